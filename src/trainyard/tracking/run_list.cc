#include "trainyard/tracking/run_list.h"

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>

#include "trainyard/common/json.h"
#include "trainyard/common/page_token.h"

namespace trainyard::tracking {
namespace {

using store::Value;

std::string Hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  return buf;
}

// Doubles travel as C99 hex floats ("0x1.8p+1", "inf"): exact, and infinities survive, which
// JSON numbers cannot carry.
std::string HexDouble(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", v);
  return buf;
}

Status BadCursor(std::string_view why) {
  return Status::InvalidArgument(
      "cursor is not valid for this listing (" + std::string(why) +
      "); pass the next_cursor of the previous page of the same query, or omit cursor to start "
      "from the first page");
}

Result<Value> DecodeValue(const json::value& v) {
  if (v.is_null()) return Value{};
  if (!v.is_object() || v.as_object().size() != 1) return BadCursor("a value is malformed");
  const auto& [kind, x] = *v.as_object().begin();
  if (kind == "i" && x.is_int64()) return Value{x.as_int64()};
  if (kind == "s" && x.is_string()) return Value{std::string(x.as_string())};
  if (kind == "f" && x.is_string()) {
    std::string text(x.as_string());
    if (text.empty() || text.size() > 40) return BadCursor("a number is malformed");
    char* end = nullptr;
    errno = 0;
    double d = std::strtod(text.c_str(), &end);
    if (end != text.c_str() + text.size() || d != d) return BadCursor("a number is malformed");
    return Value{d};
  }
  return BadCursor("a value is malformed");
}

}  // namespace

uint64_t QueryFingerprint(const std::vector<std::string_view>& parts) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](std::string_view bytes) {
    for (unsigned char c : bytes) {
      h ^= c;
      h *= 1099511628211ull;
    }
  };
  for (std::string_view p : parts) {
    mix(std::to_string(p.size()) + ":");
    mix(p);
  }
  return h;
}

std::string EncodeRunCursor(uint64_t fingerprint, const std::vector<Value>& values) {
  json::array a;
  a.emplace_back(Hex64(fingerprint));
  for (const Value& v : values) {
    if (const auto* i = std::get_if<int64_t>(&v)) {
      a.emplace_back(json::object{{"i", *i}});
    } else if (const auto* d = std::get_if<double>(&v)) {
      a.emplace_back(json::object{{"f", HexDouble(*d)}});
    } else if (const auto* s = std::get_if<std::string>(&v)) {
      a.emplace_back(json::object{{"s", *s}});
    } else if (const auto* b = std::get_if<store::Blob>(&v)) {
      a.emplace_back(json::object{{"s", b->bytes}});
    } else {
      a.emplace_back(nullptr);
    }
  }
  std::string out = Base64Encode(json::serialize(a));
  // base64url without padding: nothing to escape in a query string.
  while (!out.empty() && out.back() == '=') out.pop_back();
  for (char& c : out) {
    if (c == '+') c = '-';
    if (c == '/') c = '_';
  }
  return out;
}

Result<std::vector<Value>> DecodeRunCursor(std::string_view cursor, uint64_t fingerprint,
                                           size_t terms) {
  if (cursor.size() > kMaxRunCursorBytes) {
    return BadCursor("longer than " + std::to_string(kMaxRunCursorBytes) + " bytes");
  }
  std::string b64(cursor);
  for (char& c : b64) {
    if (c == '-')
      c = '+';
    else if (c == '_')
      c = '/';
    else if (c == '+' || c == '/' || c == '=')
      return BadCursor("not base64url");
  }
  if (b64.size() % 4 == 1) return BadCursor("not base64url");
  while (b64.size() % 4 != 0) b64 += '=';
  auto decoded = Base64Decode(b64);
  if (!decoded.ok()) return BadCursor("not base64url");
  auto parsed = ParseJsonExact(*decoded);
  if (!parsed.ok() || !parsed->is_array()) return BadCursor("not a cursor this server issued");
  const json::array& a = parsed->as_array();
  if (a.empty() || !a[0].is_string()) return BadCursor("not a cursor this server issued");
  if (a[0].as_string() != Hex64(fingerprint)) {
    return BadCursor("it belongs to another experiment, filter, order_by or run_view_type");
  }
  if (a.size() != terms + 1) return BadCursor("it has the wrong number of values");
  std::vector<Value> out;
  out.reserve(terms);
  for (size_t i = 1; i < a.size(); ++i) {
    TY_ASSIGN_OR_RETURN(Value v, DecodeValue(a[i]));
    out.push_back(std::move(v));
  }
  return out;
}

SqlFragment KeysetCondition(const std::vector<OrderTerm>& terms, const std::vector<Value>& after) {
  SqlFragment out;
  std::string ties;  // "t0 = ? AND t1 IS NULL AND ..." for the terms before the current one
  std::vector<Value> tie_params;
  for (size_t i = 0; i < terms.size() && i < after.size(); ++i) {
    const OrderTerm& t = terms[i];
    bool null = std::holds_alternative<std::monostate>(after[i]);
    if (!null) {
      if (!out.sql.empty()) out.sql += " OR ";
      out.sql += "(" + ties + (ties.empty() ? "" : " AND ") + "(" + t.sql + ")" +
                 (t.ascending ? " > ?" : " < ?") + ")";
      out.params.insert(out.params.end(), tie_params.begin(), tie_params.end());
      out.params.insert(out.params.end(), t.params.begin(), t.params.end());
      out.params.push_back(after[i]);
    }
    if (!ties.empty()) ties += " AND ";
    ties += "(" + t.sql + ")" + (null ? " IS NULL" : " = ?");
    tie_params.insert(tie_params.end(), t.params.begin(), t.params.end());
    if (!null) tie_params.push_back(after[i]);
  }
  if (out.sql.empty()) out.sql = "1=0";
  return out;
}

}  // namespace trainyard::tracking
