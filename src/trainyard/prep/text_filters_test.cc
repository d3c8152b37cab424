#include "trainyard/prep/text_filters.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <string>

namespace trainyard::prep {
namespace {

TEST(TextFilterTest, NormalizeFoldsCaseAndCollapsesSeparators) {
  EXPECT_EQ(NormalizeForDedup("  Hello,   World!!  "), "hello world");
  EXPECT_EQ(NormalizeForDedup("My order #123 -- isn't here.\n\tThanks"),
            "my order 123 isn t here thanks");
  EXPECT_EQ(NormalizeForDedup(""), "");
  EXPECT_EQ(NormalizeForDedup(" ... !!! "), "");
  // Symbols (Unicode S*) are not punctuation: they stay.
  EXPECT_EQ(NormalizeForDedup("a+b=$5"), "a+b=$5");
}

TEST(TextFilterTest, NormalizeUsesUnicodeFoldingAndSpaces) {
  // Full case folding: "ß" -> "ss", "Σ" -> "σ"; NBSP (U+00A0), ideographic space (U+3000), em
  // dash (U+2014, Pd) and the CJK full stop (U+3002, Po) separate words.
  EXPECT_EQ(NormalizeForDedup("STRASSE Straße"), "strasse strasse");
  EXPECT_EQ(NormalizeForDedup("ΣΊΣΥΦΟΣ"), "σίσυφοσ");
  EXPECT_EQ(NormalizeForDedup("a\u00a0b\u3000c\u2014d\u3002"), "a b c d");
  EXPECT_EQ(NormalizeForDedup("ÉCOLE École"), "école école");
}

TEST(TextFilterTest, NormalizeHandlesTheLargestFoldingGrowth) {
  // U+0390 (2 bytes) folds to three code points (6 bytes), the largest growth there is.
  std::string s;
  for (int i = 0; i < 1000; ++i) s += "\u0390";
  std::string expected;
  for (int i = 0; i < 1000; ++i) expected += "\u03b9\u0308\u0301";
  EXPECT_EQ(NormalizeForDedup(s), expected);
}

TEST(TextFilterTest, NormalizeKeepsInvalidUtf8Bytes) {
  std::string bad = "AB\xff\xfe CD\xc3";  // 0xff, 0xfe never valid; 0xc3 truncated
  EXPECT_EQ(NormalizeForDedup(bad), "ab\xff\xfe cd\xc3");
  // An overlong encoding of '/' is not a separator; its bytes are kept.
  EXPECT_EQ(NormalizeForDedup("a\xc0\xaf"
                              "b"),
            "a\xc0\xaf"
            "b");
}

TEST(TextFilterTest, CountWords) {
  EXPECT_EQ(CountWords(""), 0);
  EXPECT_EQ(CountWords("one"), 1);
  EXPECT_EQ(CountWords(NormalizeForDedup("one, two; three!")), 3);
}

TEST(TextFilterTest, RepetitionRatioOfLines) {
  EXPECT_EQ(RepetitionRatio(""), 0.0);
  EXPECT_EQ(RepetitionRatio("first line\nsecond line\nthird"), 0.0);
  // "buy now" (7 bytes) repeats twice after its first occurrence: 14 of 7*3 + 5 bytes.
  EXPECT_DOUBLE_EQ(RepetitionRatio("buy now\nbuy now\n  buy now  \nhello\n\n"), 14.0 / 26.0);
}

TEST(TextFilterTest, RepetitionRatioOfOneLineUsesWordTrigrams) {
  EXPECT_EQ(RepetitionRatio("a perfectly ordinary sentence without repeats"), 0.0);
  EXPECT_EQ(RepetitionRatio("two words"), 0.0);
  // The 3-grams at positions 3..6 repeat earlier ones, so words 3..8 (24 of 36 bytes) are
  // repeated.
  EXPECT_DOUBLE_EQ(RepetitionRatio("click here now click here now click here now"), 24.0 / 36.0);
}

TEST(TextFilterTest, EnglishScore) {
  EXPECT_EQ(EnglishScore(""), 0.0);
  double english = EnglishScore(
      "I would like to know where my order is, because it has not "
      "arrived yet and the tracking page is empty.");
  EXPECT_GT(english, 0.4);
  EXPECT_LT(EnglishScore("Ich möchte wissen, wo meine Bestellung ist, weil sie noch nicht "
                         "angekommen ist."),
            0.1);
  // 8 words ('>' is a symbol, so a word); "from" and "where" are on the list.
  EXPECT_EQ(EnglishScore("SELECT id FROM t WHERE x > 3"), 2.0 / 8.0);
}

TEST(TextFilterTest, ExactHashIsXxh3OfTheNormalizedText) {
  std::string n = NormalizeForDedup("Hello,  WORLD");
  XXH128_hash_t h = XXH3_128bits(n.data(), n.size());
  auto got = ExactHash(n);
  EXPECT_EQ(got[0], h.low64);
  EXPECT_EQ(got[1], h.high64);
  EXPECT_EQ(ExactHash(NormalizeForDedup("hello world!")), got);
  EXPECT_NE(ExactHash(NormalizeForDedup("hello world 2")), got);
}

}  // namespace
}  // namespace trainyard::prep
