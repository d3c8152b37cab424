#include "trainyard/catalog/catalog_authorizer.h"

#include "trainyard/catalog/catalog_service_impl.h"
#include "trainyard/catalog/names.h"

namespace trainyard::catalog {
namespace {

// The catalog type of `what`, when it names an object of the catalog's shape.
std::optional<SecurableType> CatalogTypeOf(const identity::Securable& what) {
  auto type = ParseSecurableType("type", what.type);
  if (!type.ok() || *type == SecurableType::kMetastore) return std::nullopt;
  if (!ParseFullName("id", what.id, NameLevels(*type)).ok()) return std::nullopt;
  return *type;
}

}  // namespace

Privilege PrivilegeForAction(identity::Action action, SecurableType type) {
  if (action == identity::Action::kManage) return Privilege::kManage;
  if (action == identity::Action::kEdit) {
    return type == SecurableType::kTable ? Privilege::kModify : Privilege::kManage;
  }
  return ReadPrivilege(type);
}

Status CatalogAuthorizer::Authorize(const identity::Principal& who, identity::Action action,
                                    const identity::Securable& what) {
  return Authorize(who, action, what, what);
}

Status CatalogAuthorizer::Authorize(const identity::Principal& who, identity::Action action,
                                    const identity::Securable& what,
                                    const identity::Securable& accessed) {
  auto type = CatalogTypeOf(what);
  if (!type) return fallback_.Authorize(who, action, what, accessed);
  Status s = catalog_.Authorize(who, PrivilegeForAction(action, *type), *type, what.id);
  // Not in the catalog (an MLflow model named like one, say): the previous rules decide.
  if (s.IsNotFound()) return fallback_.Authorize(who, action, what, accessed);
  return s;
}

}  // namespace trainyard::catalog
