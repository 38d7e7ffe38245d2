// Gather, GatherElements, GatherND (opset 13). Indices may be int32 or int64
// and negative (counted from the back); out-of-range indices are errors that
// name the index and the dim.
#include <cstring>

#include "ops/axis.h"
#include "ops/op_util.h"
#include "graph/op_registry.h"
#include "ops/strided_copy.h"
#include "base/mapped_file.h"
#include "base/thread_pool.h"

namespace onebit {

namespace {

void check_index_type(DType t) {
  if (t != DType::I64 && t != DType::I32) fail("indices must be int32 or int64, got {}", dtype_name(t));
}

// Tables from this size on are marked for scattered reads.
constexpr size_t kRandomReadBytes = size_t{16} << 20;

int64_t fix_index(int64_t i, int64_t dim) {
  if (i < -dim || i >= dim) fail("index {} is out of range for a dim of size {}", i, dim);
  return i < 0 ? i + dim : i;
}

class GatherKernel : public Kernel {
 public:
  explicit GatherKernel(const KernelInfo& info) : axis_(info.attrs().get_int("axis", 0)) {
    // A large constant table that only this node reads (the token
    // embedding, read in place from the model file; not when a tied LM head
    // streams it too) is read a few rows a step: a cold row reads its own
    // pages from disk, not the read-ahead window around them. Rows are
    // contiguous only along axis 0; along another axis a Gather reads
    // across the whole table, which read-ahead serves.
    if (const Tensor* table = info.constant(0);
        table && axis_ == 0 && table->bytes() >= kRandomReadBytes && info.readers(0) == 1)
      advise_random_reads(table->raw(), table->bytes());
  }
  void reshape(ReshapeContext& ctx) override {
    check_index_type(ctx.dtype(1));
    const Shape& data = ctx.shape(0);
    const size_t axis = static_cast<size_t>(normalize_axis(axis_, static_cast<int64_t>(data.size()), "attribute 'axis'"));
    Shape out(data.begin(), data.begin() + static_cast<std::ptrdiff_t>(axis));
    out.insert(out.end(), ctx.shape(1).begin(), ctx.shape(1).end());
    out.insert(out.end(), data.begin() + static_cast<std::ptrdiff_t>(axis) + 1, data.end());
    ctx.set_output(0, ctx.dtype(0), out);
  }
  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& idx = ctx.input(1);
    const size_t axis = static_cast<size_t>(normalize_axis(axis_, x.rank()));
    const int64_t eb = static_cast<int64_t>(element_bytes(x.dtype(), "Gather"));
    const int64_t outer = dims_product(x.shape(), 0, static_cast<int>(axis)), dim = x.shape()[axis];
    const int64_t inner = dims_product(x.shape(), static_cast<int>(axis + 1), static_cast<int>(x.shape().size())) * eb;
    const int64_t n = idx.size();
    for (int64_t j = 0; j < n; ++j) fix_index(tensor_int_at(idx, j), dim);  // validate before writing
    const uint8_t* src = static_cast<const uint8_t*>(x.raw());
    uint8_t* dst = static_cast<uint8_t*>(ctx.output(0).raw());
    const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(inner, 1));
    ctx.pool().parallel_for(outer * n, grain, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        const int64_t o = t / n, j = t % n;
        int64_t i = tensor_int_at(idx, j);
        if (i < 0) i += dim;
        std::memcpy(dst + t * inner, src + (o * dim + i) * inner, static_cast<size_t>(inner));
      }
    });
  }

 private:
  int64_t axis_;
};

class GatherElementsKernel : public Kernel {
 public:
  explicit GatherElementsKernel(const KernelInfo& info) : axis_(info.attrs().get_int("axis", 0)) {}
  void reshape(ReshapeContext& ctx) override {
    check_index_type(ctx.dtype(1));
    if (ctx.rank(0) != ctx.rank(1))
      fail("data {} and indices {} must have the same rank", shape_str(ctx.shape(0)), shape_str(ctx.shape(1)));
    normalize_axis(axis_, ctx.rank(0), "attribute 'axis'");
    ctx.set_output(0, ctx.dtype(0), ctx.shape(1));
  }
  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& idx = ctx.input(1);
    const size_t axis = static_cast<size_t>(normalize_axis(axis_, x.rank()));
    const size_t eb = element_bytes(x.dtype(), "GatherElements");
    const std::vector<int64_t> xs = contiguous_strides(x.shape());
    const Shape& is = idx.shape();
    const uint8_t* src = static_cast<const uint8_t*>(x.raw());
    uint8_t* dst = static_cast<uint8_t*>(ctx.output(0).raw());
    std::vector<int64_t> pos(is.size(), 0);
    for (int64_t t = 0; t < idx.size(); ++t) {
      int64_t off = 0;
      for (size_t d = 0; d < is.size(); ++d) {
        const int64_t c = d == axis ? fix_index(tensor_int_at(idx, t), x.shape()[d]) : pos[d];
        off += c * xs[d];
      }
      std::memcpy(dst + t * static_cast<int64_t>(eb), src + off * static_cast<int64_t>(eb), eb);
      for (size_t d = is.size(); d-- > 0;) {
        if (++pos[d] < is[d]) break;
        pos[d] = 0;
      }
    }
  }

 private:
  int64_t axis_;
};

class GatherNDKernel : public Kernel {
 public:
  explicit GatherNDKernel(const KernelInfo& info) : batch_dims_(info.attrs().get_int("batch_dims", 0)) {}
  void reshape(ReshapeContext& ctx) override {
    const Shape& data = ctx.shape(0);
    const Shape& ind = ctx.shape(1);
    if (ctx.dtype(1) != DType::I64) fail("indices must be int64, got {}", dtype_name(ctx.dtype(1)));
    const int64_t b = batch_dims_;
    if (ind.empty() || b < 0 || b >= static_cast<int64_t>(std::min(data.size(), ind.size())))
      fail("batch_dims {} does not fit data {} and indices {}", b, shape_str(data), shape_str(ind));
    const int64_t last = ind.back();
    if (last < 1 || last > static_cast<int64_t>(data.size()) - b)
      fail("indices' last dim {} does not fit data {} with batch_dims {}", last, shape_str(data), b);
    for (int64_t d = 0; d < b; ++d)
      if (data[static_cast<size_t>(d)] != ind[static_cast<size_t>(d)])
        fail("batch dim {} differs: data {} vs indices {}", d, shape_str(data), shape_str(ind));
    Shape out(ind.begin(), ind.end() - 1);
    out.insert(out.end(), data.begin() + b + last, data.end());
    ctx.set_output(0, ctx.dtype(0), out);
  }
  void run(RunContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& idx = ctx.input(1);
    const Shape& data = x.shape();
    const Shape& ind = idx.shape();
    const size_t b = static_cast<size_t>(batch_dims_);
    const size_t last = static_cast<size_t>(ind.back());
    const int64_t eb = static_cast<int64_t>(element_bytes(x.dtype(), "GatherND"));
    const int64_t slice = dims_product(data, static_cast<int>(b + last), static_cast<int>(data.size())) * eb;
    const int64_t batches = dims_product(data, 0, static_cast<int>(b));
    const int64_t per_batch = dims_product(ind, static_cast<int>(b), static_cast<int>(ind.size() - 1));
    const int64_t batch_stride = dims_product(data, static_cast<int>(b), static_cast<int>(data.size())) * eb;
    const int64_t* ip = idx.data<int64_t>();
    const uint8_t* src = static_cast<const uint8_t*>(x.raw());
    uint8_t* dst = static_cast<uint8_t*>(ctx.output(0).raw());
    for (int64_t bt = 0; bt < batches; ++bt)
      for (int64_t j = 0; j < per_batch; ++j) {
        const int64_t* tuple = ip + (bt * per_batch + j) * static_cast<int64_t>(last);
        int64_t off = 0;
        for (size_t k = 0; k < last; ++k) {
          const int64_t dim = data[b + k];
          off = off * dim + fix_index(tuple[k], dim);
        }
        std::memcpy(dst + (bt * per_batch + j) * slice, src + bt * batch_stride + off * slice, static_cast<size_t>(slice));
      }
  }

 private:
  int64_t batch_dims_;
};

}  // namespace

void register_gather_ops(OpRegistry& r) {
  r.add("", "Gather", 13, kOnnxOpsetMax, make_factory<GatherKernel>());
  r.add("", "GatherElements", 13, kOnnxOpsetMax, make_factory<GatherElementsKernel>());
  r.add("", "GatherND", 13, kOnnxOpsetMax, make_factory<GatherNDKernel>());
}

}  // namespace onebit
