#include "trainyard/prep/text_filters.h"

#include <unicode/uchar.h>
#include <unicode/ustring.h>
#include <unicode/utf16.h>
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "trainyard/prep/text_internal.h"

namespace trainyard::prep {
namespace internal {

size_t DecodeUtf8(std::string_view s, size_t i, int32_t* cp) {
  unsigned char c0 = static_cast<unsigned char>(s[i]);
  if (c0 < 0x80) {
    *cp = c0;
    return 1;
  }
  size_t need = 0;
  int32_t min = 0;
  int32_t v = 0;
  if (c0 >= 0xC2 && c0 <= 0xDF) {
    need = 1, min = 0x80, v = c0 & 0x1F;
  } else if (c0 >= 0xE0 && c0 <= 0xEF) {
    need = 2, min = 0x800, v = c0 & 0x0F;
  } else if (c0 >= 0xF0 && c0 <= 0xF4) {
    need = 3, min = 0x10000, v = c0 & 0x07;
  } else {
    *cp = -1;
    return 1;
  }
  if (s.size() - i <= need) {
    *cp = -1;
    return 1;
  }
  for (size_t k = 1; k <= need; ++k) {
    unsigned char ck = static_cast<unsigned char>(s[i + k]);
    if ((ck & 0xC0) != 0x80) {
      *cp = -1;
      return 1;
    }
    v = (v << 6) | (ck & 0x3F);
  }
  if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) {
    *cp = -1;
    return 1;
  }
  *cp = v;
  return need + 1;
}

void AppendUtf8(int32_t c, std::string* out) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

bool IsValidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    int32_t cp;
    i += DecodeUtf8(s, i, &cp);
    if (cp < 0) return false;
  }
  return true;
}

}  // namespace internal

namespace {

bool IsSeparator(UChar32 c) { return u_hasBinaryProperty(c, UCHAR_WHITE_SPACE) || u_ispunct(c); }

// What each ASCII byte becomes: kSeparator (White_Space or P*) or its folding. Built from ICU's
// properties, so the fast path and the general one agree by construction.
constexpr unsigned char kSeparator = 0xFF;  // no ASCII byte folds to it

const std::array<unsigned char, 128>& AsciiTable() {
  static const std::array<unsigned char, 128> table = [] {
    std::array<unsigned char, 128> t{};
    for (int c = 0; c < 128; ++c) {
      t[c] = IsSeparator(c) ? kSeparator
                            : static_cast<unsigned char>(u_foldCase(c, U_FOLD_CASE_DEFAULT));
    }
    return t;
  }();
  return table;
}

// Appends the full case folding of `c` (one code point may fold to several: "ß" -> "ss").
void AppendFolded(UChar32 c, std::string* out) {
  UChar src[2];
  int32_t src_len = 0;
  UBool error = false;
  U16_APPEND(src, src_len, 2, c, error);
  UChar folded[8];
  UErrorCode status = U_ZERO_ERROR;
  int32_t n = error ? 0 : u_strFoldCase(folded, 8, src, src_len, U_FOLD_CASE_DEFAULT, &status);
  if (U_FAILURE(status) || n <= 0 || n > 8) {  // cannot happen for a scalar value
    internal::AppendUtf8(c, out);
    return;
  }
  for (int32_t i = 0; i < n;) {
    UChar32 f;
    U16_NEXT(folded, i, n, f);
    internal::AppendUtf8(f, out);
  }
}

// 100 common English function words, sorted (docs/prep.md lists the same).
constexpr std::array<std::string_view, 100> kEnglishWords = {
    "a",     "about", "after", "again",  "all",     "also",   "am",     "an",    "and",  "any",
    "are",   "as",    "at",    "be",     "because", "been",   "before", "being", "both", "but",
    "by",    "can",   "could", "did",    "do",      "does",   "each",   "few",   "for",  "from",
    "had",   "has",   "have",  "he",     "her",     "here",   "him",    "his",   "how",  "i",
    "if",    "in",    "into",  "is",     "it",      "its",    "just",   "me",    "more", "most",
    "my",    "no",    "not",   "now",    "of",      "on",     "one",    "only",  "or",   "other",
    "our",   "out",   "over",  "please", "she",     "should", "so",     "some",  "such", "than",
    "that",  "the",   "their", "them",   "then",    "there",  "these",  "they",  "this", "those",
    "to",    "under", "up",    "us",     "very",    "was",    "we",     "were",  "what", "when",
    "where", "which", "while", "who",    "why",     "will",   "with",   "would", "you",  "your",
};

template <typename F>
void ForEachWord(std::string_view normalized, F&& f) {
  size_t i = 0;
  while (i < normalized.size()) {
    size_t j = normalized.find(' ', i);
    if (j == std::string_view::npos) j = normalized.size();
    if (j > i) f(normalized.substr(i, j - i));
    i = j + 1;
  }
}

std::string_view StripAsciiSpace(std::string_view s) {
  constexpr std::string_view kSpace = " \t\r\v\f";
  size_t b = s.find_first_not_of(kSpace);
  if (b == std::string_view::npos) return {};
  size_t e = s.find_last_not_of(kSpace);
  return s.substr(b, e - b + 1);
}

double DuplicateLineFraction(const std::vector<std::string_view>& lines) {
  std::unordered_set<std::string_view> seen;
  seen.reserve(lines.size() * 2);
  size_t total = 0;
  size_t duplicated = 0;
  for (std::string_view line : lines) {
    total += line.size();
    if (!seen.insert(line).second) duplicated += line.size();
  }
  return total == 0 ? 0.0 : static_cast<double>(duplicated) / static_cast<double>(total);
}

double RepeatedTrigramFraction(std::string_view text) {
  std::string normalized = NormalizeForDedup(text);
  std::vector<std::string_view> words;
  ForEachWord(normalized, [&](std::string_view w) { words.push_back(w); });
  if (words.size() < 3) return 0.0;
  std::vector<bool> repeated(words.size(), false);
  std::unordered_set<std::string_view> seen;
  seen.reserve(words.size() * 2);
  for (size_t i = 0; i + 3 <= words.size(); ++i) {
    // Words are separated by one space, so a 3-gram is a contiguous piece of `normalized`.
    std::string_view gram(
        words[i].data(),
        static_cast<size_t>(words[i + 2].data() + words[i + 2].size() - words[i].data()));
    if (!seen.insert(gram).second) repeated[i] = repeated[i + 1] = repeated[i + 2] = true;
  }
  size_t total = 0;
  size_t dup = 0;
  for (size_t i = 0; i < words.size(); ++i) {
    total += words[i].size();
    if (repeated[i]) dup += words[i].size();
  }
  return static_cast<double>(dup) / static_cast<double>(total);
}

}  // namespace

std::string NormalizeForDedup(std::string_view text) {
  const std::array<unsigned char, 128>& ascii = AsciiTable();
  // Written through a raw pointer into a per-thread buffer (the hot loop of dedup). Folding
  // grows a character at most threefold (U+0390, 2 bytes, folds to 3 code points, 6 bytes).
  thread_local std::string buffer;
  if (buffer.size() < 3 * text.size() + 8) buffer.resize(3 * text.size() + 8);
  char* const begin = buffer.data();
  char* w = begin;
  bool pending_space = false;  // a separator run since the last character written
  std::string folded;
  for (size_t i = 0; i < text.size();) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      unsigned char f = ascii[c];
      if (f == kSeparator) {
        pending_space = w != begin;
      } else {
        if (pending_space) *w++ = ' ';
        pending_space = false;
        *w++ = static_cast<char>(f);
      }
      ++i;
      continue;
    }
    int32_t cp;
    size_t len = internal::DecodeUtf8(text, i, &cp);
    if (cp >= 0 && IsSeparator(cp)) {
      pending_space = w != begin;
    } else {
      if (pending_space) *w++ = ' ';
      pending_space = false;
      if (cp < 0) {
        *w++ = static_cast<char>(c);  // not UTF-8: the byte as it is
      } else {
        folded.clear();
        AppendFolded(cp, &folded);
        std::memcpy(w, folded.data(), folded.size());
        w += folded.size();
      }
    }
    i += len;
  }
  std::string out(begin, static_cast<size_t>(w - begin));
  if (buffer.size() > (size_t{1} << 22)) std::string().swap(buffer);  // keep no huge buffer
  return out;
}

int64_t CountWords(std::string_view normalized) {
  int64_t n = 0;
  ForEachWord(normalized, [&](std::string_view) { ++n; });
  return n;
}

double RepetitionRatio(std::string_view text) {
  std::vector<std::string_view> lines;
  size_t i = 0;
  while (i <= text.size()) {
    size_t j = text.find('\n', i);
    if (j == std::string_view::npos) j = text.size();
    std::string_view line = StripAsciiSpace(text.substr(i, j - i));
    if (!line.empty()) lines.push_back(line);
    i = j + 1;
  }
  if (lines.size() >= 2) return DuplicateLineFraction(lines);
  return RepeatedTrigramFraction(text);
}

double EnglishScore(std::string_view text) {
  std::string normalized = NormalizeForDedup(text);
  int64_t words = 0;
  int64_t english = 0;
  ForEachWord(normalized, [&](std::string_view w) {
    ++words;
    if (std::binary_search(kEnglishWords.begin(), kEnglishWords.end(), w)) ++english;
  });
  return words == 0 ? 0.0 : static_cast<double>(english) / static_cast<double>(words);
}

std::array<uint64_t, 2> ExactHash(std::string_view normalized) {
  XXH128_hash_t h = XXH3_128bits(normalized.data(), normalized.size());
  return {h.low64, h.high64};
}

}  // namespace trainyard::prep
