#include "base/thread_pool.h"

#include <immintrin.h>

namespace onebit {

namespace {
thread_local bool tls_in_pool = false;
constexpr int kSpinIterations = 1 << 14;
}  // namespace

int ThreadPool::default_threads() {
  // Once: each query reads /sys/devices/system/cpu/online, and attention
  // kernels ask on every run (120 file opens a decode step).
  static const int threads = [] {
    const unsigned n = std::thread::hardware_concurrency();
    return n == 0 ? 1 : static_cast<int>(n);
  }();
  return threads;
}

ThreadPool::ThreadPool(int threads) {
  if (threads < 1) threads = 1;
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::work_on(Job& job) {
  for (;;) {
    const int64_t t = job.next.fetch_add(1);
    if (t >= job.tasks) break;
    if (!job.failed.load(std::memory_order_relaxed)) {
      try {
        job.call(job.ctx, t);
      } catch (...) {
        std::lock_guard<std::mutex> lock(job.error_mutex);
        if (!job.error) job.error = std::current_exception();
        job.failed.store(true, std::memory_order_relaxed);
      }
    }
    job.done.fetch_add(1);
  }
}

void ThreadPool::worker_loop() {
  tls_in_pool = true;
  uint64_t seen = 0;
  for (;;) {
    uint64_t gen = generation_.load();
    for (int spin = 0; gen == seen && spin < kSpinIterations; ++spin) {
      _mm_pause();
      gen = generation_.load();
    }
    if (gen == seen) {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return generation_.load() != seen; });
      gen = generation_.load();
    }
    seen = gen;
    if (stop_.load()) return;
    active_.fetch_add(1);
    if (Job* job = job_.load()) work_on(*job);
    active_.fetch_sub(1);
  }
}

void ThreadPool::run_impl(int64_t tasks, Call call, void* ctx) {
  if (tasks <= 0) return;
  if (workers_.empty() || tasks == 1 || tls_in_pool) {
    for (int64_t t = 0; t < tasks; ++t) call(ctx, t);
    return;
  }
  Job job;
  job.call = call;
  job.ctx = ctx;
  job.tasks = tasks;
  job_.store(&job);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  tls_in_pool = true;
  work_on(job);
  tls_in_pool = false;
  while (job.done.load() != tasks) _mm_pause();
  job_.store(nullptr);
  while (active_.load() != 0) _mm_pause();
  if (job.error) std::rethrow_exception(job.error);
}

}  // namespace onebit
