// MinHash signatures and LSH banding for near-duplicate detection (issue 18): the algorithm
// datatrove and text-dedup use, computed so that every engine gets the same bits (docs/prep.md,
// "Algorithms", is the reference for the Spark engine).
//
// - Shingles: the words of NormalizeForDedup(text) (text_filters.h) split on ' '; a shingle is
//   `shingle_words` consecutive words joined by one space; a text with fewer words is one
//   shingle; a text without words has no signature (it is never a duplicate). Shingles form a
//   set (repeats do not matter). Each shingle hashes once to x = XXH3_64bits(shingle, seed 0).
// - Permutation i (0 <= i < bands*rows): h_i(x) = uint32((a_i * x + b_i) >> 32), uint64
//   arithmetic wrapping, where a_0, b_0, a_1, b_1, ... are drawn in that order from splitmix64
//   seeded with `seed`, and a_i |= 1. signature[i] = min over the shingles of h_i(x).
// - Band j (0 <= j < bands) covers signature[j*rows .. (j+1)*rows); its key is XXH3_64bits of
//   those `rows` uint32 values as little-endian bytes (4*rows bytes), seed j.
//
// MinHasher is immutable after construction: all methods are const and thread-safe.
// NearDuplicateIndex is single-threaded (the engine adds the band keys after its parallel pass).
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "trainyard/common/status.h"

namespace trainyard::prep {

struct MinHashParams {
  int shingle_words = 5;
  int bands = 14;
  int rows = 8;
  // Pairs that share a band are near-duplicates only when their EstimatedJaccard is at least
  // this; 0 accepts every candidate pair (LSH alone, as datatrove does).
  double threshold = 0.0;
  uint64_t seed = 1;

  int num_perm() const { return bands * rows; }
};

// InvalidArgument naming the field ("<field>.bands: ..."): shingle_words in 1..32, bands and
// rows >= 1 with bands*rows <= 1024, threshold in [0, 1].
Status ValidateMinHashParams(const MinHashParams& params, std::string_view field);

class MinHasher {
 public:
  // `params` must have passed ValidateMinHashParams.
  explicit MinHasher(MinHashParams params);

  const MinHashParams& params() const { return params_; }
  int num_perm() const { return params_.num_perm(); }

  // Writes the signature of `text` to out[0 .. num_perm()). Returns false (out untouched) when
  // the text has no words.
  bool Signature(std::string_view text, uint32_t* out) const;
  // The same for a text already normalized by NormalizeForDedup (the engine normalizes once
  // for exact and near dedup).
  bool SignatureOfNormalized(std::string_view normalized, uint32_t* out) const;

  // Writes the `bands` band keys of a signature to keys[0 .. bands).
  void BandKeys(const uint32_t* signature, uint64_t* keys) const;

 private:
  MinHashParams params_;
  // Multipliers and offsets, num_perm() each (a_i odd), and their 32-bit halves for the
  // vectorised kernel (minhash.cc).
  std::vector<uint64_t> a_;
  std::vector<uint64_t> b_;
  std::vector<uint32_t> alo_, ahi_, blo_, bhi_;
};

// The fraction of the n positions where two signatures agree (the estimate of the Jaccard
// similarity of the shingle sets); 0 when n == 0.
double EstimatedJaccard(const uint32_t* a, const uint32_t* b, int n);

// Clusters of near-duplicates from band keys. Documents are dense indexes 0..n-1 in source
// order. For every band j and key k, the documents whose band j has key k form a bucket; each
// bucket's other members are joined to its smallest member d0 (when a verify function is given,
// only those d with verify(d0, d) true). The clusters are the connected components of these
// edges; a cluster's root is its smallest document index. The result depends only on the set of
// (document, band keys) added, never on the order of Add calls.
//
// Memory: bands*8 bytes per document slot, plus a temporary index while Clusters runs.
class NearDuplicateIndex {
 public:
  explicit NearDuplicateIndex(int bands);

  int bands() const { return bands_; }

  // Records a document's band keys (keys[0 .. bands)). Adding a document twice replaces its
  // keys. Not thread-safe.
  void Add(uint32_t doc, const uint64_t* band_keys);

  // (a, b) with a < b: whether the pair counts as near-duplicates (for example
  // EstimatedJaccard(sig[a], sig[b]) >= threshold). Called only for pairs not already in one
  // cluster.
  using VerifyFn = std::function<bool(uint32_t a, uint32_t b)>;

  // For each document 0..num_docs-1, its cluster's root; documents never added are their own
  // root. `verify` may be empty (every candidate pair is a near-duplicate).
  std::vector<uint32_t> Clusters(uint32_t num_docs, const VerifyFn& verify = nullptr) const;

 private:
  int bands_;
  std::vector<uint64_t> keys_;  // document-major: keys_[doc*bands_ + j]
  std::vector<bool> added_;
};

}  // namespace trainyard::prep
