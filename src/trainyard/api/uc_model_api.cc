#include "trainyard/api/uc_model_api.h"

#include "trainyard/api/uc_api.h"
#include "trainyard/api/uc_json.h"
#include "trainyard/api/uc_model_json.h"

namespace trainyard::api {
namespace {

using catalog::CatalogService;
using catalog::ModelService;
using http::Method;

void Route(Api& api, Method method, const std::string& path, JsonHandler handler) {
  api.RouteRenderingErrors(method, kUnityCatalogPrefixes, path, std::move(handler),
                           UcErrorResponse);
}

const std::string& Param(Call& c, const std::string& name) { return c.request.path_params[name]; }

Result<int64_t> VersionParam(Call& c) {
  return ParseModelVersionNumber("version", Param(c, "version"));
}

Result<catalog::PageRequest> PageOf(const json::object& query) {
  TY_ASSIGN_OR_RETURN(UcPage page, ReadUcPage(query));
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

// UC sends `force` in the query string.
Result<bool> Force(Call& c) {
  json::object query;
  if (auto it = c.request.query.find("force"); it != c.request.query.end() && !it->second.empty()) {
    query["force"] = it->second.back();
  }
  TY_ASSIGN_OR_RETURN(auto force, OptionalBool(query.empty() ? c.body : query, "force"));
  return force.value_or(false);
}

void RegisterModels(Api& api, ModelService& ms) {
  Route(api, Method::kPost, "/models", [&ms](Call& c) -> Result<json::value> {
    TY_ASSIGN_OR_RETURN(auto request, DecodeCreateRegisteredModel(c.body));
    TY_ASSIGN_OR_RETURN(auto info, ms.CreateModel(c.principal, request));
    return RegisteredModelToJson(info);
  });
  Route(api, Method::kGet, "/models", [&ms](Call& c) -> Result<json::value> {
    TY_ASSIGN_OR_RETURN(auto catalog_name, OptionalString(c.body, "catalog_name"));
    TY_ASSIGN_OR_RETURN(auto schema_name, OptionalString(c.body, "schema_name"));
    TY_ASSIGN_OR_RETURN(auto page, PageOf(c.body));
    TY_ASSIGN_OR_RETURN(auto result, ms.ListModels(c.principal, catalog_name.value_or(""),
                                                   schema_name.value_or(""), page));
    return PageToJson(result, "registered_models", RegisteredModelToJson);
  });
  Route(api, Method::kGet, "/models/{full_name}", [&ms](Call& c) -> Result<json::value> {
    TY_ASSIGN_OR_RETURN(auto info, ms.GetModel(c.principal, Param(c, "full_name")));
    return RegisteredModelToJson(info);
  });
  Route(api, Method::kPatch, "/models/{full_name}", [&ms](Call& c) -> Result<json::value> {
    TY_ASSIGN_OR_RETURN(auto request, DecodeUpdate(c.body));
    TY_ASSIGN_OR_RETURN(auto info, ms.UpdateModel(c.principal, Param(c, "full_name"), request));
    return RegisteredModelToJson(info);
  });
  Route(api, Method::kDelete, "/models/{full_name}", [&ms](Call& c) -> Result<json::value> {
    TY_ASSIGN_OR_RETURN(bool force, Force(c));
    TY_RETURN_IF_ERROR(ms.DeleteModel(c.principal, Param(c, "full_name"), force));
    return json::object();
  });
}

void RegisterVersions(Api& api, ModelService& ms) {
  Route(api, Method::kPost, "/models/versions", [&ms](Call& c) -> Result<json::value> {
    TY_ASSIGN_OR_RETURN(auto request, DecodeCreateModelVersion(c.body));
    TY_ASSIGN_OR_RETURN(auto info, ms.CreateVersion(c.principal, request));
    return ModelVersionToJson(info);
  });
  Route(api, Method::kGet, "/models/{full_name}/versions", [&ms](Call& c) -> Result<json::value> {
    TY_ASSIGN_OR_RETURN(auto page, PageOf(c.body));
    TY_ASSIGN_OR_RETURN(auto result, ms.ListVersions(c.principal, Param(c, "full_name"), page));
    return PageToJson(result, "model_versions", ModelVersionToJson);
  });
  const std::string version_path = "/models/{full_name}/versions/{version}";
  Route(api, Method::kGet, version_path, [&ms](Call& c) -> Result<json::value> {
    TY_ASSIGN_OR_RETURN(int64_t version, VersionParam(c));
    TY_ASSIGN_OR_RETURN(auto info, ms.GetVersion(c.principal, Param(c, "full_name"), version));
    return ModelVersionToJson(info);
  });
  Route(api, Method::kPatch, version_path, [&ms](Call& c) -> Result<json::value> {
    TY_ASSIGN_OR_RETURN(int64_t version, VersionParam(c));
    TY_ASSIGN_OR_RETURN(auto comment, DecodeUpdateModelVersion(c.body));
    TY_ASSIGN_OR_RETURN(auto info,
                        ms.UpdateVersion(c.principal, Param(c, "full_name"), version, comment));
    return ModelVersionToJson(info);
  });
  Route(api, Method::kDelete, version_path, [&ms](Call& c) -> Result<json::value> {
    TY_ASSIGN_OR_RETURN(int64_t version, VersionParam(c));
    TY_RETURN_IF_ERROR(ms.DeleteVersion(c.principal, Param(c, "full_name"), version));
    return json::object();
  });
  Route(api, Method::kPatch, version_path + "/finalize", [&ms](Call& c) -> Result<json::value> {
    TY_ASSIGN_OR_RETURN(int64_t version, VersionParam(c));
    TY_ASSIGN_OR_RETURN(auto info, ms.FinalizeVersion(c.principal, Param(c, "full_name"), version));
    return ModelVersionToJson(info);
  });
}

void RegisterCredentials(Api& api, ModelService& ms, CatalogService& cs) {
  Route(api, Method::kPost, "/temporary-model-version-credentials",
        [&ms](Call& c) -> Result<json::value> {
          TY_ASSIGN_OR_RETURN(auto r, DecodeModelVersionCredentialRequest(c.body));
          TY_ASSIGN_OR_RETURN(auto credential, ms.VersionCredential(c.principal, r.full_name,
                                                                    r.version, r.operation));
          return TemporaryCredentialToJson(credential);
        });
  Route(api, Method::kPost, "/temporary-volume-credentials", [&cs](Call& c) -> Result<json::value> {
    TY_ASSIGN_OR_RETURN(auto r, DecodeVolumeCredentialRequest(c.body));
    TY_ASSIGN_OR_RETURN(auto credential,
                        cs.TemporaryVolumeCredential(c.principal, r.volume_id, r.operation));
    return TemporaryCredentialToJson(credential);
  });
  Route(api, Method::kPost, "/temporary-path-credentials", [&cs](Call& c) -> Result<json::value> {
    TY_ASSIGN_OR_RETURN(auto r, DecodePathCredentialRequest(c.body));
    TY_ASSIGN_OR_RETURN(auto credential,
                        cs.TemporaryPathCredential(c.principal, r.url, r.operation));
    return TemporaryCredentialToJson(credential);
  });
}

}  // namespace

void RegisterUcModelRoutes(Api& api, ModelService& models, CatalogService& catalog) {
  RegisterModels(api, models);
  RegisterVersions(api, models);
  RegisterCredentials(api, models, catalog);
}

}  // namespace trainyard::api
