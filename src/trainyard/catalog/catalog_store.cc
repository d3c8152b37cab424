#include "trainyard/catalog/catalog_store.h"

#include <map>

#include "trainyard/common/json.h"
#include "trainyard/store/sql.h"

namespace trainyard::catalog {
namespace {

constexpr const char* kColumns =
    "id, type, parent_id, name, full_name, catalog_name, schema_name, owner, comment, "
    "properties, storage_location, created_at, created_by, updated_at, updated_by, details";

std::string PropertiesToJson(const std::map<std::string, std::string>& properties) {
  json::object o;
  for (const auto& [k, v] : properties) o[k] = v;
  return json::serialize(o);
}

std::map<std::string, std::string> PropertiesFromJson(std::string_view text) {
  std::map<std::string, std::string> out;
  auto parsed = ParseJsonObject(text);
  if (!parsed.ok()) return out;
  for (const auto& [k, v] : *parsed) {
    if (v.is_string()) out[std::string(k)] = std::string(v.get_string());
  }
  return out;
}

Result<SecurableType> TypeFromText(const std::string& text) {
  return ParseSecurableType("catalog_objects.type", text);
}

Result<ObjectRow> RowFromDb(const store::Row& r) {
  ObjectRow row;
  TY_ASSIGN_OR_RETURN(row.type, TypeFromText(r.Text(1)));
  row.parent_id = r.Text(2);
  ObjectInfo& i = row.info;
  i.id = r.Text(0);
  i.name = r.Text(3);
  i.full_name = r.Text(4);
  i.catalog_name = r.Text(5);
  i.schema_name = r.Text(6);
  i.owner = r.Text(7);
  i.comment = r.Text(8);
  i.properties = PropertiesFromJson(r.Text(9));
  i.storage_location = r.Text(10);
  i.created_at = r.Int(11);
  i.created_by = r.Text(12);
  i.updated_at = r.Int(13);
  i.updated_by = r.Text(14);
  row.details = r.Text(15);
  return row;
}

Result<std::optional<ObjectRow>> OneRow(Result<store::Rows> rows) {
  if (!rows.ok()) return rows.status();
  if (rows->empty()) return std::optional<ObjectRow>();
  TY_ASSIGN_OR_RETURN(ObjectRow row, RowFromDb((*rows)[0]));
  return std::optional<ObjectRow>(std::move(row));
}

// SUBSTR counts characters on both backends.
int64_t Utf8Length(std::string_view s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// The condition "full_name lies under `prefix`" without LIKE (names may hold '_').
std::string UnderPrefixSql() { return "SUBSTR(full_name, 1, CAST(? AS INTEGER)) = ?"; }

Result<std::vector<GrantRow>> GrantsIn(store::Transaction& tx, const std::string& securable_id) {
  TY_ASSIGN_OR_RETURN(auto rows, tx.Query("SELECT principal, privilege FROM catalog_grants WHERE "
                                          "securable_id = ? ORDER BY principal, privilege",
                                          {securable_id}));
  std::vector<GrantRow> out;
  for (const auto& r : rows) {
    auto p = ParsePrivilege(r.Text(1));
    if (!p) continue;
    if (out.empty() || out.back().principal != r.Text(0)) {
      out.push_back(GrantRow{securable_id, r.Text(0), {}});
    }
    out.back().privileges.Add(*p);
  }
  return out;
}

}  // namespace

std::vector<store::Migration> CatalogStore::Migrations() {
  return {{"catalog",
           1,
           {
               "CREATE TABLE catalog_objects (id TEXT PRIMARY KEY, type TEXT NOT NULL,"
               " parent_id TEXT NOT NULL, name TEXT NOT NULL, full_name TEXT NOT NULL,"
               " catalog_name TEXT NOT NULL, schema_name TEXT NOT NULL, owner TEXT NOT NULL,"
               " comment TEXT NOT NULL, properties TEXT NOT NULL,"
               " storage_location TEXT NOT NULL, created_at BIGINT NOT NULL,"
               " created_by TEXT NOT NULL, updated_at BIGINT NOT NULL,"
               " updated_by TEXT NOT NULL, details TEXT NOT NULL,"
               " UNIQUE (type, full_name))",
               "CREATE INDEX catalog_objects_by_parent ON catalog_objects (parent_id, type, name)",
               "CREATE TABLE catalog_grants (securable_id TEXT NOT NULL, principal TEXT NOT NULL,"
               " privilege TEXT NOT NULL, PRIMARY KEY (securable_id, principal, privilege))",
               "CREATE INDEX catalog_grants_by_principal ON catalog_grants (principal)",
           }},
          {"catalog",
           2,
           {
               "CREATE TABLE catalog_table_policies (table_id TEXT NOT NULL,"
               " column_name TEXT NOT NULL, kind TEXT NOT NULL, spec TEXT NOT NULL,"
               " updated_at BIGINT NOT NULL, updated_by TEXT NOT NULL,"
               " PRIMARY KEY (table_id, column_name))",
           }}};
}

Status CatalogStore::Insert(const ObjectRow& row) {
  const ObjectInfo& i = row.info;
  return db_.Write([&](store::Transaction& tx) -> Status {
    auto r = tx.Exec(
        std::string("INSERT INTO catalog_objects (") + kColumns +
            ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        {i.id, std::string(SecurableTypeName(row.type)), row.parent_id, i.name, i.full_name,
         i.catalog_name, i.schema_name, i.owner, i.comment, PropertiesToJson(i.properties),
         i.storage_location, i.created_at, i.created_by, i.updated_at, i.updated_by, row.details});
    if (!r.ok() && r.status().IsAlreadyExists()) {
      return Status::AlreadyExists(std::string(SecurableTypeName(row.type)) + " '" + i.full_name +
                                   "' already exists");
    }
    return r.status();
  });
}

Result<std::optional<ObjectRow>> CatalogStore::Get(SecurableType type,
                                                   const std::string& full_name) {
  std::optional<ObjectRow> out;
  TY_RETURN_IF_ERROR(db_.Read([&](store::Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(out, OneRow(tx.Query(std::string("SELECT ") + kColumns +
                                                 " FROM catalog_objects WHERE type = ? AND "
                                                 "full_name = ?",
                                             {std::string(SecurableTypeName(type)), full_name})));
    return Status::Ok();
  }));
  return out;
}

Result<std::optional<ObjectRow>> CatalogStore::GetById(const std::string& id) {
  std::optional<ObjectRow> out;
  TY_RETURN_IF_ERROR(db_.Read([&](store::Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(
        out, OneRow(tx.Query(
                 std::string("SELECT ") + kColumns + " FROM catalog_objects WHERE id = ?", {id})));
    return Status::Ok();
  }));
  return out;
}

Result<std::vector<ObjectRow>> CatalogStore::List(SecurableType type, const std::string& parent_id,
                                                  const std::string& after_name, int limit) {
  std::vector<ObjectRow> out;
  TY_RETURN_IF_ERROR(db_.Read([&](store::Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(
        auto rows,
        tx.Query(std::string("SELECT ") + kColumns +
                     " FROM catalog_objects WHERE parent_id = ? AND type = ? AND name > ? ORDER "
                     "BY name LIMIT ?",
                 {parent_id, std::string(SecurableTypeName(type)), after_name, int64_t{limit}}));
    for (const auto& r : rows) {
      TY_ASSIGN_OR_RETURN(ObjectRow row, RowFromDb(r));
      out.push_back(std::move(row));
    }
    return Status::Ok();
  }));
  return out;
}

Result<std::vector<ObjectRow>> CatalogStore::ListAll(SecurableType type,
                                                     const std::string& after_full_name,
                                                     int limit) {
  std::vector<ObjectRow> out;
  TY_RETURN_IF_ERROR(db_.Read([&](store::Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(
        auto rows,
        tx.Query(std::string("SELECT ") + kColumns +
                     " FROM catalog_objects WHERE type = ? AND full_name > ? ORDER BY full_name "
                     "LIMIT ?",
                 {std::string(SecurableTypeName(type)), after_full_name, int64_t{limit}}));
    for (const auto& r : rows) {
      TY_ASSIGN_OR_RETURN(ObjectRow row, RowFromDb(r));
      out.push_back(std::move(row));
    }
    return Status::Ok();
  }));
  return out;
}

Result<std::vector<ObjectRow>> CatalogStore::FindByLocations(
    const std::vector<std::string>& locations) {
  std::vector<ObjectRow> out;
  if (locations.empty()) return out;
  if (locations.size() > store::kMaxListParams) {
    return Status::InvalidArgument("a path may have at most " +
                                   std::to_string(store::kMaxListParams / 3) + " components");
  }
  std::vector<store::Value> params(locations.begin(), locations.end());
  TY_RETURN_IF_ERROR(db_.Read([&](store::Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(auto rows, tx.Query(std::string("SELECT ") + kColumns +
                                                " FROM catalog_objects WHERE storage_location IN " +
                                                store::InList(params.size()),
                                            params));
    for (const auto& r : rows) {
      TY_ASSIGN_OR_RETURN(ObjectRow row, RowFromDb(r));
      out.push_back(std::move(row));
    }
    return Status::Ok();
  }));
  return out;
}

Result<std::optional<ObjectRow>> CatalogStore::FindUnderLocation(
    const std::vector<std::string>& prefixes) {
  std::optional<ObjectRow> out;
  TY_RETURN_IF_ERROR(db_.Read([&](store::Transaction& tx) -> Status {
    for (const auto& prefix : prefixes) {
      // SUBSTR, not LIKE: paths may hold '_' and '%'.
      TY_ASSIGN_OR_RETURN(
          out, OneRow(tx.Query(std::string("SELECT ") + kColumns +
                                   " FROM catalog_objects WHERE SUBSTR(storage_location, 1, "
                                   "CAST(? AS INTEGER)) = ? LIMIT 1",
                               {Utf8Length(prefix), prefix})));
      if (out) break;
    }
    return Status::Ok();
  }));
  return out;
}

Result<int64_t> CatalogStore::CountDescendants(const std::string& full_name) {
  int64_t n = 0;
  const std::string prefix = full_name + ".";
  TY_RETURN_IF_ERROR(db_.Read([&](store::Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(auto rows,
                        tx.Query("SELECT COUNT(*) FROM catalog_objects WHERE " + UnderPrefixSql(),
                                 {static_cast<int64_t>(prefix.size()), prefix}));
    n = rows[0].Int(0);
    return Status::Ok();
  }));
  return n;
}

Status CatalogStore::Update(const ObjectRow& row) {
  const ObjectInfo& i = row.info;
  return db_.Write([&](store::Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(int64_t n, tx.Exec("UPDATE catalog_objects SET owner = ?, comment = ?, "
                                           "properties = ?, details = ?, updated_at = ?, "
                                           "updated_by = ? WHERE id = ?",
                                           {i.owner, i.comment, PropertiesToJson(i.properties),
                                            row.details, i.updated_at, i.updated_by, i.id}));
    if (n == 0) return Status::NotFound("'" + i.full_name + "' was deleted meanwhile");
    return Status::Ok();
  });
}

Status CatalogStore::Rename(const ObjectRow& row, const std::string& new_name,
                            const std::string& new_full_name) {
  const std::string old_prefix = row.info.full_name + ".";
  const std::string new_prefix = new_full_name + ".";
  const bool is_catalog = row.type == SecurableType::kCatalog;
  const bool is_schema = row.type == SecurableType::kSchema;
  return db_.Write([&](store::Transaction& tx) -> Status {
    auto r = tx.Exec(
        "UPDATE catalog_objects SET name = ?, full_name = ?, updated_at = ?, "
        "updated_by = ? WHERE id = ?",
        {new_name, new_full_name, row.info.updated_at, row.info.updated_by, row.info.id});
    if (!r.ok() && r.status().IsAlreadyExists()) {
      return Status::AlreadyExists(std::string(SecurableTypeName(row.type)) + " '" + new_full_name +
                                   "' already exists");
    }
    TY_RETURN_IF_ERROR(r.status());
    if (!is_catalog && !is_schema) return Status::Ok();
    // Descendants: their full names, and the catalog/schema name columns.
    const char* name_column = is_catalog ? "catalog_name" : "schema_name";
    return tx
        .Exec(std::string("UPDATE catalog_objects SET full_name = ? || SUBSTR(full_name, CAST(? AS "
                          "INTEGER)), ") +
                  name_column + " = ? WHERE " + UnderPrefixSql(),
              {new_prefix, static_cast<int64_t>(old_prefix.size() + 1), new_name,
               static_cast<int64_t>(old_prefix.size()), old_prefix})
        .status();
  });
}

Result<std::vector<std::string>> CatalogStore::DeleteSubtree(const ObjectRow& row) {
  std::vector<std::string> ids{row.info.id};
  const std::string prefix = row.info.full_name + ".";
  Status s = db_.Write([&](store::Transaction& tx) -> Status {
    if (row.type == SecurableType::kCatalog || row.type == SecurableType::kSchema) {
      TY_ASSIGN_OR_RETURN(auto rows,
                          tx.Query("SELECT id FROM catalog_objects WHERE " + UnderPrefixSql(),
                                   {static_cast<int64_t>(prefix.size()), prefix}));
      for (const auto& r : rows) ids.push_back(r.Text(0));
    }
    for (const auto& id : ids) {
      TY_RETURN_IF_ERROR(
          tx.Exec("DELETE FROM catalog_grants WHERE securable_id = ?", {id}).status());
      TY_RETURN_IF_ERROR(
          tx.Exec("DELETE FROM catalog_table_policies WHERE table_id = ?", {id}).status());
      TY_RETURN_IF_ERROR(tx.Exec("DELETE FROM catalog_objects WHERE id = ?", {id}).status());
    }
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return ids;
}

Result<std::vector<GrantRow>> CatalogStore::ApplyGrantChanges(
    const std::string& securable_id, const std::vector<PermissionChange>& changes) {
  std::vector<GrantRow> out;
  Status s = db_.Write([&](store::Transaction& tx) -> Status {
    for (const auto& c : changes) {
      for (Privilege p : c.add) {
        TY_RETURN_IF_ERROR(tx.Exec("INSERT INTO catalog_grants (securable_id, principal, "
                                   "privilege) VALUES (?, ?, ?) ON CONFLICT (securable_id, "
                                   "principal, privilege) DO NOTHING",
                                   {securable_id, c.principal, std::string(PrivilegeName(p))})
                               .status());
      }
      for (Privilege p : c.remove) {
        TY_RETURN_IF_ERROR(tx.Exec("DELETE FROM catalog_grants WHERE securable_id = ? AND "
                                   "principal = ? AND privilege = ?",
                                   {securable_id, c.principal, std::string(PrivilegeName(p))})
                               .status());
      }
    }
    TY_ASSIGN_OR_RETURN(out, GrantsIn(tx, securable_id));
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return out;
}

Result<std::vector<GrantRow>> CatalogStore::ListGrants(const std::string& securable_id) {
  std::vector<GrantRow> out;
  TY_RETURN_IF_ERROR(db_.Read([&](store::Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(out, GrantsIn(tx, securable_id));
    return Status::Ok();
  }));
  return out;
}

Result<std::vector<std::string>> CatalogStore::DeleteGrantsOf(const std::string& principal) {
  std::vector<std::string> ids;
  Status s = db_.Write([&](store::Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(auto rows, tx.Query("SELECT DISTINCT securable_id FROM catalog_grants "
                                            "WHERE principal = ?",
                                            {principal}));
    for (const auto& r : rows) ids.push_back(r.Text(0));
    return tx.Exec("DELETE FROM catalog_grants WHERE principal = ?", {principal}).status();
  });
  if (!s.ok()) return s;
  return ids;
}

Status CatalogStore::PutPolicy(const PolicyRow& row) {
  return db_.Write([&](store::Transaction& tx) -> Status {
    return tx
        .Exec(
            "INSERT INTO catalog_table_policies (table_id, column_name, kind, spec, updated_at, "
            "updated_by) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (table_id, column_name) DO UPDATE "
            "SET kind = excluded.kind, spec = excluded.spec, updated_at = excluded.updated_at, "
            "updated_by = excluded.updated_by",
            {row.table_id, row.column, row.kind, row.spec, row.updated_at, row.updated_by})
        .status();
  });
}

Result<bool> CatalogStore::DeletePolicy(const std::string& table_id, const std::string& column) {
  int64_t n = 0;
  TY_RETURN_IF_ERROR(db_.Write([&](store::Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(n, tx.Exec("DELETE FROM catalog_table_policies WHERE table_id = ? AND "
                                   "column_name = ?",
                                   {table_id, column}));
    return Status::Ok();
  }));
  return n > 0;
}

Result<std::vector<PolicyRow>> CatalogStore::ListPolicies(
    const std::vector<std::string>& table_ids) {
  std::vector<PolicyRow> out;
  if (table_ids.empty()) return out;
  std::string placeholders;
  std::vector<store::Value> params;
  for (const auto& id : table_ids) {
    placeholders += placeholders.empty() ? "?" : ", ?";
    params.emplace_back(id);
  }
  TY_RETURN_IF_ERROR(db_.Read([&](store::Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(auto rows, tx.Query("SELECT table_id, column_name, kind, spec, "
                                            "updated_at, updated_by FROM catalog_table_policies "
                                            "WHERE table_id IN (" +
                                                placeholders + ") ORDER BY table_id, column_name",
                                            params));
    for (const auto& r : rows) {
      out.push_back(PolicyRow{r.Text(0), r.Text(1), r.Text(2), r.Text(3), r.Int(4), r.Text(5)});
    }
    return Status::Ok();
  }));
  return out;
}

Result<std::optional<std::pair<ObjectRow, std::vector<PolicyRow>>>> CatalogStore::GetWithPolicies(
    const std::string& id) {
  std::optional<std::pair<ObjectRow, std::vector<PolicyRow>>> out;
  TY_RETURN_IF_ERROR(db_.Read([&](store::Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(
        std::optional<ObjectRow> row,
        OneRow(tx.Query(std::string("SELECT ") + kColumns + " FROM catalog_objects WHERE id = ?",
                        {id})));
    if (!row) return Status::Ok();
    std::vector<PolicyRow> policies;
    if (row->type == SecurableType::kTable) {
      TY_ASSIGN_OR_RETURN(auto rows, tx.Query("SELECT table_id, column_name, kind, spec, "
                                              "updated_at, updated_by FROM "
                                              "catalog_table_policies WHERE table_id = ? ORDER BY "
                                              "column_name",
                                              {id}));
      for (const auto& r : rows) {
        policies.push_back(
            PolicyRow{r.Text(0), r.Text(1), r.Text(2), r.Text(3), r.Int(4), r.Text(5)});
      }
    }
    out.emplace(std::move(*row), std::move(policies));
    return Status::Ok();
  }));
  return out;
}

Status CatalogStore::LoadAll(std::vector<ObjectRow>& objects, std::vector<GrantRow>& grants) {
  return db_.Read([&](store::Transaction& tx) -> Status {
    TY_RETURN_IF_ERROR(
        tx.QueryEach("SELECT id, type, parent_id, full_name, owner FROM catalog_objects", {},
                     [&](const store::RowView& r) -> Status {
                       ObjectRow row;
                       TY_ASSIGN_OR_RETURN(row.type, TypeFromText(std::string(r.Text(1))));
                       row.info.id = std::string(r.Text(0));
                       row.parent_id = std::string(r.Text(2));
                       row.info.full_name = std::string(r.Text(3));
                       row.info.owner = std::string(r.Text(4));
                       objects.push_back(std::move(row));
                       return Status::Ok();
                     }));
    std::map<std::pair<std::string, std::string>, PrivilegeSet> sets;
    TY_RETURN_IF_ERROR(
        tx.QueryEach("SELECT securable_id, principal, privilege FROM catalog_grants", {},
                     [&](const store::RowView& r) -> Status {
                       auto p = ParsePrivilege(r.Text(2));
                       if (p) {
                         sets[{std::string(r.Text(0)), std::string(r.Text(1))}].Add(*p);
                       }
                       return Status::Ok();
                     }));
    for (auto& [key, set] : sets) grants.push_back(GrantRow{key.first, key.second, set});
    return Status::Ok();
  });
}

}  // namespace trainyard::catalog
