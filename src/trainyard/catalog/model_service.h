// ModelService: Unity Catalog's registered models and model versions, one registry with
// MLflow's (docs/decisions/0013).
//
// A model named "catalog.schema.model" is a securable of the catalog (CatalogService: owner,
// grants, a managed storage location) and a registered model of the model registry
// (RegistryService: versions, tags, aliases, description), under the same full name. The
// catalog composes the two, as it composes a table's metadata and data: this service is
// the Unity Catalog API's way in, and it is also the registry's ModelNamespace, so a model
// created, renamed or deleted through MLflow's API under a three-level name gets, renames
// or loses its securable too. The UC comment is the registry's description.
//
// Authorization is the catalog's, whichever API is used: CREATE MODEL on the schema to
// create; EXECUTE on the model (and USE CATALOG / USE SCHEMA) to read it, its versions and
// their files; owner or MANAGE to change it, create, update, finalize or delete versions.
//
// Versions created here (UC's create-model-version) start PENDING_REGISTRATION with a
// storage location `<model location>/versions/<n>` (a file:// URI for local storage), where
// the client writes the files with a READ_WRITE_MODEL_VERSION credential; finalizing makes
// them READY. Versions created through MLflow's API keep the location their source
// resolves to.
//
// Thread-safe. Keeps references to `catalog` and `registry`, which must outlive it.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "trainyard/catalog/catalog_service.h"
#include "trainyard/catalog/catalog_types.h"
#include "trainyard/common/status.h"
#include "trainyard/identity/authorizer.h"
#include "trainyard/registry/model_namespace.h"
#include "trainyard/registry/registry_service.h"

namespace trainyard::catalog {

// UC's ModelVersionInfo.
struct ModelVersionInfo {
  std::string catalog_name{};
  std::string schema_name{};
  std::string model_name{};
  int64_t version = 0;
  std::string source{};
  std::string run_id{};
  registry::ModelVersionStatus status = registry::ModelVersionStatus::kReady;
  std::string storage_location{};
  std::string comment{};
  int64_t created_at = 0;
  std::string created_by{};
  int64_t updated_at = 0;
  std::string updated_by{};
  std::string id{};  // "<model id>/<version>"
};

struct CreateModelVersionRequest {
  std::string catalog_name{};
  std::string schema_name{};
  std::string model_name{};
  std::string source{};  // required: where the client's model came from (recorded as given)
  std::string run_id{};
  std::string comment{};
};

// UC's ModelVersionOperation.
enum class ModelVersionOperation { kRead, kReadWrite };

class ModelService : public registry::ModelNamespace {
 public:
  ModelService(CatalogService& catalog, registry::RegistryService& registry)
      : catalog_(catalog), registry_(registry) {}
  ModelService(const ModelService&) = delete;
  ModelService& operator=(const ModelService&) = delete;

  // Registered models. Names are parsed with names.h (levels stored lower-case).
  Result<RegisteredModelInfo> CreateModel(const identity::Principal& who,
                                          const CreateRegisteredModelRequest& request);
  Result<RegisteredModelInfo> GetModel(const identity::Principal& who, std::string_view full_name);
  // Both empty: every model the caller may see (see CatalogService::ListRegisteredModels).
  Result<Page<RegisteredModelInfo>> ListModels(const identity::Principal& who,
                                               std::string_view catalog_name,
                                               std::string_view schema_name,
                                               const PageRequest& page);
  // comment (owner or MANAGE), new_name (within the schema; owner or MANAGE), owner (owner
  // or admin); properties are InvalidArgument (models have none in UC).
  Result<RegisteredModelInfo> UpdateModel(const identity::Principal& who,
                                          std::string_view full_name,
                                          const UpdateObjectRequest& request);
  // FailedPrecondition while the model has versions, unless `force` (which deletes them).
  Status DeleteModel(const identity::Principal& who, std::string_view full_name, bool force);

  // Model versions of the model `full_name`.
  Result<ModelVersionInfo> CreateVersion(const identity::Principal& who,
                                         const CreateModelVersionRequest& request);
  Result<ModelVersionInfo> GetVersion(const identity::Principal& who, std::string_view full_name,
                                      int64_t version);
  Result<Page<ModelVersionInfo>> ListVersions(const identity::Principal& who,
                                              std::string_view full_name, const PageRequest& page);
  Result<ModelVersionInfo> UpdateVersion(const identity::Principal& who, std::string_view full_name,
                                         int64_t version,
                                         const std::optional<std::string>& comment);
  Status DeleteVersion(const identity::Principal& who, std::string_view full_name, int64_t version);
  Result<ModelVersionInfo> FinalizeVersion(const identity::Principal& who,
                                           std::string_view full_name, int64_t version);
  // UC's temporary model version credential: READ needs EXECUTE; READ_WRITE needs owner or
  // MANAGE and a version still PENDING_REGISTRATION (FailedPrecondition otherwise).
  Result<TemporaryCredential> VersionCredential(const identity::Principal& who,
                                                std::string_view full_name, int64_t version,
                                                ModelVersionOperation operation);

  // registry::ModelNamespace: three-level names are the catalog's.
  std::optional<std::string> Claim(std::string_view name) override;
  Status Create(const identity::Principal& who, const std::string& name,
                const std::string& description) override;
  Status Rename(const identity::Principal& who, const std::string& name,
                const std::string& new_name) override;
  Status Remove(const std::string& name) override;

 private:
  // The model's catalog object and the registry's description over it (no authorization).
  Result<RegisteredModelInfo> Describe(const std::string& full_name);
  Result<ModelVersionInfo> ToVersionInfo(const registry::ModelVersion& v);
  Result<std::string> ParseModelName(std::string_view field, std::string_view full_name);

  CatalogService& catalog_;
  registry::RegistryService& registry_;
};

}  // namespace trainyard::catalog
