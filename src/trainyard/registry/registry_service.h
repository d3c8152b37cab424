// RegistryService: MLflow's model registry — registered models, their numbered
// versions, tags, aliases and stages — stored in the metadata store.
//
// Semantics follow MLflow's SQL store (mlflow 3.x): versions are numbered 1, 2, 3
// per model and a number is never reused, even after its version is deleted; a
// version is READY as soon as it is created (nothing is copied); `latest_versions`
// holds the highest version per stage; deleting a model deletes its versions,
// tags and aliases; deleting a version deletes the aliases that point to it.
// Errors: NotFound for an unknown model/version/alias, AlreadyExists for a taken
// name, InvalidArgument naming the field for bad input.
//
// A version's download location is resolved once, when it is created, and stored:
// "models:/<model_id>" → the logged model's artifact location, "runs:/<run>/<path>"
// → the run's artifact URI + "/<path>", "models:/<name>/<version>" and
// "models:/<name>@<alias>" → that version's location; anything else as given.
// Runs and logged models are reached through TrackingService only.
//
// Search filters use MLflow's grammar (tracking/search_filter.h). As in MLflow,
// prompts (models whose versions carry the tag mlflow.prompt.is_prompt = 'true')
// are left out of searches unless the filter asks for them.
//
// Authorization: every public method that changes a registered model or one of its
// versions, tags or aliases takes the caller's Principal and asks the Authorizer given at
// construction for EDIT on the model first (NotFound when there is no such model). Reads
// take no Principal; callers that serve a request ask AuthorizeRead() first (the Authorizer
// grants READ to all on plain MLflow models, EXECUTE decides on catalog models).
//
// One registry seen two ways (docs/decisions/0013): with a ModelNamespace set, names it
// claims (the catalog's "catalog.schema.model") are stored in its form, and creating,
// renaming and deleting such a model also creates, renames and removes its object there.
// A version created with a `storage_root` (Unity Catalog's create-model-version) starts
// PENDING_REGISTRATION at `<storage_root>/versions/<version>`, where the client writes its
// files, and becomes READY with FinalizeModelVersion.
//
// Thread-safe. The service keeps references to `db`, `clock`, `authz` and `tracking`,
// which must outlive it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "trainyard/common/clock.h"
#include "trainyard/common/mutex.h"
#include "trainyard/common/status.h"
#include "trainyard/identity/authorizer.h"
#include "trainyard/registry/model_namespace.h"
#include "trainyard/registry/types.h"
#include "trainyard/store/database.h"

namespace trainyard::tracking {
class TrackingService;
}  // namespace trainyard::tracking

namespace trainyard::registry {

struct RegistryLimits {
  size_t max_name_length = 256;
  size_t max_tag_key_length = 250;
  size_t max_tag_value_length = 100'000;  // prompts keep their text in a tag
  size_t max_alias_length = 255;
  size_t max_description_length = 100'000;
  int64_t max_models_per_page = 1000;
  int64_t default_models_per_page = 100;
  int64_t max_versions_per_page = 200'000;
  int64_t default_versions_per_page = 10'000;
};

struct CreateRegisteredModelRequest {
  std::string name{};
  std::vector<KeyValue> tags{};
  std::string description{};
  std::string deployment_job_id{};
};

struct CreateModelVersionRequest {
  std::string name{};
  std::string source{};  // may be empty when model_id is given
  std::string run_id{};
  std::vector<KeyValue> tags{};
  std::string run_link{};
  std::string description{};
  std::string model_id{};
  // Set: the version's files are written by the client to `<storage_root>/versions/<n>`
  // (a file:// or s3:// URI), it starts PENDING_REGISTRATION, and `source` is recorded as
  // given (the server never reads from it). Empty: resolved from source, READY at once.
  std::string storage_root{};
};

struct RegistrySearchRequest {
  std::string filter{};
  std::optional<int64_t> max_results{};  // default per search (see RegistryLimits)
  std::vector<std::string> order_by{};   // "name", "last_updated_timestamp DESC", ...
  std::string page_token{};
};

class RegistryService {
 public:
  RegistryService(store::Database& db, Clock& clock, identity::Authorizer& authz,
                  tracking::TrackingService& tracking, RegistryLimits limits = {});
  RegistryService(const RegistryService&) = delete;
  RegistryService& operator=(const RegistryService&) = delete;

  // Claimed names go through `ns` (see above). Set once, before serving; `ns` must outlive
  // the service.
  void SetNamespace(ModelNamespace* ns) { ns_ = ns; }

  // Ok when `who` may read the model `name` (its versions and files): the Authorizer's READ.
  // NotFound when there is no such model.
  Status AuthorizeRead(const identity::Principal& who, const std::string& name);
  // EDIT on the model `name` (aliases, tags, versions), asked of the Authorizer; NotFound when
  // there is none.
  Status AuthorizeEdit(const identity::Principal& who, const std::string& name);

  // Component "registry": registered_models, registered_model_tags, model_versions,
  // model_version_tags, registered_model_aliases.
  static std::vector<store::Migration> Migrations();

  // --- registered models
  // `who` becomes the model's owner (user_id); anyone may create a model.
  Result<RegisteredModel> CreateRegisteredModel(const identity::Principal& who,
                                                const CreateRegisteredModelRequest& request);
  Result<RegisteredModel> GetRegisteredModel(const std::string& name);
  // Order: name, creation_timestamp, last_updated_timestamp (alias "timestamp") with ASC/DESC;
  // name ASC breaks ties and is the default.
  Result<Page<RegisteredModel>> SearchRegisteredModels(const RegistrySearchRequest& request);
  // Leaves fields that are nullopt as they are.
  Result<RegisteredModel> UpdateRegisteredModel(
      const identity::Principal& who, const std::string& name,
      const std::optional<std::string>& description,
      const std::optional<std::string>& deployment_job_id = std::nullopt);
  // The model's versions, tags and aliases follow it.
  Result<RegisteredModel> RenameRegisteredModel(const identity::Principal& who,
                                                const std::string& name,
                                                const std::string& new_name);
  Status DeleteRegisteredModel(const identity::Principal& who, const std::string& name);
  Status SetRegisteredModelTag(const identity::Principal& who, const std::string& name,
                               const KeyValue& tag);
  // Ok when the model exists but has no such tag (as MLflow).
  Status DeleteRegisteredModelTag(const identity::Principal& who, const std::string& name,
                                  const std::string& key);
  // Points `alias` at `version`, moving it if it pointed elsewhere. Aliases that look like
  // versions ("v1", "1") and "latest" are reserved.
  Status SetRegisteredModelAlias(const identity::Principal& who, const std::string& name,
                                 const std::string& alias, int64_t version);
  // Ok when the model exists but has no such alias (as MLflow).
  Status DeleteRegisteredModelAlias(const identity::Principal& who, const std::string& name,
                                    const std::string& alias);
  Result<ModelVersion> GetModelVersionByAlias(const std::string& name, const std::string& alias);
  // The latest version in each of `stages` (case-insensitive names) that has one; with no
  // stages, in every stage. Ordered by version.
  Result<std::vector<ModelVersion>> GetLatestVersions(const std::string& name,
                                                      const std::vector<std::string>& stages);
  // The owner (creator) of a model, for authorization. Cached. NotFound if absent.
  Result<std::string> RegisteredModelOwner(const std::string& name) TY_EXCLUDES(cache_mu_);

  // --- model versions
  // EDIT on the model; `who` becomes the version's user_id. Validates that run_id and
  // model_id, when given, exist (NotFound otherwise).
  Result<ModelVersion> CreateModelVersion(const identity::Principal& who,
                                          const CreateModelVersionRequest& request);
  Result<ModelVersion> GetModelVersion(const std::string& name, int64_t version);
  // Called after every successful CreateModelVersion with the caller and the new version
  // (the server records lineage from its run). Set once, before serving; it must be cheap
  // and must not call back into this service.
  using VersionListener =
      std::function<void(const identity::Principal& who, const ModelVersion& version)>;
  void SetVersionListener(VersionListener listener) { version_listener_ = std::move(listener); }
  // Order: name, version_number, creation_timestamp, last_updated_timestamp (alias
  // "timestamp") with ASC/DESC; name ASC, version_number DESC break ties and are the default.
  Result<Page<ModelVersion>> SearchModelVersions(const RegistrySearchRequest& request);
  Result<ModelVersion> UpdateModelVersion(const identity::Principal& who, const std::string& name,
                                          int64_t version,
                                          const std::optional<std::string>& description);
  Status DeleteModelVersion(const identity::Principal& who, const std::string& name,
                            int64_t version);
  // PENDING_REGISTRATION → READY (EDIT on the model): the client has written the files.
  // FailedPrecondition when the version is not pending.
  Result<ModelVersion> FinalizeModelVersion(const identity::Principal& who, const std::string& name,
                                            int64_t version);
  // Where the version's files can be downloaded from (see the contract above).
  Result<std::string> GetModelVersionDownloadUri(const std::string& name, int64_t version);
  // With archive_existing_versions (only for Staging and Production), the model's other
  // versions in that stage move to Archived.
  Result<ModelVersion> TransitionModelVersionStage(const identity::Principal& who,
                                                   const std::string& name, int64_t version,
                                                   const std::string& stage,
                                                   bool archive_existing_versions);
  Status SetModelVersionTag(const identity::Principal& who, const std::string& name,
                            int64_t version, const KeyValue& tag);
  // Ok when the version exists but has no such tag (as MLflow).
  Status DeleteModelVersionTag(const identity::Principal& who, const std::string& name,
                               int64_t version, const std::string& key);

 private:
  struct ResolvedSource {
    std::string source;
    std::string storage_location;
    std::string run_id;
    std::string model_id;
  };

  Status ValidateName(std::string_view field, const std::string& name) const;
  Status ValidateTag(std::string_view what, const KeyValue& tag) const;
  Status ValidateAlias(const std::string& alias) const;
  Status ValidateDescription(const std::string& description) const;
  Result<ResolvedSource> ResolveSource(const CreateModelVersionRequest& request);
  // A source recorded as given for a version whose files are uploaded (storage_root set).
  Result<ResolvedSource> ResolveUploadedSource(const CreateModelVersionRequest& request);
  // The namespace's form of `name` when it claims it.
  std::optional<std::string> Claimed(std::string_view name);
  Result<std::string> ResolveRegistryUri(const std::string& uri);
  Result<RegisteredModel> LoadModel(store::Transaction& tx, const std::string& name);
  Result<ModelVersion> LoadVersion(store::Transaction& tx, const std::string& name,
                                   int64_t version);
  Status FillModels(store::Transaction& tx, std::vector<RegisteredModel>& models);
  void ForgetOwner(const std::string& name) TY_EXCLUDES(cache_mu_);

  store::Database& db_;
  Clock& clock_;
  identity::Authorizer& authz_;
  tracking::TrackingService& tracking_;
  const RegistryLimits limits_;
  VersionListener version_listener_;
  ModelNamespace* ns_ = nullptr;

  Mutex cache_mu_;
  std::unordered_map<std::string, std::string> owner_ TY_GUARDED_BY(cache_mu_);  // by name
  uint64_t owner_generation_ TY_GUARDED_BY(cache_mu_) = 0;  // bumped by every ForgetOwner
};

}  // namespace trainyard::registry
