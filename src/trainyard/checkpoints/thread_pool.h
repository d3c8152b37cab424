// ThreadPool: a fixed set of worker threads for the checkpoint store's parallel I/O.
//
// ParallelFor runs fn(i, worker) for every i in [0, n), on the pool's threads and on the
// calling thread, and returns when all have run. `worker` is in [0, Concurrency()) and is
// unique among calls running at the same time, so callers can keep per-worker scratch
// buffers. Several threads may call ParallelFor at once (each call waits only for its own
// work). Thread-safe. The destructor joins the workers.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace trainyard::checkpoints {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Pool threads plus the caller.
  size_t Concurrency() const { return workers_.size() + 1; }

  void ParallelFor(size_t n, const std::function<void(size_t index, size_t worker)>& fn);

 private:
  void Loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;  // guarded by mu_
  bool stopping_ = false;                    // guarded by mu_
  std::vector<std::thread> workers_;
};

}  // namespace trainyard::checkpoints
