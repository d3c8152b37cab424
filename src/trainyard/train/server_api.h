// Calls from a workload to the Trainyard server's REST API (or any MLflow server): a bearer
// token, retries with backoff on connection failures and 5xx answers (the server restarting),
// and the server's error body {"error_code", "message"} turned into a Status (401/403
// PermissionDenied, 404 NotFound, other 4xx InvalidArgument, 5xx Unavailable), prefixed with
// `what`. Internal to the trainer's platform clients (platform.cc, table_source.cc).
// Thread-safe (no state).
#pragma once

#include <map>
#include <string>

#include "trainyard/common/json.h"
#include "trainyard/common/status.h"

namespace trainyard::train {

// A successful (2xx) answer.
struct ServerReply {
  int status = 0;
  std::string body;
  std::map<std::string, std::string> headers;  // lower-case names
};

Result<ServerReply> CallServer(const std::string& method, const std::string& url,
                               const std::string& token, const std::string& body,
                               const std::string& content_type, const std::string& what);

// A JSON call: the body is serialized (none for GET) and the answer parsed as an object
// (an empty answer is {}).
Result<json::object> CallServerJson(const std::string& method, const std::string& url,
                                    const std::string& token, const json::object& body,
                                    const std::string& what);

// `url` without trailing slashes.
std::string StripSlash(std::string url);

}  // namespace trainyard::train
