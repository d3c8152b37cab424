#include "trainyard/prep/minhash.h"

// Inlined here (same values as the library): the shingle loop hashes short strings.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <utility>

#include "trainyard/prep/text_filters.h"
#include "trainyard/prep/text_internal.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define TY_PREP_HAVE_AVX2 1
#endif

namespace trainyard::prep {
namespace {

uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// The permutations split into 32-bit halves: for x = xh*2^32 + xl,
//   (a*x + b) mod 2^64 = (alo*xl + blo) + ((ahi*xl + alo*xh + bhi) << 32)   (mod 2^64),
// and alo*xl + blo < 2^64, so bits 32..63 of a*x + b are
//   hi32(alo*xl + blo) + ahi*xl + alo*xh + bhi   (mod 2^32).
// Only 32x32-bit multiplies, which AVX2 has (a 64-bit multiply it has not).
struct SplitPermutations {
  const uint32_t* alo;
  const uint32_t* ahi;
  const uint32_t* blo;
  const uint32_t* bhi;
};

// Scalar reference: signature[i] = min over shingles of uint32((a_i*x + b_i) >> 32).
void MinScalar(const uint64_t* xs, size_t n, const uint64_t* a, const uint64_t* b, int perms,
               uint32_t* sig) {
  std::fill(sig, sig + perms, std::numeric_limits<uint32_t>::max());
  for (size_t s = 0; s < n; ++s) {
    const uint64_t x = xs[s];
    for (int i = 0; i < perms; ++i) {
      uint32_t h = static_cast<uint32_t>((a[i] * x + b[i]) >> 32);
      sig[i] = std::min(sig[i], h);
    }
  }
}

#ifdef TY_PREP_HAVE_AVX2
std::atomic<bool> avx2_allowed{true};  // false only in tests of the scalar path

bool CpuHasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has && avx2_allowed.load(std::memory_order_relaxed);
}

// Eight permutations (one 256-bit vector of uint32) for one shingle.
struct Lanes8 {
  __m256i alo_even, alo_odd, ahi, blo_even, blo_odd, bhi;
};

__attribute__((target("avx2"))) inline Lanes8 LoadLanes(const SplitPermutations& p, int i) {
  const __m256i low32 = _mm256_set1_epi64x(0xFFFFFFFFLL);
  Lanes8 l;
  l.alo_even = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.alo + i));
  l.alo_odd = _mm256_srli_epi64(l.alo_even, 32);
  l.ahi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.ahi + i));
  __m256i blo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.blo + i));
  l.blo_even = _mm256_and_si256(blo, low32);
  l.blo_odd = _mm256_srli_epi64(blo, 32);
  l.bhi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.bhi + i));
  return l;
}

__attribute__((target("avx2"))) inline __m256i Permute8(const Lanes8& l, __m256i xl, __m256i xh) {
  // _mm256_mul_epu32 multiplies the even 32-bit lanes into 64-bit products.
  __m256i even = _mm256_add_epi64(_mm256_mul_epu32(l.alo_even, xl), l.blo_even);
  __m256i odd = _mm256_add_epi64(_mm256_mul_epu32(l.alo_odd, xl), l.blo_odd);
  __m256i hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
  __m256i cross =
      _mm256_add_epi32(_mm256_mullo_epi32(l.ahi, xl), _mm256_mullo_epi32(l.alo_even, xh));
  return _mm256_add_epi32(_mm256_add_epi32(hi, l.bhi), cross);
}

// Blocks of 16 permutations stay in registers while the loop runs over the shingles; the
// shingle hashes come pre-split into xl (low halves) and xh (high halves).
__attribute__((target("avx2"))) void MinAvx2(const uint32_t* xl, const uint32_t* xh, size_t n,
                                             const SplitPermutations& p, int perms, uint32_t* sig) {
  int i = 0;
  for (; i + 16 <= perms; i += 16) {
    Lanes8 l0 = LoadLanes(p, i);
    Lanes8 l1 = LoadLanes(p, i + 8);
    __m256i m0 = _mm256_set1_epi32(-1);
    __m256i m1 = m0;
    for (size_t s = 0; s < n; ++s) {
      __m256i vxl = _mm256_set1_epi32(static_cast<int>(xl[s]));
      __m256i vxh = _mm256_set1_epi32(static_cast<int>(xh[s]));
      m0 = _mm256_min_epu32(m0, Permute8(l0, vxl, vxh));
      m1 = _mm256_min_epu32(m1, Permute8(l1, vxl, vxh));
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(sig + i), m0);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(sig + i + 8), m1);
  }
  for (; i + 8 <= perms; i += 8) {
    Lanes8 l0 = LoadLanes(p, i);
    __m256i m0 = _mm256_set1_epi32(-1);
    for (size_t s = 0; s < n; ++s) {
      __m256i vxl = _mm256_set1_epi32(static_cast<int>(xl[s]));
      __m256i vxh = _mm256_set1_epi32(static_cast<int>(xh[s]));
      m0 = _mm256_min_epu32(m0, Permute8(l0, vxl, vxh));
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(sig + i), m0);
  }
  for (; i < perms; ++i) {  // the tail (fewer than 8)
    uint32_t m = std::numeric_limits<uint32_t>::max();
    for (size_t s = 0; s < n; ++s) {
      uint64_t t = static_cast<uint64_t>(p.alo[i]) * xl[s] + p.blo[i];
      uint32_t h = static_cast<uint32_t>(t >> 32) + p.ahi[i] * xl[s] + p.alo[i] * xh[s] + p.bhi[i];
      m = std::min(m, h);
    }
    sig[i] = m;
  }
}
#endif

// Per-thread scratch, so Signature allocates nothing in the steady state.
struct Scratch {
  std::vector<size_t> word_starts;
  std::vector<uint64_t> hashes;
  std::vector<uint32_t> xl, xh;
};

Scratch& ThreadScratch() {
  thread_local Scratch scratch;
  return scratch;
}

}  // namespace

namespace internal {

bool SetMinHashAvx2ForTest(bool allowed) {
#ifdef TY_PREP_HAVE_AVX2
  return avx2_allowed.exchange(allowed);
#else
  (void)allowed;
  return false;
#endif
}

}  // namespace internal

Status ValidateMinHashParams(const MinHashParams& params, std::string_view field) {
  std::string f(field);
  if (params.shingle_words < 1 || params.shingle_words > 32) {
    return Status::InvalidArgument(f + ".shingle_words: must be between 1 and 32 (got " +
                                   std::to_string(params.shingle_words) + ")");
  }
  if (params.bands < 1) {
    return Status::InvalidArgument(f + ".bands: must be at least 1 (got " +
                                   std::to_string(params.bands) + ")");
  }
  if (params.rows < 1) {
    return Status::InvalidArgument(f + ".rows: must be at least 1 (got " +
                                   std::to_string(params.rows) + ")");
  }
  if (static_cast<int64_t>(params.bands) * params.rows > 1024) {
    return Status::InvalidArgument(f +
                                   ".bands: bands * rows must be at most 1024 permutations (got " +
                                   std::to_string(params.bands) + " * " +
                                   std::to_string(params.rows) + "); use fewer bands or rows");
  }
  if (!(params.threshold >= 0.0 && params.threshold <= 1.0)) {
    return Status::InvalidArgument(f + ".threshold: must be between 0 and 1 (got " +
                                   std::to_string(params.threshold) + ")");
  }
  return Status::Ok();
}

MinHasher::MinHasher(MinHashParams params) : params_(params) {
  const int perms = params_.num_perm();
  a_.resize(perms);
  b_.resize(perms);
  uint64_t state = params_.seed;
  for (int i = 0; i < perms; ++i) {
    a_[i] = SplitMix64(&state) | 1;
    b_[i] = SplitMix64(&state);
  }
  for (uint64_t a : a_) {
    alo_.push_back(static_cast<uint32_t>(a));
    ahi_.push_back(static_cast<uint32_t>(a >> 32));
  }
  for (uint64_t b : b_) {
    blo_.push_back(static_cast<uint32_t>(b));
    bhi_.push_back(static_cast<uint32_t>(b >> 32));
  }
}

bool MinHasher::Signature(std::string_view text, uint32_t* out) const {
  return SignatureOfNormalized(NormalizeForDedup(text), out);
}

bool MinHasher::SignatureOfNormalized(std::string_view normalized, uint32_t* out) const {
  Scratch& scratch = ThreadScratch();
  std::vector<size_t>& starts = scratch.word_starts;
  starts.clear();
  // Normalized text: words separated by exactly one space, none leading or trailing; tolerate
  // other input by skipping empty pieces.
  for (size_t i = 0; i < normalized.size();) {
    size_t j = normalized.find(' ', i);
    if (j == std::string_view::npos) j = normalized.size();
    if (j > i) starts.push_back(i);
    i = j + 1;
  }
  if (starts.empty()) return false;
  auto word_end = [&](size_t w) {
    size_t e = normalized.find(' ', starts[w]);
    return e == std::string_view::npos ? normalized.size() : e;
  };
  std::vector<uint64_t>& hashes = scratch.hashes;
  hashes.clear();
  const size_t k = static_cast<size_t>(params_.shingle_words);
  if (starts.size() <= k) {
    size_t begin = starts.front();
    size_t end = word_end(starts.size() - 1);
    hashes.push_back(XXH3_64bits(normalized.data() + begin, end - begin));
  } else {
    for (size_t w = 0; w + k <= starts.size(); ++w) {
      size_t begin = starts[w];
      // The shingle ends where its last word ends: just before the next word's start.
      size_t end = w + k < starts.size() ? starts[w + k] - 1 : word_end(w + k - 1);
      hashes.push_back(XXH3_64bits(normalized.data() + begin, end - begin));
    }
  }
  const int perms = num_perm();
#ifdef TY_PREP_HAVE_AVX2
  if (CpuHasAvx2()) {
    scratch.xl.resize(hashes.size());
    scratch.xh.resize(hashes.size());
    for (size_t s = 0; s < hashes.size(); ++s) {
      scratch.xl[s] = static_cast<uint32_t>(hashes[s]);
      scratch.xh[s] = static_cast<uint32_t>(hashes[s] >> 32);
    }
    SplitPermutations split{alo_.data(), ahi_.data(), blo_.data(), bhi_.data()};
    MinAvx2(scratch.xl.data(), scratch.xh.data(), hashes.size(), split, perms, out);
    return true;
  }
#endif
  MinScalar(hashes.data(), hashes.size(), a_.data(), b_.data(), perms, out);
  return true;
}

void MinHasher::BandKeys(const uint32_t* signature, uint64_t* keys) const {
  const int rows = params_.rows;
  for (int j = 0; j < params_.bands; ++j) {
    const uint32_t* band = signature + static_cast<size_t>(j) * rows;
    if constexpr (std::endian::native == std::endian::little) {
      keys[j] = XXH3_64bits_withSeed(band, sizeof(uint32_t) * rows, static_cast<uint64_t>(j));
    } else {
      std::string bytes(sizeof(uint32_t) * rows, '\0');
      for (int r = 0; r < rows; ++r) {
        for (int k = 0; k < 4; ++k) bytes[4 * r + k] = static_cast<char>(band[r] >> (8 * k));
      }
      keys[j] = XXH3_64bits_withSeed(bytes.data(), bytes.size(), static_cast<uint64_t>(j));
    }
  }
}

double EstimatedJaccard(const uint32_t* a, const uint32_t* b, int n) {
  if (n <= 0) return 0.0;
  int equal = 0;
  for (int i = 0; i < n; ++i) equal += a[i] == b[i];
  return static_cast<double>(equal) / n;
}

NearDuplicateIndex::NearDuplicateIndex(int bands) : bands_(bands) {}

void NearDuplicateIndex::Add(uint32_t doc, const uint64_t* band_keys) {
  if (doc >= added_.size()) {
    added_.resize(static_cast<size_t>(doc) + 1, false);
    keys_.resize(added_.size() * bands_, 0);
  }
  std::memcpy(keys_.data() + static_cast<size_t>(doc) * bands_, band_keys,
              sizeof(uint64_t) * bands_);
  added_[doc] = true;
}

std::vector<uint32_t> NearDuplicateIndex::Clusters(uint32_t num_docs,
                                                   const VerifyFn& verify) const {
  std::vector<uint32_t> parent(num_docs);
  std::iota(parent.begin(), parent.end(), 0u);
  auto find = [&](uint32_t x) {
    while (parent[x] != x) {
      parent[x] = parent[parent[x]];  // path halving
      x = parent[x];
    }
    return x;
  };
  std::vector<std::pair<uint64_t, uint32_t>> bucketed;  // (band key, doc), one band at a time
  const uint32_t limit = std::min<uint32_t>(num_docs, static_cast<uint32_t>(added_.size()));
  for (int j = 0; j < bands_; ++j) {
    bucketed.clear();
    for (uint32_t d = 0; d < limit; ++d) {
      if (added_[d]) bucketed.emplace_back(keys_[static_cast<size_t>(d) * bands_ + j], d);
    }
    std::sort(bucketed.begin(), bucketed.end());
    for (size_t i = 0; i < bucketed.size();) {
      size_t e = i + 1;
      while (e < bucketed.size() && bucketed[e].first == bucketed[i].first) ++e;
      const uint32_t d0 = bucketed[i].second;  // the bucket's smallest document
      for (size_t k = i + 1; k < e; ++k) {
        const uint32_t d = bucketed[k].second;
        uint32_t r0 = find(d0);
        uint32_t r = find(d);
        if (r0 == r) continue;
        if (verify && !verify(d0, d)) continue;
        // The smaller root stays the root, so every root is its component's smallest index.
        if (r0 < r) {
          parent[r] = r0;
        } else {
          parent[r0] = r;
        }
      }
      i = e;
    }
  }
  for (uint32_t d = 0; d < num_docs; ++d) parent[d] = find(d);
  return parent;
}

}  // namespace trainyard::prep
