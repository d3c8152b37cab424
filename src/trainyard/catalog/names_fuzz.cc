// libFuzzer target for name parsing: ParseFullName and NormalizeName must never crash, and
// whatever they accept must be canonical: lower-case levels of UC's characters that parse
// again to themselves.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "trainyard/catalog/names.h"

namespace {

bool Canonical(const std::string& level) {
  if (level.empty() || level.size() > trainyard::catalog::kMaxNameLength) return false;
  for (char c : level) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '@';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  for (int levels = 1; levels <= 3; ++levels) {
    auto parsed = trainyard::catalog::ParseFullName("full_name", text, levels);
    if (!parsed.ok()) {
      if (parsed.status().code() != trainyard::StatusCode::kInvalidArgument) std::abort();
      continue;
    }
    if (static_cast<int>(parsed->parts.size()) != levels) std::abort();
    for (const auto& level : parsed->parts) {
      if (!Canonical(level)) std::abort();
    }
    auto again = trainyard::catalog::ParseFullName("full_name", parsed->ToString(), levels);
    if (!again.ok() || again->parts != parsed->parts) std::abort();
  }
  auto one = trainyard::catalog::NormalizeName("name", text);
  if (one.ok() && !Canonical(*one)) std::abort();
  return 0;
}
