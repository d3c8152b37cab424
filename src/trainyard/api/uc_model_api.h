// The Unity Catalog API's registered models, model versions and temporary credentials for
// model versions, volumes and paths (/api/2.1/unity-catalog/...), as UC OSS speaks them:
//
//   POST /models, GET /models (catalog_name and schema_name, or neither), GET/PATCH/DELETE
//   /models/{full_name}; POST /models/versions, GET /models/{full_name}/versions,
//   GET/PATCH/DELETE /models/{full_name}/versions/{version}, PATCH .../{version}/finalize;
//   POST /temporary-model-version-credentials, /temporary-volume-credentials,
//   /temporary-path-credentials.
//
// The models are one registry with MLflow's (catalog/model_service.h, docs/decisions/0013),
// so MLflow's client with registry_uri "uc:http://host:port" registers and loads models here.
// Lists page with max_results (at most 100) and next_page_token; errors are UC's bodies
// (uc_json.h). Handlers only decode, call and encode.
#pragma once

#include "trainyard/api/api.h"
#include "trainyard/catalog/catalog_service.h"
#include "trainyard/catalog/model_service.h"

namespace trainyard::api {

// `models` and `catalog` must outlive `api`.
void RegisterUcModelRoutes(Api& api, catalog::ModelService& models,
                           catalog::CatalogService& catalog);

}  // namespace trainyard::api
