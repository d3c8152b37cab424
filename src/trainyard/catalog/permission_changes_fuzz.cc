// libFuzzer target for the permission-changes decoder: DecodePermissionChanges must never
// crash, must fail only with InvalidArgument, and whatever it accepts must hold only
// non-empty principals and privileges that apply to the securable type, none both added and
// removed.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "trainyard/catalog/permissions.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace trainyard::catalog;
  if (size == 0) return 0;
  // The first byte picks the securable type; the rest is the body.
  auto type = static_cast<SecurableType>(data[0] % 7);
  std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  auto changes = DecodePermissionChanges(body, type);
  if (!changes.ok()) {
    if (changes.status().code() != trainyard::StatusCode::kInvalidArgument) std::abort();
    return 0;
  }
  if (changes->size() > kMaxPermissionChanges) std::abort();
  for (const auto& c : *changes) {
    if (c.principal.empty()) std::abort();
    PrivilegeSet added;
    for (Privilege p : c.add) {
      if (!PrivilegeAppliesTo(p, type) || !ParsePrivilege(PrivilegeName(p))) std::abort();
      added.Add(p);
    }
    for (Privilege p : c.remove) {
      if (!PrivilegeAppliesTo(p, type) || added.Has(p)) std::abort();
    }
  }
  return 0;
}
