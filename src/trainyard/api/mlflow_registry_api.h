// MLflow model registry endpoints (/api/2.0/mlflow/{registered-models,model-versions}/...,
// also under /ajax-api/2.0/mlflow), wire-compatible with the mlflow 3.x client.
//
// Reads are open to every authenticated user. Writes to an existing model (its versions,
// tags, aliases, stages) need EDIT on the securable {"registered_model", name, owner}: its
// owner (creator), admins and grantees pass. Any authenticated user may create a model and
// becomes its owner.
//
// The routes keep references to `api` and `registry`, which must outlive the router.
#pragma once

#include "trainyard/api/api.h"
#include "trainyard/registry/registry_service.h"

namespace trainyard::api {

void RegisterRegistryRoutes(Api& api, registry::RegistryService& registry);

}  // namespace trainyard::api
