#include "trainyard/http/api_call.h"

#include <map>
#include <thread>

#include "trainyard/common/strings.h"

namespace trainyard::http {
namespace {

// How much of an error body that is not the server's JSON goes into the message.
constexpr size_t kErrorBodyChars = 300;

// The server's error body {"error_code", "message"} as a Status.
Status HttpError(const ClientResponse& r, const std::string& what) {
  std::string message = Abbreviate(r.body, kErrorBodyChars);
  auto parsed = ParseJsonObject(r.body);
  if (parsed.ok()) {
    auto m = OptionalString(*parsed, "message");
    if (m.ok() && *m) message = **m;
  }
  std::string text = what + ": HTTP " + std::to_string(r.status) + ": " + message;
  if (r.status == 401 || r.status == 403) return Status::PermissionDenied(text);
  if (r.status == 404) return Status::NotFound(text);
  if (r.status >= 500) return Status::Unavailable(text);
  return Status::InvalidArgument(text);
}

}  // namespace

Result<ClientResponse> CallApi(const std::string& method, const std::string& url,
                               const std::string& token, const std::string& body,
                               const std::string& content_type, const std::string& what,
                               std::chrono::seconds timeout) {
  std::map<std::string, std::string> headers;
  if (!token.empty()) headers["Authorization"] = "Bearer " + token;
  if (!content_type.empty()) headers["Content-Type"] = content_type;
  Status last;
  for (int attempt = 0; attempt < kApiCallAttempts; ++attempt) {
    if (attempt > 0) {
      // Backoff between retries of a failed call (the server restarting), not synchronization.
      std::this_thread::sleep_for(
          std::chrono::milliseconds(kApiFirstRetryDelayMs << (attempt - 1)));
    }
    auto r = Fetch(method, url, headers, body, timeout);
    if (!r.ok()) {
      last = Status(r.status().code(), what + ": " + r.status().message());
      continue;
    }
    if (r->status >= 200 && r->status < 300) return std::move(*r);
    last = HttpError(*r, what);
    if (r->status < 500) return last;
  }
  return last;
}

Result<json::object> CallApiJson(const std::string& method, const std::string& url,
                                 const std::string& token, const json::object& body,
                                 const std::string& what, std::chrono::seconds timeout) {
  std::string payload = method == "GET" ? std::string() : json::serialize(body);
  TY_ASSIGN_OR_RETURN(auto r, CallApi(method, url, token, payload,
                                      method == "GET" ? "" : "application/json", what, timeout));
  if (r.body.empty()) return json::object{};
  auto parsed = ParseJsonObject(r.body);
  if (!parsed.ok()) return Status::Unavailable(what + ": the server answered with invalid JSON");
  return std::move(*parsed);
}

}  // namespace trainyard::http
