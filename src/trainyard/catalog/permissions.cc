#include "trainyard/catalog/permissions.h"

#include <array>
#include <cctype>

#include "trainyard/common/json.h"
#include "trainyard/common/strings.h"

namespace trainyard::catalog {
namespace {

constexpr std::array<std::string_view, kPrivilegeCount> kPrivilegeNames = {
    "CREATE CATALOG",
    "USE CATALOG",
    "CREATE SCHEMA",
    "USE SCHEMA",
    "CREATE TABLE",
    "SELECT",
    "MODIFY",
    "CREATE FUNCTION",
    "EXECUTE",
    "CREATE VOLUME",
    "READ VOLUME",
    "CREATE MODEL",
    "CREATE EXTERNAL LOCATION",
    "READ FILES",
    "WRITE FILES",
    "CREATE EXTERNAL TABLE",
    "CREATE EXTERNAL VOLUME",
    "CREATE MANAGED STORAGE",
    "CREATE STORAGE CREDENTIAL",
    "MANAGE",
    "ALL PRIVILEGES",
};

constexpr std::array<std::string_view, 7> kSecurableTypeNames = {
    "metastore", "catalog", "schema", "table", "volume", "function", "registered_model"};

// The securable types a privilege may be granted on, as a bit mask of SecurableType.
constexpr uint32_t Bit(SecurableType t) { return 1u << static_cast<int>(t); }
constexpr uint32_t kMetastore = Bit(SecurableType::kMetastore);
constexpr uint32_t kContainers =
    Bit(SecurableType::kMetastore) | Bit(SecurableType::kCatalog) | Bit(SecurableType::kSchema);
constexpr uint32_t kEverything = kContainers | Bit(SecurableType::kTable) |
                                 Bit(SecurableType::kVolume) | Bit(SecurableType::kFunction) |
                                 Bit(SecurableType::kRegisteredModel);

uint32_t AppliesMask(Privilege p) {
  switch (p) {
    case Privilege::kCreateCatalog:
    case Privilege::kCreateExternalLocation:
    case Privilege::kCreateStorageCredential:
      return kMetastore;
    case Privilege::kUseCatalog:
      return Bit(SecurableType::kMetastore) | Bit(SecurableType::kCatalog);
    case Privilege::kCreateSchema:
      return Bit(SecurableType::kMetastore) | Bit(SecurableType::kCatalog);
    case Privilege::kUseSchema:
    case Privilege::kCreateTable:
    case Privilege::kCreateFunction:
    case Privilege::kCreateVolume:
    case Privilege::kCreateModel:
      return kContainers;
    case Privilege::kSelect:
    case Privilege::kModify:
      return kContainers | Bit(SecurableType::kTable);
    case Privilege::kExecute:
      return kContainers | Bit(SecurableType::kFunction) | Bit(SecurableType::kRegisteredModel);
    case Privilege::kReadVolume:
      return kContainers | Bit(SecurableType::kVolume);
    case Privilege::kReadFiles:
    case Privilege::kWriteFiles:
      // On a volume too: WRITE FILES is what writing a volume's files takes (UC OSS has no
      // WRITE VOLUME privilege).
      return kContainers | Bit(SecurableType::kVolume);
    case Privilege::kCreateExternalTable:
    case Privilege::kCreateExternalVolume:
    case Privilege::kCreateManagedStorage:
      return kContainers;
    case Privilege::kManage:
    case Privilege::kAllPrivileges:
      return kEverything;
  }
  return 0;
}

Status FieldError(const std::string& field, const std::string& what) {
  return Status::InvalidArgument(field + ": " + what);
}

Result<std::vector<Privilege>> DecodePrivilegeList(const json::object& change,
                                                   const std::string& field, std::string_view key,
                                                   SecurableType type) {
  std::vector<Privilege> out;
  auto it = change.find(key);
  if (it == change.end() || it->value().is_null()) return out;
  const std::string list_field = field + "." + std::string(key);
  if (!it->value().is_array()) {
    return FieldError(list_field,
                      "must be an array of privileges (got " + DescribeJson(it->value()) + ")");
  }
  const auto& items = it->value().get_array();
  if (items.size() > static_cast<size_t>(kPrivilegeCount) * 4) {
    return FieldError(list_field, "has too many entries (" + std::to_string(items.size()) + ")");
  }
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string item_field = list_field + "[" + std::to_string(i) + "]";
    if (!items[i].is_string()) {
      return FieldError(item_field,
                        "must be a privilege name (got " + DescribeJson(items[i]) + ")");
    }
    std::string_view text(items[i].get_string().data(), items[i].get_string().size());
    auto p = ParsePrivilege(text);
    if (!p) {
      return FieldError(item_field, "unknown privilege '" + Abbreviate(text) +
                                        "' (e.g. 'SELECT', 'USE CATALOG', 'ALL PRIVILEGES')");
    }
    if (!PrivilegeAppliesTo(*p, type)) {
      return FieldError(item_field, std::string(PrivilegeName(*p)) + " cannot be granted on a " +
                                        std::string(SecurableTypeName(type)));
    }
    out.push_back(*p);
  }
  return out;
}

Result<PermissionChange> DecodeChange(const json::value& v, size_t index, SecurableType type) {
  const std::string field = "changes[" + std::to_string(index) + "]";
  if (!v.is_object()) {
    return FieldError(
        field, "must be an object with principal, add and remove (got " + DescribeJson(v) + ")");
  }
  const auto& o = v.get_object();
  PermissionChange change;
  auto principal = o.find("principal");
  if (principal == o.end() || !principal->value().is_string() ||
      principal->value().get_string().empty()) {
    return FieldError(field + ".principal",
                      "must be a non-empty string (a user, group or "
                      "service principal)");
  }
  change.principal = std::string(principal->value().get_string());
  if (change.principal.size() > 255) {
    return FieldError(field + ".principal", "must be at most 255 characters");
  }
  TY_ASSIGN_OR_RETURN(change.add, DecodePrivilegeList(o, field, "add", type));
  TY_ASSIGN_OR_RETURN(change.remove, DecodePrivilegeList(o, field, "remove", type));
  PrivilegeSet added;
  for (Privilege p : change.add) added.Add(p);
  for (Privilege p : change.remove) {
    if (added.Has(p)) {
      return FieldError(field, std::string(PrivilegeName(p)) + " is both added and removed");
    }
  }
  return change;
}

}  // namespace

std::string_view PrivilegeName(Privilege p) {
  auto i = static_cast<size_t>(p);
  return i < kPrivilegeNames.size() ? kPrivilegeNames[i] : "UNKNOWN";
}

std::optional<Privilege> ParsePrivilege(std::string_view text) {
  if (text.size() > 40) return std::nullopt;
  std::string canonical;
  for (char c : text) {
    canonical.push_back(c == '_' ? ' '
                                 : static_cast<char>(std::toupper(static_cast<unsigned char>(c))));
  }
  for (size_t i = 0; i < kPrivilegeNames.size(); ++i) {
    if (kPrivilegeNames[i] == canonical) return static_cast<Privilege>(i);
  }
  return std::nullopt;
}

const std::vector<Privilege>& AllPrivilegeValues() {
  static const std::vector<Privilege> all = [] {
    std::vector<Privilege> v;
    for (int i = 0; i < kPrivilegeCount; ++i) v.push_back(static_cast<Privilege>(i));
    return v;
  }();
  return all;
}

PrivilegeSet PrivilegeSet::Of(std::initializer_list<Privilege> ps) {
  PrivilegeSet s;
  for (Privilege p : ps) s.Add(p);
  return s;
}

bool PrivilegeSet::Grants(Privilege p) const {
  return Has(p) || (p != Privilege::kManage && Has(Privilege::kAllPrivileges));
}

std::vector<Privilege> PrivilegeSet::ToVector() const {
  std::vector<Privilege> out;
  for (Privilege p : AllPrivilegeValues()) {
    if (Has(p)) out.push_back(p);
  }
  return out;
}

std::string_view SecurableTypeName(SecurableType t) {
  auto i = static_cast<size_t>(t);
  return i < kSecurableTypeNames.size() ? kSecurableTypeNames[i] : "unknown";
}

Result<SecurableType> ParseSecurableType(std::string_view field, std::string_view text) {
  std::string lower = ToLower(text);
  if (lower == "model") lower = "registered_model";
  for (size_t i = 0; i < kSecurableTypeNames.size(); ++i) {
    if (kSecurableTypeNames[i] == lower) return static_cast<SecurableType>(i);
  }
  return Status::InvalidArgument(std::string(field) + ": unknown securable type '" +
                                 Abbreviate(text) +
                                 "' (one of metastore, catalog, schema, table, volume, function, "
                                 "registered_model)");
}

int NameLevels(SecurableType t) {
  switch (t) {
    case SecurableType::kMetastore:
      return 0;
    case SecurableType::kCatalog:
      return 1;
    case SecurableType::kSchema:
      return 2;
    default:
      return 3;
  }
}

bool PrivilegeAppliesTo(Privilege p, SecurableType t) { return (AppliesMask(p) & Bit(t)) != 0; }

Result<std::vector<PermissionChange>> DecodePermissionChanges(std::string_view body,
                                                              SecurableType type) {
  auto parsed = ParseJsonExact(body);
  if (!parsed.ok() || !parsed->is_object()) {
    return Status::InvalidArgument(
        "the body must be a JSON object {\"changes\": [{\"principal\": ..., \"add\": [...], "
        "\"remove\": [...]}]}");
  }
  const auto& o = parsed->get_object();
  auto changes = o.find("changes");
  if (changes == o.end() || !changes->value().is_array()) {
    return FieldError("changes", "must be an array of {principal, add, remove}");
  }
  const auto& items = changes->value().get_array();
  if (items.size() > kMaxPermissionChanges) {
    return FieldError("changes", "has " + std::to_string(items.size()) + " entries (at most " +
                                     std::to_string(kMaxPermissionChanges) +
                                     "); split it into several requests");
  }
  std::vector<PermissionChange> out;
  for (size_t i = 0; i < items.size(); ++i) {
    TY_ASSIGN_OR_RETURN(PermissionChange change, DecodeChange(items[i], i, type));
    out.push_back(std::move(change));
  }
  return out;
}

}  // namespace trainyard::catalog
