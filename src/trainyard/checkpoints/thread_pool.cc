#include "trainyard/checkpoints/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <memory>

namespace trainyard::checkpoints {

ThreadPool::ThreadPool(int threads) {
  for (int i = 0; i < std::max(threads, 0); ++i) workers_.emplace_back([this] { Loop(); });
}

ThreadPool::~ThreadPool() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  cv_.NotifyAll();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::Loop() {
  for (;;) {
    std::function<void()> task;
    {
      MutexLock lock(mu_);
      while (!stopping_ && queue_.empty()) cv_.Wait(mu_);
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

namespace {

// One ParallelFor call: indexes are claimed from `next`; worker slots from `next_worker`.
struct ForState {
  size_t n = 0;
  std::atomic<size_t> next{0};
  std::atomic<size_t> next_worker{0};
  Mutex mu;
  CondVar done_cv;  // helpers_running reached 0
  size_t helpers_running TY_GUARDED_BY(mu) = 0;
};

void RunShare(ForState& st, const std::function<void(size_t, size_t)>& fn) {
  size_t worker = st.next_worker.fetch_add(1);
  for (size_t i = st.next.fetch_add(1); i < st.n; i = st.next.fetch_add(1)) fn(i, worker);
}

}  // namespace

void ThreadPool::ParallelFor(size_t n, const std::function<void(size_t, size_t)>& fn) {
  if (n == 0) return;
  auto st = std::make_shared<ForState>();
  st->n = n;
  size_t helpers = std::min(workers_.size(), n - 1);
  {
    MutexLock lock(st->mu);
    st->helpers_running = helpers;
  }
  if (helpers > 0) {
    MutexLock lock(mu_);
    for (size_t h = 0; h < helpers; ++h) {
      queue_.emplace_back([st, &fn] {
        RunShare(*st, fn);
        MutexLock l(st->mu);
        if (--st->helpers_running == 0) st->done_cv.NotifyAll();
      });
    }
  }
  cv_.NotifyAll();
  RunShare(*st, fn);
  MutexLock lock(st->mu);
  while (st->helpers_running != 0) st->done_cv.Wait(st->mu);
}

}  // namespace trainyard::checkpoints
