// libFuzzer target for the runs listing's cursor (run_list.h): any input must decode or fail
// with InvalidArgument, never crash or hang; a cursor that decodes must encode back to one that
// decodes to the same values, and the keyset condition built from them must bind exactly one
// value per placeholder.
//
// The input's first byte is the number of order terms (mod 8); the rest is the cursor.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "trainyard/tracking/run_list.h"

namespace trainyard::tracking {
namespace {

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "%s\n", what);
  std::abort();
}

size_t Placeholders(const std::string& sql) {
  size_t n = 0;
  for (char c : sql) n += c == '?';
  return n;
}

bool SameValues(const std::vector<store::Value>& a, const std::vector<store::Value>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].index() != b[i].index()) return false;
    if (const auto* d = std::get_if<double>(&a[i])) {
      if (*d != std::get<double>(b[i])) return false;
    } else if (const auto* n = std::get_if<int64_t>(&a[i])) {
      if (*n != std::get<int64_t>(b[i])) return false;
    } else if (const auto* t = std::get_if<std::string>(&a[i])) {
      if (*t != std::get<std::string>(b[i])) return false;
    } else if (!std::holds_alternative<std::monostate>(a[i])) {
      return false;  // the decoder never makes a Blob
    }
  }
  return true;
}

}  // namespace
}  // namespace trainyard::tracking

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace trainyard::tracking;
  if (size == 0) return 0;
  size_t terms = data[0] % 8;
  std::string_view cursor(reinterpret_cast<const char*>(data) + 1, size - 1);
  uint64_t fingerprint = QueryFingerprint({"1", "metrics.acc > 0", "metrics.acc DESC\n", "active"});
  auto decoded = DecodeRunCursor(cursor, fingerprint, terms);
  if (!decoded.ok()) {
    if (!decoded.status().IsInvalidArgument()) Fail("an error other than InvalidArgument");
    return 0;
  }
  if (decoded->size() != terms) Fail("wrong number of values");
  auto again = DecodeRunCursor(EncodeRunCursor(fingerprint, *decoded), fingerprint, terms);
  if (!again.ok() || !SameValues(*again, *decoded)) Fail("a cursor does not round-trip");
  if (DecodeRunCursor(EncodeRunCursor(fingerprint + 1, *decoded), fingerprint, terms).ok()) {
    Fail("another query's cursor was accepted");
  }
  std::vector<OrderTerm> order;
  for (size_t i = 0; i < terms; ++i) {
    OrderTerm t{"(SELECT v FROM t WHERE k = ?)", {std::string("k")}, i % 2 == 0};
    order.push_back(std::move(t));
  }
  SqlFragment keyset = KeysetCondition(order, *decoded);
  if (Placeholders(keyset.sql) != keyset.params.size()) Fail("placeholders and values differ");
  return 0;
}
