#include "npu/dispatcher.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace onebit::npu {

struct Dispatcher::Opened {
  const Design* design = nullptr;
  std::unique_ptr<DeviceDesign> dev;
  std::unique_ptr<DeviceBuffer> a, c;
  size_t a_dirty_rows = 0;  // rows of A holding an earlier call's data (must be re-zeroed)
  bool dead = false;
  std::string why;
};

class Dispatcher::Slot {
 public:
  Route route;
  std::string label;
  size_t k = 0, n = 0;
  Opened* opened = nullptr;
  std::unique_ptr<DeviceBuffer> b;
};

const char* route_name(Route r) {
  switch (r) {
    case Route::kQdq: return "qdq";
    case Route::kQd8: return "qd8";
    case Route::kQ4: return "q4";
  }
  return "?";
}

Dispatcher::Dispatcher(std::unique_ptr<Device> device, std::vector<Design> designs, DispatcherOptions options,
                       std::string no_device_why)
    : device_(std::move(device)), designs_(std::move(designs)), options_(options),
      no_device_why_(std::move(no_device_why)) {
  device_name_ = device_ ? device_->name() : "no device";
  if (!device_ && !no_device_why_.empty()) say(fmt::format("npu: {}; GEMMs run on the host", no_device_why_));
}

Dispatcher::~Dispatcher() {
  slots_.clear();
  opened_.clear();
}

void Dispatcher::say(const std::string& line) const {
  if (options_.log) options_.log(line);
  else fmt::print(stderr, "{}\n", line);
}

void Dispatcher::note(const std::string& key, const std::string& line) {
  if (said_.insert(key).second) say(line);
}

Dispatcher::Opened* Dispatcher::open_for(size_t k, size_t n, std::string& why) {
  const Design* d = nullptr;
  for (const Design& x : designs_)
    if (static_cast<size_t>(x.k) == k && static_cast<size_t>(x.n) == n) d = &x;
  if (!d) {
    why = "no-design";
    return nullptr;
  }
  for (auto& o : opened_)
    if (o->design == d) {
      if (o->dead) why = "dead-design";
      return o->dead ? nullptr : o.get();
    }
  if (!device_) {
    why = "no-device";
    return nullptr;
  }
  if (static_cast<int>(opened_.size()) >= options_.max_contexts) {
    why = "context-limit";
    note("cap", fmt::format("npu: {} hardware contexts are open (--npu-max-contexts {}); design {} and any later "
                            "one stay on the host",
                            opened_.size(), options_.max_contexts, d->key()));
    return nullptr;
  }
  auto o = std::make_unique<Opened>();
  o->design = d;
  try {
    o->dev = device_->open(*d);
    o->a = o->dev->allocate(BufferRole::kA);
    o->c = o->dev->allocate(BufferRole::kC);
    std::memset(o->a->map(), 0, o->a->bytes());  // padding rows are zeros from the start
    o->a->sync_to_device(o->a->bytes(), 0);
    counters_.bytes_to_device += o->a->bytes();
  } catch (const std::exception& e) {
    // A design that does not open is dead from the start; the session runs.
    o->dead = true;
    o->why = e.what();
    o->dev.reset();
    note("open:" + d->key(), fmt::format("npu: design {} does not open on the {}: {}; its GEMMs run on the host",
                                         d->key(), device_name_, e.what()));
    opened_.push_back(std::move(o));
    why = "open-failed";
    return nullptr;
  }
  ++counters_.contexts;
  opened_.push_back(std::move(o));
  return opened_.back().get();
}

Dispatcher::Slot* Dispatcher::bind(Route route, const std::string& label, size_t k, size_t n, const int8_t* w) {
  ++counters_.gemms_bound;
  const char* r = route_name(route);
  std::string why;
  Opened* o = open_for(k, n, why);
  if (o) {
    auto slot = std::make_unique<Slot>();
    slot->route = route;
    slot->label = label;
    slot->k = k;
    slot->n = n;
    slot->opened = o;
    try {
      slot->b = o->dev->allocate(BufferRole::kB);
      auto* dst = static_cast<int8_t*>(slot->b->map());
      if (o->design->b_layout == BLayout::kKN) {
        std::memcpy(dst, w, k * n);
      } else {
        for (size_t kk = 0; kk < k; ++kk)
          for (size_t j = 0; j < n; ++j) dst[j * k + kk] = w[kk * n + j];
      }
      slot->b->sync_to_device(k * n, 0);
      counters_.bytes_to_device += k * n;
    } catch (const std::exception& e) {
      mark_dead(*o, e.what());
      why = "dead-design";
      o = nullptr;
    }
    if (o) {
      ++counters_.gemms_routed;
      if (options_.trace) say(fmt::format("npu_{}_bind node='{}' k={} n={} design={}", r, label, k, n, o->design->key()));
      slots_.push_back(std::move(slot));
      return slots_.back().get();
    }
  }
  if (options_.trace) say(fmt::format("npu_{}_fallback node='{}' k={} n={} why={}", r, label, k, n, why));
  return nullptr;
}

void Dispatcher::mark_dead(Opened& o, const std::string& why) {
  if (o.dead) return;
  o.dead = true;
  o.why = why;
  say(fmt::format("npu: design {} failed on the {} ({}); its GEMMs run on the host for the rest of the session",
                  o.design->key(), device_name_, why));
}

bool Dispatcher::alive(const Slot& slot) const { return !slot.opened->dead; }

std::vector<int8_t> Dispatcher::weight_of(const Slot& slot) const {
  const size_t k = slot.k, n = slot.n;
  std::vector<int8_t> w(k * n);
  const auto* src = static_cast<const int8_t*>(slot.b->map());
  if (slot.opened->design->b_layout == BLayout::kKN) std::memcpy(w.data(), src, k * n);
  else
    for (size_t kk = 0; kk < k; ++kk)
      for (size_t j = 0; j < n; ++j) w[kk * n + j] = src[j * k + kk];
  return w;
}

bool Dispatcher::routes(Slot& slot, size_t m) {
  if (m >= kDeviceMinRows) return true;
  ++counters_.host_row_calls;
  if (options_.trace) {
    const char* r = route_name(slot.route);
    note(fmt::format("h:{}:{}:{}:{}", r, m, slot.k, slot.n),
         fmt::format("npu_{}_host_rows m={} k={} n={} min={}", r, m, slot.k, slot.n, kDeviceMinRows));
  }
  return false;
}

bool Dispatcher::run(Slot& slot, size_t m, const void* x, size_t lda, uint8_t flip, int32_t* c, size_t ldc) {
  const char* r = route_name(slot.route);
  Opened& o = *slot.opened;
  const size_t k = slot.k, n = slot.n;
  if (!routes(slot, m)) return false;
  if (o.dead) {
    ++counters_.fallback_calls;
    if (options_.trace)
      note(fmt::format("f:{}:{}:{}:{}", r, m, k, n),
           fmt::format("npu_{}_fallback m={} k={} n={} why=dead-design", r, m, k, n));
    return false;
  }
  const size_t M = static_cast<size_t>(o.design->m);
  const size_t launches = (m + M - 1) / M;
  const auto* src = static_cast<const uint8_t*>(x);
  try {
    for (size_t l = 0; l < launches; ++l) {
      const size_t row0 = l * M, rows = std::min(M, m - row0);
      auto* a = static_cast<uint8_t*>(o.a->map());
      for (size_t i = 0; i < rows; ++i) {
        const uint8_t* s = src + (row0 + i) * lda;
        uint8_t* d = a + i * k;
        if (flip)
          for (size_t kk = 0; kk < k; ++kk) d[kk] = s[kk] ^ flip;
        else
          std::memcpy(d, s, k);
      }
      // Rows past `rows` are zero on the device unless an earlier call wrote
      // them: re-zero those and sync them with this call's rows.
      const size_t dirty = o.a_dirty_rows;
      if (dirty > rows) std::memset(a + rows * k, 0, (dirty - rows) * k);
      const size_t sync_rows = std::max(rows, dirty);
      if (!options_.test_skip_a_sync) o.a->sync_to_device(sync_rows * k, 0);
      counters_.bytes_to_device += sync_rows * k;
      o.a_dirty_rows = rows;
      counters_.padded_rows += static_cast<int64_t>(M - rows);

      const RunState st = o.dev->run(*o.a, *slot.b, *o.c, options_.timeout);
      ++counters_.launches;
      if (st != RunState::kCompleted) throw DeviceError(std::string("launch ended ") + run_state_name(st));
      if (!options_.test_skip_c_sync) o.c->sync_from_device(rows * n * sizeof(int32_t), 0);
      counters_.bytes_from_device += rows * n * sizeof(int32_t);
      const auto* cm = static_cast<const int32_t*>(o.c->map());
      for (size_t i = 0; i < rows; ++i) std::memcpy(c + (row0 + i) * ldc, cm + i * n, n * sizeof(int32_t));
    }
  } catch (const std::exception& e) {
    mark_dead(o, e.what());
    ++counters_.fallback_calls;
    if (options_.trace)
      note(fmt::format("f:{}:{}:{}:{}", r, m, k, n),
           fmt::format("npu_{}_fallback m={} k={} n={} why=dead-design", r, m, k, n));
    return false;
  }
  ++counters_.device_calls;
  if (options_.trace)
    note(fmt::format("d:{}:{}:{}:{}", r, m, k, n),
         fmt::format("npu_{}_device m={} k={} n={} design={} runs={}", r, m, k, n, o.design->key(), launches));
  return true;
}

std::string Dispatcher::summary() const {
  const DispatchCounters& c = counters_;
  return fmt::format(
      "npu: {}: {} of {} GEMMs routed | {} device calls, {} host-row calls, {} fallbacks | {} launches, {:.1f} MB to "
      "and {:.1f} MB from the device, {} padded rows, {} contexts",
      device_name_, c.gemms_routed, c.gemms_bound, c.device_calls, c.host_row_calls, c.fallback_calls, c.launches,
      c.bytes_to_device / 1e6, c.bytes_from_device / 1e6, c.padded_rows, c.contexts);
}

}  // namespace onebit::npu
