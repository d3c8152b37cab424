// PII redaction (issue 18): finds personal data in text and replaces it with a marker naming
// its kind, counting what it replaced per kind. The built-in kinds are hand-written scanners
// (faster than regexes and with the checks a regex cannot make: Luhn, IBAN mod 97, octet
// ranges); custom kinds are named BoundedRegex patterns (common/regex.h). docs/prep.md
// ("Algorithms") states every rule exactly so the Spark engine redacts the same bytes.
//
// Built-in kinds (each match starts and ends at an ASCII character):
// - email: local@domain; local part [A-Za-z0-9._%+-]+ not starting or ending with '.';
//   domain two or more dot-separated labels of [A-Za-z0-9-] (not starting or ending with '-'),
//   the last of 2+ letters.
// - phone: '+' then 8-15 digits in groups separated by single ' ', '-' or '.' (a group may be
//   parenthesised, "(0)"); or North American: optional "1" and a separator, then a 3-digit area
//   code (optionally in parentheses) and 3 + 4 digits, first digits of area code and exchange
//   2-9, separated by one consistent ' ', '-' or '.' (after "(NNN)" a space or nothing). Never
//   dates, times, version numbers or plain digit runs; not touching letters, digits or a
//   separator followed by a digit.
// - card: 13-19 digits, optionally in groups separated by single spaces or dashes, passing the
//   Luhn check; a digit run's whole groups only.
// - iban: two letters, two check digits, 11-30 letters/digits (15-34 in all), compact or in
//   space-separated groups of 4 (the last 1-4), whose mod-97 check gives 1.
// - ip: IPv4 dotted quads (each 0-255, no leading zeros), not preceded by "v", "ver" or
//   "version" (version numbers), not part of a longer dotted run; IPv6 in RFC 4291 text form.
//
// Which matches are replaced: each kind's matches are found left to right without overlapping
// each other; then, from the start of the text, the earliest-starting match among all kinds
// wins, ties to the longest, then to the kind listed first (kinds, then patterns); matches
// overlapping a winner are dropped and the scan continues after it. A custom pattern's
// zero-length matches are ignored, and its matches are widened to whole UTF-8 characters, so a
// valid UTF-8 text stays valid.
//
// A PiiRedactor is immutable after Create: its methods are const and thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "trainyard/common/regex.h"
#include "trainyard/common/status.h"

namespace trainyard::prep {

// The built-in kinds, in their tie-break order: email, phone, card, iban, ip.
const std::vector<std::string>& BuiltinPiiKinds();

struct PiiOptions {
  // Built-in kinds to find (names from BuiltinPiiKinds()).
  std::vector<std::string> kinds;
  // Custom kinds: name ([a-z0-9_]+, not a built-in's) and a PCRE2 pattern.
  std::vector<std::pair<std::string, std::string>> patterns;
  // What replaces a match; "{kind}" becomes the kind's name upper-cased (EMAIL, ORDER_ID).
  std::string replacement = "[{kind}]";
};

struct PiiMatch {
  size_t begin = 0;  // byte offsets in the text, [begin, end)
  size_t end = 0;
  int kind = 0;  // index into PiiRedactor::kind_names()
};

class PiiRedactor {
 public:
  // InvalidArgument naming the field: "<field>.kinds[2]: unknown PII kind "ssn"; known: ...",
  // "<field>.patterns.order_id: ..." (bad name, duplicate, or the regex's error),
  // "<field>.replacement: ..." (not valid UTF-8). At least one kind or pattern is required.
  static Result<PiiRedactor> Create(const PiiOptions& options, std::string_view field);

  // The kinds in tie-break order: the built-ins as listed in options.kinds, then the patterns.
  const std::vector<std::string>& kind_names() const { return kind_names_; }

  // The matches to replace, sorted by begin, non-overlapping and non-empty.
  std::vector<PiiMatch> Find(std::string_view text) const;

  // `text` with every match of Find replaced. When `counts` is not null, adds the number of
  // replacements of each kind to (*counts)[kind name] (kinds with none are left alone).
  std::string Redact(std::string_view text, std::map<std::string, int64_t>* counts) const;

 private:
  enum class Builtin { kEmail, kPhone, kCard, kIban, kIp, kCustom };
  struct Kind {
    Builtin builtin = Builtin::kCustom;
    std::shared_ptr<const BoundedRegex> regex;  // kCustom only
    std::string replacement;                    // the options' replacement with {kind} filled in
  };

  PiiRedactor() = default;
  void FindKind(const Kind& kind, std::string_view text, std::vector<PiiMatch>* out,
                int kind_index) const;

  std::vector<std::string> kind_names_;
  std::vector<Kind> kinds_;
};

// The checks the built-in kinds use, exposed for tests and the fuzz target.
// Luhn over the decimal digits of `digits` (other characters ignored); false without digits.
bool LuhnValid(std::string_view digits);
// ISO 13616 mod-97 over an IBAN's letters and digits (spaces ignored; letters either case).
bool IbanChecksumValid(std::string_view iban);

}  // namespace trainyard::prep
