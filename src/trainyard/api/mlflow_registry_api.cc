#include "trainyard/api/mlflow_registry_api.h"

#include <string>
#include <vector>

#include "trainyard/api/mlflow_json.h"

namespace trainyard::api {
namespace {

using http::Method;
using registry::RegistryService;

// --- encoding (MLflow's proto JSON: int64 as numbers, absent optionals omitted; versions are
// strings)

json::object ModelVersionToJson(const registry::ModelVersion& v) {
  json::object o;
  o["name"] = v.name;
  o["version"] = std::to_string(v.version);
  o["creation_timestamp"] = v.creation_timestamp;
  o["last_updated_timestamp"] = v.last_updated_timestamp;
  if (!v.user_id.empty()) o["user_id"] = v.user_id;
  o["current_stage"] = registry::StageName(v.current_stage);
  if (!v.description.empty()) o["description"] = v.description;
  o["source"] = v.source;
  if (!v.run_id.empty()) o["run_id"] = v.run_id;
  o["status"] = registry::ModelVersionStatusName(v.status);
  if (!v.status_message.empty()) o["status_message"] = v.status_message;
  if (!v.tags.empty()) o["tags"] = KeyValuesToJson(v.tags);
  if (!v.run_link.empty()) o["run_link"] = v.run_link;
  if (!v.aliases.empty()) {
    json::array aliases;
    for (const auto& a : v.aliases) aliases.emplace_back(a);
    o["aliases"] = std::move(aliases);
  }
  if (!v.model_id.empty()) o["model_id"] = v.model_id;
  return o;
}

json::array ModelVersionsToJson(const std::vector<registry::ModelVersion>& versions) {
  json::array a;
  a.reserve(versions.size());
  for (const auto& v : versions) a.emplace_back(ModelVersionToJson(v));
  return a;
}

json::object RegisteredModelToJson(const registry::RegisteredModel& m) {
  json::object o;
  o["name"] = m.name;
  o["creation_timestamp"] = m.creation_timestamp;
  o["last_updated_timestamp"] = m.last_updated_timestamp;
  if (!m.user_id.empty()) o["user_id"] = m.user_id;
  if (!m.description.empty()) o["description"] = m.description;
  if (!m.latest_versions.empty()) o["latest_versions"] = ModelVersionsToJson(m.latest_versions);
  if (!m.tags.empty()) o["tags"] = KeyValuesToJson(m.tags);
  if (!m.aliases.empty()) {
    json::array aliases;
    for (const auto& a : m.aliases) {
      aliases.emplace_back(
          json::object{{"alias", a.alias}, {"version", std::to_string(a.version)}});
    }
    o["aliases"] = std::move(aliases);
  }
  if (!m.deployment_job_id.empty()) o["deployment_job_id"] = m.deployment_job_id;
  return o;
}

// --- decoding

Result<registry::RegistrySearchRequest> SearchRequestFromJson(const json::object& body) {
  registry::RegistrySearchRequest r;
  TY_ASSIGN_OR_RETURN(auto filter, OptionalString(body, "filter"));
  r.filter = filter.value_or("");
  TY_ASSIGN_OR_RETURN(r.max_results, OptionalInt64(body, "max_results"));
  TY_ASSIGN_OR_RETURN(r.order_by, StringList(body, "order_by"));
  TY_ASSIGN_OR_RETURN(auto token, OptionalString(body, "page_token"));
  r.page_token = token.value_or("");
  return r;
}

json::value Empty() { return json::object(); }

// Drops the items of a search page the caller may not read (catalog models without EXECUTE;
// plain MLflow models are readable by everyone).
template <typename T>
Status KeepReadable(RegistryService& reg, const identity::Principal& who, std::vector<T>& items) {
  std::vector<T> kept;
  kept.reserve(items.size());
  for (auto& item : items) {
    Status s = reg.AuthorizeRead(who, item.name);
    if (s.ok()) {
      kept.push_back(std::move(item));
    } else if (s.code() != StatusCode::kPermissionDenied && !s.IsNotFound()) {
      return s;
    }
  }
  items = std::move(kept);
  return Status::Ok();
}

class RegistryRoutes {
 public:
  RegistryRoutes(Api& api, RegistryService& registry) : api_(api), registry_(registry) {}

  void Register() {
    RegisterRegisteredModels();
    RegisterAliases();
    RegisterModelVersions();
  }

 private:
  void RegisterRegisteredModels() {
    Api& api = api_;
    RegistryService& reg = registry_;

    api.Route(Method::kPost, kMlflowPrefixes, "/registered-models/create",
              [&reg](Call& c) -> Result<json::value> {
                registry::CreateRegisteredModelRequest r;
                TY_ASSIGN_OR_RETURN(r.name, RequiredString(c.body, "name"));
                TY_ASSIGN_OR_RETURN(r.tags, KeyValuesFromJson(c.body, "tags"));
                TY_ASSIGN_OR_RETURN(auto description, OptionalString(c.body, "description"));
                r.description = description.value_or("");
                TY_ASSIGN_OR_RETURN(auto job, OptionalString(c.body, "deployment_job_id"));
                r.deployment_job_id = job.value_or("");
                TY_ASSIGN_OR_RETURN(auto model, reg.CreateRegisteredModel(c.principal, r));
                return json::object{{"registered_model", RegisteredModelToJson(model)}};
              });

    api.Route(Method::kGet, kMlflowPrefixes, "/registered-models/get",
              [&reg](Call& c) -> Result<json::value> {
                TY_ASSIGN_OR_RETURN(std::string name, RequiredString(c.body, "name"));
                TY_RETURN_IF_ERROR(reg.AuthorizeRead(c.principal, name));
                TY_ASSIGN_OR_RETURN(auto model, reg.GetRegisteredModel(name));
                return json::object{{"registered_model", RegisteredModelToJson(model)}};
              });

    JsonHandler search = [&reg](Call& c) -> Result<json::value> {
      TY_ASSIGN_OR_RETURN(auto request, SearchRequestFromJson(c.body));
      TY_ASSIGN_OR_RETURN(auto page, reg.SearchRegisteredModels(request));
      TY_RETURN_IF_ERROR(KeepReadable(reg, c.principal, page.items));
      json::array models;
      models.reserve(page.items.size());
      for (const auto& m : page.items) models.emplace_back(RegisteredModelToJson(m));
      json::object o{{"registered_models", std::move(models)}};
      if (!page.next_page_token.empty()) o["next_page_token"] = page.next_page_token;
      return o;
    };
    api.Route(Method::kGet, kMlflowPrefixes, "/registered-models/search", search);
    api.Route(Method::kPost, kMlflowPrefixes, "/registered-models/search", search);

    api.Route(Method::kPatch, kMlflowPrefixes, "/registered-models/update",
              [&reg](Call& c) -> Result<json::value> {
                TY_ASSIGN_OR_RETURN(std::string name, RequiredString(c.body, "name"));
                TY_ASSIGN_OR_RETURN(auto description, OptionalString(c.body, "description"));
                TY_ASSIGN_OR_RETURN(auto job, OptionalString(c.body, "deployment_job_id"));
                TY_ASSIGN_OR_RETURN(auto model,
                                    reg.UpdateRegisteredModel(c.principal, name, description, job));
                return json::object{{"registered_model", RegisteredModelToJson(model)}};
              });

    api.Route(Method::kPost, kMlflowPrefixes, "/registered-models/rename",
              [&reg](Call& c) -> Result<json::value> {
                TY_ASSIGN_OR_RETURN(std::string name, RequiredString(c.body, "name"));
                TY_ASSIGN_OR_RETURN(std::string new_name, RequiredString(c.body, "new_name"));
                TY_ASSIGN_OR_RETURN(auto model,
                                    reg.RenameRegisteredModel(c.principal, name, new_name));
                return json::object{{"registered_model", RegisteredModelToJson(model)}};
              });

    api.Route(Method::kDelete, kMlflowPrefixes, "/registered-models/delete",
              [&reg](Call& c) -> Result<json::value> {
                TY_ASSIGN_OR_RETURN(std::string name, RequiredString(c.body, "name"));
                TY_RETURN_IF_ERROR(reg.DeleteRegisteredModel(c.principal, name));
                return Empty();
              });

    api.Route(Method::kPost, kMlflowPrefixes, "/registered-models/set-tag",
              [&reg](Call& c) -> Result<json::value> {
                TY_ASSIGN_OR_RETURN(std::string name, RequiredString(c.body, "name"));
                registry::KeyValue tag;
                TY_ASSIGN_OR_RETURN(tag.key, RequiredString(c.body, "key"));
                TY_ASSIGN_OR_RETURN(tag.value, RequiredString(c.body, "value"));
                TY_RETURN_IF_ERROR(reg.SetRegisteredModelTag(c.principal, name, tag));
                return Empty();
              });

    api.Route(Method::kDelete, kMlflowPrefixes, "/registered-models/delete-tag",
              [&reg](Call& c) -> Result<json::value> {
                TY_ASSIGN_OR_RETURN(std::string name, RequiredString(c.body, "name"));
                TY_ASSIGN_OR_RETURN(std::string key, RequiredString(c.body, "key"));
                TY_RETURN_IF_ERROR(reg.DeleteRegisteredModelTag(c.principal, name, key));
                return Empty();
              });

    JsonHandler latest = [&reg](Call& c) -> Result<json::value> {
      TY_ASSIGN_OR_RETURN(std::string name, RequiredString(c.body, "name"));
      TY_ASSIGN_OR_RETURN(auto stages, StringList(c.body, "stages"));
      TY_RETURN_IF_ERROR(reg.AuthorizeRead(c.principal, name));
      TY_ASSIGN_OR_RETURN(auto versions, reg.GetLatestVersions(name, stages));
      return json::object{{"model_versions", ModelVersionsToJson(versions)}};
    };
    api.Route(Method::kPost, kMlflowPrefixes, "/registered-models/get-latest-versions", latest);
    api.Route(Method::kGet, kMlflowPrefixes, "/registered-models/get-latest-versions", latest);
  }

  void RegisterAliases() {
    Api& api = api_;
    RegistryService& reg = registry_;

    api.Route(Method::kPost, kMlflowPrefixes, "/registered-models/alias",
              [&reg](Call& c) -> Result<json::value> {
                TY_ASSIGN_OR_RETURN(std::string name, RequiredString(c.body, "name"));
                TY_ASSIGN_OR_RETURN(std::string alias, RequiredString(c.body, "alias"));
                TY_ASSIGN_OR_RETURN(int64_t version, RequiredInt64(c.body, "version"));
                TY_RETURN_IF_ERROR(reg.SetRegisteredModelAlias(c.principal, name, alias, version));
                return Empty();
              });

    api.Route(Method::kDelete, kMlflowPrefixes, "/registered-models/alias",
              [&reg](Call& c) -> Result<json::value> {
                TY_ASSIGN_OR_RETURN(std::string name, RequiredString(c.body, "name"));
                TY_ASSIGN_OR_RETURN(std::string alias, RequiredString(c.body, "alias"));
                TY_RETURN_IF_ERROR(reg.DeleteRegisteredModelAlias(c.principal, name, alias));
                return Empty();
              });

    // What the caller may do to a model (the web UI's disabled actions): EDIT moves aliases,
    // sets tags and creates versions.
    api.Route(Method::kGet, kTrainyardPrefixes, "/registered-models/my-permissions",
              [&reg](Call& c) -> Result<json::value> {
                TY_ASSIGN_OR_RETURN(std::string name, RequiredString(c.body, "name"));
                TY_RETURN_IF_ERROR(reg.AuthorizeRead(c.principal, name));
                return ActionDecisionsJson({{"edit", reg.AuthorizeEdit(c.principal, name)}});
              });

    api.Route(Method::kGet, kMlflowPrefixes, "/registered-models/alias",
              [&reg](Call& c) -> Result<json::value> {
                TY_ASSIGN_OR_RETURN(std::string name, RequiredString(c.body, "name"));
                TY_ASSIGN_OR_RETURN(std::string alias, RequiredString(c.body, "alias"));
                TY_RETURN_IF_ERROR(reg.AuthorizeRead(c.principal, name));
                TY_ASSIGN_OR_RETURN(auto version, reg.GetModelVersionByAlias(name, alias));
                return json::object{{"model_version", ModelVersionToJson(version)}};
              });
  }

  void RegisterModelVersions() {
    Api& api = api_;
    RegistryService& reg = registry_;

    api.Route(Method::kPost, kMlflowPrefixes, "/model-versions/create",
              [&reg](Call& c) -> Result<json::value> {
                registry::CreateModelVersionRequest r;
                TY_ASSIGN_OR_RETURN(r.name, RequiredString(c.body, "name"));
                for (auto [field, target] :
                     {std::pair{"source", &r.source}, std::pair{"run_id", &r.run_id},
                      std::pair{"run_link", &r.run_link}, std::pair{"description", &r.description},
                      std::pair{"model_id", &r.model_id}}) {
                  TY_ASSIGN_OR_RETURN(auto value, OptionalString(c.body, field));
                  *target = value.value_or("");
                }
                TY_ASSIGN_OR_RETURN(r.tags, KeyValuesFromJson(c.body, "tags"));
                TY_ASSIGN_OR_RETURN(auto version, reg.CreateModelVersion(c.principal, r));
                return json::object{{"model_version", ModelVersionToJson(version)}};
              });

    api.Route(Method::kGet, kMlflowPrefixes, "/model-versions/get",
              [&reg](Call& c) -> Result<json::value> {
                TY_ASSIGN_OR_RETURN(std::string name, RequiredString(c.body, "name"));
                TY_ASSIGN_OR_RETURN(int64_t version, RequiredInt64(c.body, "version"));
                TY_RETURN_IF_ERROR(reg.AuthorizeRead(c.principal, name));
                TY_ASSIGN_OR_RETURN(auto v, reg.GetModelVersion(name, version));
                return json::object{{"model_version", ModelVersionToJson(v)}};
              });

    JsonHandler search = [&reg](Call& c) -> Result<json::value> {
      TY_ASSIGN_OR_RETURN(auto request, SearchRequestFromJson(c.body));
      TY_ASSIGN_OR_RETURN(auto page, reg.SearchModelVersions(request));
      TY_RETURN_IF_ERROR(KeepReadable(reg, c.principal, page.items));
      json::object o{{"model_versions", ModelVersionsToJson(page.items)}};
      if (!page.next_page_token.empty()) o["next_page_token"] = page.next_page_token;
      return o;
    };
    api.Route(Method::kGet, kMlflowPrefixes, "/model-versions/search", search);
    api.Route(Method::kPost, kMlflowPrefixes, "/model-versions/search", search);

    api.Route(Method::kPatch, kMlflowPrefixes, "/model-versions/update",
              [&reg](Call& c) -> Result<json::value> {
                TY_ASSIGN_OR_RETURN(std::string name, RequiredString(c.body, "name"));
                TY_ASSIGN_OR_RETURN(int64_t version, RequiredInt64(c.body, "version"));
                TY_ASSIGN_OR_RETURN(auto description, OptionalString(c.body, "description"));
                TY_ASSIGN_OR_RETURN(
                    auto v, reg.UpdateModelVersion(c.principal, name, version, description));
                return json::object{{"model_version", ModelVersionToJson(v)}};
              });

    api.Route(Method::kDelete, kMlflowPrefixes, "/model-versions/delete",
              [&reg](Call& c) -> Result<json::value> {
                TY_ASSIGN_OR_RETURN(std::string name, RequiredString(c.body, "name"));
                TY_ASSIGN_OR_RETURN(int64_t version, RequiredInt64(c.body, "version"));
                TY_RETURN_IF_ERROR(reg.DeleteModelVersion(c.principal, name, version));
                return Empty();
              });

    api.Route(Method::kGet, kMlflowPrefixes, "/model-versions/get-download-uri",
              [&reg](Call& c) -> Result<json::value> {
                TY_ASSIGN_OR_RETURN(std::string name, RequiredString(c.body, "name"));
                TY_ASSIGN_OR_RETURN(int64_t version, RequiredInt64(c.body, "version"));
                TY_RETURN_IF_ERROR(reg.AuthorizeRead(c.principal, name));
                TY_ASSIGN_OR_RETURN(std::string uri, reg.GetModelVersionDownloadUri(name, version));
                return json::object{{"artifact_uri", uri}};
              });

    api.Route(Method::kPost, kMlflowPrefixes, "/model-versions/transition-stage",
              [&reg](Call& c) -> Result<json::value> {
                TY_ASSIGN_OR_RETURN(std::string name, RequiredString(c.body, "name"));
                TY_ASSIGN_OR_RETURN(int64_t version, RequiredInt64(c.body, "version"));
                TY_ASSIGN_OR_RETURN(std::string stage, RequiredString(c.body, "stage"));
                TY_ASSIGN_OR_RETURN(auto archive,
                                    OptionalBool(c.body, "archive_existing_versions"));
                TY_ASSIGN_OR_RETURN(
                    auto v, reg.TransitionModelVersionStage(c.principal, name, version, stage,
                                                            archive.value_or(false)));
                return json::object{{"model_version", ModelVersionToJson(v)}};
              });

    api.Route(Method::kPost, kMlflowPrefixes, "/model-versions/set-tag",
              [&reg](Call& c) -> Result<json::value> {
                TY_ASSIGN_OR_RETURN(std::string name, RequiredString(c.body, "name"));
                TY_ASSIGN_OR_RETURN(int64_t version, RequiredInt64(c.body, "version"));
                registry::KeyValue tag;
                TY_ASSIGN_OR_RETURN(tag.key, RequiredString(c.body, "key"));
                TY_ASSIGN_OR_RETURN(tag.value, RequiredString(c.body, "value"));
                TY_RETURN_IF_ERROR(reg.SetModelVersionTag(c.principal, name, version, tag));
                return Empty();
              });

    api.Route(Method::kDelete, kMlflowPrefixes, "/model-versions/delete-tag",
              [&reg](Call& c) -> Result<json::value> {
                TY_ASSIGN_OR_RETURN(std::string name, RequiredString(c.body, "name"));
                TY_ASSIGN_OR_RETURN(int64_t version, RequiredInt64(c.body, "version"));
                TY_ASSIGN_OR_RETURN(std::string key, RequiredString(c.body, "key"));
                TY_RETURN_IF_ERROR(reg.DeleteModelVersionTag(c.principal, name, version, key));
                return Empty();
              });
  }

  Api& api_;
  RegistryService& registry_;
};

}  // namespace

void RegisterRegistryRoutes(Api& api, registry::RegistryService& registry) {
  RegistryRoutes(api, registry).Register();
}

}  // namespace trainyard::api
