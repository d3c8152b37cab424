// CatalogService's typed operations: each maps its request onto the generic ones
// (catalog_service.cc) and its type's own fields onto the row's `details` JSON; and the
// permissions operations.
#include <algorithm>
#include <set>

#include "trainyard/catalog/catalog_service.h"
#include "trainyard/catalog/catalog_service_impl.h"
#include "trainyard/catalog/names.h"
#include "trainyard/common/json.h"
#include "trainyard/common/strings.h"

namespace trainyard::catalog {
namespace {

using identity::Principal;

std::string ToUpper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

std::string Str(const json::object& o, std::string_view key) {
  auto it = o.find(key);
  return it != o.end() && it->value().is_string() ? std::string(it->value().get_string()) : "";
}

json::object DetailsOf(const ObjectRow& row) {
  auto parsed = ParseJsonObject(row.details);
  return parsed.ok() ? std::move(*parsed) : json::object();
}

template <typename T>
T WithInfo(const ObjectRow& row) {
  T out;
  static_cast<ObjectInfo&>(out) = row.info;
  return out;
}

Result<std::string> TableDetails(const CreateTableRequest& r, std::string& format) {
  format = ToUpper(r.data_source_format.empty() ? "DELTA" : r.data_source_format);
  if (std::find(std::begin(kDataSourceFormats), std::end(kDataSourceFormats), format) ==
      std::end(kDataSourceFormats)) {
    return Status::InvalidArgument(
        "data_source_format must be one of DELTA, CSV, JSON, AVRO, "
        "PARQUET, ORC, TEXT (got '" +
        Abbreviate(r.data_source_format) + "')");
  }
  json::array columns;
  std::set<std::string> names;
  std::set<int32_t> partitions;
  for (size_t i = 0; i < r.columns.size(); ++i) {
    const ColumnInfo& c = r.columns[i];
    const std::string field = "columns[" + std::to_string(i) + "]";
    if (c.name.empty() || c.name.size() > kMaxNameLength ||
        std::any_of(c.name.begin(), c.name.end(),
                    [](char ch) { return static_cast<unsigned char>(ch) < 0x20; })) {
      return Status::InvalidArgument(field +
                                     ".name must be 1-255 characters without control "
                                     "characters");
    }
    if (!names.insert(ToLower(c.name)).second) {
      return Status::InvalidArgument(field + ".name: duplicate column '" + c.name + "'");
    }
    if (c.type_text.empty() && c.type_name.empty()) {
      return Status::InvalidArgument(field + ": type_text or type_name is required");
    }
    if (c.partition_index &&
        (*c.partition_index < 0 || !partitions.insert(*c.partition_index).second)) {
      return Status::InvalidArgument(field + ".partition_index must be unique and >= 0");
    }
    json::object col{{"name", c.name},           {"type_text", c.type_text},
                     {"type_name", c.type_name}, {"type_json", c.type_json},
                     {"position", c.position},   {"nullable", c.nullable},
                     {"comment", c.comment}};
    if (c.partition_index) col["partition_index"] = *c.partition_index;
    columns.push_back(std::move(col));
  }
  json::object d{{"table_type", std::string(TableTypeName(r.table_type))},
                 {"data_source_format", format},
                 {"columns", std::move(columns)}};
  return json::serialize(d);
}

}  // namespace

TableInfo ToTable(const ObjectRow& row) {
  TableInfo t = WithInfo<TableInfo>(row);
  json::object d = DetailsOf(row);
  t.table_type = Str(d, "table_type") == "EXTERNAL" ? TableType::kExternal : TableType::kManaged;
  t.data_source_format = Str(d, "data_source_format");
  if (auto it = d.find("columns"); it != d.end() && it->value().is_array()) {
    for (const auto& v : it->value().get_array()) {
      if (!v.is_object()) continue;
      const auto& o = v.get_object();
      ColumnInfo c{Str(o, "name"), Str(o, "type_text"), Str(o, "type_name"), Str(o, "type_json")};
      if (auto p = o.find("position"); p != o.end() && p->value().is_int64()) {
        c.position = static_cast<int32_t>(p->value().get_int64());
      }
      if (auto n = o.find("nullable"); n != o.end() && n->value().is_bool()) {
        c.nullable = n->value().get_bool();
      }
      c.comment = Str(o, "comment");
      if (auto p = o.find("partition_index"); p != o.end() && p->value().is_int64()) {
        c.partition_index = static_cast<int32_t>(p->value().get_int64());
      }
      t.columns.push_back(std::move(c));
    }
  }
  return t;
}

namespace {

VolumeInfo ToVolume(const ObjectRow& row) {
  VolumeInfo v = WithInfo<VolumeInfo>(row);
  v.volume_type = Str(DetailsOf(row), "volume_type") == "EXTERNAL" ? VolumeType::kExternal
                                                                   : VolumeType::kManaged;
  return v;
}

FunctionInfo ToFunction(const ObjectRow& row) {
  FunctionInfo f = WithInfo<FunctionInfo>(row);
  json::object d = DetailsOf(row);
  f.data_type = Str(d, "data_type");
  f.full_data_type = Str(d, "full_data_type");
  f.routine_body = Str(d, "routine_body");
  f.routine_definition = Str(d, "routine_definition");
  f.external_language = Str(d, "external_language");
  f.spec_json = Str(d, "spec_json");
  return f;
}

template <typename T, typename F>
Result<Page<T>> MapPage(Result<Page<ObjectRow>> page, F convert) {
  if (!page.ok()) return page.status();
  Page<T> out;
  out.next_page_token = page->next_page_token;
  for (const auto& row : page->items) out.items.push_back(convert(row));
  return out;
}

// Checks an external object's location, or that a managed one has none.
Status CheckLocation(bool external, const std::string& location) {
  if (external) {
    if (location.empty()) {
      return Status::InvalidArgument("storage_location is required for an EXTERNAL object");
    }
    return ValidateStorageLocation("storage_location", location);
  }
  if (!location.empty()) {
    return Status::InvalidArgument(
        "storage_location must be empty for a MANAGED object (the "
        "catalog chooses it)");
  }
  return Status::Ok();
}

}  // namespace

std::string_view TableTypeName(TableType t) {
  return t == TableType::kExternal ? "EXTERNAL" : "MANAGED";
}
std::string_view VolumeTypeName(VolumeType t) {
  return t == VolumeType::kExternal ? "EXTERNAL" : "MANAGED";
}

// ---- catalogs and schemas ----------------------------------------------------------------

Result<CatalogInfo> CatalogService::CreateCatalog(const Principal& who,
                                                  const CreateCatalogRequest& r) {
  NewObject o{.type = SecurableType::kCatalog,
              .parent_levels = {},
              .name = r.name,
              .create_privilege = Privilege::kCreateCatalog,
              .comment = r.comment,
              .properties = r.properties,
              .storage_location = r.storage_root,
              .location_kind = "catalogs"};
  if (!r.storage_root.empty()) {
    TY_RETURN_IF_ERROR(ValidateStorageLocation("storage_root", r.storage_root));
    o.metastore_privilege = Privilege::kCreateManagedStorage;
  }
  TY_ASSIGN_OR_RETURN(ObjectRow row, impl_->Create(who, o));
  return WithInfo<CatalogInfo>(row);
}

Result<CatalogInfo> CatalogService::GetCatalog(const Principal& who, std::string_view name) {
  TY_ASSIGN_OR_RETURN(ObjectRow row, impl_->Get(who, SecurableType::kCatalog, name));
  return WithInfo<CatalogInfo>(row);
}

Result<Page<CatalogInfo>> CatalogService::ListCatalogs(const Principal& who,
                                                       const PageRequest& page) {
  return MapPage<CatalogInfo>(impl_->List(who, SecurableType::kCatalog, {}, page),
                              WithInfo<CatalogInfo>);
}

Result<CatalogInfo> CatalogService::UpdateCatalog(const Principal& who, std::string_view name,
                                                  const UpdateObjectRequest& request) {
  TY_ASSIGN_OR_RETURN(ObjectRow row, impl_->Update(who, SecurableType::kCatalog, name, request));
  return WithInfo<CatalogInfo>(row);
}

Status CatalogService::DeleteCatalog(const Principal& who, std::string_view name, bool force) {
  return impl_->Delete(who, SecurableType::kCatalog, name, force);
}

Result<SchemaInfo> CatalogService::CreateSchema(const Principal& who,
                                                const CreateSchemaRequest& r) {
  NewObject o{.type = SecurableType::kSchema,
              .parent_levels = {r.catalog_name},
              .name = r.name,
              .create_privilege = Privilege::kCreateSchema,
              .comment = r.comment,
              .properties = r.properties,
              .storage_location = r.storage_root,
              .location_kind = "schemas"};
  if (!r.storage_root.empty()) {
    TY_RETURN_IF_ERROR(ValidateStorageLocation("storage_root", r.storage_root));
    o.metastore_privilege = Privilege::kCreateManagedStorage;
  }
  TY_ASSIGN_OR_RETURN(ObjectRow row, impl_->Create(who, o));
  return WithInfo<SchemaInfo>(row);
}

Result<SchemaInfo> CatalogService::GetSchema(const Principal& who, std::string_view full_name) {
  TY_ASSIGN_OR_RETURN(ObjectRow row, impl_->Get(who, SecurableType::kSchema, full_name));
  return WithInfo<SchemaInfo>(row);
}

Result<Page<SchemaInfo>> CatalogService::ListSchemas(const Principal& who,
                                                     std::string_view catalog_name,
                                                     const PageRequest& page) {
  return MapPage<SchemaInfo>(
      impl_->List(who, SecurableType::kSchema, {std::string(catalog_name)}, page),
      WithInfo<SchemaInfo>);
}

Result<SchemaInfo> CatalogService::UpdateSchema(const Principal& who, std::string_view full_name,
                                                const UpdateObjectRequest& request) {
  TY_ASSIGN_OR_RETURN(ObjectRow row,
                      impl_->Update(who, SecurableType::kSchema, full_name, request));
  return WithInfo<SchemaInfo>(row);
}

Status CatalogService::DeleteSchema(const Principal& who, std::string_view full_name, bool force) {
  return impl_->Delete(who, SecurableType::kSchema, full_name, force);
}

// ---- tables ------------------------------------------------------------------------------

Result<TableInfo> CatalogService::CreateTable(const Principal& who, const CreateTableRequest& r) {
  const bool external = r.table_type == TableType::kExternal;
  TY_RETURN_IF_ERROR(CheckLocation(external, r.storage_location));
  std::string format;
  TY_ASSIGN_OR_RETURN(std::string details, TableDetails(r, format));
  NewObject o{.type = SecurableType::kTable,
              .parent_levels = {r.catalog_name, r.schema_name},
              .name = r.name,
              .create_privilege = Privilege::kCreateTable,
              .comment = r.comment,
              .properties = r.properties,
              .storage_location = r.storage_location,
              .location_kind = "tables",
              .details = details};
  if (external) o.metastore_privilege = Privilege::kCreateExternalTable;
  TY_ASSIGN_OR_RETURN(ObjectRow row, impl_->Create(who, o));
  return ToTable(row);
}

Result<TableInfo> CatalogService::GetTable(const Principal& who, std::string_view full_name) {
  TY_ASSIGN_OR_RETURN(TableInfo table, LoadTable(full_name));
  TY_ASSIGN_OR_RETURN(Subject subject, impl_->SubjectOf(who));
  return impl_->ReadableTable(who, subject, table);
}

std::optional<Result<TableInfo>> CatalogService::GetTableIfCached(const Principal& who,
                                                                  std::string_view full_name) {
  Result<std::string> id = impl_->Resolve(SecurableType::kTable, full_name, "full_name");
  if (!id.ok()) return Result<TableInfo>(id.status());
  std::shared_ptr<const TableInfo> table = impl_->table_cache.Get(*id);
  if (!table) return std::nullopt;
  std::optional<Subject> subject = impl_->CachedSubjectOf(who);
  if (!subject) return std::nullopt;
  return impl_->ReadableTable(who, *subject, *table);
}

Result<TableInfo> CatalogService::GetTableById(const Principal& who, std::string_view table_id) {
  TY_ASSIGN_OR_RETURN(std::shared_ptr<const TableInfo> table, impl_->TableById(table_id));
  TY_ASSIGN_OR_RETURN(Subject subject, impl_->SubjectOf(who));
  return impl_->ReadableTable(who, subject, *table);
}

Result<Page<TableInfo>> CatalogService::ListTables(const Principal& who,
                                                   std::string_view catalog_name,
                                                   std::string_view schema_name,
                                                   const PageRequest& page) {
  TY_ASSIGN_OR_RETURN(
      Page<TableInfo> tables,
      MapPage<TableInfo>(impl_->List(who, SecurableType::kTable,
                                     {std::string(catalog_name), std::string(schema_name)}, page),
                         ToTable));
  TY_RETURN_IF_ERROR(impl_->PresentTables(who, tables.items));
  return tables;
}

Result<TableInfo> CatalogService::UpdateTable(const Principal& who, std::string_view full_name,
                                              const UpdateObjectRequest& request) {
  TY_ASSIGN_OR_RETURN(ObjectRow row, impl_->Update(who, SecurableType::kTable, full_name, request));
  return impl_->PresentTable(who, ToTable(row));
}

Status CatalogService::DeleteTable(const Principal& who, std::string_view full_name) {
  return impl_->Delete(who, SecurableType::kTable, full_name, false);
}

// ---- volumes -----------------------------------------------------------------------------

Result<VolumeInfo> CatalogService::CreateVolume(const Principal& who,
                                                const CreateVolumeRequest& r) {
  const bool external = r.volume_type == VolumeType::kExternal;
  TY_RETURN_IF_ERROR(CheckLocation(external, r.storage_location));
  NewObject o{.type = SecurableType::kVolume,
              .parent_levels = {r.catalog_name, r.schema_name},
              .name = r.name,
              .create_privilege = Privilege::kCreateVolume,
              .comment = r.comment,
              .storage_location = r.storage_location,
              .location_kind = "volumes",
              .details = json::serialize(
                  json::object{{"volume_type", std::string(VolumeTypeName(r.volume_type))}})};
  if (external) o.metastore_privilege = Privilege::kCreateExternalVolume;
  TY_ASSIGN_OR_RETURN(ObjectRow row, impl_->Create(who, o));
  return ToVolume(row);
}

Result<VolumeInfo> CatalogService::GetVolume(const Principal& who, std::string_view full_name) {
  TY_ASSIGN_OR_RETURN(ObjectRow row, impl_->Get(who, SecurableType::kVolume, full_name));
  return ToVolume(row);
}

Result<VolumeInfo> CatalogService::GetVolumeById(const Principal& who, std::string_view volume_id) {
  TY_ASSIGN_OR_RETURN(ObjectRow row, impl_->GetById(who, SecurableType::kVolume, volume_id));
  return ToVolume(row);
}

Result<Page<VolumeInfo>> CatalogService::ListVolumes(const Principal& who,
                                                     std::string_view catalog_name,
                                                     std::string_view schema_name,
                                                     const PageRequest& page) {
  return MapPage<VolumeInfo>(
      impl_->List(who, SecurableType::kVolume,
                  {std::string(catalog_name), std::string(schema_name)}, page),
      ToVolume);
}

Result<VolumeInfo> CatalogService::UpdateVolume(const Principal& who, std::string_view full_name,
                                                const UpdateObjectRequest& request) {
  TY_ASSIGN_OR_RETURN(ObjectRow row,
                      impl_->Update(who, SecurableType::kVolume, full_name, request));
  return ToVolume(row);
}

Status CatalogService::DeleteVolume(const Principal& who, std::string_view full_name) {
  return impl_->Delete(who, SecurableType::kVolume, full_name, false);
}

// ---- functions ---------------------------------------------------------------------------

Result<FunctionInfo> CatalogService::CreateFunction(const Principal& who,
                                                    const CreateFunctionRequest& r) {
  if (r.routine_body != "SQL" && r.routine_body != "EXTERNAL") {
    return Status::InvalidArgument("routine_body must be SQL or EXTERNAL (got '" +
                                   Abbreviate(r.routine_body) + "')");
  }
  auto spec = ParseJsonObject(r.spec_json.empty() ? "{}" : r.spec_json);
  if (!spec.ok()) return Status::InvalidArgument("spec_json must be a JSON object");
  if (r.routine_definition.size() > 1 << 20) {
    return Status::InvalidArgument("routine_definition must be at most 1 MiB");
  }
  json::object d{{"data_type", r.data_type},
                 {"full_data_type", r.full_data_type},
                 {"routine_body", r.routine_body},
                 {"routine_definition", r.routine_definition},
                 {"external_language", r.external_language},
                 {"spec_json", r.spec_json.empty() ? "{}" : r.spec_json}};
  NewObject o{.type = SecurableType::kFunction,
              .parent_levels = {r.catalog_name, r.schema_name},
              .name = r.name,
              .create_privilege = Privilege::kCreateFunction,
              .comment = r.comment,
              .properties = r.properties,
              .location_kind = "functions",
              .details = json::serialize(d)};
  TY_ASSIGN_OR_RETURN(ObjectRow row, impl_->Create(who, o));
  return ToFunction(row);
}

Result<FunctionInfo> CatalogService::GetFunction(const Principal& who, std::string_view full_name) {
  TY_ASSIGN_OR_RETURN(ObjectRow row, impl_->Get(who, SecurableType::kFunction, full_name));
  return ToFunction(row);
}

Result<Page<FunctionInfo>> CatalogService::ListFunctions(const Principal& who,
                                                         std::string_view catalog_name,
                                                         std::string_view schema_name,
                                                         const PageRequest& page) {
  return MapPage<FunctionInfo>(
      impl_->List(who, SecurableType::kFunction,
                  {std::string(catalog_name), std::string(schema_name)}, page),
      ToFunction);
}

Status CatalogService::DeleteFunction(const Principal& who, std::string_view full_name) {
  return impl_->Delete(who, SecurableType::kFunction, full_name, false);
}

// ---- registered models -------------------------------------------------------------------

Result<RegisteredModelInfo> CatalogService::CreateRegisteredModel(
    const Principal& who, const CreateRegisteredModelRequest& r) {
  NewObject o{.type = SecurableType::kRegisteredModel,
              .parent_levels = {r.catalog_name, r.schema_name},
              .name = r.name,
              .create_privilege = Privilege::kCreateModel,
              .comment = r.comment,
              .location_kind = "models"};
  TY_ASSIGN_OR_RETURN(ObjectRow row, impl_->Create(who, o));
  return WithInfo<RegisteredModelInfo>(row);
}

Result<RegisteredModelInfo> CatalogService::GetRegisteredModel(const Principal& who,
                                                               std::string_view full_name) {
  TY_ASSIGN_OR_RETURN(ObjectRow row, impl_->Get(who, SecurableType::kRegisteredModel, full_name));
  return WithInfo<RegisteredModelInfo>(row);
}

Result<Page<RegisteredModelInfo>> CatalogService::ListRegisteredModels(
    const Principal& who, std::string_view catalog_name, std::string_view schema_name,
    const PageRequest& page) {
  if (catalog_name.empty() && schema_name.empty()) {
    return MapPage<RegisteredModelInfo>(impl_->ListAll(who, SecurableType::kRegisteredModel, page),
                                        WithInfo<RegisteredModelInfo>);
  }
  if (catalog_name.empty() || schema_name.empty()) {
    return Status::InvalidArgument(
        std::string(catalog_name.empty() ? "catalog_name" : "schema_name") + " is required with " +
        (catalog_name.empty() ? "schema_name" : "catalog_name") +
        ": give both to list one schema's models, or neither to list every model you may see");
  }
  return MapPage<RegisteredModelInfo>(
      impl_->List(who, SecurableType::kRegisteredModel,
                  {std::string(catalog_name), std::string(schema_name)}, page),
      WithInfo<RegisteredModelInfo>);
}

Result<RegisteredModelInfo> CatalogService::UpdateRegisteredModel(
    const Principal& who, std::string_view full_name, const UpdateObjectRequest& request) {
  TY_ASSIGN_OR_RETURN(ObjectRow row,
                      impl_->Update(who, SecurableType::kRegisteredModel, full_name, request));
  return WithInfo<RegisteredModelInfo>(row);
}

Status CatalogService::DeleteRegisteredModel(const Principal& who, std::string_view full_name) {
  return impl_->Delete(who, SecurableType::kRegisteredModel, full_name, false);
}

// ---- permissions -------------------------------------------------------------------------

Result<std::vector<PrivilegeAssignment>> CatalogService::GetPermissions(
    const Principal& who, SecurableType type, std::string_view full_name,
    std::string_view principal) {
  TY_ASSIGN_OR_RETURN(std::string id, impl_->Resolve(type, full_name, "full_name"));
  if (type != SecurableType::kMetastore) TY_RETURN_IF_ERROR(impl_->CheckRead(who, type, id));
  TY_ASSIGN_OR_RETURN(auto rows, impl_->store.ListGrants(id));
  std::vector<PrivilegeAssignment> out;
  for (const auto& g : rows) {
    if (principal.empty() || g.principal == principal) {
      out.push_back(PrivilegeAssignment{g.principal, g.privileges.ToVector()});
    }
  }
  return out;
}

Result<std::vector<PrivilegeAssignment>> CatalogService::UpdatePermissions(
    const Principal& who, SecurableType type, std::string_view full_name,
    const std::vector<PermissionChange>& changes) {
  TY_ASSIGN_OR_RETURN(std::string id, impl_->Resolve(type, full_name, "full_name"));
  if (!who.scope.empty()) {
    return Status::PermissionDenied("a token scoped to " + who.scope +
                                    " may not grant or revoke privileges");
  }
  TY_RETURN_IF_ERROR(impl_->Check(who, Privilege::kManage, id));
  std::set<std::string> touched;
  for (size_t i = 0; i < changes.size(); ++i) {
    for (Privilege p : changes[i].add) {
      if (!PrivilegeAppliesTo(p, type)) {
        return Status::InvalidArgument(
            "changes[" + std::to_string(i) + "].add: " + std::string(PrivilegeName(p)) +
            " cannot be granted on a " + std::string(SecurableTypeName(type)));
      }
    }
    if (auto kind = impl_->identity.GetPrincipalKind(changes[i].principal); !kind.ok()) {
      if (!kind.status().IsNotFound()) return kind.status();
      return Status::InvalidArgument("changes[" + std::to_string(i) +
                                     "].principal: " + kind.status().message());
    }
    touched.insert(changes[i].principal);
  }
  TY_ASSIGN_OR_RETURN(auto rows, impl_->store.ApplyGrantChanges(id, changes));
  std::vector<PrivilegeAssignment> out;
  for (const auto& principal : touched) {
    auto it = std::find_if(rows.begin(), rows.end(),
                           [&](const GrantRow& g) { return g.principal == principal; });
    impl_->index.SetGrants(id, principal, it == rows.end() ? PrivilegeSet() : it->privileges);
  }
  for (const auto& g : rows)
    out.push_back(PrivilegeAssignment{g.principal, g.privileges.ToVector()});
  return out;
}

Result<std::vector<EffectivePrivilegeAssignment>> CatalogService::GetEffectivePermissions(
    const Principal& who, SecurableType type, std::string_view full_name,
    std::string_view principal) {
  TY_ASSIGN_OR_RETURN(std::string id, impl_->Resolve(type, full_name, "full_name"));
  if (type != SecurableType::kMetastore) TY_RETURN_IF_ERROR(impl_->CheckRead(who, type, id));
  return impl_->index.Effective(id, principal);
}

}  // namespace trainyard::catalog
