#include "trainyard/train/server_api.h"

#include <chrono>
#include <map>
#include <thread>

#include "trainyard/common/strings.h"
#include "trainyard/http/client.h"

namespace trainyard::train {
namespace {

std::map<std::string, std::string> AuthHeaders(const std::string& token,
                                               const std::string& content_type) {
  std::map<std::string, std::string> h;
  if (!token.empty()) h["Authorization"] = "Bearer " + token;
  if (!content_type.empty()) h["Content-Type"] = content_type;
  return h;
}

// Calls to the server: tries in all, and the backoff before the second (doubling after).
constexpr int kCallAttempts = 5;
constexpr int kFirstRetryDelayMs = 400;
// How much of an error body that is not the server's JSON goes into the message.
constexpr size_t kErrorBodyChars = 300;

// The server's error body {"error_code", "message"} as a Status.
Status HttpError(const http::ClientResponse& r, const std::string& what) {
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

Result<ServerReply> CallServer(const std::string& method, const std::string& url,
                               const std::string& token, const std::string& body,
                               const std::string& content_type, const std::string& what) {
  // Transient failures (the server restarting, 5xx) are retried with backoff.
  Status last;
  for (int attempt = 0; attempt < kCallAttempts; ++attempt) {
    if (attempt > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(kFirstRetryDelayMs << (attempt - 1)));
    }
    auto r = http::Fetch(method, url, AuthHeaders(token, content_type), body);
    if (!r.ok()) {
      last = Status(r.status().code(), what + ": " + r.status().message());
      continue;
    }
    if (r->status >= 200 && r->status < 300) {
      return ServerReply{r->status, std::move(r->body), std::move(r->headers)};
    }
    last = HttpError(*r, what);
    if (r->status < 500) return last;
  }
  return last;
}

Result<json::object> CallServerJson(const std::string& method, const std::string& url,
                                    const std::string& token, const json::object& body,
                                    const std::string& what) {
  std::string payload = method == "GET" ? std::string() : json::serialize(body);
  TY_ASSIGN_OR_RETURN(auto r, CallServer(method, url, token, payload,
                                         method == "GET" ? "" : "application/json", what));
  if (r.body.empty()) return json::object{};
  auto parsed = ParseJsonObject(r.body);
  if (!parsed.ok()) {
    return Status::Unavailable(what + ": the server answered with invalid JSON");
  }
  return std::move(*parsed);
}

std::string StripSlash(std::string url) {
  while (!url.empty() && url.back() == '/') url.pop_back();
  return url;
}

}  // namespace trainyard::train
