#include "trainyard/api/uc_json.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "trainyard/api/api.h"

namespace trainyard::api {

std::string_view UcErrorCode(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kInvalidArgument:
      return "INVALID_ARGUMENT";
    case StatusCode::kNotFound:
      return "NOT_FOUND";
    case StatusCode::kAlreadyExists:
      return "ALREADY_EXISTS";
    case StatusCode::kPermissionDenied:
      return "PERMISSION_DENIED";
    case StatusCode::kUnauthenticated:
      return "UNAUTHENTICATED";
    case StatusCode::kFailedPrecondition:
      return "FAILED_PRECONDITION";
    case StatusCode::kResourceExhausted:
      return "RESOURCE_EXHAUSTED";
    case StatusCode::kNotImplemented:
      return "UNIMPLEMENTED";
    case StatusCode::kUnavailable:
      return "UNAVAILABLE";
    case StatusCode::kInternal:
    case StatusCode::kIOError:
      return "INTERNAL";
  }
  return "INTERNAL";
}

int UcHttpStatus(StatusCode code) {
  if (code == StatusCode::kAlreadyExists) return 409;
  return HttpStatusFor(code);
}

http::Response UcErrorResponse(const Status& status) {
  int http_status = UcHttpStatus(status.code());
  if (http_status >= 500) spdlog::error("unity catalog request failed: {}", status.ToString());
  json::object o{{"error_code", UcErrorCode(status.code())}, {"message", status.message()}};
  http::Response r = http::Response::Json(http_status, json::serialize(o));
  if (http_status == 401) r.headers.emplace_back("WWW-Authenticate", "Bearer");
  return r;
}

Result<UcPage> ReadUcPage(const json::object& body) {
  UcPage page;
  auto it = body.find("max_results");
  if (it != body.end() && !it->value().is_null()) {
    auto n = AsInt64(it->value(), "max_results");
    if (!n.ok() || *n < 0) {
      return Status::InvalidArgument("max_results must be a non-negative integer (got " +
                                     DescribeJson(it->value()) + "); at most " +
                                     std::to_string(kUcMaxResults) + " are returned per page");
    }
    if (*n > 0) page.max_results = std::min(*n, kUcMaxResults);
  }
  TY_ASSIGN_OR_RETURN(auto token, OptionalString(body, "page_token"));
  page.page_token = token.value_or("");
  return page;
}

Result<std::vector<std::pair<std::string, std::string>>> ReadStringMap(const json::object& body,
                                                                       std::string_view field) {
  std::vector<std::pair<std::string, std::string>> out;
  TY_ASSIGN_OR_RETURN(const json::object* map, OptionalObject(body, field));
  if (map == nullptr) return out;
  for (const auto& [key, value] : *map) {
    if (!value.is_string()) {
      return Status::InvalidArgument(std::string(field) + "." + std::string(key) +
                                     " must be a string (got " + DescribeJson(value) + ")");
    }
    out.emplace_back(std::string(key), std::string(value.as_string()));
  }
  return out;
}

}  // namespace trainyard::api
