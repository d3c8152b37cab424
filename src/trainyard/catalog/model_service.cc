#include "trainyard/catalog/model_service.h"

#include <algorithm>

#include "trainyard/catalog/names.h"
#include "trainyard/common/strings.h"

namespace trainyard::catalog {
namespace {

using identity::Principal;

// A catalog location as a URI clients open: an absolute local path becomes file:///path.
std::string StorageUri(const std::string& location) {
  if (!location.empty() && location.front() == '/') return "file://" + location;
  return location;
}

// The registry's search for one model's versions ('name' is a validated catalog name, so
// it holds no quote).
std::string VersionsOf(const std::string& full_name) { return "name = '" + full_name + "'"; }

Principal System() { return Principal::System(); }

}  // namespace

// ---- the registry's namespace -------------------------------------------------------------

std::optional<std::string> ModelService::Claim(std::string_view name) {
  auto parsed = ParseFullName("name", name, 3);
  if (!parsed.ok()) return std::nullopt;
  return parsed->ToString();
}

Status ModelService::Create(const Principal& who, const std::string& name,
                            const std::string& description) {
  TY_ASSIGN_OR_RETURN(FullName parsed, ParseFullName("name", name, 3));
  CreateRegisteredModelRequest request{.catalog_name = parsed.catalog(),
                                       .schema_name = parsed.schema(),
                                       .name = parsed.object(),
                                       .comment = description};
  return catalog_.CreateRegisteredModel(who, request).status();
}

Status ModelService::Rename(const Principal& who, const std::string& name,
                            const std::string& new_name) {
  auto from = ParseFullName("name", name, 3);
  auto to = ParseFullName("new_name", new_name, 3);
  if (!from.ok() || !to.ok()) {
    return Status::InvalidArgument(
        "new_name: a model cannot move between the catalog (catalog.schema.model names) and "
        "plain MLflow names ('" +
        Abbreviate(name) + "' to '" + Abbreviate(new_name) + "')");
  }
  if (from->catalog() != to->catalog() || from->schema() != to->schema()) {
    return Status::InvalidArgument("new_name: a catalog model is renamed within its schema (" +
                                   from->catalog() + "." + from->schema() + "), got '" +
                                   Abbreviate(new_name) + "'");
  }
  UpdateObjectRequest request;
  request.new_name = to->object();
  return catalog_.UpdateRegisteredModel(who, from->ToString(), request).status();
}

Status ModelService::Remove(const std::string& name) {
  Status s = catalog_.DeleteRegisteredModel(System(), name);
  return s.IsNotFound() ? Status::Ok() : s;
}

// ---- registered models ----------------------------------------------------------------------

Result<std::string> ModelService::ParseModelName(std::string_view field,
                                                 std::string_view full_name) {
  TY_ASSIGN_OR_RETURN(FullName parsed, ParseFullName(field, full_name, 3));
  return parsed.ToString();
}

Result<RegisteredModelInfo> ModelService::Describe(const std::string& full_name) {
  TY_ASSIGN_OR_RETURN(RegisteredModelInfo info, catalog_.GetRegisteredModel(System(), full_name));
  info.storage_location = StorageUri(info.storage_location);
  auto model = registry_.GetRegisteredModel(info.full_name);
  if (model.ok()) {
    info.comment = model->description;
    if (model->last_updated_timestamp > info.updated_at) {
      info.updated_at = model->last_updated_timestamp;
    }
  } else if (!model.status().IsNotFound()) {
    return model.status();
  }
  return info;
}

Result<RegisteredModelInfo> ModelService::CreateModel(const Principal& who,
                                                      const CreateRegisteredModelRequest& r) {
  TY_ASSIGN_OR_RETURN(std::string catalog_name, NormalizeName("catalog_name", r.catalog_name));
  TY_ASSIGN_OR_RETURN(std::string schema_name, NormalizeName("schema_name", r.schema_name));
  TY_ASSIGN_OR_RETURN(std::string name, NormalizeName("name", r.name));
  registry::CreateRegisteredModelRequest request;
  request.name = catalog_name + "." + schema_name + "." + name;
  request.description = r.comment;
  // The registry calls Create() above for the securable, then stores its own row.
  TY_ASSIGN_OR_RETURN(registry::RegisteredModel model,
                      registry_.CreateRegisteredModel(who, request));
  return Describe(model.name);
}

Result<RegisteredModelInfo> ModelService::GetModel(const Principal& who,
                                                   std::string_view full_name) {
  TY_ASSIGN_OR_RETURN(RegisteredModelInfo info, catalog_.GetRegisteredModel(who, full_name));
  return Describe(info.full_name);
}

Result<Page<RegisteredModelInfo>> ModelService::ListModels(const Principal& who,
                                                           std::string_view catalog_name,
                                                           std::string_view schema_name,
                                                           const PageRequest& page) {
  TY_ASSIGN_OR_RETURN(auto listed,
                      catalog_.ListRegisteredModels(who, catalog_name, schema_name, page));
  for (RegisteredModelInfo& info : listed.items) {
    info.storage_location = StorageUri(info.storage_location);
    auto model = registry_.GetRegisteredModel(info.full_name);
    if (model.ok()) {
      info.comment = model->description;
      info.updated_at = std::max(info.updated_at, model->last_updated_timestamp);
    }
  }
  return listed;
}

Result<RegisteredModelInfo> ModelService::UpdateModel(const Principal& who,
                                                      std::string_view full_name,
                                                      const UpdateObjectRequest& request) {
  TY_ASSIGN_OR_RETURN(std::string name, ParseModelName("full_name", full_name));
  if (request.properties) {
    return Status::InvalidArgument("properties: registered models have none in Unity Catalog");
  }
  if (request.comment || request.owner) {
    UpdateObjectRequest change;
    change.comment = request.comment;
    change.owner = request.owner;
    TY_RETURN_IF_ERROR(catalog_.UpdateRegisteredModel(who, name, change).status());
    if (request.comment) {
      auto updated = registry_.UpdateRegisteredModel(System(), name, request.comment);
      if (!updated.ok() && !updated.status().IsNotFound()) return updated.status();
    }
  }
  if (request.new_name) {
    TY_ASSIGN_OR_RETURN(std::string level, NormalizeName("new_name", *request.new_name));
    TY_ASSIGN_OR_RETURN(FullName parsed, ParseFullName("full_name", name, 3));
    std::string new_full_name = parsed.catalog() + "." + parsed.schema() + "." + level;
    if (new_full_name != name) {
      // The registry renames its row and, through Rename() above, the securable.
      TY_RETURN_IF_ERROR(registry_.RenameRegisteredModel(who, name, new_full_name).status());
      name = new_full_name;
    }
  }
  return Describe(name);
}

Status ModelService::DeleteModel(const Principal& who, std::string_view full_name, bool force) {
  TY_ASSIGN_OR_RETURN(std::string name, ParseModelName("full_name", full_name));
  TY_RETURN_IF_ERROR(
      catalog_.Authorize(who, Privilege::kManage, SecurableType::kRegisteredModel, name));
  if (!force) {
    registry::RegistrySearchRequest search;
    search.filter = VersionsOf(name);
    search.max_results = 1;
    TY_ASSIGN_OR_RETURN(auto versions, registry_.SearchModelVersions(search));
    if (!versions.items.empty()) {
      return Status::FailedPrecondition(
          "registered model '" + name +
          "' still has versions; delete them first or pass force=true");
    }
  }
  // The registry deletes its rows (versions too) and, through Remove() above, the securable.
  Status s = registry_.DeleteRegisteredModel(who, name);
  if (s.IsNotFound()) return catalog_.DeleteRegisteredModel(who, name);  // catalog-only
  return s;
}

// ---- model versions -------------------------------------------------------------------------

Result<ModelVersionInfo> ModelService::ToVersionInfo(const registry::ModelVersion& v) {
  TY_ASSIGN_OR_RETURN(FullName parsed, ParseFullName("name", v.name, 3));
  TY_ASSIGN_OR_RETURN(RegisteredModelInfo model, catalog_.GetRegisteredModel(System(), v.name));
  ModelVersionInfo out;
  out.catalog_name = parsed.catalog();
  out.schema_name = parsed.schema();
  out.model_name = parsed.object();
  out.version = v.version;
  out.source = v.source;
  out.run_id = v.run_id;
  out.status = v.status;
  out.storage_location = v.storage_location;
  out.comment = v.description;
  out.created_at = v.creation_timestamp;
  out.created_by = v.user_id;
  out.updated_at = v.last_updated_timestamp;
  out.id = model.id + "/" + std::to_string(v.version);
  return out;
}

Result<ModelVersionInfo> ModelService::CreateVersion(const Principal& who,
                                                     const CreateModelVersionRequest& r) {
  TY_ASSIGN_OR_RETURN(std::string catalog_name, NormalizeName("catalog_name", r.catalog_name));
  TY_ASSIGN_OR_RETURN(std::string schema_name, NormalizeName("schema_name", r.schema_name));
  TY_ASSIGN_OR_RETURN(std::string model_name, NormalizeName("model_name", r.model_name));
  if (r.source.empty()) return Status::InvalidArgument("missing required field 'source'");
  const std::string name = catalog_name + "." + schema_name + "." + model_name;
  // Creating a version is a change of the model: owner or MANAGE (the registry asks again
  // through the Authorizer, which is the catalog's for this name).
  TY_RETURN_IF_ERROR(
      catalog_.Authorize(who, Privilege::kManage, SecurableType::kRegisteredModel, name));
  TY_ASSIGN_OR_RETURN(RegisteredModelInfo model, catalog_.GetRegisteredModel(System(), name));
  registry::CreateModelVersionRequest request;
  request.name = name;
  request.source = r.source;
  request.run_id = r.run_id;
  request.description = r.comment;
  request.storage_root = StorageUri(model.storage_location);
  TY_ASSIGN_OR_RETURN(registry::ModelVersion v, registry_.CreateModelVersion(who, request));
  return ToVersionInfo(v);
}

Result<ModelVersionInfo> ModelService::GetVersion(const Principal& who, std::string_view full_name,
                                                  int64_t version) {
  TY_ASSIGN_OR_RETURN(std::string name, ParseModelName("full_name", full_name));
  TY_RETURN_IF_ERROR(
      catalog_.Authorize(who, Privilege::kExecute, SecurableType::kRegisteredModel, name));
  TY_ASSIGN_OR_RETURN(registry::ModelVersion v, registry_.GetModelVersion(name, version));
  return ToVersionInfo(v);
}

Result<Page<ModelVersionInfo>> ModelService::ListVersions(const Principal& who,
                                                          std::string_view full_name,
                                                          const PageRequest& page) {
  TY_ASSIGN_OR_RETURN(std::string name, ParseModelName("full_name", full_name));
  if (page.max_results < 0) {
    return Status::InvalidArgument("max_results must be 0 (the default, 100) or more (got " +
                                   std::to_string(page.max_results) + ")");
  }
  TY_RETURN_IF_ERROR(
      catalog_.Authorize(who, Privilege::kExecute, SecurableType::kRegisteredModel, name));
  registry::RegistrySearchRequest search;
  search.filter = VersionsOf(name);
  search.max_results =
      page.max_results == 0 ? kDefaultMaxResults : std::min(page.max_results, kMaxMaxResults);
  search.order_by = {"version_number ASC"};
  search.page_token = page.page_token;
  TY_ASSIGN_OR_RETURN(auto versions, registry_.SearchModelVersions(search));
  Page<ModelVersionInfo> out;
  out.next_page_token = versions.next_page_token;
  for (const auto& v : versions.items) {
    TY_ASSIGN_OR_RETURN(ModelVersionInfo info, ToVersionInfo(v));
    out.items.push_back(std::move(info));
  }
  return out;
}

Result<ModelVersionInfo> ModelService::UpdateVersion(const Principal& who,
                                                     std::string_view full_name, int64_t version,
                                                     const std::optional<std::string>& comment) {
  TY_ASSIGN_OR_RETURN(std::string name, ParseModelName("full_name", full_name));
  TY_RETURN_IF_ERROR(
      catalog_.Authorize(who, Privilege::kManage, SecurableType::kRegisteredModel, name));
  TY_ASSIGN_OR_RETURN(registry::ModelVersion v,
                      registry_.UpdateModelVersion(who, name, version, comment));
  return ToVersionInfo(v);
}

Status ModelService::DeleteVersion(const Principal& who, std::string_view full_name,
                                   int64_t version) {
  TY_ASSIGN_OR_RETURN(std::string name, ParseModelName("full_name", full_name));
  TY_RETURN_IF_ERROR(
      catalog_.Authorize(who, Privilege::kManage, SecurableType::kRegisteredModel, name));
  return registry_.DeleteModelVersion(who, name, version);
}

Result<ModelVersionInfo> ModelService::FinalizeVersion(const Principal& who,
                                                       std::string_view full_name,
                                                       int64_t version) {
  TY_ASSIGN_OR_RETURN(std::string name, ParseModelName("full_name", full_name));
  TY_RETURN_IF_ERROR(
      catalog_.Authorize(who, Privilege::kManage, SecurableType::kRegisteredModel, name));
  TY_ASSIGN_OR_RETURN(registry::ModelVersion v, registry_.FinalizeModelVersion(who, name, version));
  return ToVersionInfo(v);
}

Result<TemporaryCredential> ModelService::VersionCredential(const Principal& who,
                                                            std::string_view full_name,
                                                            int64_t version,
                                                            ModelVersionOperation operation) {
  TY_ASSIGN_OR_RETURN(std::string name, ParseModelName("full_name", full_name));
  const bool write = operation == ModelVersionOperation::kReadWrite;
  TY_RETURN_IF_ERROR(catalog_.Authorize(who, write ? Privilege::kManage : Privilege::kExecute,
                                        SecurableType::kRegisteredModel, name));
  TY_ASSIGN_OR_RETURN(registry::ModelVersion v, registry_.GetModelVersion(name, version));
  if (write && v.status != registry::ModelVersionStatus::kPendingRegistration) {
    return Status::FailedPrecondition(
        "version " + std::to_string(version) + " of '" + name + "' is " +
        std::string(registry::ModelVersionStatusName(v.status)) +
        ": its files can be written only while it is PENDING_REGISTRATION (create a new "
        "version instead)");
  }
  return catalog_.StorageCredential(who, v.storage_location, write);
}

}  // namespace trainyard::catalog
