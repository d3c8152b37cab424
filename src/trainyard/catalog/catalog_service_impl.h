// CatalogService's private half, shared by its .cc files (catalog_service.cc: the
// generic operations on securables; catalog_objects.cc: the typed ones). Not for other
// components.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "trainyard/catalog/access_index.h"
#include "trainyard/catalog/catalog_service.h"
#include "trainyard/catalog/catalog_store.h"
#include "trainyard/catalog/table_cache.h"
#include "trainyard/identity/identity_service.h"

namespace trainyard::catalog {

// What creating a child object needs: its type, its parent's type and name levels, the
// privilege on the parent, and the row to insert (owner, times and id are filled in).
struct NewObject {
  SecurableType type = SecurableType::kTable;
  std::vector<std::string> parent_levels{};  // {} (catalog), {catalog}, {catalog, schema}
  std::string name{};
  Privilege create_privilege = Privilege::kCreateTable;
  // Also needed on the metastore (an external table or volume), if set.
  std::optional<Privilege> metastore_privilege{};
  std::string comment{};
  std::map<std::string, std::string> properties{};
  // Empty: a managed location `<parent root>/<kind>/<id>` is made for it.
  std::string storage_location{};
  std::string location_kind{};  // "catalogs", "schemas", "tables", "volumes", "models"
  std::string details = "{}";
};

struct CatalogService::Impl {
  Impl(store::Database& db_in, identity::IdentityService& identity_in, Clock& clock_in,
       Random& random_in, CatalogServiceOptions options_in)
      : identity(identity_in),
        clock(clock_in),
        random(random_in),
        options(std::move(options_in)),
        store(db_in) {}

  Result<Subject> SubjectOf(const identity::Principal& who);
  // The same from identity's caches only (never blocks): nullopt when they lack the groups.
  std::optional<Subject> CachedSubjectOf(const identity::Principal& who);
  // Decides, audits the decision, and returns Ok or PermissionDenied.
  Status Check(const identity::Principal& who, const Subject& subject, Privilege privilege,
               const std::string& id);
  Status Check(const identity::Principal& who, Privilege privilege, const std::string& id);
  void AuditDecision(const identity::Principal& who, const std::string& id,
                     std::string_view privilege, const Decision& decision);
  // The id of the object of `type` named `text` (parsed with names.h; "" for the metastore),
  // or NotFound / InvalidArgument naming `field`.
  Result<std::string> Resolve(SecurableType type, std::string_view text, std::string_view field);
  Result<ObjectRow> Load(SecurableType type, std::string_view text, std::string_view field);
  Status CheckRead(const identity::Principal& who, SecurableType type, const std::string& id);
  Status CheckRead(const identity::Principal& who, const Subject& subject, SecurableType type,
                   const std::string& id);
  bool MayRead(const Subject& subject, SecurableType type, const std::string& id);

  Result<ObjectRow> Create(const identity::Principal& who, const NewObject& request);
  Result<ObjectRow> Get(const identity::Principal& who, SecurableType type,
                        std::string_view full_name);
  Result<ObjectRow> GetById(const identity::Principal& who, SecurableType type,
                            std::string_view id);
  Result<Page<ObjectRow>> List(const identity::Principal& who, SecurableType type,
                               std::vector<std::string> parent_levels, const PageRequest& page);
  // Objects of `type` in every parent, by full name, that the caller may see.
  Result<Page<ObjectRow>> ListAll(const identity::Principal& who, SecurableType type,
                                  const PageRequest& page);
  Result<ObjectRow> Update(const identity::Principal& who, SecurableType type,
                           std::string_view full_name, const UpdateObjectRequest& request);
  Status Delete(const identity::Principal& who, SecurableType type, std::string_view full_name,
                bool force);

  // Table policies (catalog_table_policies.cc). The reader's identity for them.
  Result<tables::PredicateReader> ReaderOf(const identity::Principal& who);
  // Attaches each table's row filter and column masks from the store.
  Status AttachPolicies(std::vector<TableInfo>& tables);
  // Attaches the row filters and column masks in `rows` to the tables they belong to.
  static void ApplyPolicies(const std::vector<PolicyRow>& rows, std::vector<TableInfo>& tables);
  // The table with id `id` (its row and policies), from `tables` or else from the store
  // (and then kept there); NotFound when no table has that id.
  Result<std::shared_ptr<const TableInfo>> TableById(std::string_view id);
  // GetTable's answer for `subject` given the table (policies attached): CheckRead, then the
  // storage_location hidden where the policies restrict the reader. Touches no store.
  Result<TableInfo> ReadableTable(const identity::Principal& who, const Subject& subject,
                                  const TableInfo& table);
  // Attaches the policies and hides storage_location from `who` where they restrict `who`.
  Status PresentTables(const identity::Principal& who, std::vector<TableInfo>& tables);
  Result<TableInfo> PresentTable(const identity::Principal& who, TableInfo table);
  // Owner or MANAGE on the table, audited once with `change` (what is being set).
  Status CheckPolicyChange(const identity::Principal& who, const TableInfo& table,
                           const std::string& change);

  std::string NewId();
  std::string ManagedRoot(const std::string& parent_id);

  identity::IdentityService& identity;
  Clock& clock;
  Random& random;
  const CatalogServiceOptions options;
  CatalogStore store;
  AccessIndex index;
  // Tables read by id; every write of a table's row or policies invalidates its entry.
  TableCache table_cache;
};

// The table's fields from its row (no policies attached).
TableInfo ToTable(const ObjectRow& row);
// The privilege that lets one see (get, list) an object of `type`.
Privilege ReadPrivilege(SecurableType type);
// "table main.support.tickets", "metastore".
std::string SecurableLabel(SecurableType type, std::string_view full_name);
// Ok for an absolute local path, file:/ URL or s3://bucket[/prefix]; InvalidArgument naming
// `field` otherwise.
Status ValidateStorageLocation(std::string_view field, std::string_view location);

}  // namespace trainyard::catalog
