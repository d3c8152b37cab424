#include "trainyard/prep/minhash.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <algorithm>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "trainyard/common/strings.h"
#include "trainyard/prep/text_filters.h"
#include "trainyard/prep/text_internal.h"
#include "trainyard/testing/status_matchers.h"

namespace trainyard::prep {
namespace {

// The algorithm of minhash.h written out plainly, independent of the vectorised kernel.
std::vector<uint32_t> ReferenceSignature(const std::string& text, const MinHashParams& p) {
  std::vector<std::string> words;
  for (const std::string& w : SplitString(NormalizeForDedup(text), ' ')) {
    if (!w.empty()) words.push_back(w);
  }
  if (words.empty()) return {};
  std::vector<std::string> shingles;
  size_t k = static_cast<size_t>(p.shingle_words);
  size_t count = words.size() <= k ? 1 : words.size() - k + 1;
  for (size_t i = 0; i < count; ++i) {
    std::string s;
    for (size_t j = i; j < std::min(words.size(), i + k); ++j) {
      if (j > i) s += ' ';
      s += words[j];
    }
    shingles.push_back(s);
  }
  uint64_t state = p.seed;
  auto splitmix = [&] {
    uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  };
  std::vector<uint32_t> sig(p.num_perm(), std::numeric_limits<uint32_t>::max());
  for (int i = 0; i < p.num_perm(); ++i) {
    uint64_t a = splitmix() | 1;
    uint64_t b = splitmix();
    for (const std::string& s : shingles) {
      uint64_t x = XXH3_64bits_withSeed(s.data(), s.size(), 0);
      sig[i] = std::min(sig[i], static_cast<uint32_t>((a * x + b) >> 32));
    }
  }
  return sig;
}

// A deterministic "ticket" of n words from a small vocabulary.
std::string RandomText(int n, uint32_t seed) {
  static const std::vector<std::string> vocab = {
      "order",   "refund",  "delivery", "account", "password", "invoice", "package", "late",
      "broken",  "replace", "customer", "support", "please",   "help",    "thanks",  "the",
      "my",      "was",     "not",      "arrived", "charged",  "twice",   "card",    "email",
      "address", "update",  "cancel",   "week",    "today",    "store",   "app",     "login",
      "error",   "message", "screen",   "phone",   "number",   "call",    "back",    "soon"};
  std::mt19937 rng(seed);
  std::string s;
  for (int i = 0; i < n; ++i) {
    if (i > 0) s += ' ';
    s += vocab[rng() % vocab.size()] + std::to_string(rng() % 50);
  }
  return s;
}

// `text` with `changed` of its words replaced (deterministically spread).
std::string ChangeWords(const std::string& text, int changed, uint32_t seed) {
  std::vector<std::string> words = SplitString(text, ' ');
  std::mt19937 rng(seed);
  std::vector<size_t> positions(words.size());
  for (size_t i = 0; i < positions.size(); ++i) positions[i] = i;
  std::shuffle(positions.begin(), positions.end(), rng);
  for (int i = 0; i < changed; ++i) words[positions[i]] = "zz" + std::to_string(i);
  std::string out;
  for (size_t i = 0; i < words.size(); ++i) out += (i ? " " : "") + words[i];
  return out;
}

TEST(MinHashTest, ValidateNamesTheField) {
  TY_EXPECT_OK(ValidateMinHashParams(MinHashParams{}, "steps[3].dedup_near"));
  MinHashParams p;
  p.bands = 0;
  TY_EXPECT_ERROR(ValidateMinHashParams(p, "steps[3].dedup_near"), StatusCode::kInvalidArgument,
                  "steps[3].dedup_near.bands");
  p = MinHashParams{};
  p.bands = 64;
  p.rows = 32;
  TY_EXPECT_ERROR(ValidateMinHashParams(p, "d"), StatusCode::kInvalidArgument, "at most 1024");
  p = MinHashParams{};
  p.shingle_words = 33;
  TY_EXPECT_ERROR(ValidateMinHashParams(p, "d"), StatusCode::kInvalidArgument, "d.shingle_words");
  p = MinHashParams{};
  p.threshold = 1.5;
  TY_EXPECT_ERROR(ValidateMinHashParams(p, "d"), StatusCode::kInvalidArgument, "d.threshold");
  p.threshold = std::numeric_limits<double>::quiet_NaN();
  TY_EXPECT_ERROR(ValidateMinHashParams(p, "d"), StatusCode::kInvalidArgument, "d.threshold");
}

TEST(MinHashTest, SignatureFollowsTheDocumentedAlgorithm) {
  const std::vector<std::string> texts = {
      RandomText(300, 1), RandomText(7, 2),          "One, two:  THREE four five six.",
      "short text",       "Straße ÉCOLE \xff bytes", RandomText(1000, 3)};
  const std::vector<MinHashParams> params = {
      MinHashParams{}, MinHashParams{3, 3, 5, 0.0, 7},  // 15 permutations: the scalar tail
      MinHashParams{1, 32, 8, 0.5, 42}, MinHashParams{32, 1, 1, 0.0, 0}};
  for (const MinHashParams& p : params) {
    TY_ASSERT_OK(ValidateMinHashParams(p, "p"));
    MinHasher hasher(p);
    for (const std::string& text : texts) {
      std::vector<uint32_t> sig(p.num_perm());
      ASSERT_TRUE(hasher.Signature(text, sig.data()));
      EXPECT_EQ(sig, ReferenceSignature(text, p)) << text.substr(0, 40);
      std::vector<uint32_t> again(p.num_perm());
      ASSERT_TRUE(hasher.SignatureOfNormalized(NormalizeForDedup(text), again.data()));
      EXPECT_EQ(again, sig);
    }
  }
}

TEST(MinHashTest, ScalarPathGivesTheSameSignatures) {
  bool previous = internal::SetMinHashAvx2ForTest(false);
  for (const MinHashParams& p : {MinHashParams{}, MinHashParams{3, 3, 5, 0.0, 7}}) {
    MinHasher hasher(p);
    for (const std::string& text : {RandomText(300, 31), std::string("a few words")}) {
      std::vector<uint32_t> sig(p.num_perm());
      ASSERT_TRUE(hasher.Signature(text, sig.data()));
      EXPECT_EQ(sig, ReferenceSignature(text, p));
    }
  }
  internal::SetMinHashAvx2ForTest(previous);
}

TEST(MinHashTest, TextWithoutWordsHasNoSignature) {
  MinHasher hasher(MinHashParams{});
  std::vector<uint32_t> sig(hasher.num_perm(), 7);
  EXPECT_FALSE(hasher.Signature("", sig.data()));
  EXPECT_FALSE(hasher.Signature(" ...!? \n", sig.data()));
  EXPECT_EQ(sig[0], 7u);
  // Fewer words than a shingle: one shingle, so the two spellings are identical.
  std::vector<uint32_t> a(hasher.num_perm()), b(hasher.num_perm());
  ASSERT_TRUE(hasher.Signature("Hello there", a.data()));
  ASSERT_TRUE(hasher.Signature("hello,  THERE!", b.data()));
  EXPECT_EQ(a, b);
}

TEST(MinHashTest, BandKeysHashLittleEndianRowsWithTheBandAsSeed) {
  MinHashParams p;
  MinHasher hasher(p);
  std::vector<uint32_t> sig(p.num_perm());
  ASSERT_TRUE(hasher.Signature(RandomText(50, 9), sig.data()));
  std::vector<uint64_t> keys(p.bands);
  hasher.BandKeys(sig.data(), keys.data());
  for (int j = 0; j < p.bands; ++j) {
    std::string bytes;
    for (int r = 0; r < p.rows; ++r) {
      uint32_t v = sig[j * p.rows + r];
      for (int k = 0; k < 4; ++k) bytes.push_back(static_cast<char>(v >> (8 * k)));
    }
    EXPECT_EQ(keys[j], XXH3_64bits_withSeed(bytes.data(), bytes.size(), j)) << "band " << j;
  }
}

TEST(MinHashTest, EstimatedJaccard) {
  uint32_t a[4] = {1, 2, 3, 4};
  uint32_t b[4] = {1, 9, 3, 9};
  EXPECT_EQ(EstimatedJaccard(a, a, 4), 1.0);
  EXPECT_EQ(EstimatedJaccard(a, b, 4), 0.5);
  EXPECT_EQ(EstimatedJaccard(a, b, 0), 0.0);
}

// Signatures and band keys of a small corpus, computed in `threads` threads, documents taken in
// an interleaved order.
struct Corpus {
  std::vector<std::vector<uint32_t>> sigs;
  std::vector<std::vector<uint64_t>> keys;
  std::vector<bool> has;
};

Corpus Sign(const MinHasher& hasher, const std::vector<std::string>& texts, int threads) {
  Corpus c;
  c.sigs.assign(texts.size(), std::vector<uint32_t>(hasher.num_perm()));
  c.keys.assign(texts.size(), std::vector<uint64_t>(hasher.params().bands));
  c.has.assign(texts.size(), false);
  std::vector<char> has(texts.size(), 0);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (size_t i = t; i < texts.size(); i += threads) {
        if (hasher.Signature(texts[i], c.sigs[i].data())) {
          hasher.BandKeys(c.sigs[i].data(), c.keys[i].data());
          has[i] = 1;
        }
      }
    });
  }
  for (std::thread& th : pool) th.join();
  for (size_t i = 0; i < texts.size(); ++i) c.has[i] = has[i] != 0;
  return c;
}

std::vector<uint32_t> Cluster(const MinHasher& hasher, const Corpus& c,
                              const std::vector<uint32_t>& add_order) {
  NearDuplicateIndex index(hasher.params().bands);
  for (uint32_t d : add_order) {
    if (c.has[d]) index.Add(d, c.keys[d].data());
  }
  double threshold = hasher.params().threshold;
  NearDuplicateIndex::VerifyFn verify;
  if (threshold > 0) {
    verify = [&](uint32_t a, uint32_t b) {
      return EstimatedJaccard(c.sigs[a].data(), c.sigs[b].data(), hasher.num_perm()) >= threshold;
    };
  }
  return index.Clusters(static_cast<uint32_t>(c.sigs.size()), verify);
}

TEST(MinHashIndexTest, NearDuplicatesAboveTheThresholdClusterAndOthersDoNot) {
  const std::string base = RandomText(300, 11);
  const std::vector<std::string> texts = {
      RandomText(300, 12),       // 0: unrelated
      base,                      // 1
      ChangeWords(base, 6, 1),   // 2: 2% of the words changed
      RandomText(300, 13),       // 3: unrelated
      ChangeWords(base, 90, 2),  // 4: 30% changed: far below any useful threshold
      "",                        // 5: no signature
      ChangeWords(base, 3, 3),   // 6: 1% changed
  };
  for (double threshold : {0.0, 0.7}) {
    MinHashParams p;
    p.threshold = threshold;
    MinHasher hasher(p);
    Corpus c = Sign(hasher, texts, 1);
    EXPECT_GT(EstimatedJaccard(c.sigs[1].data(), c.sigs[2].data(), p.num_perm()), 0.7);
    EXPECT_LT(EstimatedJaccard(c.sigs[1].data(), c.sigs[4].data(), p.num_perm()), 0.3);
    std::vector<uint32_t> roots = Cluster(hasher, c, {0, 1, 2, 3, 4, 5, 6});
    EXPECT_EQ(roots, (std::vector<uint32_t>{0, 1, 1, 3, 4, 5, 1})) << "threshold " << threshold;
  }
}

TEST(MinHashIndexTest, VerifyRejectsCandidatesBelowTheThreshold) {
  const std::string base = RandomText(300, 21);
  const std::vector<std::string> texts = {base, ChangeWords(base, 6, 4)};
  MinHashParams p;
  p.threshold = 0.99;  // the pair shares bands but its estimate is below 0.99
  MinHasher hasher(p);
  Corpus c = Sign(hasher, texts, 1);
  EXPECT_EQ(Cluster(hasher, c, {0, 1}), (std::vector<uint32_t>{0, 1}));
  p.threshold = 0.0;
  MinHasher lsh_only(p);
  EXPECT_EQ(Cluster(lsh_only, Sign(lsh_only, texts, 1), {0, 1}), (std::vector<uint32_t>{0, 0}));
}

TEST(MinHashIndexTest, RootsAreSmallestIndexAndIndependentOfThreadsAndOrder) {
  // 40 families of 5 near-copies each (0-4 of 300 words changed), interleaved, plus 100
  // unrelated texts.
  std::vector<std::string> texts;
  std::vector<std::string> bases;
  for (int f = 0; f < 40; ++f) bases.push_back(RandomText(300, 100 + f));
  for (int copy = 0; copy < 5; ++copy) {
    for (int f = 0; f < 40; ++f) texts.push_back(ChangeWords(bases[f], copy, 1000 + copy));
  }
  for (int u = 0; u < 100; ++u) texts.push_back(RandomText(300, 5000 + u));
  MinHashParams p;
  p.threshold = 0.5;
  MinHasher hasher(p);
  Corpus one = Sign(hasher, texts, 1);
  Corpus four = Sign(hasher, texts, 4);
  ASSERT_EQ(one.keys, four.keys);
  std::vector<uint32_t> order(texts.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::vector<uint32_t> roots = Cluster(hasher, one, order);
  std::shuffle(order.begin(), order.end(), std::mt19937(5));
  EXPECT_EQ(Cluster(hasher, four, order), roots);
  for (uint32_t d = 0; d < texts.size(); ++d) {
    if (d < 200) {
      EXPECT_EQ(roots[d], d % 40) << d;  // each family's first copy is its smallest index
    } else {
      EXPECT_EQ(roots[d], d) << d;
    }
  }
}

TEST(MinHashIndexTest, DocumentsNotAddedAreTheirOwnRoots) {
  NearDuplicateIndex index(2);
  uint64_t k1[2] = {5, 6};
  uint64_t k2[2] = {7, 6};
  uint64_t k3[2] = {7, 8};
  index.Add(9, k3);
  index.Add(4, k1);
  index.Add(7, k2);
  // 4~7 share band 1's key 6; 7~9 share band 0's key 7: one cluster rooted at 4.
  std::vector<uint32_t> roots = index.Clusters(10);
  EXPECT_EQ(roots, (std::vector<uint32_t>{0, 1, 2, 3, 4, 5, 6, 4, 8, 4}));
  // The same key in different bands does not connect.
  NearDuplicateIndex other(2);
  uint64_t a[2] = {1, 2};
  uint64_t b[2] = {2, 1};
  other.Add(0, a);
  other.Add(1, b);
  EXPECT_EQ(other.Clusters(2), (std::vector<uint32_t>{0, 1}));
}

}  // namespace
}  // namespace trainyard::prep
