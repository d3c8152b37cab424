// The catalog's value types: what CatalogService takes and returns. Plain structs; copy
// them freely (no thread-safety concerns).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "trainyard/catalog/permissions.h"
#include "trainyard/tables/mask_kind.h"

namespace trainyard::catalog {

// The securable id of the metastore (the one, implicit root; it has no row of its own).
inline constexpr const char* kMetastoreId = "metastore";

// The fields every securable has. Names are the stored (lower-case) form.
struct ObjectInfo {
  std::string id{};  // a UUID
  std::string name{};
  std::string full_name{};     // "main", "main.support", "main.support.tickets"
  std::string catalog_name{};  // empty for a catalog itself
  std::string schema_name{};   // empty for catalogs and schemas
  std::string owner{};         // a user, group or service principal
  std::string comment{};
  std::map<std::string, std::string> properties{};
  // Catalog and schema: the managed storage root given at creation ("" = inherited).
  // Table and volume: where its data lies (managed: `<root>/tables/<id>`, `<root>/volumes/<id>`).
  // Registered model: `<root>/models/<id>`.
  std::string storage_location{};
  int64_t created_at = 0;  // epoch ms
  std::string created_by{};
  int64_t updated_at = 0;
  std::string updated_by{};
};

struct CatalogInfo : ObjectInfo {};
struct SchemaInfo : ObjectInfo {};

enum class TableType { kManaged, kExternal };
std::string_view TableTypeName(TableType t);  // "MANAGED", "EXTERNAL"

// UC's DataSourceFormat: "DELTA", "CSV", "JSON", "AVRO", "PARQUET", "ORC", "TEXT".
inline constexpr const char* kDataSourceFormats[] = {"DELTA",   "CSV", "JSON", "AVRO",
                                                     "PARQUET", "ORC", "TEXT"};

// A column's mask (not in UC OSS; Databricks has column masks): a reader not named in `except`
// (as themselves or through a group, transitively) sees the column's values masked
// (tables/column_mask.h). Set and cleared with CatalogService::SetColumnMask.
struct ColumnMaskInfo {
  tables::MaskKind kind = tables::MaskKind::kRedact;
  std::vector<std::string> except{};  // users, service principals, groups: they see raw values
  int64_t updated_at = 0;             // epoch ms
  std::string updated_by{};
};

// A table's row filter: a reader sees the rows where `predicate` (tables/predicate.h's
// grammar, with current_user() and is_member('group')), bound to them, is TRUE.
struct RowFilterInfo {
  std::string predicate{};
  std::vector<std::string> columns{};  // the columns it reads (UC's input_column_names)
  int64_t updated_at = 0;
  std::string updated_by{};
};

struct ColumnInfo {
  std::string name{};
  std::string type_text{};  // "string", "array<int>"
  std::string type_name{};  // UC's ColumnTypeName: "STRING", "INT", "ARRAY", ...
  std::string type_json{};  // Spark's JSON of the field
  int32_t position = 0;
  bool nullable = true;
  std::string comment{};
  std::optional<int32_t> partition_index{};
  std::optional<ColumnMaskInfo> mask{};
};

struct TableInfo : ObjectInfo {
  TableType table_type = TableType::kManaged;
  std::string data_source_format = "DELTA";
  std::vector<ColumnInfo> columns{};
  std::optional<RowFilterInfo> row_filter{};
};

enum class VolumeType { kManaged, kExternal };
std::string_view VolumeTypeName(VolumeType t);  // "MANAGED", "EXTERNAL"

struct VolumeInfo : ObjectInfo {
  VolumeType volume_type = VolumeType::kManaged;
};

// A function's metadata (the catalog does not run functions). UC's FunctionInfo fields
// that are not interpreted here travel as they came in `spec_json` (a JSON object).
struct FunctionInfo : ObjectInfo {
  std::string data_type{};
  std::string full_data_type{};
  std::string routine_body{};  // "SQL" or "EXTERNAL"
  std::string routine_definition{};
  std::string external_language{};
  std::string spec_json = "{}";
};

// The catalog's side of a registered model (securable, owner, grants, storage). Its
// versions live in the model registry; see CatalogService's registry seam.
struct RegisteredModelInfo : ObjectInfo {};

// An AWS credential (UC's AwsCredentials): temporary, from STS, scoped to one location.
struct AwsTemporaryCredentials {
  std::string access_key_id{};
  std::string secret_access_key{};
  std::string session_token{};
};

// A temporary credential (UC's TemporaryCredentials): the location's URL and when the
// credential expires (epoch ms). For storage on the local file system there is no secret:
// the caller reads and writes the files itself, so it is a statement of what it may use, not
// a key. For S3 it carries an STS credential that works for that location only
// (docs/decisions/0014).
struct TemporaryCredential {
  std::string url{};
  int64_t expiration_time = 0;
  std::optional<AwsTemporaryCredentials> aws_temp_credentials{};
};
inline constexpr int64_t kTemporaryCredentialMillis = 60 * 60 * 1000;

// UC's VolumeOperation and PathOperation.
enum class VolumeOperation { kRead, kWrite };
enum class PathOperation { kRead, kReadWrite, kCreateTable };

// Paging: `max_results` 0 = kDefaultMaxResults; more than kMaxMaxResults is capped.
inline constexpr int kDefaultMaxResults = 100;
inline constexpr int kMaxMaxResults = 100;
struct PageRequest {
  int max_results = 0;       // negative is InvalidArgument (max_results)
  std::string page_token{};  // from the previous page's next_page_token
};
template <typename T>
struct Page {
  std::vector<T> items{};
  std::string next_page_token{};  // empty on the last page
};

// Create requests. `name` is one level; parents are named by their levels.
struct CreateCatalogRequest {
  std::string name{};
  std::string comment{};
  std::map<std::string, std::string> properties{};
  std::string storage_root{};  // "" = under the metastore's root
};
struct CreateSchemaRequest {
  std::string catalog_name{};
  std::string name{};
  std::string comment{};
  std::map<std::string, std::string> properties{};
  std::string storage_root{};  // "" = under the catalog's root
};
struct CreateTableRequest {
  std::string catalog_name{};
  std::string schema_name{};
  std::string name{};
  TableType table_type = TableType::kManaged;
  std::string data_source_format = "DELTA";
  std::vector<ColumnInfo> columns{};
  std::string storage_location{};  // required for EXTERNAL, must be empty for MANAGED
  std::string comment{};
  std::map<std::string, std::string> properties{};
};
struct CreateVolumeRequest {
  std::string catalog_name{};
  std::string schema_name{};
  std::string name{};
  VolumeType volume_type = VolumeType::kManaged;
  std::string storage_location{};  // required for EXTERNAL, must be empty for MANAGED
  std::string comment{};
};
struct CreateFunctionRequest {
  std::string catalog_name{};
  std::string schema_name{};
  std::string name{};
  std::string data_type{};
  std::string full_data_type{};
  std::string routine_body = "EXTERNAL";
  std::string routine_definition{};
  std::string external_language{};
  std::string comment{};
  std::map<std::string, std::string> properties{};
  std::string spec_json = "{}";
};
struct CreateRegisteredModelRequest {
  std::string catalog_name{};
  std::string schema_name{};
  std::string name{};
  std::string comment{};
};

// A change of a securable's mutable fields; unset fields stay as they are.
// `new_name` renames (one level); `owner` transfers ownership (owner or admin only).
struct UpdateObjectRequest {
  std::optional<std::string> new_name{};
  std::optional<std::string> comment{};
  std::optional<std::map<std::string, std::string>> properties{};
  std::optional<std::string> owner{};
};

// Direct grants on one securable: UC's PrivilegeAssignment.
struct PrivilegeAssignment {
  std::string principal{};
  std::vector<Privilege> privileges{};
};

// A privilege a principal holds on a securable, and where it is granted (the securable
// itself or an ancestor): Databricks' EffectivePrivilege.
struct EffectivePrivilege {
  Privilege privilege{};
  SecurableType inherited_from_type = SecurableType::kMetastore;
  std::string inherited_from_name{};  // "" when granted on the securable itself
  bool inherited = false;
};
struct EffectivePrivilegeAssignment {
  std::string principal{};
  std::vector<EffectivePrivilege> privileges{};
};

}  // namespace trainyard::catalog
