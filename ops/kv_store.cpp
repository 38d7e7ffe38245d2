// The process-wide count of KV state allocations (ops/kv_store.h).
#include "ops/kv_store.h"

#include <atomic>

namespace onebit {

namespace {
std::atomic<int64_t> allocations{0};
}  // namespace

void count_kv_state_allocation() { allocations.fetch_add(1, std::memory_order_relaxed); }

int64_t kv_state_allocations() { return allocations.load(std::memory_order_relaxed); }

}  // namespace onebit
