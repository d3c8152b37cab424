#include "trainyard/api/uc_json.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>

#include "trainyard/api/api.h"
#include "trainyard/common/strings.h"

namespace trainyard::api {

std::string_view UcErrorCode(StatusCode code) {
  // UC's codes are our status names, except these two.
  switch (code) {
    case StatusCode::kNotImplemented:
      return "UNIMPLEMENTED";
    case StatusCode::kIOError:
      return "INTERNAL";
    default:
      return StatusCodeName(code);
  }
}

int UcHttpStatus(StatusCode code) {
  if (code == StatusCode::kAlreadyExists) return 409;
  return HttpStatusFor(code);
}

http::Response UcErrorResponse(const Status& status) {
  int http_status = UcHttpStatus(status.code());
  if (http_status >= 500) spdlog::error("unity catalog request failed: {}", status.ToString());
  json::object o{{"error_code", UcErrorCode(status.code())}, {"message", status.message()}};
  http::Response r = http::Response::Json(http_status, json::serialize(o));
  if (http_status == 401) r.headers.emplace_back("WWW-Authenticate", "Bearer");
  return r;
}

Result<UcPage> ReadUcPage(const json::object& body) {
  UcPage page;
  auto it = body.find("max_results");
  if (it != body.end() && !it->value().is_null()) {
    auto n = AsInt64(it->value(), "max_results");
    if (!n.ok() || *n < 0) {
      return Status::InvalidArgument("max_results must be a non-negative integer (got " +
                                     DescribeJson(it->value()) + "); at most " +
                                     std::to_string(kUcMaxResults) + " are returned per page");
    }
    if (*n > 0) page.max_results = std::min(*n, kUcMaxResults);
  }
  TY_ASSIGN_OR_RETURN(auto token, OptionalString(body, "page_token"));
  page.page_token = token.value_or("");
  return page;
}

Result<std::vector<std::pair<std::string, std::string>>> ReadStringMap(const json::object& body,
                                                                       std::string_view field) {
  std::vector<std::pair<std::string, std::string>> out;
  TY_ASSIGN_OR_RETURN(const json::object* map, OptionalObject(body, field));
  if (map == nullptr) return out;
  for (const auto& [key, value] : *map) {
    if (!value.is_string()) {
      return Status::InvalidArgument(std::string(field) + "." + std::string(key) +
                                     " must be a string (got " + DescribeJson(value) + ")");
    }
    out.emplace_back(std::string(key), std::string(value.as_string()));
  }
  return out;
}

}  // namespace trainyard::api

namespace trainyard::api {
namespace {

using catalog::ObjectInfo;

void PutIfSet(json::object& o, std::string_view key, const std::string& value) {
  if (!value.empty()) o[key] = value;
}

json::object PropertiesToJson(const std::map<std::string, std::string>& properties) {
  json::object o;
  for (const auto& [k, v] : properties) o[k] = v;
  return o;
}

// The fields every securable has, under UC's names; `id_field` is "id", "schema_id", ...
json::object ObjectToJson(const ObjectInfo& info, std::string_view id_field) {
  json::object o{{"name", info.name},
                 {"owner", info.owner},
                 {"created_at", info.created_at},
                 {"created_by", info.created_by},
                 {id_field, info.id}};
  PutIfSet(o, "comment", info.comment);
  if (info.updated_at != 0) o["updated_at"] = info.updated_at;
  PutIfSet(o, "updated_by", info.updated_by);
  return o;
}

void PutParents(json::object& o, const ObjectInfo& info) {
  o["catalog_name"] = info.catalog_name;
  if (!info.schema_name.empty()) o["schema_name"] = info.schema_name;
}

json::object ColumnToJson(const catalog::ColumnInfo& c) {
  json::object o{{"name", c.name},           {"type_text", c.type_text}, {"type_json", c.type_json},
                 {"type_name", c.type_name}, {"position", c.position},   {"nullable", c.nullable}};
  // DuckDB's unity_catalog extension requires both; UC OSS sends 0 for non-decimals.
  o["type_precision"] = 0;
  o["type_scale"] = 0;
  PutIfSet(o, "comment", c.comment);
  if (c.partition_index) o["partition_index"] = *c.partition_index;
  if (c.mask) {
    // Databricks' ColumnMask names a SQL function; ours is a built-in kind (not in UC OSS).
    json::array except;
    for (const auto& name : c.mask->except) except.emplace_back(name);
    o["mask"] = json::object{
        {"function_name", "trainyard.mask_" + std::string(tables::MaskKindName(c.mask->kind))},
        {"using_column_names", json::array{}},
        {"kind", tables::MaskKindName(c.mask->kind)},
        {"except", std::move(except)}};
  }
  return o;
}

Result<std::map<std::string, std::string>> PropertiesField(const json::object& body,
                                                           std::string_view field) {
  TY_ASSIGN_OR_RETURN(auto pairs, ReadStringMap(body, field));
  return std::map<std::string, std::string>(pairs.begin(), pairs.end());
}

std::string Indexed(std::string_view field, size_t i, std::string_view member) {
  return std::string(field) + "[" + std::to_string(i) + "]." + std::string(member);
}

Result<catalog::ColumnInfo> DecodeColumn(const json::value& v, size_t i) {
  if (!v.is_object()) {
    return Status::InvalidArgument("columns[" + std::to_string(i) + "] must be an object (got " +
                                   DescribeJson(v) + ")");
  }
  const json::object& o = v.as_object();
  catalog::ColumnInfo c;
  auto str = [&](std::string_view member) -> Result<std::string> {
    TY_ASSIGN_OR_RETURN(auto s, OptionalString(o, member));
    return s.value_or("");
  };
  TY_ASSIGN_OR_RETURN(c.name, RequiredString(o, "name"));
  TY_ASSIGN_OR_RETURN(c.type_text, str("type_text"));
  TY_ASSIGN_OR_RETURN(c.type_json, str("type_json"));
  TY_ASSIGN_OR_RETURN(c.type_name, str("type_name"));
  TY_ASSIGN_OR_RETURN(c.comment, str("comment"));
  TY_ASSIGN_OR_RETURN(auto position, OptionalInt64(o, "position"));
  TY_ASSIGN_OR_RETURN(auto nullable, OptionalBool(o, "nullable"));
  TY_ASSIGN_OR_RETURN(auto partition, OptionalInt64(o, "partition_index"));
  if (position && (*position < 0 || *position > INT32_MAX)) {
    return Status::InvalidArgument(Indexed("columns", i, "position") +
                                   " must be a non-negative integer");
  }
  if (partition && (*partition < 0 || *partition > INT32_MAX)) {
    return Status::InvalidArgument(Indexed("columns", i, "partition_index") +
                                   " must be a non-negative integer");
  }
  c.position = static_cast<int32_t>(position.value_or(static_cast<int64_t>(i)));
  c.nullable = nullable.value_or(true);
  if (partition) c.partition_index = static_cast<int32_t>(*partition);
  return c;
}

// Errors of a column's fields name the column: "columns[2].name: missing required field".
Result<catalog::ColumnInfo> DecodeColumnNamed(const json::value& v, size_t i) {
  auto c = DecodeColumn(v, i);
  if (c.ok() || c.status().message().rfind("columns[", 0) == 0) return c;
  return Status::InvalidArgument("columns[" + std::to_string(i) + "]: " + c.status().message());
}

Result<std::string> UpperEnum(const json::object& body, std::string_view field,
                              std::initializer_list<std::string_view> allowed,
                              std::string_view fallback) {
  TY_ASSIGN_OR_RETURN(auto v, OptionalString(body, field));
  if (!v) return std::string(fallback);
  std::string upper = *v;
  for (char& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  std::string list;
  for (auto a : allowed) {
    if (a == upper) return upper;
    list += (list.empty() ? "" : ", ") + std::string(a);
  }
  return Status::InvalidArgument(std::string(field) + " must be one of " + list + " (got '" +
                                 Abbreviate(*v, 60) + "')");
}

Result<std::string> OptionalField(const json::object& body, std::string_view field) {
  TY_ASSIGN_OR_RETURN(auto v, OptionalString(body, field));
  return v.value_or("");
}

}  // namespace

json::object CatalogToJson(const catalog::CatalogInfo& c) {
  json::object o = ObjectToJson(c, "id");
  o["properties"] = PropertiesToJson(c.properties);
  PutIfSet(o, "storage_root", c.storage_location);
  return o;
}

json::object SchemaToJson(const catalog::SchemaInfo& s) {
  json::object o = ObjectToJson(s, "schema_id");
  o["catalog_name"] = s.catalog_name;
  o["full_name"] = s.full_name;
  o["properties"] = PropertiesToJson(s.properties);
  PutIfSet(o, "storage_root", s.storage_location);
  return o;
}

json::object TableToJson(const catalog::TableInfo& t) {
  json::object o = ObjectToJson(t, "table_id");
  PutParents(o, t);
  o["table_type"] = t.table_type == catalog::TableType::kExternal ? "EXTERNAL" : "MANAGED";
  o["data_source_format"] = t.data_source_format;
  json::array columns;
  for (const auto& c : t.columns) columns.emplace_back(ColumnToJson(c));
  o["columns"] = std::move(columns);
  PutIfSet(o, "storage_location", t.storage_location);
  o["properties"] = PropertiesToJson(t.properties);
  if (t.row_filter) {
    // Databricks' TableRowFilter names a SQL function; ours is a predicate (not in UC OSS).
    json::array inputs;
    for (const auto& c : t.row_filter->columns) inputs.emplace_back(c);
    o["row_filter"] = json::object{{"function_name", "trainyard.row_filter"},
                                   {"input_column_names", std::move(inputs)},
                                   {"predicate", t.row_filter->predicate}};
  }
  return o;
}

json::object VolumeToJson(const catalog::VolumeInfo& v) {
  json::object o = ObjectToJson(v, "volume_id");
  PutParents(o, v);
  o["full_name"] = v.full_name;
  o["volume_type"] = v.volume_type == catalog::VolumeType::kExternal ? "EXTERNAL" : "MANAGED";
  PutIfSet(o, "storage_location", v.storage_location);
  return o;
}

json::object FunctionToJson(const catalog::FunctionInfo& f) {
  json::object o;
  if (auto spec = ParseJsonObject(f.spec_json); spec.ok()) o = std::move(*spec);
  for (auto& [k, v] : ObjectToJson(f, "function_id")) o[k] = v;
  PutParents(o, f);
  o["full_name"] = f.full_name;
  PutIfSet(o, "data_type", f.data_type);
  PutIfSet(o, "full_data_type", f.full_data_type);
  PutIfSet(o, "routine_body", f.routine_body);
  PutIfSet(o, "routine_definition", f.routine_definition);
  PutIfSet(o, "external_language", f.external_language);
  o["properties"] = json::serialize(PropertiesToJson(f.properties));
  return o;
}

json::object PermissionsToJson(const std::vector<catalog::PrivilegeAssignment>& assignments) {
  json::array out;
  for (const auto& a : assignments) {
    json::array privileges;
    for (auto p : a.privileges) privileges.emplace_back(catalog::PrivilegeName(p));
    out.emplace_back(json::object{{"principal", a.principal}, {"privileges", privileges}});
  }
  return json::object{{"privilege_assignments", std::move(out)}};
}

Result<catalog::CreateCatalogRequest> DecodeCreateCatalog(const json::object& body) {
  catalog::CreateCatalogRequest r;
  TY_ASSIGN_OR_RETURN(r.name, RequiredString(body, "name"));
  TY_ASSIGN_OR_RETURN(r.comment, OptionalField(body, "comment"));
  TY_ASSIGN_OR_RETURN(r.properties, PropertiesField(body, "properties"));
  TY_ASSIGN_OR_RETURN(r.storage_root, OptionalField(body, "storage_root"));
  return r;
}

Result<catalog::CreateSchemaRequest> DecodeCreateSchema(const json::object& body) {
  catalog::CreateSchemaRequest r;
  TY_ASSIGN_OR_RETURN(r.name, RequiredString(body, "name"));
  TY_ASSIGN_OR_RETURN(r.catalog_name, RequiredString(body, "catalog_name"));
  TY_ASSIGN_OR_RETURN(r.comment, OptionalField(body, "comment"));
  TY_ASSIGN_OR_RETURN(r.properties, PropertiesField(body, "properties"));
  TY_ASSIGN_OR_RETURN(r.storage_root, OptionalField(body, "storage_root"));
  return r;
}

Result<catalog::CreateTableRequest> DecodeCreateTable(const json::object& body) {
  catalog::CreateTableRequest r;
  TY_ASSIGN_OR_RETURN(r.name, RequiredString(body, "name"));
  TY_ASSIGN_OR_RETURN(r.catalog_name, RequiredString(body, "catalog_name"));
  TY_ASSIGN_OR_RETURN(r.schema_name, RequiredString(body, "schema_name"));
  TY_ASSIGN_OR_RETURN(std::string type,
                      UpperEnum(body, "table_type", {"MANAGED", "EXTERNAL"}, "MANAGED"));
  r.table_type = type == "EXTERNAL" ? catalog::TableType::kExternal : catalog::TableType::kManaged;
  TY_ASSIGN_OR_RETURN(
      r.data_source_format,
      UpperEnum(body, "data_source_format",
                {"DELTA", "CSV", "JSON", "AVRO", "PARQUET", "ORC", "TEXT"}, "DELTA"));
  TY_ASSIGN_OR_RETURN(const json::array* columns, OptionalArray(body, "columns"));
  for (size_t i = 0; columns != nullptr && i < columns->size(); ++i) {
    TY_ASSIGN_OR_RETURN(auto c, DecodeColumnNamed((*columns)[i], i));
    r.columns.push_back(std::move(c));
  }
  TY_ASSIGN_OR_RETURN(r.storage_location, OptionalField(body, "storage_location"));
  TY_ASSIGN_OR_RETURN(r.comment, OptionalField(body, "comment"));
  TY_ASSIGN_OR_RETURN(r.properties, PropertiesField(body, "properties"));
  return r;
}

Result<catalog::CreateVolumeRequest> DecodeCreateVolume(const json::object& body) {
  catalog::CreateVolumeRequest r;
  TY_ASSIGN_OR_RETURN(r.name, RequiredString(body, "name"));
  TY_ASSIGN_OR_RETURN(r.catalog_name, RequiredString(body, "catalog_name"));
  TY_ASSIGN_OR_RETURN(r.schema_name, RequiredString(body, "schema_name"));
  TY_ASSIGN_OR_RETURN(std::string type,
                      UpperEnum(body, "volume_type", {"MANAGED", "EXTERNAL"}, "MANAGED"));
  r.volume_type =
      type == "EXTERNAL" ? catalog::VolumeType::kExternal : catalog::VolumeType::kManaged;
  TY_ASSIGN_OR_RETURN(r.storage_location, OptionalField(body, "storage_location"));
  TY_ASSIGN_OR_RETURN(r.comment, OptionalField(body, "comment"));
  return r;
}

Result<catalog::CreateFunctionRequest> DecodeCreateFunction(const json::object& body) {
  TY_ASSIGN_OR_RETURN(const json::object* info, OptionalObject(body, "function_info"));
  if (info == nullptr) {
    return Status::InvalidArgument(
        "missing required field 'function_info' (UC's "
        "CreateFunctionRequest: {\"function_info\": {...}})");
  }
  auto field = [](const Status& s) {
    return Status::InvalidArgument("function_info." + s.message());
  };
  catalog::CreateFunctionRequest r;
  auto name = RequiredString(*info, "name");
  if (!name.ok()) return field(name.status());
  r.name = *name;
  for (auto [member, target] : {std::pair{"catalog_name", &r.catalog_name},
                                {"schema_name", &r.schema_name},
                                {"data_type", &r.data_type},
                                {"full_data_type", &r.full_data_type},
                                {"routine_body", &r.routine_body},
                                {"routine_definition", &r.routine_definition},
                                {"external_language", &r.external_language},
                                {"comment", &r.comment}}) {
    auto v = OptionalString(*info, member);
    if (!v.ok()) return field(v.status());
    if (v->has_value()) *target = **v;
  }
  auto properties = OptionalString(*info, "properties");
  if (!properties.ok()) return field(properties.status());
  if (properties->has_value() && !(*properties)->empty()) {
    auto parsed = ParseJsonObject(**properties);
    auto map = parsed.ok() ? PropertiesField(json::object{{"properties", *parsed}}, "properties")
                           : Result<std::map<std::string, std::string>>(parsed.status());
    if (!map.ok()) {
      return Status::InvalidArgument(
          "function_info.properties must be a JSON-serialized object of strings (" +
          map.status().message() + ")");
    }
    r.properties = *map;
  }
  r.spec_json = json::serialize(*info);
  return r;
}

Result<catalog::UpdateObjectRequest> DecodeUpdate(const json::object& body) {
  catalog::UpdateObjectRequest r;
  TY_ASSIGN_OR_RETURN(r.new_name, OptionalString(body, "new_name"));
  TY_ASSIGN_OR_RETURN(r.comment, OptionalString(body, "comment"));
  TY_ASSIGN_OR_RETURN(r.owner, OptionalString(body, "owner"));
  if (body.contains("properties")) {
    TY_ASSIGN_OR_RETURN(auto properties, PropertiesField(body, "properties"));
    r.properties = std::move(properties);
  }
  return r;
}

}  // namespace trainyard::api
