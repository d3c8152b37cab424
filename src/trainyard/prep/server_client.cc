#include "trainyard/prep/server_client.h"

#include <chrono>

#include "trainyard/common/strings.h"
#include "trainyard/http/api_call.h"

namespace trainyard::prep {
namespace {

// A prep call may move a whole Parquet file: each try gets longer than http's default.
constexpr std::chrono::seconds kCallTimeout(600);

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

Result<ServerReply> CallServer(const ServerEndpoint& server, const std::string& method,
                               const std::string& path_and_query, const std::string& body,
                               const std::string& content_type, const std::string& what) {
  TY_ASSIGN_OR_RETURN(auto r, http::CallApi(method, server.url + path_and_query, server.token, body,
                                            content_type, what, kCallTimeout));
  return ServerReply{r.status, std::move(r.body), std::move(r.headers)};
}

Result<json::object> CallServerJson(const ServerEndpoint& server, const std::string& method,
                                    const std::string& path_and_query, const json::object& body,
                                    const std::string& what) {
  return http::CallApiJson(method, server.url + path_and_query, server.token, body, what,
                           kCallTimeout);
}

Status RunLog::LogBatch(const std::map<std::string, double>& metrics,
                        const std::map<std::string, std::string>& params,
                        const std::map<std::string, std::string>& tags) {
  if (!enabled()) return Status::Ok();
  json::array m, p, t;
  int64_t now = NowMs();
  for (const auto& [k, v] : metrics) {
    m.push_back(json::object{{"key", k}, {"value", v}, {"step", 0}, {"timestamp", now}});
  }
  for (const auto& [k, v] : params) p.push_back(json::object{{"key", k}, {"value", v}});
  for (const auto& [k, v] : tags) t.push_back(json::object{{"key", k}, {"value", v}});
  return CallServerJson(server_, "POST", "/api/2.0/mlflow/runs/log-batch",
                        json::object{{"run_id", run_id_},
                                     {"metrics", std::move(m)},
                                     {"params", std::move(p)},
                                     {"tags", std::move(t)}},
                        "logging the prep report to run " + run_id_)
      .status();
}

Status RunLog::PutArtifact(const std::string& relative_path, const std::string& content) {
  if (!enabled()) return Status::Ok();
  TY_ASSIGN_OR_RETURN(
      auto got,
      CallServerJson(server_, "GET", "/api/2.0/mlflow/runs/get?run_id=" + UrlEncode(run_id_), {},
                     "reading run " + run_id_));
  std::string root;
  if (const json::value* run = got.if_contains("run"); run && run->is_object()) {
    if (const json::value* info = run->as_object().if_contains("info"); info && info->is_object()) {
      auto uri = OptionalString(info->as_object(), "artifact_uri");
      constexpr std::string_view kProxy = "mlflow-artifacts:";
      if (uri.ok() && *uri && (*uri)->rfind(kProxy, 0) == 0) {
        root = (*uri)->substr(kProxy.size());
        while (!root.empty() && root.front() == '/') root.erase(0, 1);
      }
    }
  }
  if (root.empty()) {
    return Status::FailedPrecondition("run " + run_id_ +
                                      " does not store artifacts through the mlflow-artifacts "
                                      "proxy; the report was not uploaded");
  }
  std::string path;
  for (const std::string& part : SplitString(root + "/" + relative_path, '/')) {
    if (!part.empty()) path += "/" + UrlEncode(part);
  }
  return CallServer(server_, "PUT", "/api/2.0/mlflow-artifacts/artifacts" + path, content,
                    "application/octet-stream", "uploading artifact " + relative_path)
      .status();
}

}  // namespace trainyard::prep
