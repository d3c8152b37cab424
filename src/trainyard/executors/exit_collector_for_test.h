// Test-only: collects an executor's exit callbacks so that tests can wait for an attempt's end
// with a deadline instead of sleeping. Thread-safe.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "trainyard/executors/executor.h"

namespace trainyard::executors {

class ExitCollector {
 public:
  Executor::ExitCallback Callback() {
    return [this](const AttemptExit& e) {
      std::lock_guard<std::mutex> lock(mu_);
      exits_.push_back(e);
      cv_.notify_all();
    };
  }

  // The attempt's exit once it has arrived; nullopt if it did not within `limit`.
  std::optional<AttemptExit> WaitFor(const std::string& job_id, int attempt,
                                     std::chrono::milliseconds limit) {
    std::unique_lock<std::mutex> lock(mu_);
    std::optional<AttemptExit> found;
    cv_.wait_for(lock, limit, [&] {
      for (const auto& e : exits_) {
        if (e.job_id == job_id && e.attempt == attempt) found = e;
      }
      return found.has_value();
    });
    return found;
  }

  // How many exits the attempt reported (an executor must report exactly one).
  size_t Count(const std::string& job_id, int attempt) {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<size_t>(std::count_if(
        exits_.begin(), exits_.end(),
        [&](const AttemptExit& e) { return e.job_id == job_id && e.attempt == attempt; }));
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<AttemptExit> exits_;  // guarded by mu_
};

}  // namespace trainyard::executors
