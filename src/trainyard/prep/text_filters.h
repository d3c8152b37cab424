// Text operators of data preparation (issue 18): the normalization exact and near-duplicate
// detection share, and the quality heuristics the `filter` step uses. Pure functions of their
// input: no I/O, no locale, no global state, so they are thread-safe and every engine (the
// native one, Spark) computes the same values; docs/prep.md ("Algorithms") states each rule.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace trainyard::prep {

// The text exact and near-dedup compare: Unicode full case folding (ICU's u_foldCase, default
// options; ASCII letters become lowercase), then every maximal run of code points that are
// whitespace (Unicode White_Space) or punctuation (general category P*) becomes one ASCII space,
// and leading and trailing spaces are removed. Bytes that are not valid UTF-8 are copied as they
// are (each such byte is its own "character", neither space nor punctuation). The result's words
// are separated by exactly one ' '.
std::string NormalizeForDedup(std::string_view text);

// The number of words of a normalized text: its ' '-separated non-empty pieces (0 for "").
int64_t CountWords(std::string_view normalized);

// How much of `text` is repeated, in [0, 1]; 0 for an empty text.
// - Texts with two or more non-empty lines (lines split on '\n', each stripped of ASCII
//   whitespace; empty ones ignored): the bytes of the lines that repeat an earlier line, over
//   the bytes of all non-empty lines (Gopher's dup_line_char_frac).
// - Texts with at most one non-empty line: the words of NormalizeForDedup(text); a word is
//   "repeated" when it lies in a word 3-gram that occurred at an earlier position; the bytes of
//   the repeated words over the bytes of all words (0 with fewer than 3 words).
double RepetitionRatio(std::string_view text);

// The fraction of the words of NormalizeForDedup(text) that are common English function words
// (a fixed list of 100, in text_filters.cc and docs/prep.md), in [0, 1]; 0 without words.
// Ordinary English prose scores 0.3-0.6; other languages, code and junk score near 0.
double EnglishScore(std::string_view text);

// XXH3-128 (seed 0) of the bytes of `normalized` (pass NormalizeForDedup's result):
// {low 64 bits, high 64 bits}.
std::array<uint64_t, 2> ExactHash(std::string_view normalized);

}  // namespace trainyard::prep
