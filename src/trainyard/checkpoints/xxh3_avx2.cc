#include "trainyard/checkpoints/xxh3_avx2.h"

#if defined(__AVX2__)
#define XXH_INLINE_ALL
#define XXH_VECTOR XXH_AVX2
#include <xxhash.h>
#endif

namespace trainyard::checkpoints::internal {

#if defined(__AVX2__)

bool Xxh3Avx2Usable() {
  static const bool usable = __builtin_cpu_supports("avx2");
  return usable;
}

void Xxh3Avx2(const void* data, size_t size, uint64_t* low64, uint64_t* high64) {
  XXH128_hash_t h = XXH3_128bits(data, size);
  *low64 = h.low64;
  *high64 = h.high64;
}

#else  // built without -mavx2 (not x86-64): the library's version is used

bool Xxh3Avx2Usable() { return false; }

void Xxh3Avx2(const void*, size_t, uint64_t* low64, uint64_t* high64) {
  *low64 = 0;
  *high64 = 0;
}

#endif

}  // namespace trainyard::checkpoints::internal
