// The API layer's shared plumbing. Every endpoint is registered through Api::Route,
// which authenticates the caller (Bearer token → identity::Principal), decodes
// the request (a JSON body, or for GET the query string turned into an object),
// calls the handler, and encodes its result or error. Mutating calls are audited: a
// successful one's record is committed before the response goes out; failed
// authentications are audited (rate-limited per client address).
//
// CheckHeader is the HTTP server's check of a request before its body is read: unknown
// routes get 404/405 and callers without valid credentials 401 (public routes aside), so
// nobody unauthenticated can make the server read, buffer or store a body.
//
// Errors: one table (HttpStatusFor / MlflowErrorCode) maps Status codes to HTTP
// statuses and MLflow error codes; bodies are {"error_code": ..., "message": ...}.
//
// Handlers are thin: decode → call a service with the caller's Principal (the services
// authorize, through identity::Authorizer) → encode. Thread-safe after all routes are
// registered.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "trainyard/common/json.h"
#include "trainyard/common/status.h"
#include "trainyard/http/router.h"
#include "trainyard/http/server.h"
#include "trainyard/identity/identity_service.h"

namespace trainyard::api {

int HttpStatusFor(StatusCode code);
std::string_view MlflowErrorCode(StatusCode code);
http::Response ErrorResponse(const Status& status);
// For errors raised below the API (unknown route, body too large).
http::Response TransportErrorResponse(int http_status, const std::string& message);

struct Call {
  const identity::Principal& principal;
  const json::object& body;  // JSON body, or the query string for GET/DELETE without a body
  http::Request& request;
};

// A handler returns the JSON response body, or a Status for an error.
using JsonHandler = std::function<Result<json::value>(Call&)>;
// A handler that builds its own Response (artifact downloads).
using RawHandler = std::function<Result<http::Response>(Call&)>;
// A hot path's decoder of the raw body (call.request.body; call.body is empty): it answers
// the requests it can decode without a JSON tree, and returns nullopt for the others, which
// then go to the route's JsonHandler with the body parsed.
using FastJsonHandler = std::function<std::optional<Result<json::value>>(Call&)>;
// A GET's handler tried first on the HTTP server's I/O thread (ServerOptions::answer_inline),
// for the caller authenticated from identity's cache: it must not block, answering from
// memory (the services' caches and indexes) or returning nullopt, whereupon the request goes
// to the route's JsonHandler on a worker as usual.
using InlineJsonHandler = std::function<std::optional<Result<json::value>>(Call&)>;

class Api {
 public:
  Api(http::Router& router, identity::IdentityService& identity, Clock& clock)
      : router_(router), identity_(identity), clock_(clock) {}

  // Registers `path` under each prefix (e.g. "/api/2.0/mlflow" and "/ajax-api/2.0/mlflow").
  void Route(http::Method method, const std::vector<std::string>& prefixes, const std::string& path,
             JsonHandler handler);
  // The same, trying `fast` first on requests whose body would be parsed as JSON.
  void Route(http::Method method, const std::vector<std::string>& prefixes, const std::string& path,
             JsonHandler handler, FastJsonHandler fast);
  void RawRoute(http::Method method, const std::vector<std::string>& prefixes,
                const std::string& path, RawHandler handler);
  // Renders a handler's error (or a body that is not JSON) for APIs whose error table
  // differs from MLflow's (the Unity Catalog API: UcErrorResponse in uc_api.h).
  using ErrorRenderer = http::Response (*)(const Status&);
  // The same as Route, with the route's errors rendered by `render_error`.
  void RouteRenderingErrors(http::Method method, const std::vector<std::string>& prefixes,
                            const std::string& path, JsonHandler handler,
                            ErrorRenderer render_error);
  // The same, trying `inline_handler` first on the I/O thread (GET routes only).
  void RouteRenderingErrors(http::Method method, const std::vector<std::string>& prefixes,
                            const std::string& path, JsonHandler handler,
                            ErrorRenderer render_error, InlineJsonHandler inline_handler);
  // A serving route (a model's invocations): raw bodies, errors rendered by `render_error`,
  // job tokens allowed (the endpoint's grants decide), and its audit record queued without
  // waiting for it to be committed (a query changes nothing; its capture is its record).
  void ServingRoute(http::Method method, const std::string& path, RawHandler handler,
                    ErrorRenderer render_error);
  // Routes reachable without a token (health checks).
  void PublicRoute(http::Method method, const std::string& path, JsonHandler handler);
  // A route reachable without a token whose handler builds its own response, unaudited
  // (the web UI's static files: the page must load before the user can sign in).
  void PublicRawRoute(http::Method method, const std::string& path, http::Handler handler);

  identity::IdentityService& identity() { return identity_; }
  Clock& clock() { return clock_; }

  // For http::ServerOptions::check_header: judges a request by its header alone.
  http::HeaderVerdict CheckHeader(const http::Request& request, bool may_block);

 private:
  using RawFastHandler = std::function<std::optional<Result<http::Response>>(Call&)>;
  // `scoped_may_call`: whether a job's scoped token may call this route (ScopedTokenMayCall).
  http::Response Serve(http::Request& request, const RawHandler& handler, bool authenticate,
                       const RawFastHandler* fast = nullptr, bool scoped_may_call = true,
                       ErrorRenderer render_error = nullptr, bool audit_durably = true);
  http::Response Unauthenticated(const http::Request& request, const Status& status);
  // The inline half of a route (see InlineJsonHandler): nullopt unless the request is a GET
  // without a body whose caller authenticates from the cache and `handler` answers it.
  std::optional<http::Response> ServeInline(http::Request& request,
                                            const InlineJsonHandler& handler, bool scoped_may_call,
                                            ErrorRenderer render_error);

  http::Router& router_;
  http::Router public_routes_;  // the routes reachable without a token (handlers unused)
  identity::IdentityService& identity_;
  Clock& clock_;
};

extern const std::vector<std::string> kMlflowPrefixes;     // /api/2.0/mlflow, /ajax-api/2.0/mlflow
extern const std::vector<std::string> kTrainyardPrefixes;  // /api/trainyard/v1

// Whether a job's scoped token may call a route (`path` without its prefix): reads, and of
// the writes only its run's logging, its job's heartbeats and checkpoints, and searches sent
// as POST. IdentityService::Authorize then limits those to the job's own run and job.
bool ScopedTokenMayCall(http::Method method, std::string_view path);

// Reads a repeated string field (JSON array, or a single string from a query string).
Result<std::vector<std::string>> StringList(const json::object& o, std::string_view field);

// One action of a ".../my-permissions" answer, decided by the same check the action's route
// makes: {action, allowed, reason}, the reason being the refusal's message (what is missing
// and who may grant it), "" when allowed. The web UI disables what is not allowed and shows
// the reason; the action's route still decides for itself.
json::object ActionDecisionJson(std::string_view action, const Status& decision);
// {"actions": [...]} of the above.
json::object ActionDecisionsJson(const std::vector<std::pair<std::string, Status>>& decisions);

}  // namespace trainyard::api
