#include "trainyard/api/uc_api.h"

#include "trainyard/api/uc_json.h"
#include "trainyard/api/uc_model_json.h"
#include "trainyard/catalog/permissions.h"
#include "trainyard/catalog/table_policy.h"

namespace trainyard::api {

const std::vector<std::string> kUnityCatalogPrefixes = {"/api/2.1/unity-catalog"};

namespace {

using catalog::CatalogService;
using http::Method;

void UcRoute(Api& api, Method method, const std::string& path, JsonHandler handler) {
  api.RouteRenderingErrors(method, kUnityCatalogPrefixes, path, std::move(handler),
                           UcErrorResponse);
}

const std::string& PathParam(Call& c, const std::string& name) {
  return c.request.path_params[name];
}

Result<catalog::PageRequest> PageOf(const json::object& body) {
  TY_ASSIGN_OR_RETURN(UcPage page, ReadUcPage(body));
  return catalog::PageRequest{static_cast<int>(page.max_results), page.page_token};
}

template <typename T, typename Encode>
json::object PageToJson(const catalog::Page<T>& page, std::string_view key, Encode encode) {
  json::array items;
  for (const auto& item : page.items) items.emplace_back(encode(item));
  json::object o{{key, std::move(items)}};
  if (!page.next_page_token.empty()) o["next_page_token"] = page.next_page_token;
  return o;
}

Result<std::string> RequiredQuery(const json::object& body, std::string_view field) {
  auto v = OptionalString(body, field);
  if (!v.ok()) return v.status();
  if (!v->has_value() || (*v)->empty()) {
    return Status::InvalidArgument("missing required query parameter '" + std::string(field) + "'");
  }
  return **v;
}

// UC sends `force` in the query string; a client that also sends a body ("{}") still means it.
Result<bool> Force(Call& c) {
  json::object query;
  if (auto it = c.request.query.find("force"); it != c.request.query.end() && !it->second.empty()) {
    query["force"] = it->second.back();
  }
  TY_ASSIGN_OR_RETURN(auto force, OptionalBool(query.empty() ? c.body : query, "force"));
  return force.value_or(false);
}

void RegisterCatalogs(Api& api, CatalogService& cs) {
  UcRoute(api, Method::kPost, "/catalogs", [&cs](Call& c) -> Result<json::value> {
    TY_ASSIGN_OR_RETURN(auto request, DecodeCreateCatalog(c.body));
    TY_ASSIGN_OR_RETURN(auto info, cs.CreateCatalog(c.principal, request));
    return CatalogToJson(info);
  });
  UcRoute(api, Method::kGet, "/catalogs", [&cs](Call& c) -> Result<json::value> {
    TY_ASSIGN_OR_RETURN(auto page, PageOf(c.body));
    TY_ASSIGN_OR_RETURN(auto result, cs.ListCatalogs(c.principal, page));
    return PageToJson(result, "catalogs", CatalogToJson);
  });
  UcRoute(api, Method::kGet, "/catalogs/{name}", [&cs](Call& c) -> Result<json::value> {
    TY_ASSIGN_OR_RETURN(auto info, cs.GetCatalog(c.principal, PathParam(c, "name")));
    return CatalogToJson(info);
  });
  UcRoute(api, Method::kPatch, "/catalogs/{name}", [&cs](Call& c) -> Result<json::value> {
    TY_ASSIGN_OR_RETURN(auto request, DecodeUpdate(c.body));
    TY_ASSIGN_OR_RETURN(auto info, cs.UpdateCatalog(c.principal, PathParam(c, "name"), request));
    return CatalogToJson(info);
  });
  UcRoute(api, Method::kDelete, "/catalogs/{name}", [&cs](Call& c) -> Result<json::value> {
    TY_ASSIGN_OR_RETURN(bool force, Force(c));
    TY_RETURN_IF_ERROR(cs.DeleteCatalog(c.principal, PathParam(c, "name"), force));
    return json::object();
  });
}

void RegisterSchemas(Api& api, CatalogService& cs) {
  UcRoute(api, Method::kPost, "/schemas", [&cs](Call& c) -> Result<json::value> {
    TY_ASSIGN_OR_RETURN(auto request, DecodeCreateSchema(c.body));
    TY_ASSIGN_OR_RETURN(auto info, cs.CreateSchema(c.principal, request));
    return SchemaToJson(info);
  });
  UcRoute(api, Method::kGet, "/schemas", [&cs](Call& c) -> Result<json::value> {
    TY_ASSIGN_OR_RETURN(std::string catalog_name, RequiredQuery(c.body, "catalog_name"));
    TY_ASSIGN_OR_RETURN(auto page, PageOf(c.body));
    TY_ASSIGN_OR_RETURN(auto result, cs.ListSchemas(c.principal, catalog_name, page));
    return PageToJson(result, "schemas", SchemaToJson);
  });
  UcRoute(api, Method::kGet, "/schemas/{full_name}", [&cs](Call& c) -> Result<json::value> {
    TY_ASSIGN_OR_RETURN(auto info, cs.GetSchema(c.principal, PathParam(c, "full_name")));
    return SchemaToJson(info);
  });
  UcRoute(api, Method::kPatch, "/schemas/{full_name}", [&cs](Call& c) -> Result<json::value> {
    TY_ASSIGN_OR_RETURN(auto request, DecodeUpdate(c.body));
    TY_ASSIGN_OR_RETURN(auto info,
                        cs.UpdateSchema(c.principal, PathParam(c, "full_name"), request));
    return SchemaToJson(info);
  });
  UcRoute(api, Method::kDelete, "/schemas/{full_name}", [&cs](Call& c) -> Result<json::value> {
    TY_ASSIGN_OR_RETURN(bool force, Force(c));
    TY_RETURN_IF_ERROR(cs.DeleteSchema(c.principal, PathParam(c, "full_name"), force));
    return json::object();
  });
}

// Lists of objects inside a schema take catalog_name and schema_name.
struct SchemaScope {
  std::string catalog_name, schema_name;
  catalog::PageRequest page;
};
Result<SchemaScope> ScopeOf(const json::object& body) {
  SchemaScope s;
  TY_ASSIGN_OR_RETURN(s.catalog_name, RequiredQuery(body, "catalog_name"));
  TY_ASSIGN_OR_RETURN(s.schema_name, RequiredQuery(body, "schema_name"));
  TY_ASSIGN_OR_RETURN(s.page, PageOf(body));
  return s;
}

void RegisterTables(Api& api, CatalogService& cs, catalog::TableService* ts) {
  UcRoute(api, Method::kPost, "/tables", [&cs, ts](Call& c) -> Result<json::value> {
    TY_ASSIGN_OR_RETURN(auto request, DecodeCreateTable(c.body));
    TY_ASSIGN_OR_RETURN(auto info, cs.CreateTable(c.principal, request));
    // A managed Delta table gets its (empty) Delta table, so UC clients can read it.
    if (Status s = ts ? ts->CreateDeltaForRow(c.principal, info) : Status::Ok(); !s.ok()) {
      (void)cs.DeleteTable(identity::Principal::System(), info.full_name);
      return s;
    }
    return TableToJson(info);
  });
  UcRoute(api, Method::kGet, "/tables", [&cs](Call& c) -> Result<json::value> {
    TY_ASSIGN_OR_RETURN(auto s, ScopeOf(c.body));
    TY_ASSIGN_OR_RETURN(auto result,
                        cs.ListTables(c.principal, s.catalog_name, s.schema_name, s.page));
    return PageToJson(result, "tables", TableToJson);
  });
  // The hot read: answered on the I/O thread when the table and the caller's groups are in
  // memory (bench/catalog).
  api.RouteRenderingErrors(
      Method::kGet, kUnityCatalogPrefixes, "/tables/{full_name}",
      [&cs](Call& c) -> Result<json::value> {
        TY_ASSIGN_OR_RETURN(auto info, cs.GetTable(c.principal, PathParam(c, "full_name")));
        return TableToJson(info);
      },
      UcErrorResponse,
      [&cs](Call& c) -> std::optional<Result<json::value>> {
        std::optional<Result<catalog::TableInfo>> info =
            cs.GetTableIfCached(c.principal, PathParam(c, "full_name"));
        if (!info) return std::nullopt;
        if (!info->ok()) return Result<json::value>(info->status());
        return Result<json::value>(json::value(TableToJson(**info)));
      });
  UcRoute(api, Method::kDelete, "/tables/{full_name}", [&cs](Call& c) -> Result<json::value> {
    TY_RETURN_IF_ERROR(cs.DeleteTable(c.principal, PathParam(c, "full_name")));
    return json::object();
  });
}

void RegisterVolumes(Api& api, CatalogService& cs) {
  UcRoute(api, Method::kPost, "/volumes", [&cs](Call& c) -> Result<json::value> {
    TY_ASSIGN_OR_RETURN(auto request, DecodeCreateVolume(c.body));
    TY_ASSIGN_OR_RETURN(auto info, cs.CreateVolume(c.principal, request));
    return VolumeToJson(info);
  });
  UcRoute(api, Method::kGet, "/volumes", [&cs](Call& c) -> Result<json::value> {
    TY_ASSIGN_OR_RETURN(auto s, ScopeOf(c.body));
    TY_ASSIGN_OR_RETURN(auto result,
                        cs.ListVolumes(c.principal, s.catalog_name, s.schema_name, s.page));
    return PageToJson(result, "volumes", VolumeToJson);
  });
  UcRoute(api, Method::kGet, "/volumes/{name}", [&cs](Call& c) -> Result<json::value> {
    TY_ASSIGN_OR_RETURN(auto info, cs.GetVolume(c.principal, PathParam(c, "name")));
    return VolumeToJson(info);
  });
  UcRoute(api, Method::kPatch, "/volumes/{name}", [&cs](Call& c) -> Result<json::value> {
    TY_ASSIGN_OR_RETURN(auto request, DecodeUpdate(c.body));
    TY_ASSIGN_OR_RETURN(auto info, cs.UpdateVolume(c.principal, PathParam(c, "name"), request));
    return VolumeToJson(info);
  });
  UcRoute(api, Method::kDelete, "/volumes/{name}", [&cs](Call& c) -> Result<json::value> {
    TY_RETURN_IF_ERROR(cs.DeleteVolume(c.principal, PathParam(c, "name")));
    return json::object();
  });
}

void RegisterFunctions(Api& api, CatalogService& cs) {
  UcRoute(api, Method::kPost, "/functions", [&cs](Call& c) -> Result<json::value> {
    TY_ASSIGN_OR_RETURN(auto request, DecodeCreateFunction(c.body));
    TY_ASSIGN_OR_RETURN(auto info, cs.CreateFunction(c.principal, request));
    return FunctionToJson(info);
  });
  UcRoute(api, Method::kGet, "/functions", [&cs](Call& c) -> Result<json::value> {
    TY_ASSIGN_OR_RETURN(auto s, ScopeOf(c.body));
    TY_ASSIGN_OR_RETURN(auto result,
                        cs.ListFunctions(c.principal, s.catalog_name, s.schema_name, s.page));
    return PageToJson(result, "functions", FunctionToJson);
  });
  UcRoute(api, Method::kGet, "/functions/{name}", [&cs](Call& c) -> Result<json::value> {
    TY_ASSIGN_OR_RETURN(auto info, cs.GetFunction(c.principal, PathParam(c, "name")));
    return FunctionToJson(info);
  });
  UcRoute(api, Method::kDelete, "/functions/{name}", [&cs](Call& c) -> Result<json::value> {
    TY_RETURN_IF_ERROR(cs.DeleteFunction(c.principal, PathParam(c, "name")));
    return json::object();
  });
}

// The securable a permissions route names; the metastore's full name is "" whatever the
// path says (UC clients send its id or "metastore").
Result<std::pair<catalog::SecurableType, std::string>> SecurableOf(Call& c) {
  TY_ASSIGN_OR_RETURN(auto type,
                      catalog::ParseSecurableType("securable_type", PathParam(c, "type")));
  std::string full_name = type == catalog::SecurableType::kMetastore ? "" : PathParam(c, "name");
  return std::pair{type, full_name};
}

void RegisterPermissions(Api& api, CatalogService& cs) {
  const std::string path = "/permissions/{type}/{name}";
  UcRoute(api, Method::kGet, path, [&cs](Call& c) -> Result<json::value> {
    TY_ASSIGN_OR_RETURN(auto securable, SecurableOf(c));
    TY_ASSIGN_OR_RETURN(auto principal, OptionalString(c.body, "principal"));
    TY_ASSIGN_OR_RETURN(
        auto assignments,
        cs.GetPermissions(c.principal, securable.first, securable.second, principal.value_or("")));
    return PermissionsToJson(assignments);
  });
  UcRoute(api, Method::kPatch, path, [&cs](Call& c) -> Result<json::value> {
    TY_ASSIGN_OR_RETURN(auto securable, SecurableOf(c));
    TY_ASSIGN_OR_RETURN(auto changes,
                        catalog::DecodePermissionChanges(c.request.body, securable.first));
    TY_ASSIGN_OR_RETURN(auto assignments, cs.UpdatePermissions(c.principal, securable.first,
                                                               securable.second, changes));
    return PermissionsToJson(assignments);
  });
}

// POST /temporary-table-credentials {table_id, operation: READ | READ_WRITE}, handed out only
// to a caller who may read the table (SELECT) or, for READ_WRITE, change it (MODIFY). For a
// table on local storage the credential is the location itself, valid for an hour; on S3 it
// is an STS credential for that table's prefix only (CatalogService::StorageCredential). A
// table with a row filter or column masks is refused to everyone (PERMISSION_DENIED), as
// Databricks does: direct storage access would bypass them.
Result<json::value> TemporaryTableCredential(CatalogService& cs, Call& c) {
  TY_ASSIGN_OR_RETURN(std::string table_id, RequiredString(c.body, "table_id"));
  TY_ASSIGN_OR_RETURN(auto operation, OptionalString(c.body, "operation"));
  std::string op = operation.value_or("");
  if (op != "READ" && op != "READ_WRITE") {
    return Status::InvalidArgument("operation must be READ or READ_WRITE (got '" + op + "')");
  }
  TY_ASSIGN_OR_RETURN(catalog::TableInfo table, cs.GetTableById(c.principal, table_id));
  TY_RETURN_IF_ERROR(catalog::CheckDirectAccess(table));
  TY_RETURN_IF_ERROR(cs.Authorize(
      c.principal, op == "READ" ? catalog::Privilege::kSelect : catalog::Privilege::kModify,
      catalog::SecurableType::kTable, table.full_name));
  TY_ASSIGN_OR_RETURN(auto credential,
                      cs.StorageCredential(c.principal, table.storage_location, op != "READ"));
  return TemporaryCredentialToJson(credential);
}

}  // namespace

void RegisterUnityCatalogRoutes(Api& api, catalog::CatalogService& catalog,
                                catalog::TableService* tables) {
  UcRoute(api, Method::kPost, "/temporary-table-credentials",
          [&catalog](Call& c) { return TemporaryTableCredential(catalog, c); });
  RegisterCatalogs(api, catalog);
  RegisterSchemas(api, catalog);
  RegisterTables(api, catalog, tables);
  RegisterVolumes(api, catalog);
  RegisterFunctions(api, catalog);
  RegisterPermissions(api, catalog);
}

}  // namespace trainyard::api
