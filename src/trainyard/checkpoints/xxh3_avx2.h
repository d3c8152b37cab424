// XXH3-128 compiled for AVX2, for chunk hashing on x86-64.
//
// Debian's libxxhash is built for the x86-64 baseline (SSE2): about 5-6 GB/s on one core of
// the development VM, against 12-13 GB/s with AVX2 for the same hash value (XXH3's result
// does not depend on the vector width). Every byte of a checkpoint is hashed on save and on
// restore, so this is most of the store's CPU. xxh3_avx2.cc is built with -mavx2 where the
// compiler targets x86-64 (CMakeLists.txt); callers must check Xxh3Avx2Usable() first, which
// asks the CPU at run time. Thread-safe, no state.
#pragma once

#include <cstddef>
#include <cstdint>

namespace trainyard::checkpoints::internal {

// True when this build has the AVX2 version and the CPU can run it.
bool Xxh3Avx2Usable();

// XXH3_128bits(data, size) as (low64, high64). Only when Xxh3Avx2Usable().
void Xxh3Avx2(const void* data, size_t size, uint64_t* low64, uint64_t* high64);

}  // namespace trainyard::checkpoints::internal
