// Tensor: a dtype, a shape and a pointer, with an optional keep-alive handle.
// Initializers are views into the parsed file or an mmapped external-data
// file; run-time values are views into the session's arena.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <string>
#include <vector>

#include "base/dtype.h"

namespace onebit {

using Shape = std::vector<int64_t>;

// Product of dims. A negative dim or a product above 2^50 elements is an
// Error naming the shape (base/sizes.h): no shape computation wraps.
int64_t numel(const Shape& shape);

// The same without throwing: -1 for a negative dim or a product above 2^50.
int64_t checked_numel(const Shape& shape);
// Fails naming what makes these dims no shape (checked_numel gave -1).
[[noreturn]] void fail_invalid_shape(const int64_t* dims, size_t rank);

std::string shape_str(const Shape& shape);  // "[2,3,4]"

class Tensor {
 public:
  Tensor() = default;
  // The shape is checked here (numel): a tensor's size never wraps.
  Tensor(DType dtype, Shape shape, void* data, std::shared_ptr<const void> owner = nullptr)
      : dtype_(dtype), shape_(std::move(shape)), count_(numel(shape_)), data_(data), owner_(std::move(owner)) {}
  Tensor(const Tensor&) = default;
  Tensor& operator=(const Tensor&) = default;
  // A moved-from tensor is the empty default one, not a stale pointer with a
  // count that no longer matches its (moved) shape.
  Tensor(Tensor&& o) noexcept { *this = std::move(o); }
  Tensor& operator=(Tensor&& o) noexcept {
    if (this != &o) {
      dtype_ = std::exchange(o.dtype_, DType::Undefined);
      shape_ = std::move(o.shape_);
      o.shape_.clear();
      count_ = std::exchange(o.count_, 0);
      data_ = std::exchange(o.data_, nullptr);
      owner_ = std::move(o.owner_);
    }
    return *this;
  }

  // A tensor that owns fresh, zero-filled storage.
  static Tensor allocate(DType dtype, Shape shape);
  // The same without zero-filling, for buffers about to be overwritten.
  static Tensor allocate_uninit(DType dtype, Shape shape);
  // A copy of `src` that owns its storage.
  static Tensor clone(const Tensor& src);

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const { return shape_[static_cast<size_t>(i)]; }
  int64_t size() const { return count_; }
  size_t bytes() const { return dtype_bytes(dtype_, size()); }
  bool empty() const { return data_ == nullptr && size() != 0; }

  void* raw() const { return data_; }
  template <class T> T* data() const { return static_cast<T*>(data_); }
  const std::shared_ptr<const void>& owner() const { return owner_; }

  // This tensor made again as Tensor(dtype, shape, data, owner) from `rank`
  // dims and their element count, which the caller computed with
  // checked_numel (a plan's ValuePlan::count), reusing its shape's storage:
  // the executor binds every node's outputs this way each run, so a steady
  // decode step allocates no shapes. A count of -1 fails first, naming the
  // shape, and leaves the tensor as it was.
  void rebind(DType dtype, const int64_t* dims, size_t rank, int64_t count, void* data,
              std::shared_ptr<const void> owner = nullptr) {
    if (count < 0) fail_invalid_shape(dims, rank);
    shape_.assign(dims, dims + rank);
    count_ = count;
    dtype_ = dtype;
    data_ = data;
    owner_ = std::move(owner);
  }
  // The empty default tensor again, keeping its shape's storage for rebind.
  void release() {
    dtype_ = DType::Undefined;
    shape_.clear();
    count_ = 0;
    data_ = nullptr;
    owner_.reset();
  }

  // Same storage, other shape (caller checked the element count).
  Tensor reshaped(Shape shape) const { return Tensor(dtype_, std::move(shape), data_, owner_); }

 private:
  DType dtype_ = DType::Undefined;
  Shape shape_;
  int64_t count_ = 0;
  void* data_ = nullptr;
  std::shared_ptr<const void> owner_;
};

// Element i of an integer tensor as int64 (any integer dtype); used for the
// small shape-like inputs of Reshape, Slice, Expand and friends.
int64_t tensor_int_at(const Tensor& t, int64_t i);
std::vector<int64_t> tensor_to_ints(const Tensor& t);
// Element i of a float or integer tensor as double.
double tensor_double_at(const Tensor& t, int64_t i);

}  // namespace onebit
