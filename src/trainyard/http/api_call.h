// Calls to the Trainyard server's REST API (or any MLflow server) from its clients (the
// trainer, prep): a bearer token, retries with backoff on connection failures and 5xx answers
// (the server restarting), and the server's error body {"error_code", "message"} turned into a
// Status (401/403 PermissionDenied, 404 NotFound, other 4xx InvalidArgument, 5xx Unavailable),
// prefixed with `what`. Thread-safe (no state).
#pragma once

#include <chrono>
#include <string>

#include "trainyard/common/json.h"
#include "trainyard/common/status.h"
#include "trainyard/http/client.h"

namespace trainyard::http {

// Tries in all, and the backoff before the second (doubling after).
inline constexpr int kApiCallAttempts = 5;
inline constexpr int kApiFirstRetryDelayMs = 400;

// A call to `url` that answers a 2xx ClientResponse, or the error as a Status. `timeout`
// bounds each try.
Result<ClientResponse> CallApi(const std::string& method, const std::string& url,
                               const std::string& token, const std::string& body,
                               const std::string& content_type, const std::string& what,
                               std::chrono::seconds timeout = std::chrono::seconds(60));

// A JSON call: the body is serialized (none for GET) and the answer parsed as an object
// (an empty answer is {}).
Result<json::object> CallApiJson(const std::string& method, const std::string& url,
                                 const std::string& token, const json::object& body,
                                 const std::string& what,
                                 std::chrono::seconds timeout = std::chrono::seconds(60));

}  // namespace trainyard::http
