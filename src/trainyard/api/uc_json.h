// The Unity Catalog API's wire conventions, shared by its handlers (uc_api.cc): its error
// table and bodies ({"error_code": "NOT_FOUND", "message": ...}), which differ from MLflow's
// in api.h (ALREADY_EXISTS is 409 here, 400 there), and its paging (max_results, page_token).
// Also the codecs between UC's JSON and the catalog's types (catalog_types.h). Pure
// functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "trainyard/catalog/catalog_types.h"
#include "trainyard/common/json.h"
#include "trainyard/common/status.h"
#include "trainyard/http/router.h"

namespace trainyard::api {

// UC's error code for a Status ("NOT_FOUND", "ALREADY_EXISTS", "INVALID_ARGUMENT", ...).
std::string_view UcErrorCode(StatusCode code);
// The HTTP status UC answers with (NOT_FOUND 404, ALREADY_EXISTS 409, PERMISSION_DENIED 403,
// UNAUTHENTICATED 401, INVALID_ARGUMENT 400, ...).
int UcHttpStatus(StatusCode code);
// The error response: {"error_code": ..., "message": ...} with UcHttpStatus.
http::Response UcErrorResponse(const Status& status);

// The most items a UC list returns in one page; also the default.
inline constexpr int64_t kUcMaxResults = 100;

struct UcPage {
  int64_t max_results = kUcMaxResults;  // 1..kUcMaxResults
  std::string page_token;               // "" = the first page
};
// Reads max_results (absent or 0: the default; above kUcMaxResults: kUcMaxResults, as UC
// does; negative or not a number: InvalidArgument naming the field) and page_token.
Result<UcPage> ReadUcPage(const json::object& body);

// An optional string->string map field ("properties"); InvalidArgument naming the field when
// it is not an object of strings.
Result<std::vector<std::pair<std::string, std::string>>> ReadStringMap(const json::object& body,
                                                                       std::string_view field);

// Encoders: UC's CatalogInfo, SchemaInfo, TableInfo, VolumeInfo, FunctionInfo and
// PermissionsList. Empty optional strings (comment, storage_location) are left out, since
// UC's SDK refuses an empty volume comment.
json::object CatalogToJson(const catalog::CatalogInfo& c);
json::object SchemaToJson(const catalog::SchemaInfo& s);
json::object TableToJson(const catalog::TableInfo& t);
json::object VolumeToJson(const catalog::VolumeInfo& v);
json::object FunctionToJson(const catalog::FunctionInfo& f);
json::object PermissionsToJson(const std::vector<catalog::PrivilegeAssignment>& assignments);

// Decoders of UC's create and update bodies. InvalidArgument naming the field
// ("columns[2].type_name must be a string") for anything malformed; names and the rest are
// checked by CatalogService.
Result<catalog::CreateCatalogRequest> DecodeCreateCatalog(const json::object& body);
Result<catalog::CreateSchemaRequest> DecodeCreateSchema(const json::object& body);
Result<catalog::CreateTableRequest> DecodeCreateTable(const json::object& body);
Result<catalog::CreateVolumeRequest> DecodeCreateVolume(const json::object& body);
// UC's CreateFunctionRequest: {"function_info": {...}}.
Result<catalog::CreateFunctionRequest> DecodeCreateFunction(const json::object& body);
Result<catalog::UpdateObjectRequest> DecodeUpdate(const json::object& body);

}  // namespace trainyard::api
