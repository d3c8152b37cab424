// CatalogAuthorizer: the identity::Authorizer that services (tracking, registry, jobs,
// checkpoints, tables) call, with the catalog's grants behind every securable that lives in
// the catalog, and the previous authorizer (IdentityService) behind everything else.
//
// A Securable is the catalog's when its type is a catalog type ("catalog", "schema",
// "table", "volume", "function", "registered_model") and its id is the full name of an object
// of that type in the catalog (`main.support.tickets`). Then READ needs the type's read
// privilege (SELECT, READ VOLUME, EXECUTE, USE SCHEMA, USE CATALOG), EDIT needs MODIFY on a
// table and MANAGE elsewhere, MANAGE needs MANAGE, all through CatalogService::Authorize
// (owners and admins pass; decisions are audited). Other securables (experiments, runs, jobs,
// checkpoints, MLflow registered models named without catalog and schema) go to `fallback`
// unchanged, so their owner/EDIT/MANAGE grants keep working.
//
// Thread-safe; keeps references to `catalog` and `fallback`, which must outlive it.
#pragma once

#include "trainyard/catalog/catalog_service.h"
#include "trainyard/identity/authorizer.h"

namespace trainyard::catalog {

class CatalogAuthorizer : public identity::Authorizer {
 public:
  CatalogAuthorizer(CatalogService& catalog, identity::Authorizer& fallback)
      : catalog_(catalog), fallback_(fallback) {}

  Status Authorize(const identity::Principal& who, identity::Action action,
                   const identity::Securable& what) override;
  Status Authorize(const identity::Principal& who, identity::Action action,
                   const identity::Securable& what, const identity::Securable& accessed) override;

 private:
  CatalogService& catalog_;
  identity::Authorizer& fallback_;
};

// The catalog privilege an Authorizer action needs on a securable of `type`.
Privilege PrivilegeForAction(identity::Action action, SecurableType type);

}  // namespace trainyard::catalog
