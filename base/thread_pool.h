// One pool shared by every kernel of a session (`--threads N`). The caller's
// thread works too, so a pool of N runs N-1 workers. Workers spin briefly
// between jobs (a decode step is thousands of short kernels) and then sleep.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace onebit {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(task) for every task in [0, tasks), spread dynamically over the
  // threads; returns when all are done. Nested calls run inline. An
  // exception thrown by fn (a kernel's Error) stops the tasks not yet
  // started and is rethrown here, on the caller's thread, once every worker
  // has left the job.
  template <class F>
  void run(int64_t tasks, F&& fn) {
    using Fn = std::remove_reference_t<F>;
    run_impl(tasks, [](void* ctx, int64_t t) { (*static_cast<Fn*>(ctx))(t); }, &fn);
  }

  // Splits [0, n) into at most size() contiguous ranges of at least `grain`
  // and calls fn(begin, end) for each.
  template <class F>
  void parallel_for(int64_t n, int64_t grain, F&& fn) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    int64_t chunks = std::min<int64_t>(size(), (n + grain - 1) / grain);
    if (chunks <= 1) {
      fn(int64_t{0}, n);
      return;
    }
    const int64_t step = (n + chunks - 1) / chunks;
    chunks = (n + step - 1) / step;
    run(chunks, [&](int64_t c) { fn(c * step, std::min(n, (c + 1) * step)); });
  }

  // The machine's cores as std::thread sees them (at least 1).
  static int default_threads();

 private:
  using Call = void (*)(void*, int64_t);
  // One parallel call; lives on the caller's stack for the call's duration.
  struct Job {
    Call call = nullptr;
    void* ctx = nullptr;
    int64_t tasks = 0;
    std::atomic<int64_t> next{0};
    std::atomic<int64_t> done{0};
    std::atomic<bool> failed{false};
    std::mutex error_mutex;
    std::exception_ptr error;  // the first exception a task threw
  };
  void run_impl(int64_t tasks, Call call, void* ctx);
  void worker_loop();
  static void work_on(Job& job);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
  // The job being run, null between jobs. A worker raises active_ before
  // reading it and the caller clears it before waiting for active_ to drop,
  // so no worker can touch a job after run() returns.
  std::atomic<Job*> job_{nullptr};
  std::atomic<int> active_{0};
};

}  // namespace onebit
