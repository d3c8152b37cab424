// ThreadPool: a fixed set of worker threads for the checkpoint store's parallel I/O.
//
// ParallelFor runs fn(i, worker) for every i in [0, n), on the pool's threads and on the
// calling thread, and returns when all have run. `worker` is in [0, Concurrency()) and is
// unique among calls running at the same time, so callers can keep per-worker scratch
// buffers. Several threads may call ParallelFor at once (each call waits only for its own
// work). Thread-safe. The destructor joins the workers.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "trainyard/common/mutex.h"

namespace trainyard::checkpoints {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Pool threads plus the caller.
  size_t Concurrency() const { return workers_.size() + 1; }

  void ParallelFor(size_t n, const std::function<void(size_t index, size_t worker)>& fn)
      TY_EXCLUDES(mu_);

 private:
  void Loop() TY_EXCLUDES(mu_);

  Mutex mu_;
  CondVar cv_;  // a task was queued, or the pool stops
  std::deque<std::function<void()>> queue_ TY_GUARDED_BY(mu_);
  bool stopping_ TY_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

}  // namespace trainyard::checkpoints
