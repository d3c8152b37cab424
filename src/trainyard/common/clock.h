// Clock and Random: injected sources of time and randomness, so that tests are
// deterministic (Envoy's TimeSource habit). Implementations are thread-safe.
#pragma once

#include <cstdint>
#include <mutex>
#include <random>
#include <string>

namespace trainyard {

class Clock {
 public:
  virtual ~Clock() = default;
  // Milliseconds since the Unix epoch.
  virtual int64_t NowMillis() = 0;
};

class SystemClock : public Clock {
 public:
  int64_t NowMillis() override;
};

// A clock that moves only when told to. For tests.
class FakeClock : public Clock {
 public:
  explicit FakeClock(int64_t start_millis = 1'700'000'000'000) : now_(start_millis) {}
  int64_t NowMillis() override;
  void AdvanceMillis(int64_t delta);

 private:
  std::mutex mu_;
  int64_t now_;
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
  std::mutex mu_;
  std::mt19937_64 gen_;
};

}  // namespace trainyard
