#include "trainyard/prep/pii.h"

#include <arpa/inet.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <set>

#include "trainyard/prep/text_internal.h"

namespace trainyard::prep {
namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsUpper(char c) { return c >= 'A' && c <= 'Z'; }
bool IsAlpha(char c) { return (c >= 'a' && c <= 'z') || IsUpper(c); }
bool IsAlnum(char c) { return IsDigit(c) || IsAlpha(c); }
bool IsHex(char c) { return IsDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// t[i] when i is inside t, else '\0' (which is none of the classes above).
char At(std::string_view t, size_t i) { return i < t.size() ? t[i] : '\0'; }
char Before(std::string_view t, size_t i) { return i > 0 ? t[i - 1] : '\0'; }

void Emit(std::vector<PiiMatch>* out, size_t begin, size_t end, int kind) {
  out->push_back(PiiMatch{begin, end, kind});
}

// ---- email ----------------------------------------------------------------------------------

bool IsLocalChar(char c) {
  return IsAlnum(c) || c == '.' || c == '_' || c == '%' || c == '+' || c == '-';
}
bool IsDomainChar(char c) { return IsAlnum(c) || c == '.' || c == '-'; }

bool ValidDomain(std::string_view d) {
  int labels = 0;
  std::string_view last;
  size_t i = 0;
  while (i <= d.size()) {
    size_t j = d.find('.', i);
    if (j == std::string_view::npos) j = d.size();
    std::string_view label = d.substr(i, j - i);
    if (label.empty() || label.front() == '-' || label.back() == '-') return false;
    ++labels;
    last = label;
    i = j + 1;
  }
  if (labels < 2 || last.size() < 2) return false;
  return std::all_of(last.begin(), last.end(), IsAlpha);
}

void ScanEmail(std::string_view t, int kind, std::vector<PiiMatch>* out) {
  size_t pos = 0;
  while (true) {
    size_t at = t.find('@', pos);
    if (at == std::string_view::npos) return;
    size_t b = at;
    while (b > pos && IsLocalChar(t[b - 1])) --b;
    while (b < at && t[b] == '.') ++b;
    size_t e = at + 1;
    while (e < t.size() && IsDomainChar(t[e])) ++e;
    while (e > at + 1 && (t[e - 1] == '.' || t[e - 1] == '-')) --e;
    if (b < at && t[at - 1] != '.' && ValidDomain(t.substr(at + 1, e - at - 1))) {
      Emit(out, b, e, kind);
      pos = e;
    } else {
      pos = at + 1;
    }
  }
}

// ---- phone ----------------------------------------------------------------------------------

bool IsPhoneSep(char c) { return c == ' ' || c == '-' || c == '.'; }

// A phone number may not start right after these (nor after a letter or digit): it would be
// the tail of a longer token (a version, a decimal, a path, an address).
bool PhoneLeftOk(std::string_view t, size_t i) {
  char p = Before(t, i);
  return !IsAlnum(p) && p != '+' && p != '-' && p != '.' && p != '/' && p != '_' && p != '@';
}

// Nor end right before a letter or digit, or a '.', '-', '/' or ',' followed by a digit.
bool NumberRightOk(std::string_view t, size_t e) {
  char n = At(t, e);
  if (IsAlnum(n)) return false;
  if ((n == '.' || n == '-' || n == '/' || n == ',') && IsDigit(At(t, e + 1))) return false;
  return true;
}

size_t DigitsAt(std::string_view t, size_t i) {
  size_t n = 0;
  while (IsDigit(At(t, i + n))) ++n;
  return n;
}

// "+" then digit groups, each optionally parenthesised, separated by at most one separator.
// Returns the end, or 0 when there is no international number at i (t[i] == '+').
size_t ParseInternational(std::string_view t, size_t i) {
  size_t p = i + 1;
  if (!IsDigit(At(t, p))) return 0;
  int digits = 0;
  size_t end = 0;
  while (true) {
    size_t d = DigitsAt(t, p);
    if (d > 0) {
      digits += static_cast<int>(d);
      p += d;
      end = p;
    } else if (At(t, p) == '(' && DigitsAt(t, p + 1) > 0 &&
               At(t, p + 1 + DigitsAt(t, p + 1)) == ')') {
      size_t g = DigitsAt(t, p + 1);
      digits += static_cast<int>(g);
      p += g + 2;
      end = p;
    } else {
      break;
    }
    if (digits > 15) return 0;
    // One separator, then the next group (digits or "(digits)").
    if (IsPhoneSep(At(t, p)) && (IsDigit(At(t, p + 1)) || At(t, p + 1) == '(')) {
      ++p;
    } else if (!(At(t, p) == '(' || IsDigit(At(t, p)))) {
      break;
    }
  }
  if (digits < 8 || digits > 15 || !NumberRightOk(t, end)) return 0;
  return end;
}

// North American: [1 sep] (NXX) [ ]NXX sep XXXX  or  [1 sep] NXX s NXX s XXXX (s the same).
size_t ParseNanpAt(std::string_view t, size_t p) {
  auto n_digit = [](char c) { return c >= '2' && c <= '9'; };
  auto three = [&](size_t q) { return DigitsAt(t, q) >= 3 && n_digit(t[q]); };
  size_t end = 0;
  if (At(t, p) == '(') {
    if (DigitsAt(t, p + 1) != 3 || !n_digit(t[p + 1]) || At(t, p + 4) != ')') return 0;
    size_t q = p + 5;
    if (At(t, q) == ' ') ++q;
    if (DigitsAt(t, q) != 3 || !n_digit(t[q])) return 0;
    char s = At(t, q + 3);
    if (!IsPhoneSep(s) || DigitsAt(t, q + 4) != 4) return 0;
    end = q + 8;
  } else {
    if (DigitsAt(t, p) != 3 || !three(p)) return 0;
    char s = At(t, p + 3);
    if (!IsPhoneSep(s) || DigitsAt(t, p + 4) != 3 || !n_digit(t[p + 4])) return 0;
    if (At(t, p + 7) != s || DigitsAt(t, p + 8) != 4) return 0;
    end = p + 12;
  }
  return NumberRightOk(t, end) ? end : 0;
}

size_t ParseNanp(std::string_view t, size_t i) {
  if (At(t, i) == '1' && IsPhoneSep(At(t, i + 1)) &&
      (IsDigit(At(t, i + 2)) || At(t, i + 2) == '(')) {
    if (size_t e = ParseNanpAt(t, i + 2)) return e;
  }
  return ParseNanpAt(t, i);
}

void ScanPhone(std::string_view t, int kind, std::vector<PiiMatch>* out) {
  for (size_t i = 0; i < t.size();) {
    char c = t[i];
    size_t end = 0;
    if ((c == '+' || c == '(' || IsDigit(c)) && PhoneLeftOk(t, i)) {
      end = c == '+' ? ParseInternational(t, i) : ParseNanp(t, i);
    }
    if (end > i) {
      Emit(out, i, end, kind);
      i = end;
    } else {
      ++i;
    }
  }
}

// ---- card -----------------------------------------------------------------------------------

struct Group {
  size_t begin, end;
};

void ScanCard(std::string_view t, int kind, std::vector<PiiMatch>* out) {
  size_t i = 0;
  std::vector<Group> groups;
  std::string digits;
  while (i < t.size()) {
    if (!IsDigit(t[i])) {
      ++i;
      continue;
    }
    // A run: maximal digit groups joined by single spaces or dashes.
    groups.clear();
    size_t p = i;
    while (true) {
      size_t d = DigitsAt(t, p);
      groups.push_back({p, p + d});
      p += d;
      if ((At(t, p) == ' ' || At(t, p) == '-') && IsDigit(At(t, p + 1))) {
        ++p;
      } else {
        break;
      }
    }
    const size_t run_end = p;
    // A group glued to a letter, or to a decimal point or comma with digits beyond (1,299.00),
    // is part of another token: it may not begin or end a card.
    auto start_ok = [&](size_t g) {
      size_t b = groups[g].begin;
      char prev = Before(t, b);
      if (IsAlpha(prev)) return false;
      if ((prev == '.' || prev == ',') && IsDigit(Before(t, b - 1))) return false;
      return true;
    };
    auto end_ok = [&](size_t g) {
      size_t e = groups[g].end;
      char next = At(t, e);
      if (IsAlpha(next)) return false;
      if ((next == '.' || next == ',') && IsDigit(At(t, e + 1))) return false;
      return true;
    };
    size_t g0 = 0;
    while (g0 < groups.size()) {
      size_t found = groups.size();
      if (start_ok(g0)) {
        // The longest candidate of whole groups starting at g0: 13-19 digits, one separator
        // character throughout, Luhn valid.
        size_t total = 0;
        size_t last = g0;
        for (size_t g = g0; g < groups.size(); ++g) {
          if (g > g0 && t[groups[g].begin - 1] != t[groups[g0 + 1].begin - 1]) break;
          total += groups[g].end - groups[g].begin;
          if (total > 19) break;
          last = g;
        }
        for (size_t g = last + 1; g-- > g0;) {
          size_t n = 0;
          for (size_t k = g0; k <= g; ++k) n += groups[k].end - groups[k].begin;
          if (n < 13) break;
          if (!end_ok(g)) continue;
          digits.clear();
          for (size_t k = g0; k <= g; ++k) {
            digits.append(t.substr(groups[k].begin, groups[k].end - groups[k].begin));
          }
          if (LuhnValid(digits)) {
            found = g;
            break;
          }
        }
      }
      if (found < groups.size()) {
        Emit(out, groups[g0].begin, groups[found].end, kind);
        g0 = found + 1;
      } else {
        ++g0;
      }
    }
    i = run_end;
  }
}

// ---- iban -----------------------------------------------------------------------------------

bool IsIbanChar(char c) { return IsDigit(c) || IsUpper(c); }

bool IbanShapeAndChecksum(std::string_view compact) {
  if (compact.size() < 15 || compact.size() > 34) return false;
  if (!IsUpper(compact[0]) || !IsUpper(compact[1]) || !IsDigit(compact[2]) ||
      !IsDigit(compact[3])) {
    return false;
  }
  return IbanChecksumValid(compact);
}

void ScanIban(std::string_view t, int kind, std::vector<PiiMatch>* out) {
  std::string compact;
  for (size_t i = 0; i + 4 <= t.size();) {
    if (!(IsUpper(t[i]) && IsUpper(t[i + 1]) && IsDigit(t[i + 2]) && IsDigit(t[i + 3]) &&
          !IsAlnum(Before(t, i)))) {
      ++i;
      continue;
    }
    size_t token_end = i;
    while (IsAlnum(At(t, token_end))) ++token_end;
    size_t end = 0;
    if (token_end - i >= 15) {  // compact form
      bool upper = true;
      for (size_t k = i; k < token_end; ++k) upper = upper && IsIbanChar(t[k]);
      if (upper && IbanShapeAndChecksum(t.substr(i, token_end - i))) end = token_end;
    } else if (token_end - i == 4 && At(t, token_end) == ' ') {
      // Spaced form: groups of 4 after "CCdd", the last 1-4; the longest valid prefix of groups.
      compact.assign(t.substr(i, 4));
      std::vector<std::pair<size_t, size_t>> ends;  // (end offset in t, compact length)
      size_t p = token_end;
      while (At(t, p) == ' ' && IsIbanChar(At(t, p + 1))) {
        size_t g = 0;
        while (IsIbanChar(At(t, p + 1 + g)) && g < 5) ++g;
        if (g > 4 || IsAlnum(At(t, p + 1 + g))) break;  // a longer token, or lowercase glued
        compact.append(t.substr(p + 1, g));
        p += 1 + g;
        ends.emplace_back(p, compact.size());
        if (g < 4 || compact.size() >= 34) break;
      }
      for (size_t k = ends.size(); k-- > 0;) {
        if (IbanShapeAndChecksum(std::string_view(compact).substr(0, ends[k].second))) {
          end = ends[k].first;
          break;
        }
      }
    }
    if (end > i) {
      Emit(out, i, end, kind);
      i = end;
    } else {
      i = std::max(token_end, i + 1);
    }
  }
}

// ---- ip -------------------------------------------------------------------------------------

bool AfterVersionWord(std::string_view t, size_t i) {
  size_t p = i;
  while (p > 0 && (t[p - 1] == ' ' || t[p - 1] == '\t' || t[p - 1] == ':' || t[p - 1] == '=' ||
                   t[p - 1] == '.')) {
    --p;
  }
  size_t e = p;
  while (p > 0 && IsAlpha(t[p - 1])) --p;
  std::string word(t.substr(p, e - p));
  for (char& c : word) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return word == "v" || word == "ver" || word == "version";
}

// One octet at p: "0" or 1-3 digits without a leading zero, at most 255. Returns its length.
size_t OctetAt(std::string_view t, size_t p) {
  size_t d = DigitsAt(t, p);
  if (d == 0 || d > 3) return 0;
  if (d > 1 && t[p] == '0') return 0;
  int v = 0;
  for (size_t k = 0; k < d; ++k) v = v * 10 + (t[p + k] - '0');
  return v <= 255 ? d : 0;
}

size_t ParseIpv4(std::string_view t, size_t i) {
  size_t p = i;
  for (int k = 0; k < 4; ++k) {
    if (k > 0) {
      if (At(t, p) != '.') return 0;
      ++p;
    }
    size_t d = OctetAt(t, p);
    if (d == 0) return 0;
    p += d;
  }
  char n = At(t, p);
  if (IsAlnum(n) || (n == '.' && IsAlnum(At(t, p + 1)))) return 0;  // 1.2.3.4.5, not :port
  return p;
}

bool ValidIpv6(std::string_view s) {
  if (s.size() < 2 || s.size() > 45) return false;
  if (std::count(s.begin(), s.end(), ':') < 2) return false;
  if (std::none_of(s.begin(), s.end(), IsHex)) return false;
  char buf[64];
  std::memcpy(buf, s.data(), s.size());
  buf[s.size()] = '\0';
  unsigned char addr[16];
  return inet_pton(AF_INET6, buf, addr) == 1;
}

bool IsIpv6Char(char c) { return IsHex(c) || c == ':' || c == '.'; }

void ScanIp(std::string_view t, int kind, std::vector<PiiMatch>* out) {
  const bool may_have_ipv6 = t.find(':') != std::string_view::npos;
  for (size_t i = 0; i < t.size();) {
    char prev = Before(t, i);
    size_t end = 0;
    if (!IsAlnum(prev) && prev != '.') {
      if (may_have_ipv6 && (IsHex(t[i]) || t[i] == ':') && prev != ':') {
        size_t e = i;
        while (IsIpv6Char(At(t, e))) ++e;
        // The run may end in a sentence's '.' or ':'; drop up to two.
        for (int trim = 0; trim < 3 && e > i; ++trim) {
          if (!IsAlnum(At(t, e)) && ValidIpv6(t.substr(i, e - i))) {
            end = e;
            break;
          }
          if (t[e - 1] != '.' && t[e - 1] != ':') break;
          --e;
        }
      }
      if (end == 0 && IsDigit(t[i]) && !AfterVersionWord(t, i)) end = ParseIpv4(t, i);
    }
    if (end > i) {
      Emit(out, i, end, kind);
      i = end;
    } else {
      ++i;
    }
  }
}

// ---- custom patterns ------------------------------------------------------------------------

bool IsContinuation(std::string_view t, size_t i) {
  return i < t.size() && (static_cast<unsigned char>(t[i]) & 0xC0) == 0x80;
}

void ScanRegex(const BoundedRegex& re, std::string_view t, int kind, std::vector<PiiMatch>* out) {
  size_t last_end = 0;
  re.ForEachMatch(t, [&](const std::vector<std::string_view>& groups) {
    if (groups.empty() || groups[0].empty()) return;
    size_t b = static_cast<size_t>(groups[0].data() - t.data());
    size_t e = b + groups[0].size();
    // Widen to whole UTF-8 characters (a byte-wise pattern may cut one).
    for (int k = 0; k < 3 && b > 0 && IsContinuation(t, b); ++k) --b;
    for (int k = 0; k < 3 && IsContinuation(t, e); ++k) ++e;
    if (b < last_end) return;
    Emit(out, b, e, kind);
    last_end = e;
  });
}

const std::array<std::string_view, 5> kBuiltinNames = {"email", "phone", "card", "iban", "ip"};

std::string Upper(std::string_view s) {
  std::string u(s);
  for (char& c : u) c = static_cast<char>(c >= 'a' && c <= 'z' ? c - 'a' + 'A' : c);
  return u;
}

std::string FillReplacement(std::string_view replacement, std::string_view kind) {
  std::string out;
  const std::string upper = Upper(kind);
  constexpr std::string_view kPlaceholder = "{kind}";
  size_t i = 0;
  while (true) {
    size_t j = replacement.find(kPlaceholder, i);
    if (j == std::string_view::npos) break;
    out.append(replacement.substr(i, j - i));
    out.append(upper);
    i = j + kPlaceholder.size();
  }
  out.append(replacement.substr(i));
  return out;
}

}  // namespace

const std::vector<std::string>& BuiltinPiiKinds() {
  static const std::vector<std::string> kinds(kBuiltinNames.begin(), kBuiltinNames.end());
  return kinds;
}

bool LuhnValid(std::string_view digits) {
  int sum = 0;
  int count = 0;
  for (size_t i = digits.size(); i-- > 0;) {
    char c = digits[i];
    if (!IsDigit(c)) continue;
    int d = c - '0';
    if (count % 2 == 1) {
      d *= 2;
      if (d > 9) d -= 9;
    }
    sum += d;
    ++count;
  }
  return count > 0 && sum % 10 == 0;
}

bool IbanChecksumValid(std::string_view iban) {
  std::string compact;
  for (char c : iban) {
    if (c == ' ') continue;
    if (!IsAlnum(c)) return false;
    compact.push_back(c);
  }
  if (compact.size() < 5) return false;
  // Move the first four characters to the end; letters count as 10..35; the number mod 97 is 1.
  std::string rotated = compact.substr(4) + compact.substr(0, 4);
  int rem = 0;
  for (char c : rotated) {
    if (IsDigit(c)) {
      rem = (rem * 10 + (c - '0')) % 97;
    } else {
      int v = (c >= 'a' ? c - 'a' : c - 'A') + 10;
      rem = (rem * 100 + v) % 97;
    }
  }
  return rem == 1;
}

Result<PiiRedactor> PiiRedactor::Create(const PiiOptions& options, std::string_view field) {
  const std::string f(field);
  PiiRedactor r;
  std::set<std::string> names;
  std::string known;
  for (std::string_view k : kBuiltinNames) known += (known.empty() ? "" : ", ") + std::string(k);
  if (!internal::IsValidUtf8(options.replacement)) {
    return Status::InvalidArgument(f + ".replacement: must be valid UTF-8 text");
  }
  for (size_t i = 0; i < options.kinds.size(); ++i) {
    const std::string& name = options.kinds[i];
    auto it = std::find(kBuiltinNames.begin(), kBuiltinNames.end(), name);
    std::string where = f + ".kinds[" + std::to_string(i) + "]";
    if (it == kBuiltinNames.end()) {
      return Status::InvalidArgument(where + ": unknown PII kind \"" + name +
                                     "\"; known: " + known + " (name other kinds under patterns:)");
    }
    if (!names.insert(name).second) {
      return Status::InvalidArgument(where + ": \"" + name + "\" is listed twice");
    }
    Kind kind;
    kind.builtin = static_cast<Builtin>(it - kBuiltinNames.begin());
    kind.replacement = FillReplacement(options.replacement, name);
    r.kind_names_.push_back(name);
    r.kinds_.push_back(std::move(kind));
  }
  for (const auto& [name, pattern] : options.patterns) {
    std::string where = f + ".patterns." + name;
    if (name.empty() ||
        name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") != std::string::npos) {
      return Status::InvalidArgument(f + ".patterns: pattern name \"" + name +
                                     "\" must be lowercase letters, digits and '_'");
    }
    if (std::find(kBuiltinNames.begin(), kBuiltinNames.end(), name) != kBuiltinNames.end()) {
      return Status::InvalidArgument(where + ": \"" + name +
                                     "\" is a built-in kind; list it under kinds: or rename "
                                     "the pattern");
    }
    if (!names.insert(name).second) {
      return Status::InvalidArgument(where + ": the pattern is named twice");
    }
    TY_ASSIGN_OR_RETURN(auto re, BoundedRegex::Compile(pattern, where));
    Kind kind;
    kind.builtin = Builtin::kCustom;
    kind.regex = std::move(re);
    kind.replacement = FillReplacement(options.replacement, name);
    r.kind_names_.push_back(name);
    r.kinds_.push_back(std::move(kind));
  }
  if (r.kinds_.empty()) {
    return Status::InvalidArgument(f + ": name at least one PII kind (kinds: [" + known +
                                   "]) or a pattern");
  }
  return r;
}

void PiiRedactor::FindKind(const Kind& kind, std::string_view text, std::vector<PiiMatch>* out,
                           int kind_index) const {
  switch (kind.builtin) {
    case Builtin::kEmail:
      ScanEmail(text, kind_index, out);
      break;
    case Builtin::kPhone:
      ScanPhone(text, kind_index, out);
      break;
    case Builtin::kCard:
      ScanCard(text, kind_index, out);
      break;
    case Builtin::kIban:
      ScanIban(text, kind_index, out);
      break;
    case Builtin::kIp:
      ScanIp(text, kind_index, out);
      break;
    case Builtin::kCustom:
      ScanRegex(*kind.regex, text, kind_index, out);
      break;
  }
}

std::vector<PiiMatch> PiiRedactor::Find(std::string_view text) const {
  const int n = static_cast<int>(kinds_.size());
  std::vector<std::vector<PiiMatch>> per_kind(n);
  for (int k = 0; k < n; ++k) FindKind(kinds_[k], text, &per_kind[k], k);
  std::vector<size_t> next(n, 0);
  std::vector<PiiMatch> chosen;
  size_t cursor = 0;
  while (true) {
    const PiiMatch* best = nullptr;
    for (int k = 0; k < n; ++k) {
      const std::vector<PiiMatch>& list = per_kind[k];
      while (next[k] < list.size() && list[next[k]].begin < cursor) ++next[k];
      if (next[k] == list.size()) continue;
      const PiiMatch& m = list[next[k]];
      if (best == nullptr || m.begin < best->begin ||
          (m.begin == best->begin && m.end - m.begin > best->end - best->begin)) {
        best = &m;  // ties (same begin and length) keep the kind listed first
      }
    }
    if (best == nullptr) break;
    chosen.push_back(*best);
    cursor = best->end;
  }
  return chosen;
}

std::string PiiRedactor::Redact(std::string_view text,
                                std::map<std::string, int64_t>* counts) const {
  std::vector<PiiMatch> matches = Find(text);
  if (matches.empty()) return std::string(text);
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  for (const PiiMatch& m : matches) {
    out.append(text.substr(pos, m.begin - pos));
    out.append(kinds_[m.kind].replacement);
    pos = m.end;
    if (counts != nullptr) ++(*counts)[kind_names_[m.kind]];
  }
  out.append(text.substr(pos));
  return out;
}

}  // namespace trainyard::prep
