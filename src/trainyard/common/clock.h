// Clock and Random: injected sources of time and randomness, so that tests are
// deterministic (Envoy's TimeSource habit). Implementations are thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <random>
#include <string>

#include "trainyard/common/mutex.h"

namespace trainyard {

// Two kinds of time: wall time for timestamps that are stored and shown (it may jump when
// the system clock is set), and monotonic time for timeouts, backoff, hang detection and
// polling (it never goes back). Code that measures an interval uses MonotonicNow().
class Clock {
 public:
  using MonotonicTime = std::chrono::steady_clock::time_point;

  virtual ~Clock() = default;
  // Wall time: milliseconds since the Unix epoch.
  virtual int64_t NowMillis() = 0;
  // Monotonic time. Only differences between two readings mean anything.
  virtual MonotonicTime MonotonicNow() = 0;
};

class SystemClock : public Clock {
 public:
  int64_t NowMillis() override;
  MonotonicTime MonotonicNow() override;
};

// A clock that moves only when told to; AdvanceMillis moves wall and monotonic time
// together (a negative delta moves only wall time). For tests.
class FakeClock : public Clock {
 public:
  explicit FakeClock(int64_t start_millis = 1'700'000'000'000) : now_(start_millis) {}
  int64_t NowMillis() override;
  MonotonicTime MonotonicNow() override;
  void AdvanceMillis(int64_t delta);

 private:
  Mutex mu_;
  int64_t now_ TY_GUARDED_BY(mu_);
  // Monotonic time starts at an arbitrary point, as the system's does.
  std::chrono::milliseconds monotonic_ TY_GUARDED_BY(mu_){1'000'000};
};

class Random {
 public:
  virtual ~Random() = default;
  virtual uint64_t Next64() = 0;
  // `n` random bytes written as 2n lowercase hex characters.
  std::string Hex(size_t n_bytes);
};

// Cryptographically secure (OpenSSL RAND_bytes); used for tokens and ids.
class SecureRandom : public Random {
 public:
  uint64_t Next64() override;
};

// Deterministic, seeded. For tests.
class SeededRandom : public Random {
 public:
  explicit SeededRandom(uint64_t seed) : gen_(seed) {}
  uint64_t Next64() override;

 private:
  Mutex mu_;
  std::mt19937_64 gen_ TY_GUARDED_BY(mu_);
};

}  // namespace trainyard
