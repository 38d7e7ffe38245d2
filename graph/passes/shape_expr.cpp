#include "graph/passes/shape_expr.h"

#include <map>

#include "graph/passes/match.h"

namespace onebit {

namespace {

constexpr size_t kMaxTerms = 64;
// Producers followed at most this deep: a shape chain is a handful of nodes.
constexpr int kMaxDepth = 64;

using Expr = std::optional<ShapeExpr>;

// The element count two or three operands broadcast to (rank <= 1), or -1.
int64_t broadcast_count(std::initializer_list<const ShapeExpr*> xs) {
  int64_t n = 1;
  bool first = true;
  for (const ShapeExpr* x : xs) {
    const auto c = static_cast<int64_t>(x->terms.size());
    if (first || n == 1) n = c;
    else if (c != 1 && c != n) return -1;
    first = false;
  }
  return n;
}

bool all_scalar(std::initializer_list<const ShapeExpr*> xs) {
  for (const ShapeExpr* x : xs)
    if (!x->scalar) return false;
  return true;
}

const ShapeTerm& term_at(const ShapeExpr& x, int64_t i) {
  return x.terms.size() == 1 ? x.terms[0] : x.terms[static_cast<size_t>(i)];
}

// Whether a == b is known for every size of every dim: 1 or 0, else -1.
int decide_equal(const ShapeTerm& a, const ShapeTerm& b) {
  if (a == b) return 1;
  if (a.of < 0 && b.of < 0) return a.k == b.k ? 1 : 0;
  // A dim is >= 0, so k·dim with k >= 0 is never a negative constant.
  const ShapeTerm& dim = a.of >= 0 ? a : b;
  const ShapeTerm& other = a.of >= 0 ? b : a;
  if (other.of < 0 && other.k < 0 && dim.k >= 0) return 0;
  return -1;
}

// Constant integer indices or axes of at most kMaxTerms elements.
std::optional<std::vector<int64_t>> constant_ints(const Graph& g, int value, bool& scalar) {
  return constant_int_list(g, value, kMaxTerms, &scalar);
}

class Evaluator {
 public:
  Evaluator(const Graph& g, const RankOf& rank_of) : g_(g), rank_of_(rank_of) {}

  Expr eval(int value, int depth) {
    if (value < 0 || depth > kMaxDepth) return std::nullopt;
    if (auto it = memo_.find(value); it != memo_.end()) return it->second;
    Expr e = compute(value, depth);
    if (e && e->terms.size() > kMaxTerms) e.reset();
    memo_[value] = e;
    return e;
  }

 private:
  Expr compute(int value, int depth) {
    const Value& v = g_.value(value);
    if (v.constant) return from_constant(*v.constant);
    const Node* n = producer_node(g_, value);
    if (!n || !n->domain.empty() || n->outputs.empty() || n->outputs[0] != value) return std::nullopt;
    auto in = [&](size_t i) { return eval(input_at(*n, i), depth + 1); };
    const std::string& op = n->op_type;
    if (op == "Shape") return shape(*n, depth);
    if (op == "Gather") return gather(*n, in(0), depth);
    if (op == "Unsqueeze") return unsqueeze(*n, in(0));
    if (op == "Reshape") return reshape(*n, in(0));
    if (op == "Concat") return concat(*n, depth);
    if (op == "Mul") return mul(in(0), in(1));
    if (op == "ConstantOfShape") return constant_of_shape(*n, in(0));
    if (op == "Equal") return equal(in(0), in(1));
    if (op == "Where") return where(in(0), in(1), in(2));
    return std::nullopt;
  }

  static Expr from_constant(const Tensor& t) {
    if (t.dtype() != DType::I64 || !t.raw() || t.rank() > 1 || static_cast<size_t>(t.size()) > kMaxTerms)
      return std::nullopt;
    ShapeExpr e;
    e.scalar = t.rank() == 0;
    for (int64_t i = 0; i < t.size(); ++i) e.terms.push_back(constant_term(t.data<int64_t>()[i]));
    return e;
  }

  static bool integer(const Expr& e) { return e && !e->boolean; }

  Expr shape(const Node& n, int depth) {
    const int x = input_at(n, 0);
    if (x < 0) return std::nullopt;
    std::vector<ShapeTerm> dims;
    const int64_t rank = rank_of_(x);
    if (rank >= 0) {
      for (int64_t i = 0; i < rank; ++i) dims.push_back(dim_term(x, i));
    } else {
      const Expr e = eval(x, depth + 1);  // a shape expression's own shape: its length
      if (!e) return std::nullopt;
      if (!e->scalar) dims.push_back(constant_term(static_cast<int64_t>(e->terms.size())));
    }
    // start / end (opset 15): negative counts from the end, both clamped.
    const auto r = static_cast<int64_t>(dims.size());
    auto clamp = [&](int64_t i) { return std::min(r, std::max<int64_t>(0, i < 0 ? i + r : i)); };
    const int64_t start = clamp(n.attrs.get_int("start", 0)), end = clamp(n.attrs.get_int("end", r));
    ShapeExpr e;
    if (end > start) e.terms.assign(dims.begin() + start, dims.begin() + end);
    return e;
  }

  Expr gather(const Node& n, const Expr& data, int depth) {
    const int64_t axis = n.attrs.get_int("axis", 0);
    if (axis != 0 && axis != -1) return std::nullopt;
    bool scalar = false;
    const auto idx = constant_ints(g_, input_at(n, 1), scalar);
    if (!idx) return std::nullopt;
    if (!data) return gather_unranked_shape(n, *idx, scalar, depth);
    if (!integer(data) || data->scalar) return std::nullopt;
    const auto count = static_cast<int64_t>(data->terms.size());
    ShapeExpr e;
    e.scalar = scalar;
    for (int64_t i : *idx) {
      if (i < 0) i += count;
      if (i < 0 || i >= count) return std::nullopt;
      e.terms.push_back(data->terms[static_cast<size_t>(i)]);
    }
    return e;
  }

  // Gather(Shape(x), i) with x's rank unknown: dim i of x for each index
  // i >= 0 (the Gather fails when x has no dim i, so wherever it yields a
  // value that value is the dim). A negative index needs the rank.
  Expr gather_unranked_shape(const Node& n, const std::vector<int64_t>& idx, bool scalar, int depth) {
    const Node* sh = producer_op(g_, input_at(n, 0), "Shape");
    if (!sh || sh->attrs.has("start") || sh->attrs.has("end")) return std::nullopt;
    const int x = input_at(*sh, 0);
    if (x < 0 || rank_of_(x) >= 0 || eval(x, depth + 1)) return std::nullopt;  // those give a shape expression
    ShapeExpr e;
    e.scalar = scalar;
    for (int64_t i : idx) {
      if (i < 0 || i > (int64_t{1} << 20)) return std::nullopt;
      e.terms.push_back(dim_term(x, i));
    }
    return e;
  }

  Expr unsqueeze(const Node& n, const Expr& data) {
    if (!data || !data->scalar) return std::nullopt;
    bool scalar = false;  // axes is an input from opset 13 on (1bit reads 17 and later)
    const auto axes = constant_ints(g_, input_at(n, 1), scalar);
    if (!axes || (*axes != std::vector<int64_t>{0} && *axes != std::vector<int64_t>{-1})) return std::nullopt;
    ShapeExpr e = *data;
    e.scalar = false;
    return e;
  }

  Expr reshape(const Node& n, const Expr& data) {
    if (!data) return std::nullopt;
    bool scalar = false;
    const auto target = constant_ints(g_, input_at(n, 1), scalar);
    const auto count = static_cast<int64_t>(data->terms.size());
    if (!target || scalar || target->size() != 1 || ((*target)[0] != -1 && (*target)[0] != count)) return std::nullopt;
    ShapeExpr e = *data;
    e.scalar = false;
    return e;
  }

  Expr concat(const Node& n, int depth) {
    const int64_t axis = n.attrs.get_int("axis", 1);  // required; 1 is never accepted
    if ((axis != 0 && axis != -1) || n.inputs.empty()) return std::nullopt;
    ShapeExpr e;
    for (int v : n.inputs) {
      const Expr x = eval(v, depth + 1);
      if (!integer(x) || x->scalar) return std::nullopt;
      e.terms.insert(e.terms.end(), x->terms.begin(), x->terms.end());
      if (e.terms.size() > kMaxTerms) return std::nullopt;
    }
    return e;
  }

  // fn(x, y) per element of a and b broadcast: the result's term, or none.
  template <class Fn>
  static Expr elementwise(const Expr& a, const Expr& b, bool boolean, Fn&& fn) {
    if (!integer(a) || !integer(b)) return std::nullopt;
    const int64_t count = broadcast_count({&*a, &*b});
    if (count < 0) return std::nullopt;
    ShapeExpr e;
    e.boolean = boolean;
    e.scalar = all_scalar({&*a, &*b});
    for (int64_t i = 0; i < count; ++i) {
      const std::optional<ShapeTerm> t = fn(term_at(*a, i), term_at(*b, i));
      if (!t) return std::nullopt;
      e.terms.push_back(*t);
    }
    return e;
  }

  static Expr mul(const Expr& a, const Expr& b) {
    return elementwise(a, b, false, [](const ShapeTerm& x, const ShapeTerm& y) -> std::optional<ShapeTerm> {
      if (x.of >= 0 && y.of >= 0) return std::nullopt;  // a product of two dims is no term
      ShapeTerm t = x.of >= 0 ? x : y;
      if (__builtin_mul_overflow(x.k, y.k, &t.k)) return std::nullopt;
      return t;
    });
  }

  static Expr constant_of_shape(const Node& n, const Expr& shape) {
    if (!integer(shape) || shape->scalar || shape->terms.size() > 1) return std::nullopt;
    const Tensor* value = n.attrs.get_tensor("value");  // absent: float 0, no int64 expression
    if (!value || value->dtype() != DType::I64 || value->size() != 1 || !value->raw()) return std::nullopt;
    ShapeExpr e;
    e.scalar = shape->terms.empty();
    const int64_t count = e.scalar ? 1 : shape->terms[0].k;
    if ((!e.scalar && shape->terms[0].of >= 0) || count < 0 || static_cast<size_t>(count) > kMaxTerms)
      return std::nullopt;
    e.terms.assign(static_cast<size_t>(count), constant_term(value->data<int64_t>()[0]));
    return e;
  }

  static Expr equal(const Expr& a, const Expr& b) {
    return elementwise(a, b, true, [](const ShapeTerm& x, const ShapeTerm& y) -> std::optional<ShapeTerm> {
      const int same = decide_equal(x, y);
      if (same < 0) return std::nullopt;
      return constant_term(same);
    });
  }

  static Expr where(const Expr& c, const Expr& x, const Expr& y) {
    if (!c || !c->boolean || !integer(x) || !integer(y)) return std::nullopt;
    const int64_t count = broadcast_count({&*c, &*x, &*y});
    if (count < 0) return std::nullopt;
    ShapeExpr e;
    e.scalar = all_scalar({&*c, &*x, &*y});
    for (int64_t i = 0; i < count; ++i) e.terms.push_back(term_at(*c, i).k != 0 ? term_at(*x, i) : term_at(*y, i));
    return e;
  }

  const Graph& g_;
  const RankOf& rank_of_;
  std::map<int, Expr> memo_;
};

}  // namespace

std::optional<ShapeExpr> shape_expr(const Graph& g, int value, const RankOf& rank_of) {
  Evaluator ev(g, rank_of);
  return ev.eval(value, 0);
}

int64_t proven_repeat(const Graph& g, int cache, int expand, int reshape) {
  if (cache < 0 || expand < 0 || reshape < 0) return 0;
  const RankOf rank = [&](int v) -> int64_t { return v == cache ? 4 : -1; };
  const auto e = shape_expr(g, expand, rank), r = shape_expr(g, reshape, rank);
  if (!e || !r || e->boolean || r->boolean || e->terms.size() != 5) return 0;
  const ShapeTerm rep = e->terms[2];
  if (rep.of >= 0 || rep.k < 1) return 0;
  const int x = cache;
  const std::vector<ShapeTerm> want_e{dim_term(x, 0), dim_term(x, 1), rep, dim_term(x, 2), dim_term(x, 3)};
  const std::vector<ShapeTerm> want_r{dim_term(x, 0), dim_term(x, 1, rep.k), dim_term(x, 2), dim_term(x, 3)};
  return !e->scalar && !r->scalar && e->terms == want_e && r->terms == want_r ? rep.k : 0;
}

}  // namespace onebit
