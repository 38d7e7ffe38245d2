// The device half of an integer GEMM kernel (QDQMatMul, Qd8MatMul, the two
// 4-bit ops): the weight bound once through the session's NPU dispatcher
// (KernelOptions::npu) at create, the int32 accumulator space in the
// workspace, and the launch. What to do with the accumulator — the host
// epilogue — stays with the kernel, as does the host path the dispatcher
// hands back when it declines (too few rows, a dead design).
#pragma once

#include <cstddef>
#include <cstdint>

#include "graph/kernel.h"
#include "npu/dispatcher.h"

namespace onebit {

class DeviceLeg {
 public:
  // Offers `w` ([K][N] int8) to the device; no dispatcher or no design
  // leaves the leg unbound (the kernel's host path only).
  void bind(const KernelInfo& info, npu::Route route, size_t k, size_t n, const int8_t* w) {
    npu_ = info.options().npu;
    if (!npu_) return;
    slot_ = npu_->bind(route, info.node().name, k, n, w);
    n_ = n;
  }
  bool bound() const { return slot_ != nullptr; }
  bool alive() const { return slot_ && npu_->alive(*slot_); }
  npu::Dispatcher& dispatcher() const { return *npu_; }
  const npu::Dispatcher::Slot& slot() const { return *slot_; }

  // Bytes the accumulator needs for m rows (0 unbound), 64-byte rounded.
  size_t workspace_bytes(size_t m) const { return slot_ ? (m * n_ * sizeof(int32_t) + 63) / 64 * 64 : 0; }

  // Whether m rows go the device's way (else counted as host rows).
  bool routes(size_t m) { return slot_ && npu_->routes(*slot_, m); }

  // acc[m][N] = the device's Σ x'·w' for the m rows at x (XOR `flip`);
  // false when the host must compute (acc unspecified).
  bool run(size_t m, const void* x, size_t lda, uint8_t flip, int32_t* acc) {
    return slot_ && npu_->run(*slot_, m, x, lda, flip, acc, n_);
  }

 private:
  npu::Dispatcher* npu_ = nullptr;
  npu::Dispatcher::Slot* slot_ = nullptr;
  size_t n_ = 0;
};

}  // namespace onebit
