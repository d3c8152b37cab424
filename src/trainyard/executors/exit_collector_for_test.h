// Test-only: collects an executor's exit callbacks so that tests can wait for an attempt's end
// with a deadline instead of sleeping. Thread-safe.
#pragma once

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "trainyard/common/mutex.h"
#include "trainyard/executors/executor.h"

namespace trainyard::executors {

class ExitCollector {
 public:
  Executor::ExitCallback Callback() {
    return [this](const AttemptExit& e) {
      MutexLock lock(mu_);
      exits_.push_back(e);
      cv_.NotifyAll();
    };
  }

  // The attempt's exit once it has arrived; nullopt if it did not within `limit` (real time:
  // this waits for processes).
  std::optional<AttemptExit> WaitFor(const std::string& job_id, int attempt,
                                     std::chrono::milliseconds limit) TY_EXCLUDES(mu_) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    MutexLock lock(mu_);
    std::optional<AttemptExit> found = FindLocked(job_id, attempt);
    while (!found && cv_.WaitUntil(mu_, deadline)) found = FindLocked(job_id, attempt);
    return found ? found : FindLocked(job_id, attempt);
  }

  // How many exits the attempt reported (an executor must report exactly one).
  size_t Count(const std::string& job_id, int attempt) TY_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return static_cast<size_t>(std::count_if(
        exits_.begin(), exits_.end(),
        [&](const AttemptExit& e) { return e.job_id == job_id && e.attempt == attempt; }));
  }

 private:
  std::optional<AttemptExit> FindLocked(const std::string& job_id, int attempt) TY_REQUIRES(mu_) {
    std::optional<AttemptExit> found;
    for (const auto& e : exits_) {
      if (e.job_id == job_id && e.attempt == attempt) found = e;
    }
    return found;
  }

  Mutex mu_;
  CondVar cv_;  // signalled when an exit arrives
  std::vector<AttemptExit> exits_ TY_GUARDED_BY(mu_);
};

}  // namespace trainyard::executors
