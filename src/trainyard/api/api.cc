#include "trainyard/api/api.h"

#include <spdlog/spdlog.h>

#include "trainyard/api/query_token.h"
#include "trainyard/common/strings.h"
#include "trainyard/identity/query_scope.h"

namespace trainyard::api {

const std::vector<std::string> kMlflowPrefixes = {"/api/2.0/mlflow", "/ajax-api/2.0/mlflow"};
const std::vector<std::string> kTrainyardPrefixes = {"/api/trainyard/v1"};

namespace {
// The longest path and message kept in the audit record of a failed authentication
// (anyone can send those, so their size is bounded).
constexpr size_t kMaxAuditedTextLength = 512;
}  // namespace

int HttpStatusFor(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return 200;
    case StatusCode::kInvalidArgument:
      return 400;
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kAlreadyExists:
      return 400;
    case StatusCode::kPermissionDenied:
      return 403;
    case StatusCode::kUnauthenticated:
      return 401;
    case StatusCode::kFailedPrecondition:
      return 400;
    case StatusCode::kResourceExhausted:
      // Insufficient Storage: every producer is the server's disk or memory running out.
      // A request over a size limit is refused by the HTTP layer (413) before it gets here,
      // and limits on counts are InvalidArgument (400), as in MLflow.
      return 507;
    case StatusCode::kNotImplemented:
      return 501;
    case StatusCode::kUnavailable:
      return 503;
    case StatusCode::kInternal:
      return 500;
    case StatusCode::kIOError:
      return 500;
  }
  return 500;
}

std::string_view MlflowErrorCode(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kInvalidArgument:
      return "INVALID_PARAMETER_VALUE";
    case StatusCode::kNotFound:
      return "RESOURCE_DOES_NOT_EXIST";
    case StatusCode::kAlreadyExists:
      return "RESOURCE_ALREADY_EXISTS";
    case StatusCode::kPermissionDenied:
      return "PERMISSION_DENIED";
    case StatusCode::kUnauthenticated:
      return "UNAUTHENTICATED";
    case StatusCode::kFailedPrecondition:
      return "INVALID_STATE";
    case StatusCode::kResourceExhausted:
      return "RESOURCE_EXHAUSTED";
    case StatusCode::kNotImplemented:
      return "NOT_IMPLEMENTED";
    case StatusCode::kUnavailable:
      return "TEMPORARILY_UNAVAILABLE";
    case StatusCode::kInternal:
      return "INTERNAL_ERROR";
    case StatusCode::kIOError:
      return "INTERNAL_ERROR";
  }
  return "INTERNAL_ERROR";
}

static http::Response RenderError(int http_status, std::string_view code,
                                  const std::string& message) {
  json::object o;
  o["error_code"] = code;
  o["message"] = message;
  http::Response r = http::Response::Json(http_status, json::serialize(o));
  if (http_status == 401) r.headers.emplace_back("WWW-Authenticate", "Bearer");
  return r;
}

http::Response ErrorResponse(const Status& status) {
  int http_status = HttpStatusFor(status.code());
  if (http_status >= 500) spdlog::error("request failed: {}", status.ToString());
  return RenderError(http_status, MlflowErrorCode(status.code()), status.message());
}

http::Response TransportErrorResponse(int http_status, const std::string& message) {
  std::string_view code = "BAD_REQUEST";
  if (http_status == 404) code = "ENDPOINT_NOT_FOUND";
  if (http_status == 413) code = "INVALID_PARAMETER_VALUE";
  if (http_status >= 500) code = "INTERNAL_ERROR";
  return RenderError(http_status, code, message);
}

json::object ActionDecisionJson(std::string_view action, const Status& decision) {
  return json::object{{"action", action},
                      {"allowed", decision.ok()},
                      {"reason", decision.ok() ? std::string() : decision.message()}};
}

json::object ActionDecisionsJson(const std::vector<std::pair<std::string, Status>>& decisions) {
  json::array out;
  for (const auto& [action, decision] : decisions) {
    out.emplace_back(ActionDecisionJson(action, decision));
  }
  return json::object{{"actions", std::move(out)}};
}

Result<std::vector<std::string>> StringList(const json::object& o, std::string_view field) {
  std::vector<std::string> out;
  auto it = o.find(field);
  if (it == o.end() || it->value().is_null()) return out;
  if (it->value().is_string()) {
    out.emplace_back(it->value().as_string());
    return out;
  }
  if (!it->value().is_array()) {
    return Status::InvalidArgument(std::string(field) + " must be an array of strings (got " +
                                   DescribeJson(it->value()) + ")");
  }
  for (const auto& v : it->value().as_array()) {
    TY_ASSIGN_OR_RETURN(std::string s, AsString(v, std::string(field) + "[]"));
    out.push_back(std::move(s));
  }
  return out;
}

// Query parameters become an object: one value → a string, several → an array.
static json::object QueryToObject(const http::Request& request) {
  json::object o;
  for (const auto& [name, values] : request.query) {
    if (values.size() == 1) {
      o[name] = values[0];
    } else {
      json::array a;
      for (const auto& v : values) a.emplace_back(v);
      o[name] = std::move(a);
    }
  }
  return o;
}

static std::string BearerToken(const http::Request& request) {
  std::string auth = request.Header("authorization");
  if (StartsWith(auth, "Bearer ") || StartsWith(auth, "bearer ")) return Trim(auth.substr(7));
  return "";
}

http::Response Api::Unauthenticated(const http::Request& request, const Status& status) {
  identity::AuditRecord record;
  record.timestamp = clock_.NowMillis();
  record.method = std::string(http::MethodName(request.method));
  record.path = Abbreviate(request.path, kMaxAuditedTextLength);
  record.status = 401;
  record.remote = request.remote_address;
  record.detail = Abbreviate(status.message(), kMaxAuditedTextLength);
  identity_.AuditFailedAuthentication(std::move(record));
  return ErrorResponse(status);
}

http::HeaderVerdict Api::CheckHeader(const http::Request& request, bool may_block) {
  if (!router_.Matches(request.method, request.path)) {
    http::Request copy = request;  // the router renders 404 or 405; no handler runs
    return http::HeaderVerdict::Refuse(router_.Dispatch(copy));
  }
  if (public_routes_.Matches(request.method, request.path)) return http::HeaderVerdict::Accept();
  std::string token = BearerToken(request);
  std::optional<Result<identity::Principal>> p =
      may_block ? std::optional<Result<identity::Principal>>(identity_.Authenticate(token))
                : identity_.AuthenticateCached(token);
  if (!p) return http::HeaderVerdict::RetryOnWorker();
  if (!p->ok()) return http::HeaderVerdict::Refuse(Unauthenticated(request, p->status()));
  return http::HeaderVerdict::Accept();
}

bool ScopedTokenMayCall(http::Method method, std::string_view path) {
  if (method == http::Method::kGet || method == http::Method::kHead) return true;
  static const std::vector<std::pair<http::Method, std::string_view>> kAllowed = {
      // The run's own logging (the calls mlflow's client and the trainer make).
      {http::Method::kPost, "/runs/update"},
      {http::Method::kPost, "/runs/log-metric"},
      {http::Method::kPost, "/runs/log-parameter"},
      {http::Method::kPost, "/runs/set-tag"},
      {http::Method::kPost, "/runs/delete-tag"},
      {http::Method::kPost, "/runs/log-batch"},
      {http::Method::kPost, "/runs/log-inputs"},
      {http::Method::kPost, "/runs/outputs"},
      {http::Method::kPost, "/runs/log-model"},
      {http::Method::kPost, "/logged-models"},
      {http::Method::kPatch, "/logged-models/{model_id}"},
      {http::Method::kPatch, "/logged-models/{model_id}/tags"},
      {http::Method::kPost, "/logged-models/{model_id}/params"},
      {http::Method::kPut, "/artifacts/{path...}"},
      {http::Method::kPost, "/mpu/create/{path...}"},
      {http::Method::kPost, "/mpu/complete/{path...}"},
      {http::Method::kPost, "/mpu/abort/{path...}"},
      // Reads sent as POST.
      {http::Method::kPost, "/runs/search"},
      {http::Method::kPost, "/experiments/search"},
      {http::Method::kPost, "/logged-models/search"},
      {http::Method::kPost, "/registered-models/search"},
      {http::Method::kPost, "/registered-models/get-latest-versions"},
      {http::Method::kPost, "/model-versions/search"},
      {http::Method::kPost, "/temporary-table-credentials"},  // UC: a table the job may read
      // UC: the user's grants decide, as for tables.
      {http::Method::kPost, "/temporary-model-version-credentials"},
      {http::Method::kPost, "/temporary-volume-credentials"},
      {http::Method::kPost, "/temporary-path-credentials"},
      // Catalog table data a workload writes (a prep pipeline's outputs, a job's results):
      // the catalog decides with the grants of the job's principal (its submitter, or the
      // service principal it runs as), as for reads: MODIFY on the table, CREATE TABLE on the
      // schema for a new one. Lineage records the write by the job's run.
      {http::Method::kPost, "/tables/{full_name}/import"},
      // The job's own sign of life and checkpoints.
      {http::Method::kPost, "/jobs/{job_id}/heartbeat"},
      {http::Method::kPost, "/jobs/{job_id}/checkpoints"},
      {http::Method::kPost, "/checkpoints/uploads"},
      {http::Method::kPut, "/checkpoints/uploads/{upload_id}/blob"},
      {http::Method::kPost, "/checkpoints/uploads/{upload_id}/commit"},
      {http::Method::kDelete, "/checkpoints/uploads/{upload_id}"},
      {http::Method::kPost, "/checkpoints/jobs/{job_id}/steps/{step}/verify"},
      {http::Method::kDelete, "/checkpoints/jobs/{job_id}/steps/{step}"},
      {http::Method::kPut, "/checkpoints/jobs/{job_id}/retention"},
  };
  for (const auto& [m, p] : kAllowed) {
    if (m == method && p == path) return true;
  }
  return false;
}

bool QueryOnlyTokenMayCall(http::Method method, std::string_view path) {
  if (method == http::Method::kGet)
    return path == "/serving-endpoints/models" || path == "/v1/models";
  if (method != http::Method::kPost) return false;
  if (path == "/serving-endpoints/chat/completions" || path == "/serving-endpoints/completions" ||
      path == "/v1/chat/completions" || path == "/v1/completions") {
    return true;
  }
  // /serving-endpoints/{name}/invocations
  constexpr std::string_view kPrefix = "/serving-endpoints/", kSuffix = "/invocations";
  if (!StartsWith(path, kPrefix) || path.size() <= kPrefix.size() + kSuffix.size() ||
      path.substr(path.size() - kSuffix.size()) != kSuffix) {
    return false;
  }
  std::string_view name =
      path.substr(kPrefix.size(), path.size() - kPrefix.size() - kSuffix.size());
  return name.find('/') == std::string_view::npos;
}

http::Response Api::Serve(http::Request& request, const RawHandler& handler, bool authenticate,
                          const RawFastHandler* fast, bool scoped_may_call,
                          ErrorRenderer render_error, bool audit_durably) {
  if (render_error == nullptr) render_error = ErrorResponse;
  identity::Principal principal;
  if (authenticate) {
    auto p = identity_.Authenticate(BearerToken(request));
    if (!p.ok()) return Unauthenticated(request, p.status());
    principal = std::move(p).value();
  }
  if (identity::IsQueryOnly(principal) && !QueryOnlyTokenMayCall(request.method, request.path)) {
    http::Response denied = render_error(Status::PermissionDenied(
        "a query-only token may not call " + std::string(http::MethodName(request.method)) + " " +
        request.path +
        "; it may only query serving endpoints (POST /serving-endpoints/{name}/invocations and "
        "the OpenAI routes). Use a full token ('trainyard token create') for anything else"));
    identity_.Audit(identity::AuditRecord{clock_.NowMillis(), principal.user,
                                          std::string(http::MethodName(request.method)),
                                          request.path, denied.status, request.remote_address});
    return denied;
  }
  if (!principal.scope.empty() && !scoped_may_call) {
    http::Response denied = render_error(Status::PermissionDenied(
        "a token scoped to " + principal.scope + " may not call " +
        std::string(http::MethodName(request.method)) + " " + request.path +
        "; a job's token may only log to its run, heartbeat and save its checkpoints (use the "
        "owner's own token for anything else)"));
    identity_.Audit(identity::AuditRecord{clock_.NowMillis(), principal.user,
                                          std::string(http::MethodName(request.method)),
                                          request.path, denied.status, request.remote_address});
    return denied;
  }
  json::object body;
  bool has_body = request.body_file.empty() && !Trim(request.body).empty();
  bool parse_body = has_body && (request.method != http::Method::kPut ||
                                 request.Header("content-type").find("json") != std::string::npos);
  std::optional<Result<http::Response>> result;
  if (parse_body && fast) {
    Call call{principal, body, request};
    result = (*fast)(call);
  }
  if (!result) {
    if (parse_body) {
      auto parsed = ParseJsonObject(request.body);
      if (!parsed.ok()) return render_error(parsed.status());
      body = std::move(parsed).value();
    } else {
      body = QueryToObject(request);
    }
    Call call{principal, body, request};
    result = handler(call);
  }
  http::Response response =
      result->ok() ? std::move(*result).value() : render_error(result->status());
  bool mutating = request.method != http::Method::kGet && request.method != http::Method::kHead;
  if (authenticate && mutating) {
    identity::AuditRecord record{
        clock_.NowMillis(), principal.user,  std::string(http::MethodName(request.method)),
        request.path,       response.status, request.remote_address};
    if (response.status >= 400 || !audit_durably) {
      identity_.Audit(std::move(record));  // nothing changed: no need to wait
    } else if (Status audited = identity_.AuditDurably(std::move(record)); !audited.ok()) {
      // Acknowledging a change whose audit record is lost would break the audit's promise.
      return render_error(Status::Internal(
          "the request was carried out, but its audit record could not be written (" +
          audited.message() + "); see the server's log"));
    }
  }
  return response;
}

void Api::RawRoute(http::Method method, const std::vector<std::string>& prefixes,
                   const std::string& path, RawHandler handler) {
  auto shared = std::make_shared<RawHandler>(std::move(handler));
  bool scoped = ScopedTokenMayCall(method, path);
  for (const auto& prefix : prefixes) {
    router_.Add(method, prefix + path, [this, shared, scoped](http::Request& r) {
      return Serve(r, *shared, true, nullptr, scoped);
    });
  }
}

static RawHandler WrapJson(JsonHandler handler) {
  return [handler = std::move(handler)](Call& call) -> Result<http::Response> {
    auto result = handler(call);
    if (!result.ok()) return result.status();
    return http::Response::Json(200, json::serialize(*result));
  };
}

void Api::Route(http::Method method, const std::vector<std::string>& prefixes,
                const std::string& path, JsonHandler handler) {
  RawRoute(method, prefixes, path, WrapJson(std::move(handler)));
}

void Api::Route(http::Method method, const std::vector<std::string>& prefixes,
                const std::string& path, JsonHandler handler, FastJsonHandler fast) {
  auto raw = std::make_shared<RawHandler>(WrapJson(std::move(handler)));
  auto raw_fast = std::make_shared<RawFastHandler>(
      [fast = std::move(fast)](Call& call) -> std::optional<Result<http::Response>> {
        std::optional<Result<json::value>> result = fast(call);
        if (!result) return std::nullopt;
        if (!result->ok()) return Result<http::Response>(result->status());
        return Result<http::Response>(http::Response::Json(200, json::serialize(**result)));
      });
  bool scoped = ScopedTokenMayCall(method, path);
  for (const auto& prefix : prefixes) {
    router_.Add(method, prefix + path, [this, raw, raw_fast, scoped](http::Request& r) {
      return Serve(r, *raw, true, raw_fast.get(), scoped);
    });
  }
}

void Api::RouteRenderingErrors(http::Method method, const std::vector<std::string>& prefixes,
                               const std::string& path, JsonHandler handler,
                               ErrorRenderer render_error) {
  auto shared = std::make_shared<RawHandler>(WrapJson(std::move(handler)));
  bool scoped = ScopedTokenMayCall(method, path);
  for (const auto& prefix : prefixes) {
    router_.Add(method, prefix + path, [this, shared, scoped, render_error](http::Request& r) {
      return Serve(r, *shared, true, nullptr, scoped, render_error);
    });
  }
}

void Api::RouteRenderingErrors(http::Method method, const std::vector<std::string>& prefixes,
                               const std::string& path, JsonHandler handler,
                               ErrorRenderer render_error, InlineJsonHandler inline_handler) {
  auto shared = std::make_shared<RawHandler>(WrapJson(std::move(handler)));
  auto shared_inline = std::make_shared<InlineJsonHandler>(std::move(inline_handler));
  bool scoped = ScopedTokenMayCall(method, path);
  for (const auto& prefix : prefixes) {
    router_.Add(
        method, prefix + path,
        [this, shared, scoped, render_error](http::Request& r) {
          return Serve(r, *shared, true, nullptr, scoped, render_error);
        },
        [this, shared_inline, scoped, render_error](http::Request& r) {
          return ServeInline(r, *shared_inline, scoped, render_error);
        });
  }
}

std::optional<http::Response> Api::ServeInline(http::Request& request,
                                               const InlineJsonHandler& handler,
                                               bool scoped_may_call, ErrorRenderer render_error) {
  // Writes are audited durably and bodies parsed: those take the worker path (Serve).
  if (request.method != http::Method::kGet || !request.body.empty()) return std::nullopt;
  // A failed or uncached authentication goes to Serve too, which audits the failure.
  std::optional<Result<identity::Principal>> principal =
      identity_.AuthenticateCached(BearerToken(request));
  if (!principal || !principal->ok()) return std::nullopt;
  if (!(*principal)->scope.empty() && !scoped_may_call) return std::nullopt;
  if (identity::IsQueryOnly(**principal)) return std::nullopt;  // Serve refuses it
  json::object body = QueryToObject(request);
  Call call{**principal, body, request};
  std::optional<Result<json::value>> result = handler(call);
  if (!result) return std::nullopt;
  if (!result->ok()) return render_error(result->status());
  return http::Response::Json(200, json::serialize(**result));
}

void Api::ServingRoute(http::Method method, const std::string& path, RawHandler handler,
                       ErrorRenderer render_error) {
  auto shared = std::make_shared<RawHandler>(std::move(handler));
  router_.Add(method, path, [this, shared, render_error](http::Request& r) {
    return Serve(r, *shared, true, nullptr, true, render_error, false);
  });
}

void Api::PublicRoute(http::Method method, const std::string& path, JsonHandler handler) {
  auto shared = std::make_shared<RawHandler>(WrapJson(std::move(handler)));
  router_.Add(method, path, [this, shared](http::Request& r) { return Serve(r, *shared, false); });
  public_routes_.Add(method, path, [](http::Request&) { return http::Response(); });
}

void Api::PublicRawRoute(http::Method method, const std::string& path, http::Handler handler) {
  router_.Add(method, path, std::move(handler));
  public_routes_.Add(method, path, [](http::Request&) { return http::Response(); });
}

}  // namespace trainyard::api
