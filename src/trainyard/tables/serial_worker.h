// SerialWorker: one thread that runs tasks in the order they were queued, for the stages of
// a pipeline (DataFileWriter encodes row groups on one while its caller reads and converts
// the next rows, and stores finished files on another).
//
// At most `capacity` tasks (at least 1) wait; Submit blocks while that many do, which bounds what
// the tasks hold (memory, files). The first task that fails stops the worker: the tasks still
// waiting are destroyed without running, and Submit and Drain return that error from then on.
// Thread-safe. The destructor drops the waiting tasks, waits for the running one and joins.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <thread>

#include "trainyard/common/mutex.h"
#include "trainyard/common/status.h"

namespace trainyard::tables {

class SerialWorker {
 public:
  explicit SerialWorker(size_t capacity);
  ~SerialWorker();
  SerialWorker(const SerialWorker&) = delete;
  SerialWorker& operator=(const SerialWorker&) = delete;

  // Queues `task`, waiting for room. Returns the first error of an earlier task instead
  // (`task` is then destroyed without running).
  Status Submit(std::function<Status()> task) TY_EXCLUDES(mu_);
  // Waits until every queued task has run; returns the first error of any of them.
  Status Drain() TY_EXCLUDES(mu_);

 private:
  void Loop() TY_EXCLUDES(mu_);

  const size_t capacity_;
  Mutex mu_;
  CondVar changed_;  // a task was queued, taken or finished, or the worker stops
  std::deque<std::function<Status()>> queue_ TY_GUARDED_BY(mu_);
  bool running_ TY_GUARDED_BY(mu_) = false;  // a task is running
  bool stopping_ TY_GUARDED_BY(mu_) = false;
  Status error_ TY_GUARDED_BY(mu_);
  std::thread thread_;  // last: it starts once the fields above exist
};

}  // namespace trainyard::tables
