#include "trainyard/tables/serial_worker.h"

#include <algorithm>
#include <utility>

namespace trainyard::tables {

SerialWorker::SerialWorker(size_t capacity)
    : capacity_(std::max<size_t>(capacity, 1)), thread_([this] { Loop(); }) {}

SerialWorker::~SerialWorker() {
  std::deque<std::function<Status()>> dropped;
  {
    MutexLock lock(mu_);
    stopping_ = true;
    dropped.swap(queue_);
  }
  changed_.NotifyAll();
  thread_.join();
  // `dropped` goes here, outside the lock: a task's captures may clean up (remove files).
}

Status SerialWorker::Submit(std::function<Status()> task) {
  MutexLock lock(mu_);
  while (error_.ok() && !stopping_ && queue_.size() >= capacity_) {
    changed_.Wait(mu_);
  }
  if (!error_.ok()) return error_;
  if (stopping_) return Status::FailedPrecondition("the worker is stopping");
  queue_.push_back(std::move(task));
  changed_.NotifyAll();
  return Status::Ok();
}

Status SerialWorker::Drain() {
  MutexLock lock(mu_);
  while (error_.ok() && (!queue_.empty() || running_)) changed_.Wait(mu_);
  // After an error the queue is emptied by Loop, but a task may still be running.
  while (running_) changed_.Wait(mu_);
  return error_;
}

void SerialWorker::Loop() {
  for (;;) {
    std::function<Status()> task;
    {
      MutexLock lock(mu_);
      while (!stopping_ && queue_.empty()) changed_.Wait(mu_);
      if (stopping_) return;
      task = std::move(queue_.front());
      queue_.pop_front();
      running_ = true;
      changed_.NotifyAll();  // room for Submit
    }
    Status s = task();
    task = nullptr;  // its captures are released before Drain returns
    std::deque<std::function<Status()>> dropped;
    if (!s.ok()) {
      MutexLock lock(mu_);
      if (error_.ok()) {
        error_ = std::move(s);
        dropped.swap(queue_);
      }
    }
    dropped.clear();  // outside the lock: a task's captures may clean up (remove files)
    {
      MutexLock lock(mu_);
      running_ = false;
    }
    changed_.NotifyAll();
  }
}

}  // namespace trainyard::tables
