// Fuzzes PII redaction (and the normalization dedup uses) with arbitrary text. A redactor with
// every built-in kind and one custom pattern must: never crash; return matches that are sorted,
// non-empty, non-overlapping and inside the text; only report cards that pass Luhn and IBANs that
// pass mod 97; produce exactly the text with those matches replaced, and counts that add up to
// them; and keep valid UTF-8 valid. NormalizeForDedup must keep valid UTF-8 valid and MinHash
// must not crash.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "trainyard/prep/minhash.h"
#include "trainyard/prep/pii.h"
#include "trainyard/prep/text_filters.h"
#include "trainyard/prep/text_internal.h"

namespace {

using trainyard::prep::PiiMatch;
using trainyard::prep::PiiOptions;
using trainyard::prep::PiiRedactor;

const PiiRedactor& Redactor() {
  static const PiiRedactor* redactor = [] {
    PiiOptions options;
    options.kinds = trainyard::prep::BuiltinPiiKinds();
    options.patterns = {{"order_id", "ORD-[0-9]{6}|\\xc3"}};  // the second cuts a character
    auto r = PiiRedactor::Create(options, "fuzz");
    if (!r.ok()) std::abort();
    return new PiiRedactor(std::move(r).value());
  }();
  return *redactor;
}

std::string Upper(std::string s) {
  for (char& c : s) c = static_cast<char>(c >= 'a' && c <= 'z' ? c - 'a' + 'A' : c);
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  const PiiRedactor& r = Redactor();
  const std::vector<std::string>& names = r.kind_names();

  std::vector<PiiMatch> matches = r.Find(text);
  size_t last_end = 0;
  std::string expected;
  std::map<std::string, int64_t> expected_counts;
  for (const PiiMatch& m : matches) {
    if (m.begin < last_end || m.end <= m.begin || m.end > text.size()) std::abort();
    if (m.kind < 0 || static_cast<size_t>(m.kind) >= names.size()) std::abort();
    std::string_view s = text.substr(m.begin, m.end - m.begin);
    const std::string& kind = names[m.kind];
    if (kind == "card" && !trainyard::prep::LuhnValid(s)) std::abort();
    if (kind == "iban" && !trainyard::prep::IbanChecksumValid(s)) std::abort();
    if (kind == "email" && s.find('@') == std::string_view::npos) std::abort();
    expected.append(text.substr(last_end, m.begin - last_end));
    expected += "[" + Upper(kind) + "]";
    ++expected_counts[kind];
    last_end = m.end;
  }
  expected.append(text.substr(last_end));

  std::map<std::string, int64_t> counts;
  std::string out = r.Redact(text, &counts);
  if (out != expected || counts != expected_counts) std::abort();
  const bool valid = trainyard::prep::internal::IsValidUtf8(text);
  if (valid && !trainyard::prep::internal::IsValidUtf8(out)) std::abort();

  std::string normalized = trainyard::prep::NormalizeForDedup(text);
  if (valid && !trainyard::prep::internal::IsValidUtf8(normalized)) std::abort();
  if (!normalized.empty() && (normalized.front() == ' ' || normalized.back() == ' ')) std::abort();
  if (normalized.find("  ") != std::string::npos) std::abort();
  static const trainyard::prep::MinHasher hasher(trainyard::prep::MinHashParams{});
  std::vector<uint32_t> sig(hasher.num_perm());
  bool has = hasher.SignatureOfNormalized(normalized, sig.data());
  if (has != !normalized.empty()) std::abort();
  trainyard::prep::RepetitionRatio(text);
  trainyard::prep::EnglishScore(text);
  return 0;
}
