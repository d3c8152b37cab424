// prep's calls to the Trainyard server's REST API (the tables API, MLflow runs), relative to a
// ServerEndpoint: http/api_call.h's CallApi (a bearer token, retries with backoff on connection
// failures and 5xx answers, the server's error body turned into a Status prefixed with `what`)
// with a longer timeout for each try. Thread-safe (no state).
#pragma once

#include <map>
#include <string>

#include "trainyard/common/json.h"
#include "trainyard/common/status.h"

namespace trainyard::prep {

struct ServerEndpoint {
  std::string url;    // http://host:port, no trailing slash
  std::string token;  // bearer token ("" = none)
  bool empty() const { return url.empty(); }
};

struct ServerReply {
  int status = 0;
  std::string body;
  std::map<std::string, std::string> headers;  // lower-case names
};

Result<ServerReply> CallServer(const ServerEndpoint& server, const std::string& method,
                               const std::string& path_and_query, const std::string& body,
                               const std::string& content_type, const std::string& what);

// A JSON call: the body is serialized (none for GET) and the answer parsed as an object.
Result<json::object> CallServerJson(const ServerEndpoint& server, const std::string& method,
                                    const std::string& path_and_query, const json::object& body,
                                    const std::string& what);

// MLflow logging for the run a job gives prep (MLFLOW_RUN_ID): metrics, tags, params and one
// artifact file, through the server's MLflow API. Disabled without a run id.
class RunLog {
 public:
  RunLog(ServerEndpoint server, std::string run_id)
      : server_(std::move(server)), run_id_(std::move(run_id)) {}
  bool enabled() const { return !server_.empty() && !run_id_.empty(); }
  Status LogBatch(const std::map<std::string, double>& metrics,
                  const std::map<std::string, std::string>& params,
                  const std::map<std::string, std::string>& tags);
  // Uploads `content` as the run's artifact `relative_path` (through mlflow-artifacts).
  Status PutArtifact(const std::string& relative_path, const std::string& content);

 private:
  ServerEndpoint server_;
  std::string run_id_;
};

}  // namespace trainyard::prep
