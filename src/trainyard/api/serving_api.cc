#include "trainyard/api/serving_api.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <memory>

#include "trainyard/common/strings.h"
#include "trainyard/http/client.h"

namespace trainyard::api {
namespace {

using http::Method;
using serving::Flavor;

constexpr auto kReplicaTimeout = std::chrono::seconds(300);
constexpr size_t kCaptureLimit = 64 << 10;  // bytes of each body handed to the capture

std::string_view OpenAiErrorType(int status) {
  if (status == 401) return "authentication_error";
  if (status == 403) return "permission_error";
  if (status == 404) return "not_found_error";
  if (status < 500) return "invalid_request_error";
  return "server_error";
}

http::Response OpenAiError(const Status& status) {
  int code = HttpStatusFor(status.code());
  json::object error{{"message", status.message()},
                     {"type", OpenAiErrorType(code)},
                     {"code", MlflowErrorCode(status.code())},
                     {"param", nullptr}};
  return http::Response::Json(code, json::serialize(json::object{{"error", std::move(error)}}));
}

// A request over one of the endpoint's rate limits: 429 with Retry-After, in OpenAI's shape
// (the `openai` client raises RateLimitError) or Databricks' (REQUEST_LIMIT_EXCEEDED).
http::Response RateLimited(const Status& status, const serving::RateDecision& d, bool openai) {
  json::object body;
  if (openai) {
    body["error"] = json::object{{"message", status.message()},
                                 {"type", d.tokens ? "tokens" : "requests"},
                                 {"code", "rate_limit_exceeded"},
                                 {"param", nullptr}};
  } else {
    body = json::object{{"error_code", "REQUEST_LIMIT_EXCEEDED"}, {"message", status.message()}};
  }
  http::Response r = http::Response::Json(429, json::serialize(body));
  r.headers.emplace_back("Retry-After", std::to_string(d.retry_after_seconds));
  return r;
}

json::array GrantsToJson(const std::vector<serving::EndpointGrant>& grants) {
  json::array out;
  for (const auto& g : grants) {
    out.push_back(json::object{{"principal", g.principal}, {"privilege", g.privilege}});
  }
  return out;
}

std::string Truncated(const std::string& body) {
  return body.size() > kCaptureLimit ? body.substr(0, kCaptureLimit + 1) : body;
}

enum class Kind { kInvocations, kChat, kCompletions };

// Where a request goes on a replica of `flavor`.
Result<std::string> UpstreamPath(Kind kind, Flavor flavor, const json::object& body) {
  if (flavor == Flavor::kPyfunc) return std::string("/invocations");
  switch (kind) {
    case Kind::kChat:
      return std::string("/v1/chat/completions");
    case Kind::kCompletions:
      return std::string("/v1/completions");
    case Kind::kInvocations:
      if (body.contains("messages")) return std::string("/v1/chat/completions");
      if (body.contains("prompt")) return std::string("/v1/completions");
      return Status::InvalidArgument(
          "an LLM endpoint's invocations take an OpenAI chat body (\"messages\") or a "
          "completions body (\"prompt\")");
  }
  return std::string("/invocations");
}

// What one streamed answer holds until its last piece (or until the client goes away).
struct StreamState {
  serving::ServingService* serving = nullptr;
  serving::Lease lease;
  std::unique_ptr<http::ClientStream> upstream;
  serving::CaptureRecord record;
  std::chrono::steady_clock::time_point start;
  bool ended = false;

  ~StreamState() {
    record.latency_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::steady_clock::now() - start)
                            .count();
    if (!ended) record.status = 499;  // the client went away before the end
    ChargeTokens();  // once: done at the end already, or what a client that went away used
    serving->capture().Enqueue(std::move(record));
  }

  bool Next(std::string& piece) {
    auto more = upstream->Next(piece);
    if (!more.ok()) {
      lease.ReportFailure();
      json::object error{{"message", "the replica serving this request failed: " +
                                         more.status().message() + "; retry the request"},
                         {"type", "server_error"},
                         {"code", "REPLICA_FAILED"}};
      piece += "data: " + json::serialize(json::object{{"error", std::move(error)}}) + "\n\n";
      record.status = 502;
      ended = true;
      Capture(piece);
      return false;
    }
    Capture(piece);
    if (!*more) ended = true;
    return *more;
  }

  // Charges the answer's tokens to the endpoint's token limits (once).
  void ChargeTokens() {
    if (lease.rate_charge.charges_tokens()) {
      lease.rate_charge.ChargeTokens(serving::AnswerTokens(record.response_body));
    }
  }

  void Capture(const std::string& piece) {
    if (record.response_body.size() <= kCaptureLimit) {
      record.response_body += piece.substr(0, kCaptureLimit + 1 - record.response_body.size());
    } else if (piece.find("\"usage\"") != std::string::npos) {
      // The usage arrives in one of the last events: keep it for the token counts.
      record.response_body += piece;
    }
  }
};

// The replica's stream passed through to the client; the state (and with it the upstream
// connection and the capture record) goes when the server lets go of the body.
class ProxiedBody : public http::BodyStream {
 public:
  explicit ProxiedBody(std::shared_ptr<StreamState> state) : state_(std::move(state)) {}
  bool Next(std::string* chunk) override {
    bool more = state_->Next(*chunk);
    // Charged before the stream's end reaches the client, so that its next request sees it:
    // at the last event ("data: [DONE]", which comes before the body's end, and after which
    // the client already sends its next request), or at the body's end for a stream without it.
    if (!more || chunk->find("data: [DONE]") != std::string::npos) state_->ChargeTokens();
    return more;
  }
  void Cancel() override {}  // the client is gone: ~StreamState records it (499)

 private:
  std::shared_ptr<StreamState> state_;
};

// Sends one request to a replica of endpoint `name` and passes its answer back.
http::Response Forward(serving::ServingService& serving, Call& c, const std::string& name,
                       Kind kind, http::Response (*render_error)(const Status&)) {
  auto start = std::chrono::steady_clock::now();
  std::string request_id = serving.NewRequestId();
  auto fail = [&](const Status& s) {
    http::Response r = render_error(s);
    r.headers.emplace_back("x-request-id", request_id);
    return r;
  };
  serving::RateDecision limited;
  auto lease = serving.Acquire(c.principal, name, &limited);
  if (!lease.ok() && !limited.allowed) {
    http::Response r = RateLimited(lease.status(), limited, render_error == OpenAiError);
    r.headers.emplace_back("x-request-id", request_id);
    return r;
  }
  if (!lease.ok()) return fail(lease.status());
  auto path = UpstreamPath(kind, lease->flavor, c.body);
  if (!path.ok()) return fail(path.status());
  serving::CaptureRecord record;
  record.endpoint = name;
  record.served_entity = lease->served_entity;
  record.model = lease->model;
  record.model_version = lease->model_version;
  record.capture_table = lease->capture_table;
  record.owner = lease->owner;
  record.request_id = request_id;
  record.timestamp_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
  record.path = *path;
  record.user = c.principal.user;
  record.request_body = Truncated(c.request.body);
  std::map<std::string, std::string> headers{{"Content-Type", "application/json"},
                                             {"x-request-id", request_id}};
  std::string url = lease->url + *path;
  auto stream_it = c.body.find("stream");
  bool stream = lease->flavor == Flavor::kLlm && stream_it != c.body.end() &&
                stream_it->value().is_bool() && stream_it->value().as_bool();
  auto finish = [&](http::Response r) {
    if (r.status == 200 && lease->rate_charge.charges_tokens()) {
      lease->rate_charge.ChargeTokens(serving::AnswerTokens(r.body));
    }
    r.headers.emplace_back("x-request-id", request_id);
    r.headers.emplace_back("x-served-entity", lease->served_entity);
    record.status = r.status;
    record.response_body = Truncated(r.body);
    record.latency_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::steady_clock::now() - start)
                            .count();
    serving.capture().Enqueue(std::move(record));
    return r;
  };
  auto replica_failed = [&](const Status& s) {
    lease->ReportFailure();
    http::Response r =
        render_error(Status::Unavailable("replica " + lease->replica_id + " of endpoint '" + name +
                                         "' failed: " + s.message() + "; retry the request"));
    r.status = 502;
    return finish(std::move(r));
  };
  if (!stream) {
    auto answer = http::Fetch("POST", url, headers, c.request.body, kReplicaTimeout);
    if (!answer.ok()) return replica_failed(answer.status());
    http::Response r;
    r.status = answer->status;
    auto ct = answer->headers.find("content-type");
    r.content_type = ct != answer->headers.end() ? ct->second : "application/json";
    r.body = std::move(answer->body);
    return finish(std::move(r));
  }
  auto upstream = http::ClientStream::Open("POST", url, headers, c.request.body, kReplicaTimeout);
  if (!upstream.ok()) return replica_failed(upstream.status());
  if ((*upstream)->status() != 200) {
    // An error comes as one JSON body: read it whole.
    http::Response r;
    r.status = (*upstream)->status();
    while (true) {
      auto more = (*upstream)->Next(r.body);
      if (!more.ok() || !*more) break;
    }
    return finish(std::move(r));
  }
  auto state = std::make_shared<StreamState>();
  state->serving = &serving;
  state->upstream = std::move(*upstream);
  state->start = start;
  record.status = 200;
  state->record = std::move(record);
  http::Response r;
  r.status = 200;
  auto ct = state->upstream->headers().find("content-type");
  r.content_type = ct != state->upstream->headers().end() ? ct->second : "text/event-stream";
  r.headers.emplace_back("x-request-id", request_id);
  r.headers.emplace_back("x-served-entity", lease->served_entity);
  r.headers.emplace_back("cache-control", "no-cache");
  state->lease = std::move(*lease);
  r.stream = std::make_shared<ProxiedBody>(std::move(state));
  return r;
}

// The endpoint an OpenAI request names in `model`.
Result<std::string> ModelField(const json::object& body) {
  TY_ASSIGN_OR_RETURN(auto model, OptionalString(body, "model"));
  if (!model || model->empty()) {
    return Status::InvalidArgument("model is required: the name of the serving endpoint");
  }
  return *model;
}

json::value ModelsList(serving::ServingService& serving, Call& c) {
  json::array data;
  auto list = serving.List(c.principal);
  if (list.ok()) {
    for (const auto& s : *list) {
      data.push_back(json::object{{"id", s.endpoint.name},
                                  {"object", "model"},
                                  {"created", s.endpoint.created_at / 1000},
                                  {"owned_by", s.endpoint.owner}});
    }
  }
  return json::object{{"object", "list"}, {"data", std::move(data)}};
}

}  // namespace

json::object EndpointStateToJson(const serving::EndpointState& s) {
  json::object o = serving::EndpointConfigToJson(s.endpoint.config);
  o["name"] = s.endpoint.name;
  o["owner"] = s.endpoint.owner;
  o["created_at"] = s.endpoint.created_at;
  o["updated_at"] = s.endpoint.updated_at;
  o["grants"] = GrantsToJson(s.grants);
  json::array entities;
  int ready = 0;
  for (const auto& e : s.entities) {
    json::object eo{
        {"name", e.name}, {"target_replicas", e.target_replicas}, {"restarts", e.restarts}};
    if (!e.last_error.empty()) eo["last_error"] = e.last_error;
    entities.push_back(std::move(eo));
  }
  o["entity_states"] = std::move(entities);
  json::array replicas;
  for (const auto& r : s.replicas) {
    if (r.state == "READY") ++ready;
    replicas.push_back(json::object{{"id", r.id},
                                    {"served_entity", r.served_entity},
                                    {"model_version", r.model_version},
                                    {"flavor", r.flavor},
                                    {"state", r.state},
                                    {"url", r.url},
                                    {"outstanding", r.outstanding},
                                    {"served", r.served},
                                    {"started_at", r.started_at},
                                    {"log", r.log},
                                    {"pid", r.pid},
                                    {"job_id", r.job_id},
                                    {"pending_reason", r.pending_reason}});
  }
  o["replicas"] = std::move(replicas);
  bool all_pending = !s.replicas.empty();
  for (const auto& r : s.replicas) all_pending = all_pending && r.state == "PENDING";
  // PENDING: every replica waits in the scheduler's queue for its resources.
  o["state"] =
      ready > 0 ? "READY"
                : (s.replicas.empty() ? "SCALED_TO_ZERO" : (all_pending ? "PENDING" : "STARTING"));
  json::object capture{
      {"path", s.capture_path}, {"captured", s.capture.captured}, {"dropped", s.capture.dropped}};
  if (!s.endpoint.config.capture_table.empty()) {
    capture["table"] = s.endpoint.config.capture_table;
    capture["table_captured"] = s.capture.table_captured;
    capture["table_dropped"] = s.capture.table_dropped;
    capture["table_pending"] = s.capture.table_pending;
    capture["table_retrying"] = s.capture.table_retrying;
    if (s.capture.table_version >= 0) capture["table_version"] = s.capture.table_version;
    if (!s.capture.table_error.empty()) capture["table_error"] = s.capture.table_error;
  }
  o["capture"] = std::move(capture);
  if (s.last_request_at > 0) o["last_request_at"] = s.last_request_at;
  return o;
}

namespace {

constexpr int64_t kMaxRecentRequests = 200;

int64_t Percentile(const std::vector<int64_t>& sorted, double q) {
  if (sorted.empty()) return 0;
  size_t i = static_cast<size_t>(q * static_cast<double>(sorted.size() - 1) + 0.5);
  return sorted[std::min(i, sorted.size() - 1)];
}

// GET /endpoints/{name}/requests?limit=N: the last N captured requests (newest first) with
// their bodies, and latency figures over them. MANAGE on the endpoint: the bodies are other
// callers' requests. Reads the capture through serving::ReadRecentCaptures only.
Result<json::value> RecentRequests(serving::ServingService& sv, Call& c) {
  const std::string& name = c.request.path_params.at("name");
  TY_ASSIGN_OR_RETURN(auto limit, OptionalInt64(c.body, "limit"));
  int64_t n = limit.value_or(20);
  if (n < 1 || n > kMaxRecentRequests) {
    return Status::InvalidArgument("limit must be between 1 and " +
                                   std::to_string(kMaxRecentRequests) + " (got " +
                                   std::to_string(n) + ")");
  }
  TY_RETURN_IF_ERROR(sv.AuthorizeManage(c.principal, name));
  TY_ASSIGN_OR_RETURN(auto records, serving::ReadRecentCaptures(sv.capture().PathFor(name),
                                                                static_cast<size_t>(n)));
  std::vector<int64_t> latencies;
  int64_t errors = 0;
  json::array out;
  for (auto& r : records) {
    if (auto it = r.find("latency_ms"); it != r.end() && it->value().is_int64()) {
      latencies.push_back(it->value().as_int64());
    }
    if (auto it = r.find("status");
        it != r.end() && it->value().is_int64() && it->value().as_int64() >= 400) {
      ++errors;
    }
    out.emplace_back(std::move(r));
  }
  std::sort(latencies.begin(), latencies.end());
  json::object latency{{"count", static_cast<int64_t>(latencies.size())},
                       {"p50_ms", Percentile(latencies, 0.5)},
                       {"p95_ms", Percentile(latencies, 0.95)},
                       {"max_ms", latencies.empty() ? 0 : latencies.back()}};
  return json::object{
      {"requests", std::move(out)}, {"latency", std::move(latency)}, {"errors", errors}};
}

}  // namespace

void RegisterServingRoutes(Api& api, serving::ServingService& serving) {
  serving::ServingService* sv = &serving;
  api.Route(Method::kPost, kTrainyardPrefixes, "/endpoints", [sv](Call& c) -> Result<json::value> {
    TY_ASSIGN_OR_RETURN(auto state, sv->Create(c.principal, c.body));
    return EndpointStateToJson(state);
  });
  api.Route(Method::kGet, kTrainyardPrefixes, "/endpoints", [sv](Call& c) -> Result<json::value> {
    TY_ASSIGN_OR_RETURN(auto list, sv->List(c.principal));
    json::array out;
    for (const auto& s : list) out.push_back(EndpointStateToJson(s));
    return json::object{{"endpoints", std::move(out)}};
  });
  api.Route(Method::kGet, kTrainyardPrefixes, "/endpoints/{name}",
            [sv](Call& c) -> Result<json::value> {
              TY_ASSIGN_OR_RETURN(auto s, sv->Get(c.principal, c.request.path_params.at("name")));
              return EndpointStateToJson(s);
            });
  api.Route(Method::kPatch, kTrainyardPrefixes, "/endpoints/{name}",
            [sv](Call& c) -> Result<json::value> {
              TY_ASSIGN_OR_RETURN(
                  auto s, sv->Update(c.principal, c.request.path_params.at("name"), c.body));
              return EndpointStateToJson(s);
            });
  api.Route(Method::kDelete, kTrainyardPrefixes, "/endpoints/{name}",
            [sv](Call& c) -> Result<json::value> {
              TY_RETURN_IF_ERROR(sv->Delete(c.principal, c.request.path_params.at("name")));
              return json::object{};
            });
  auto grant = [sv](bool add) {
    return [sv, add](Call& c) -> Result<json::value> {
      TY_ASSIGN_OR_RETURN(std::string principal, RequiredString(c.body, "principal"));
      TY_ASSIGN_OR_RETURN(auto privilege, OptionalString(c.body, "privilege"));
      std::string p = privilege.value_or("QUERY");
      for (char& ch : p) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
      const std::string& name = c.request.path_params.at("name");
      TY_RETURN_IF_ERROR(add ? sv->Grant(c.principal, name, principal, p)
                             : sv->Revoke(c.principal, name, principal, p));
      TY_ASSIGN_OR_RETURN(auto s, sv->Get(c.principal, name));
      return json::object{{"grants", GrantsToJson(s.grants)}};
    };
  };
  api.Route(Method::kGet, kTrainyardPrefixes, "/endpoints/{name}/my-permissions",
            [sv](Call& c) -> Result<json::value> {
              const std::string& name = c.request.path_params.at("name");
              TY_RETURN_IF_ERROR(sv->Get(c.principal, name).status());
              return ActionDecisionsJson({{"manage", sv->AuthorizeManage(c.principal, name)}});
            });
  api.Route(Method::kGet, kTrainyardPrefixes, "/endpoints/{name}/requests",
            [sv](Call& c) { return RecentRequests(*sv, c); });
  api.Route(Method::kPost, kTrainyardPrefixes, "/endpoints/{name}/permissions", grant(true));
  api.Route(Method::kDelete, kTrainyardPrefixes, "/endpoints/{name}/permissions", grant(false));

  api.ServingRoute(
      Method::kPost, "/serving-endpoints/{name}/invocations",
      [sv](Call& c) -> Result<http::Response> {
        return Forward(*sv, c, c.request.path_params.at("name"), Kind::kInvocations, ErrorResponse);
      },
      ErrorResponse);
  for (const std::string prefix : {"/serving-endpoints", "/v1"}) {
    for (auto [path, kind] : {std::pair{"/chat/completions", Kind::kChat},
                              std::pair{"/completions", Kind::kCompletions}}) {
      Kind k = kind;
      api.ServingRoute(
          Method::kPost, prefix + path,
          [sv, k](Call& c) -> Result<http::Response> {
            auto name = ModelField(c.body);
            if (!name.ok()) return OpenAiError(name.status());
            return Forward(*sv, c, *name, k, OpenAiError);
          },
          OpenAiError);
    }
    api.ServingRoute(
        Method::kGet, prefix + "/models",
        [sv](Call& c) -> Result<http::Response> {
          return http::Response::Json(200, json::serialize(ModelsList(*sv, c)));
        },
        OpenAiError);
  }
}

}  // namespace trainyard::api
