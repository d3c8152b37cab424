#include "trainyard/api/mlflow_artifacts_api.h"

#include "trainyard/common/strings.h"

namespace trainyard::api {
namespace {

using http::Method;
using identity::Action;

constexpr char kArtifactsPrefix[] = "/api/2.0/mlflow-artifacts";
constexpr char kSchemePrefix[] = "mlflow-artifacts:";

// "mlflow-artifacts:/1/abc/artifacts" → "1/abc/artifacts"; other schemes → nullopt.
std::optional<std::string> KeyOfUri(const std::string& uri) {
  if (!StartsWith(uri, kSchemePrefix)) return std::nullopt;
  std::string rest = uri.substr(sizeof(kSchemePrefix) - 1);
  // Accept mlflow-artifacts:/path and mlflow-artifacts://host/path.
  if (StartsWith(rest, "//")) {
    size_t slash = rest.find('/', 2);
    rest = slash == std::string::npos ? "" : rest.substr(slash);
  }
  while (!rest.empty() && rest.front() == '/') rest.erase(0, 1);
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  return rest;
}

std::string JoinKey(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (b.empty()) return a;
  return a + "/" + b;
}

json::array FileInfos(const std::vector<blob::BlobEntry>& entries, const std::string& prefix) {
  json::array files;
  for (const auto& e : entries) {
    json::object f;
    f["path"] = JoinKey(prefix, e.name);
    f["is_dir"] = e.is_dir;
    if (!e.is_dir) f["file_size"] = e.size;
    files.emplace_back(std::move(f));
  }
  return files;
}

class ArtifactRoutes : public std::enable_shared_from_this<ArtifactRoutes> {
 public:
  ArtifactRoutes(Api& api, blob::BlobStore& blobs, tracking::TrackingService& tracking)
      : api_(api), blobs_(blobs), tracking_(tracking) {}

  void Register() {
    auto self = shared_from_this();
    const std::vector<std::string> prefix = {kArtifactsPrefix};
    api_.RawRoute(
        Method::kPut, prefix, "/artifacts/{path...}",
        [this, self](Call& c) -> Result<http::Response> {
          const std::string& path = c.request.path_params["path"];
          TY_RETURN_IF_ERROR(blob::ValidateKey(path));
          TY_RETURN_IF_ERROR(tracking_.AuthorizeArtifactPath(c.principal, path, Action::kEdit));
          if (!c.request.body_file.empty()) {
            TY_RETURN_IF_ERROR(blobs_.PutFile(path, c.request.body_file));
          } else {
            TY_RETURN_IF_ERROR(blobs_.PutBytes(path, c.request.body));
          }
          return http::Response::Json(200, "{}");
        });
    api_.RawRoute(
        Method::kGet, prefix, "/artifacts/{path...}",
        [this, self](Call& c) -> Result<http::Response> {
          const std::string& path = c.request.path_params["path"];
          TY_RETURN_IF_ERROR(blob::ValidateKey(path));
          TY_RETURN_IF_ERROR(tracking_.AuthorizeArtifactPath(c.principal, path, Action::kRead));
          TY_ASSIGN_OR_RETURN(std::string local, blobs_.LocalPathForRead(path));
          http::Response r;
          r.content_type = "application/octet-stream";
          r.file_path = local;
          std::string name = path.substr(path.rfind('/') + 1);
          r.headers.emplace_back("Content-Disposition", "attachment; filename=\"" + name + "\"");
          return r;
        });
    api_.RawRoute(
        Method::kDelete, prefix, "/artifacts/{path...}",
        [this, self](Call& c) -> Result<http::Response> {
          const std::string& path = c.request.path_params["path"];
          TY_RETURN_IF_ERROR(blob::ValidateKey(path));
          TY_RETURN_IF_ERROR(tracking_.AuthorizeArtifactPath(c.principal, path, Action::kEdit));
          TY_RETURN_IF_ERROR(blobs_.Delete(path));
          return http::Response::Json(200, "{}");
        });
    // Listing: immediate children, by base name (as MLflow's proxy lists them).
    api_.Route(Method::kGet, prefix, "/artifacts", [this, self](Call& c) -> Result<json::value> {
      TY_ASSIGN_OR_RETURN(auto path, OptionalString(c.body, "path"));
      std::string p = path.value_or("");
      while (!p.empty() && p.back() == '/') p.pop_back();
      TY_RETURN_IF_ERROR(blob::ValidateKey(p, /*allow_empty=*/true));
      TY_RETURN_IF_ERROR(tracking_.AuthorizeArtifactPath(c.principal, p, Action::kRead));
      TY_ASSIGN_OR_RETURN(auto entries, blobs_.List(p));
      return json::object{{"files", FileInfos(entries, "")}};
    });
    // The client uploads single-part unless told otherwise; this answer makes it do so.
    for (const char* op : {"create", "complete", "abort"}) {
      api_.Route(Method::kPost, prefix, std::string("/mpu/") + op + "/{path...}",
                 [](Call&) -> Result<json::value> {
                   return Status::NotImplemented(
                       "multipart upload is not supported by this server; upload the file in one "
                       "request");
                 });
    }
    api_.Route(Method::kGet, kMlflowPrefixes, "/artifacts/list",
               [this, self](Call& c) -> Result<json::value> {
                 TY_ASSIGN_OR_RETURN(auto run_id, OptionalString(c.body, "run_id"));
                 if (!run_id || run_id->empty()) {
                   TY_ASSIGN_OR_RETURN(run_id, OptionalString(c.body, "run_uuid"));
                 }
                 if (!run_id || run_id->empty()) {
                   return Status::InvalidArgument("missing required field 'run_id'");
                 }
                 TY_ASSIGN_OR_RETURN(auto path, OptionalString(c.body, "path"));
                 TY_ASSIGN_OR_RETURN(auto run, tracking_.GetRun(*run_id));
                 return ListUnder(c, run.info.artifact_uri, path.value_or(""));
               });
    api_.Route(Method::kGet, kMlflowPrefixes, "/logged-models/{model_id}/artifacts/directories",
               [this, self](Call& c) -> Result<json::value> {
                 TY_ASSIGN_OR_RETURN(auto model,
                                     tracking_.GetLoggedModel(c.request.path_params["model_id"]));
                 TY_ASSIGN_OR_RETURN(auto path, OptionalString(c.body, "artifact_directory_path"));
                 return ListUnder(c, model.artifact_uri, path.value_or(""));
               });
  }

 private:
  // Lists `relative` under an artifact root URI, with paths relative to the root.
  Result<json::value> ListUnder(Call& c, const std::string& root_uri, std::string relative) {
    while (!relative.empty() && relative.back() == '/') relative.pop_back();
    TY_RETURN_IF_ERROR(blob::ValidateKey(relative, /*allow_empty=*/true));
    json::object out{{"root_uri", root_uri}};
    auto root = KeyOfUri(root_uri);
    if (!root) {
      out["files"] = json::array();
      return out;
    }
    std::string key = JoinKey(*root, relative);
    TY_RETURN_IF_ERROR(tracking_.AuthorizeArtifactPath(c.principal, key, Action::kRead));
    TY_ASSIGN_OR_RETURN(auto entries, blobs_.List(key));
    out["files"] = FileInfos(entries, relative);
    return out;
  }

  Api& api_;
  blob::BlobStore& blobs_;
  tracking::TrackingService& tracking_;
};

}  // namespace

bool IsArtifactUpload(http::Method method, std::string_view path) {
  return method == http::Method::kPut &&
         StartsWith(path, std::string(kArtifactsPrefix) + "/artifacts/");
}

void RegisterArtifactRoutes(Api& api, blob::BlobStore& blobs, tracking::TrackingService& tracking) {
  std::make_shared<ArtifactRoutes>(api, blobs, tracking)->Register();
}

}  // namespace trainyard::api
