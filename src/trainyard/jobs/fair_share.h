// FairShareUsage: each project's resource usage, decayed exponentially with a
// configurable half-life, for the scheduler's fair-share queue order.
//
// Units are the caller's; the job service adds GPU-seconds (CPU-seconds / 100 for
// jobs that hold no GPUs). Time is injected (`now_ms`, milliseconds), so tests need
// no clock. A call with a `now_ms` earlier than the project's last update decays
// nothing (time never runs backwards here). A half-life <= 0 turns decay off.
//
// Thread-compatible: const methods may run concurrently; Add needs exclusive access.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>

namespace trainyard::jobs {

inline constexpr int64_t kDefaultUsageHalfLifeMs = 24LL * 3600 * 1000;

class FairShareUsage {
 public:
  explicit FairShareUsage(int64_t half_life_ms = kDefaultUsageHalfLifeMs);

  // Adds `amount` to `project`'s usage at time `now_ms` (after decaying what it had).
  void Add(const std::string& project, double amount, int64_t now_ms);
  // The project's decayed usage at `now_ms`; 0 for a project never seen.
  double Get(const std::string& project, int64_t now_ms) const;
  // Every project's decayed usage at `now_ms` (the scheduler's `project_usage`).
  std::unordered_map<std::string, double> Snapshot(int64_t now_ms) const;

  int64_t half_life_ms() const { return half_life_ms_; }

 private:
  struct Entry {
    double value = 0;
    int64_t as_of_ms = 0;
  };
  double Decayed(const Entry& e, int64_t now_ms) const;

  int64_t half_life_ms_;
  std::unordered_map<std::string, Entry> usage_;
};

}  // namespace trainyard::jobs
