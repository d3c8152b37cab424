// The Unity Catalog REST API (/api/2.1/unity-catalog/...), as the UC OSS server speaks it
// (its api/all.yaml): catalogs, schemas, tables, volumes and functions (create, list, get,
// update where UC has it, delete) and permissions (GET and PATCH
// /permissions/{securable_type}/{full_name}). Request and response shapes are UC's
// (uc_json.h), lists page with max_results (at most 100) and next_page_token, and errors
// are UC's bodies and codes (UcErrorResponse: ALREADY_EXISTS is 409 here).
//
// Callers authenticate with Trainyard's bearer tokens (api.h); CatalogService authorizes
// every call with the caller's Principal. Handlers only decode, call and encode.
//
// Temporary table credentials (POST /temporary-table-credentials), to callers with SELECT
// (READ) or MODIFY (READ_WRITE): for tables on local storage the location, for an hour; on S3
// an STS credential scoped to the table's prefix (docs/decisions/0014).
//
// Registered models, model versions and the temporary credentials of model versions,
// volumes and paths are uc_model_api.h's.
#pragma once

#include "trainyard/api/api.h"
#include "trainyard/catalog/catalog_service.h"
#include "trainyard/catalog/table_service.h"

namespace trainyard::api {

extern const std::vector<std::string> kUnityCatalogPrefixes;  // /api/2.1/unity-catalog

// Registers the routes; `catalog` must outlive `api`. With `tables`, creating a MANAGED
// DELTA table also creates its empty Delta table.
void RegisterUnityCatalogRoutes(Api& api, catalog::CatalogService& catalog,
                                catalog::TableService* tables = nullptr);

}  // namespace trainyard::api
