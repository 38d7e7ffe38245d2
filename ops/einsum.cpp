// Einsum (opset 12), evaluated directly from its definition:
//
//   output[out labels] = sum over the other labels of prod_t input_t[term_t]
//
// Every label gets one loop index; each operand advances by the sum of its
// strides over the positions carrying that label (so "ii->i" reads the
// diagonal), and by 0 along a size-1 dim broadcast against a larger one.
// "..." stands for the same trailing-aligned dims in every term. Implicit
// output (no "->"): the ellipsis dims, then the labels used exactly once in
// ASCII order. This is a reference loop, O(output x contracted), not a GEMM:
// it is for the small contractions models and tests use Einsum for.
#include <algorithm>
#include <array>
#include <type_traits>

#include "ops/dispatch.h"
#include "base/sizes.h"
#include "ops/op_util.h"
#include "graph/op_registry.h"

namespace onebit {

namespace {

constexpr int kLetters = 52;                    // a-z, A-Z
constexpr int kLabels = kLetters + kMaxRank;    // + one per ellipsis dim
constexpr int kMaxOperands = 8;
constexpr int kEllipsis = -1;                   // in a term: where "..." stands

int label_of(char c) {
  if (c >= 'a' && c <= 'z') return c - 'a';
  if (c >= 'A' && c <= 'Z') return 26 + (c - 'A');
  return -2;
}
char char_of(int label) { return static_cast<char>(label < 26 ? 'a' + label : 'A' + (label - 26)); }

// Splits one side's term into labels, "..." becoming kEllipsis.
std::vector<int> parse_term(const std::string& term, const std::string& equation) {
  std::vector<int> out;
  bool ellipsis = false;
  for (size_t i = 0; i < term.size(); ++i) {
    if (term.compare(i, 3, "...") == 0) {
      if (ellipsis) fail("attribute 'equation' is '{}': a term has two ellipses", equation);
      ellipsis = true;
      out.push_back(kEllipsis);
      i += 2;
      continue;
    }
    const int l = label_of(term[i]);
    if (l < 0) fail("attribute 'equation' is '{}': '{}' is not a letter or '...'", equation, term[i]);
    out.push_back(l);
  }
  return out;
}

// What the shapes make of the equation: every label's size, the output
// labels, the contracted labels, and each operand's stride per label.
struct EinsumPlan {
  int64_t size[kLabels] = {};
  int out[kLabels], n_out = 0;
  int red[kLabels], n_red = 0;
  int64_t stride[kMaxOperands][kLabels] = {};
  Shape out_shape;
};

class EinsumKernel : public Kernel {
 public:
  explicit EinsumKernel(const KernelInfo& info) {
    std::string eq;
    for (char c : info.attrs().get_string("equation", "")) {
      if (c != ' ') eq += c;
    }
    equation_ = eq;
    if (eq.empty()) fail("required attribute 'equation' is missing or empty");
    const size_t arrow = eq.find("->");
    const std::string lhs = eq.substr(0, arrow);
    explicit_ = arrow != std::string::npos;
    size_t start = 0;
    for (;;) {
      const size_t comma = lhs.find(',', start);
      terms_.push_back(parse_term(lhs.substr(start, comma - start), equation_));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    if (explicit_) rhs_ = parse_term(eq.substr(arrow + 2), equation_);
    if (static_cast<int>(terms_.size()) != info.num_inputs())
      fail("attribute 'equation' is '{}' with {} terms, but the node has {} inputs", equation_, terms_.size(),
           info.num_inputs());
    if (terms_.size() > static_cast<size_t>(kMaxOperands))
      fail("Einsum supports up to {} operands, the equation '{}' has {}", kMaxOperands, equation_, terms_.size());
    for (size_t i = 0; i < rhs_.size(); ++i)
      for (size_t j = i + 1; j < rhs_.size(); ++j)
        if (rhs_[i] == rhs_[j])
          fail("attribute 'equation' is '{}': the output repeats '{}'", equation_,
               rhs_[i] == kEllipsis ? std::string("...") : std::string(1, char_of(rhs_[i])));
  }

  void reshape(ReshapeContext& ctx) override {
    std::vector<Shape> shapes;
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      if (i > 0 && ctx.dtype(i) != ctx.dtype(0))
        fail("input {} is {}, input 0 is {}; Einsum needs one type", i, dtype_name(ctx.dtype(i)), dtype_name(ctx.dtype(0)));
      shapes.push_back(ctx.shape(i));
    }
    const DType t = ctx.dtype(0);
    if (!(dtype_is_float(t) || (dtype_is_integer(t) && dtype_bits(t) >= 8))) unsupported_dtype("Einsum input", t);
    EinsumPlan p;
    plan(shapes, p);
    ctx.set_output(0, t, p.out_shape);
  }

  void run(RunContext& ctx) override {
    const int n_in = ctx.num_inputs();
    std::vector<Shape> shapes;  // small: one entry per operand
    for (int i = 0; i < n_in; ++i) shapes.push_back(ctx.input(i).shape());
    EinsumPlan p;
    plan(shapes, p);
    dispatch_numeric(ctx.input(0).dtype(), "Einsum", [&](auto tag) {
      using T = typename decltype(tag)::type;
      using A = Arith<T>;
      // Floats sum in double; integers in unsigned 64 bits, which wrap as
      // numpy's fixed-width integers do (a signed accumulator would make an
      // overflow undefined), then truncate to T.
      using Acc = std::conditional_t<is_float_v<T>, double, uint64_t>;
      const T* in[kMaxOperands];
      for (int i = 0; i < n_in; ++i) in[i] = ctx.input(i).template data<T>();
      T* y = ctx.output(0).data<T>();
      const int64_t outs = numel(p.out_shape);
      int64_t red_count = 1;
      for (int r = 0; r < p.n_red; ++r) red_count = checked_mul(red_count, p.size[p.red[r]], "Einsum's contracted dims");
      const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(red_count * n_in, 1));
      ctx.pool().parallel_for(outs, grain, [&](int64_t begin, int64_t end) {
        for (int64_t o = begin; o < end; ++o) {
          int64_t base[kMaxOperands] = {};
          for (int64_t rest = o, d = p.n_out; d-- > 0;) {
            const int l = p.out[d];
            const int64_t idx = rest % p.size[l];
            rest /= p.size[l];
            for (int i = 0; i < n_in; ++i) base[i] += idx * p.stride[i][l];
          }
          Acc acc = 0;
          int64_t idx[kLabels] = {};
          int64_t off[kMaxOperands];
          std::copy(base, base + n_in, off);
          for (int64_t r = 0; r < red_count; ++r) {
            Acc prod = 1;
            for (int i = 0; i < n_in; ++i) {
              if constexpr (std::is_integral_v<Acc>)
                prod = static_cast<Acc>(prod * static_cast<Acc>(static_cast<int64_t>(A::load(in[i][off[i]]))));
              else prod *= static_cast<Acc>(A::load(in[i][off[i]]));
            }
            acc = static_cast<Acc>(acc + prod);
            // Odometer over the contracted labels, innermost last.
            for (int d = p.n_red; d-- > 0;) {
              const int l = p.red[d];
              for (int i = 0; i < n_in; ++i) off[i] += p.stride[i][l];
              if (++idx[d] < p.size[l]) break;
              for (int i = 0; i < n_in; ++i) off[i] -= p.size[l] * p.stride[i][l];
              idx[d] = 0;
            }
          }
          if constexpr (std::is_integral_v<Acc>) y[o] = static_cast<T>(acc);  // modular, as C++20 defines it
          else y[o] = A::store(static_cast<typename A::C>(acc));
        }
      });
    });
  }

 private:
  void plan(const std::vector<Shape>& shapes, EinsumPlan& p) const {
    int ell = 0;  // dims the ellipsis stands for (the widest operand's)
    for (size_t t = 0; t < terms_.size(); ++t) {
      const auto& term = terms_[t];
      const bool has = std::count(term.begin(), term.end(), kEllipsis) > 0;
      const int letters = static_cast<int>(term.size()) - (has ? 1 : 0);
      const int rank = static_cast<int>(shapes[t].size());
      check_max_rank(rank, "Einsum");
      if (has ? rank < letters : rank != letters)
        fail("input {} has shape {} (rank {}), but its term in '{}' has {} labels{}", t, shape_str(shapes[t]), rank,
             equation_, letters, has ? " and '...'" : "");
      if (has) ell = std::max(ell, rank - letters);
    }
    bool used[kLabels] = {};
    int count[kLabels] = {};
    bool any_ellipsis = false;
    for (size_t t = 0; t < terms_.size(); ++t) {
      const auto& term = terms_[t];
      const Shape& s = shapes[t];
      const int rank = static_cast<int>(s.size());
      const int e = rank - (static_cast<int>(term.size()) - (std::count(term.begin(), term.end(), kEllipsis) ? 1 : 0));
      // Strides of a contiguous operand.
      int64_t st[kMaxRank];
      int64_t acc = 1;
      for (int q = rank; q-- > 0;) {
        st[q] = acc;
        acc *= s[static_cast<size_t>(q)];
      }
      int d = 0;
      auto bind = [&](int label, int dim) {
        const int64_t n = s[static_cast<size_t>(dim)];
        int64_t& sz = p.size[label];
        if (!used[label] || sz == 1) sz = n;
        else if (n != sz && n != 1)
          fail("input {} dim {} is {}, but label '{}' of '{}' is {} elsewhere", t, dim, n,
               label < kLetters ? std::string(1, char_of(label)) : std::string("..."), equation_, sz);
        used[label] = true;
        if (n != 1) p.stride[t][label] += st[dim];  // a size-1 dim broadcasts: it never advances
      };
      for (int l : term) {
        if (l == kEllipsis) {
          any_ellipsis = true;
          for (int q = 0; q < e; ++q) bind(kLetters + (ell - e) + q, d++);
          continue;
        }
        ++count[l];
        bind(l, d++);
      }
    }
    bool in_out[kLabels] = {};
    auto add_out = [&](int l) {
      p.out[p.n_out++] = l;
      in_out[l] = true;
      p.out_shape.push_back(p.size[l]);
    };
    if (explicit_) {
      for (int l : rhs_) {
        if (l == kEllipsis) {
          for (int q = 0; q < ell; ++q) add_out(kLetters + q);
          continue;
        }
        if (!used[l]) fail("attribute 'equation' is '{}': output label '{}' is not in any input", equation_, char_of(l));
        add_out(l);
      }
      if (any_ellipsis && ell > 0 && std::count(rhs_.begin(), rhs_.end(), kEllipsis) == 0)
        fail("attribute 'equation' is '{}': the inputs use '...' but the output does not", equation_);
    } else {
      for (int q = 0; q < ell; ++q) add_out(kLetters + q);
      // ASCII order: uppercase before lowercase.
      for (int l = 26; l < kLetters; ++l)
        if (count[l] == 1) add_out(l);
      for (int l = 0; l < 26; ++l)
        if (count[l] == 1) add_out(l);
    }
    for (int l = 0; l < kLabels; ++l)
      if (used[l] && !in_out[l]) p.red[p.n_red++] = l;
  }

  std::string equation_;
  std::vector<std::vector<int>> terms_;
  std::vector<int> rhs_;
  bool explicit_ = false;
};

}  // namespace

void register_einsum_op(OpRegistry& r) { r.add("", "Einsum", 12, kOnnxOpsetMax, make_factory<EinsumKernel>()); }

}  // namespace onebit
