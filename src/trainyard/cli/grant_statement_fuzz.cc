// libFuzzer target for the CLI's GRANT/REVOKE/SHOW GRANTS parser: it must never crash, and a
// statement it accepts must name a known securable type, a principal for GRANT and REVOKE,
// and only known privileges.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "trainyard/cli/grant_statement.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto parsed = trainyard::cli::ParseGrantStatement(text);
  if (!parsed.ok()) return 0;
  const auto& s = *parsed;
  if (s.securable_type.empty() || s.full_name.empty()) std::abort();
  if (s.verb != trainyard::cli::GrantVerb::kShow && (s.principal.empty() || s.privileges.empty())) {
    std::abort();
  }
  const auto& known = trainyard::cli::KnownPrivileges();
  for (const auto& p : s.privileges) {
    if (std::find(known.begin(), known.end(), p) == known.end()) std::abort();
  }
  return 0;
}
