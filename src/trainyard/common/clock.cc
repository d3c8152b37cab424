#include "trainyard/common/clock.h"

#include <openssl/rand.h>

#include <chrono>
#include <stdexcept>

namespace trainyard {

int64_t SystemClock::NowMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Clock::MonotonicTime SystemClock::MonotonicNow() { return std::chrono::steady_clock::now(); }

int64_t FakeClock::NowMillis() {
  MutexLock lock(mu_);
  return now_;
}

Clock::MonotonicTime FakeClock::MonotonicNow() {
  MutexLock lock(mu_);
  return MonotonicTime(monotonic_);
}

void FakeClock::AdvanceMillis(int64_t delta) {
  MutexLock lock(mu_);
  now_ += delta;
  // Wall time may be set back (tests of clock jumps do); monotonic time never goes back.
  if (delta > 0) monotonic_ += std::chrono::milliseconds(delta);
}

std::string Random::Hex(size_t n_bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(n_bytes * 2);
  uint64_t word = 0;
  for (size_t i = 0; i < n_bytes; ++i) {
    if (i % 8 == 0) word = Next64();
    unsigned byte = word & 0xff;
    word >>= 8;
    out.push_back(kDigits[byte >> 4]);
    out.push_back(kDigits[byte & 0xf]);
  }
  return out;
}

uint64_t SecureRandom::Next64() {
  uint64_t v = 0;
  // RAND_bytes fails only when the OS entropy source is unavailable: an invariant violation.
  if (RAND_bytes(reinterpret_cast<unsigned char*>(&v), sizeof(v)) != 1) {
    std::abort();
  }
  return v;
}

uint64_t SeededRandom::Next64() {
  MutexLock lock(mu_);
  return gen_();
}

}  // namespace trainyard
