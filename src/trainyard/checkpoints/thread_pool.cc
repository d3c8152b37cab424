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
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::Loop() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
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
  std::mutex mu;
  std::condition_variable done_cv;
  size_t helpers_running = 0;  // guarded by mu
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
  st->helpers_running = helpers;
  if (helpers > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t h = 0; h < helpers; ++h) {
      queue_.emplace_back([st, &fn] {
        RunShare(*st, fn);
        std::lock_guard<std::mutex> l(st->mu);
        if (--st->helpers_running == 0) st->done_cv.notify_all();
      });
    }
  }
  cv_.notify_all();
  RunShare(*st, fn);
  std::unique_lock<std::mutex> lock(st->mu);
  st->done_cv.wait(lock, [&] { return st->helpers_running == 0; });
}

}  // namespace trainyard::checkpoints
