// CatalogStore: the catalog's tables (catalog_objects, catalog_grants): schema, rows and
// queries. No authorization, no naming rules, no caching: CatalogService does those.
//
// Every securable is one row of catalog_objects: the fields all securables share, and a
// JSON text of the fields of its type (`details`). The metastore has no row; its grants
// are kept under the securable id kMetastoreId. A table's row filter and column masks are
// rows of catalog_table_policies (migration 2), deleted with the table.
//
// Thread-safe (the Database is); keeps a reference to `db`.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "trainyard/catalog/catalog_types.h"
#include "trainyard/catalog/permissions.h"
#include "trainyard/common/status.h"
#include "trainyard/store/database.h"

namespace trainyard::catalog {

struct ObjectRow {
  SecurableType type = SecurableType::kCatalog;
  std::string parent_id;  // kMetastoreId for a catalog
  ObjectInfo info;
  std::string details = "{}";  // the type's own fields, JSON
};

// A table's row filter (column "", kind "row_filter", spec: the predicate) or a column's
// mask (kind: the mask kind's name, spec: a JSON array of the exempt principals).
struct PolicyRow {
  std::string table_id;
  std::string column;
  std::string kind;
  std::string spec;
  int64_t updated_at = 0;
  std::string updated_by;
};

struct GrantRow {
  std::string securable_id;
  std::string principal;
  PrivilegeSet privileges;
};

class CatalogStore {
 public:
  explicit CatalogStore(store::Database& db) : db_(db) {}

  static std::vector<store::Migration> Migrations();

  // AlreadyExists when an object of the same type and full name exists.
  Status Insert(const ObjectRow& row);
  Result<std::optional<ObjectRow>> Get(SecurableType type, const std::string& full_name);
  Result<std::optional<ObjectRow>> GetById(const std::string& id);
  // Children of `parent_id` of `type` with names after `after_name`, by name, at most `limit`.
  Result<std::vector<ObjectRow>> List(SecurableType type, const std::string& parent_id,
                                      const std::string& after_name, int limit);
  // Objects of `type` in any parent, by full name after `after_full_name`, at most `limit`.
  Result<std::vector<ObjectRow>> ListAll(SecurableType type, const std::string& after_full_name,
                                         int limit);
  // Objects whose storage_location is exactly one of `locations` (at most
  // store::kMaxListParams of them).
  Result<std::vector<ObjectRow>> FindByLocations(const std::vector<std::string>& locations);
  // An object whose storage_location starts with one of `prefixes` (each ending in '/'),
  // if any.
  Result<std::optional<ObjectRow>> FindUnderLocation(const std::vector<std::string>& prefixes);
  // How many objects lie under the object named `full_name` (any depth).
  Result<int64_t> CountDescendants(const std::string& full_name);
  // Writes owner, comment, properties, details and updated_at/by of `row` (by id).
  Status Update(const ObjectRow& row);
  // Renames the object and the full names of everything under it; AlreadyExists when the
  // new full name is taken.
  Status Rename(const ObjectRow& row, const std::string& new_name,
                const std::string& new_full_name);
  // Deletes the object, everything under it and their grants; returns the ids deleted.
  Result<std::vector<std::string>> DeleteSubtree(const ObjectRow& row);

  // Grants. Applies every (principal, add, remove) at once; returns the securable's rows after.
  Result<std::vector<GrantRow>> ApplyGrantChanges(const std::string& securable_id,
                                                  const std::vector<PermissionChange>& changes);
  Result<std::vector<GrantRow>> ListGrants(const std::string& securable_id);
  // Removes every grant to `principal`; returns the securables it had grants on.
  Result<std::vector<std::string>> DeleteGrantsOf(const std::string& principal);

  // Table policies. PutPolicy inserts or replaces the (table_id, column) row; DeletePolicy
  // returns whether there was one; ListPolicies returns those of the tables given, by table
  // and column.
  Status PutPolicy(const PolicyRow& row);
  Result<bool> DeletePolicy(const std::string& table_id, const std::string& column);
  Result<std::vector<PolicyRow>> ListPolicies(const std::vector<std::string>& table_ids);
  // The object with id `id` and (a table's) policies, read in one transaction: one snapshot,
  // one round trip. nullopt when no object has that id.
  Result<std::optional<std::pair<ObjectRow, std::vector<PolicyRow>>>> GetWithPolicies(
      const std::string& id);

  // Everything, for the in-memory index: rows without details, and all grants.
  Status LoadAll(std::vector<ObjectRow>& objects, std::vector<GrantRow>& grants);

 private:
  store::Database& db_;
};

}  // namespace trainyard::catalog
