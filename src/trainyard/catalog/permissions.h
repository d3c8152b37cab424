// Privileges, securable types and the permission-changes decoder: pure values and
// functions (no I/O; thread-safe).
//
// The privileges are Unity Catalog OSS's 19 (api/all.yaml, `Privilege`) plus MANAGE (a
// non-owner may grant and revoke on the object) and ALL PRIVILEGES (every privilege but
// MANAGE). On the wire a privilege is spelled as UC does ("USE CATALOG"); the decoder also
// takes the Databricks SDK's spelling ("USE_CATALOG") and any letter case.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "trainyard/common/status.h"

namespace trainyard::catalog {

enum class Privilege : uint8_t {
  kCreateCatalog,
  kUseCatalog,
  kCreateSchema,
  kUseSchema,
  kCreateTable,
  kSelect,
  kModify,
  kCreateFunction,
  kExecute,
  kCreateVolume,
  kReadVolume,
  kCreateModel,
  kCreateExternalLocation,
  kReadFiles,
  kWriteFiles,
  kCreateExternalTable,
  kCreateExternalVolume,
  kCreateManagedStorage,
  kCreateStorageCredential,
  kManage,
  kAllPrivileges,
};
inline constexpr int kPrivilegeCount = 21;

// "USE CATALOG", "ALL PRIVILEGES", ...
std::string_view PrivilegeName(Privilege p);
// Takes "USE CATALOG", "use_catalog", "Use Catalog"; nullopt for anything else.
std::optional<Privilege> ParsePrivilege(std::string_view text);
// Every privilege, in declaration order.
const std::vector<Privilege>& AllPrivilegeValues();

// A set of privileges as a bit mask (bit i = Privilege i).
class PrivilegeSet {
 public:
  PrivilegeSet() = default;
  static PrivilegeSet Of(std::initializer_list<Privilege> ps);
  static PrivilegeSet FromBits(uint32_t bits) { return PrivilegeSet(bits); }
  bool Has(Privilege p) const { return (bits_ >> static_cast<int>(p)) & 1u; }
  void Add(Privilege p) { bits_ |= 1u << static_cast<int>(p); }
  void Remove(Privilege p) { bits_ &= ~(1u << static_cast<int>(p)); }
  bool empty() const { return bits_ == 0; }
  uint32_t bits() const { return bits_; }
  // Whether holding this set lets one exercise `p`: `p` itself, or ALL PRIVILEGES for
  // anything but MANAGE.
  bool Grants(Privilege p) const;
  std::vector<Privilege> ToVector() const;

 private:
  explicit PrivilegeSet(uint32_t bits) : bits_(bits) {}
  uint32_t bits_ = 0;
};

enum class SecurableType : uint8_t {
  kMetastore,
  kCatalog,
  kSchema,
  kTable,
  kVolume,
  kFunction,
  kRegisteredModel,
};

// "metastore", "catalog", "schema", "table", "volume", "function", "registered_model".
std::string_view SecurableTypeName(SecurableType t);
// Takes the names above in any case (and "model" for registered_model); InvalidArgument
// naming `field` and listing the valid types otherwise.
Result<SecurableType> ParseSecurableType(std::string_view field, std::string_view text);
// How many levels the full name of a securable of this type has (metastore: 0).
int NameLevels(SecurableType t);

// Whether `p` may be granted on a securable of type `t` (e.g. CREATE CATALOG only on the
// metastore, SELECT on a table or one of its containers, READ VOLUME on a volume or its
// containers).
bool PrivilegeAppliesTo(Privilege p, SecurableType t);

// One entry of UC's `{"changes": [{"principal": .., "add": [..], "remove": [..]}]}`.
struct PermissionChange {
  std::string principal;
  std::vector<Privilege> add;
  std::vector<Privilege> remove;
};

// Decodes an UpdatePermissions body into typed changes, checking each privilege against
// `type` (PrivilegeAppliesTo). InvalidArgument naming the bad field
// ("changes[1].add[0]: unknown privilege 'SELCT'") for anything malformed: not JSON, a
// missing or empty principal, a privilege that is not a string or is unknown, a
// privilege both added and removed, more than kMaxPermissionChanges changes.
inline constexpr size_t kMaxPermissionChanges = 1000;
Result<std::vector<PermissionChange>> DecodePermissionChanges(std::string_view body,
                                                              SecurableType type);

}  // namespace trainyard::catalog
