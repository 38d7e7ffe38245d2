#include "npu/reference_device.h"

#include <cstring>

#include "base/error.h"

namespace onebit::npu {

namespace {

class RefBuffer : public DeviceBuffer {
 public:
  RefBuffer(BufferRole role, size_t bytes, std::shared_ptr<ReferenceFaults> faults,
            std::shared_ptr<ReferenceCounters> counters)
      : role_(role), host_(bytes), device_(bytes), faults_(std::move(faults)), counters_(std::move(counters)) {
    // Device memory starts as garbage the host never wrote: A and B with a
    // byte pattern, C with the sentinel; the host's view of C likewise.
    if (role == BufferRole::kC) {
      fill_sentinel(device_);
      fill_sentinel(host_);
    } else {
      std::memset(device_.data(), 0x5a, device_.size());
    }
  }

  void* map() override { return host_.data(); }
  size_t bytes() const override { return host_.size(); }

  void sync_to_device(size_t bytes, size_t offset) override {
    check(bytes, offset, "to the device");
    std::memcpy(device_.data() + offset, host_.data() + offset, bytes);
    counters_->bytes_to_device += bytes;
  }
  void sync_from_device(size_t bytes, size_t offset) override {
    check(bytes, offset, "from the device");
    std::memcpy(host_.data() + offset, device_.data() + offset, bytes);
    counters_->bytes_from_device += bytes;
  }

  // The device's side, for the run.
  const uint8_t* device_data() const { return device_.data(); }
  uint8_t* device_data() { return device_.data(); }
  // What the host may believe about C after a run and before a sync: nothing.
  void poison_host() { fill_sentinel(host_); }
  void poison_device() { fill_sentinel(device_); }
  BufferRole role() const { return role_; }

 private:
  static void fill_sentinel(std::vector<uint8_t>& v) {
    for (size_t i = 0; i + 4 <= v.size(); i += 4) std::memcpy(v.data() + i, &kSentinel, 4);
  }
  void check(size_t bytes, size_t offset, const char* dir) {
    const int64_t n = counters_->syncs++;
    if (faults_->throw_on_sync >= 0 && n == faults_->throw_on_sync)
      throw DeviceError("reference device: injected fault: sync " + std::to_string(n) + " " + dir + " failed");
    if (offset > host_.size() || bytes > host_.size() - offset)
      throw DeviceError("reference device: sync of " + std::to_string(bytes) + " bytes at offset " +
                        std::to_string(offset) + " " + dir + " runs past the " + std::to_string(host_.size()) +
                        "-byte buffer");
  }

  BufferRole role_;
  std::vector<uint8_t> host_, device_;
  std::shared_ptr<ReferenceFaults> faults_;
  std::shared_ptr<ReferenceCounters> counters_;
};

class RefDesign : public DeviceDesign {
 public:
  RefDesign(const Design& d, std::vector<uint32_t> insts, std::shared_ptr<ReferenceFaults> faults,
            std::shared_ptr<ReferenceCounters> counters)
      : d_(d), insts_(std::move(insts)), faults_(std::move(faults)), counters_(std::move(counters)) {
    ++counters_->contexts;
  }
  ~RefDesign() override { --counters_->contexts; }

  std::unique_ptr<DeviceBuffer> allocate(BufferRole role) override {
    return std::make_unique<RefBuffer>(role, buffer_bytes(d_, role), faults_, counters_);
  }

  RunState run(DeviceBuffer& a, DeviceBuffer& b, DeviceBuffer& c, std::chrono::milliseconds) override {
    auto& A = as_ref(a, BufferRole::kA), &B = as_ref(b, BufferRole::kB), &C = as_ref(c, BufferRole::kC);
    const int64_t launch = counters_->launches++;
    // Whatever the host mapped of C is stale from here on.
    C.poison_host();
    C.poison_device();
    if (launch == faults_->fail_launch) {
      if (faults_->launch_throws) throw DeviceError("reference device: injected fault: launch threw");
      return faults_->fail_state;
    }
    // An empty instruction stream completes and computes nothing.
    if (has_insts_ && insts_.empty()) return RunState::kCompleted;
    ++counters_->computed;
    const auto* x = reinterpret_cast<const int8_t*>(A.device_data());
    const auto* w = reinterpret_cast<const int8_t*>(B.device_data());
    uint8_t* out = C.device_data();
    const int64_t M = d_.m, K = d_.k, N = d_.n;
    std::vector<int32_t> row(static_cast<size_t>(N));
    for (int64_t i = 0; i < M; ++i) {
      std::fill(row.begin(), row.end(), 0);
      for (int64_t kk = 0; kk < K; ++kk) {
        const int32_t xv = x[i * K + kk];
        if (d_.b_layout == BLayout::kKN) {
          const int8_t* wr = w + kk * N;
          for (int64_t j = 0; j < N; ++j) row[static_cast<size_t>(j)] += xv * wr[j];
        } else {
          for (int64_t j = 0; j < N; ++j) row[static_cast<size_t>(j)] += xv * w[j * K + kk];
        }
      }
      std::memcpy(out + i * N * 4, row.data(), static_cast<size_t>(N) * 4);
    }
    return RunState::kCompleted;
  }

  void set_has_insts(bool v) { has_insts_ = v; }

 private:
  static RefBuffer& as_ref(DeviceBuffer& b, BufferRole want) {
    auto* r = dynamic_cast<RefBuffer*>(&b);
    if (!r || r->role() != want) throw DeviceError("reference device: a buffer of another role or device");
    return *r;
  }

  Design d_;
  std::vector<uint32_t> insts_;
  bool has_insts_ = false;
  std::shared_ptr<ReferenceFaults> faults_;
  std::shared_ptr<ReferenceCounters> counters_;
};

}  // namespace

const char* run_state_name(RunState s) {
  switch (s) {
    case RunState::kCompleted: return "COMPLETED";
    case RunState::kTimeout: return "TIMEOUT";
    case RunState::kAbort: return "ABORT";
    case RunState::kError: return "ERROR";
  }
  return "?";
}

size_t buffer_bytes(const Design& d, BufferRole role) {
  const size_t m = static_cast<size_t>(d.m), k = static_cast<size_t>(d.k), n = static_cast<size_t>(d.n);
  switch (role) {
    case BufferRole::kA: return m * k;
    case BufferRole::kB: return k * n;
    case BufferRole::kC: return m * n * sizeof(int32_t);
  }
  return 0;
}

ReferenceDevice::ReferenceDevice(ReferenceFaults faults)
    : faults_(std::make_shared<ReferenceFaults>(faults)), counters_(std::make_shared<ReferenceCounters>()) {}

ReferenceDevice::~ReferenceDevice() = default;

std::unique_ptr<DeviceDesign> ReferenceDevice::open(const Design& d) {
  if (faults_->open_fails) throw DeviceError("reference device: injected fault: Could not open device with index '0'");
  if (faults_->context_limit >= 0 && counters_->contexts >= faults_->context_limit)
    throw DeviceError("reference device: injected fault: DRM_IOCTL_AMDXDNA_CREATE_HWCTX IOCTL failed (err=-22)");
  std::vector<uint32_t> insts;
  if (!d.insts.empty()) {
    try {
      insts = read_instructions(d.insts);
    } catch (const Error& e) {
      throw DeviceError(e.what());
    }
  }
  auto design = std::make_unique<RefDesign>(d, std::move(insts), faults_, counters_);
  design->set_has_insts(!d.insts.empty());
  return design;
}

}  // namespace onebit::npu
