#include "trainyard/serving/serving_service.h"

#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <tuple>

#include "trainyard/common/strings.h"
#include "trainyard/identity/query_scope.h"

namespace trainyard::serving {
namespace {

namespace fs = std::filesystem;

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

// A free TCP port on this machine (bound and released: another process could take it before
// the replica binds it; the replica then fails to start, its job fails and serving starts
// another). Only for replicas on this machine: those on cluster nodes pick their own.
Result<int> FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::IOError("cannot create a socket to find a free port");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    return Status::IOError("cannot bind a socket to find a free port");
  }
  int port = ntohs(addr.sin_port);
  ::close(fd);
  return port;
}

std::string ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The last line of a replica's log: what it said before it died.
std::string LogTail(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  in.seekg(0, std::ios::end);
  std::streamoff size = in.tellg();
  std::streamoff from = std::max<std::streamoff>(0, size - 400);
  in.seekg(from);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  text = Trim(text);
  size_t nl = text.rfind('\n');
  return Abbreviate(nl == std::string::npos ? text : text.substr(nl + 1), 300);
}

std::string_view StateName(int s) {
  switch (s) {
    case 0:
      return "PENDING";
    case 1:
      return "STARTING";
    case 2:
      return "READY";
    default:
      return "STOPPING";
  }
}

std::string EntityKey(const ServedEntity& e) {
  return e.name + "|" + e.model + "|" + (e.version ? std::to_string(*e.version) : "") + "|" +
         e.alias + "|" + e.flavor;
}

}  // namespace

Lease& Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    if (service_ != nullptr) service_->Release(replica_id);
    endpoint = std::move(other.endpoint);
    served_entity = std::move(other.served_entity);
    model = std::move(other.model);
    model_version = other.model_version;
    flavor = other.flavor;
    capture_table = std::move(other.capture_table);
    owner = std::move(other.owner);
    replica_id = std::move(other.replica_id);
    url = std::move(other.url);
    rate_charge = std::move(other.rate_charge);
    service_ = std::exchange(other.service_, nullptr);
  }
  return *this;
}

Lease::~Lease() {
  if (service_ != nullptr) service_->Release(replica_id);
}

void Lease::ReportFailure() {
  if (service_ != nullptr) service_->MarkSuspect(replica_id);
}

ServingService::ServingService(store::Database& db, Clock& clock, Random& random,
                               identity::IdentityService& identity,
                               registry::RegistryService& registry, ReplicaLauncher& launcher,
                               CaptureWriter& capture, LocationResolver resolver, HealthProbe probe,
                               ServingOptions options)
    : clock_(clock),
      random_(random),
      identity_(identity),
      registry_(registry),
      launcher_(launcher),
      capture_(capture),
      resolver_(std::move(resolver)),
      probe_(std::move(probe)),
      options_(std::move(options)),
      store_(db),
      rate_buckets_(db) {}

ServingService::~ServingService() { Stop(); }

Status ServingService::Start() {
  TY_ASSIGN_OR_RETURN(auto endpoints, store_.List());
  std::vector<Runtime> runtimes;
  for (auto& e : endpoints) {
    Runtime rt;
    TY_ASSIGN_OR_RETURN(rt.grants, store_.Grants(e.name));
    rt.endpoint = std::move(e);
    runtimes.push_back(std::move(rt));
  }
  launcher_.SetExitCallback(
      [this](const std::string& id, const ReplicaEnd& end) { OnExit(id, end); });
  launcher_.EndLeftovers();
  // The rate limits' buckets as the last run left them (rate_limiter.h).
  if (auto saved = rate_buckets_.Load(); saved.ok()) {
    Status s = rate_buckets_.Delete(limiter_.Restore(*saved));
    if (!s.ok()) spdlog::warn("serving: cannot forget full rate buckets: {}", s.message());
  } else {
    spdlog::warn("serving: rate limits start with full buckets: cannot load the saved ones: {}",
                 saved.status().message());
  }
  {
    MutexLock lock(mu_);
    run_tag_ = random_.Hex(4);
    for (auto& rt : runtimes) Install(std::move(rt));
    started_ = true;
  }
  loop_ = std::thread([this] { Loop(); });
  return Status::Ok();
}

void ServingService::Stop() {
  {
    MutexLock lock(mu_);
    if (stop_) return;
    stop_ = true;
  }
  loop_cv_.NotifyAll();
  ready_cv_.NotifyAll();
  if (loop_.joinable()) loop_.join();
}

std::string ServingService::NewRequestId() { return random_.Hex(16); }

ServingService::Runtime* ServingService::FindLocked(const std::string& name) {
  auto it = endpoints_.find(name);
  return it == endpoints_.end() ? nullptr : &it->second;
}

void ServingService::Install(Runtime rt) {
  Runtime* existing = FindLocked(rt.endpoint.name);
  std::map<std::string, Pool> pools;
  for (const auto& e : rt.endpoint.config.served_entities) {
    Pool pool;
    pool.entity = e;
    if (existing) {
      // An entity that did not change keeps its replicas and its state.
      auto it = existing->pools.find(e.name);
      if (it != existing->pools.end() && EntityKey(it->second.entity) == EntityKey(e)) {
        pool = it->second;
      }
    }
    pool.target =
        std::clamp(pool.target, rt.endpoint.config.min_replicas, rt.endpoint.config.max_replicas);
    pools[e.name] = std::move(pool);
  }
  // Replicas of entities that went away (or changed) stop.
  for (auto& [id, r] : replicas_) {
    if (r.endpoint != rt.endpoint.name) continue;
    auto it = pools.find(r.entity);
    bool kept = existing && it != pools.end() && existing->pools.count(r.entity) &&
                EntityKey(existing->pools.at(r.entity).entity) == EntityKey(it->second.entity);
    if (!kept) StopReplicaLocked(r);
  }
  rt.pools = std::move(pools);
  if (existing) {
    rt.last_activity = existing->last_activity;
    rt.last_request_at = existing->last_request_at;
  } else {
    rt.last_activity = clock_.MonotonicNow();
  }
  endpoints_[rt.endpoint.name] = std::move(rt);
  loop_cv_.NotifyAll();
  ready_cv_.NotifyAll();
}

bool ServingService::MayQuery(const identity::Principal& who, const std::string& owner,
                              const std::vector<EndpointGrant>& grants) {
  if (who.is_admin && who.scope.empty()) return true;
  if (who.user == owner) return true;
  for (const auto& g : grants) {
    if (g.principal == who.user) return true;
  }
  if (grants.empty()) return false;
  auto of = identity_.GroupsOf(who.user);
  if (!of.ok() || !*of) return false;
  for (const auto& g : grants) {
    if (std::binary_search((*of)->begin(), (*of)->end(), g.principal)) return true;
  }
  return false;
}

Status ServingService::AuthorizeManage(const identity::Principal& who, const Runtime& rt) {
  if (who.is_admin && who.scope.empty()) return Status::Ok();
  if (who.user == rt.endpoint.owner && who.scope.empty()) return Status::Ok();
  std::vector<EndpointGrant> manage;
  for (const auto& g : rt.grants) {
    if (g.privilege == "MANAGE") manage.push_back(g);
  }
  if (who.scope.empty() && MayQuery(who, "", manage)) return Status::Ok();
  return Status::PermissionDenied("only the owner of endpoint '" + rt.endpoint.name + "' (" +
                                  rt.endpoint.owner +
                                  "), an admin or a holder of MANAGE on it may change it");
}

Status ServingService::CheckResources(const ReplicaResources& resources) {
  if (!options_.check_resources) return Status::Ok();
  Status s = options_.check_resources(resources);
  if (s.ok()) return s;
  return Status::InvalidArgument("resources: a replica could never be placed: " + s.message());
}

Status ServingService::CheckProject(const Endpoint& e) {
  if (!options_.check_project) return Status::Ok();
  Status s = options_.check_project(e.owner, e.config.project);
  if (s.ok()) return s;
  return Status(s.code(), "project: " + s.message());
}

Status ServingService::CheckCaptureTable(const Endpoint& e) {
  if (e.config.capture_table.empty()) return Status::Ok();
  if (!options_.check_capture_table) {
    return Status::FailedPrecondition(
        "capture.table: this server cannot write capture tables (it has no catalog)");
  }
  return options_.check_capture_table(e.owner, e.config.capture_table);
}

Result<IndexedRequest> ServingService::FindRequest(const identity::Principal& who,
                                                   const std::string& request_id) {
  RequestIndex* index = capture_.index();
  if (index == nullptr) return Status::NotFound("this server keeps no request index");
  TY_ASSIGN_OR_RETURN(IndexedRequest r, index->Find(request_id));
  if (who.is_admin && who.scope.empty()) return r;
  MutexLock lock(mu_);
  Runtime* rt = FindLocked(r.endpoint);
  // A request of an endpoint deleted since is only the admins' to trace; to anyone else the
  // request is as unknown as the endpoint.
  if (!rt) return Status::NotFound("request '" + request_id + "' was not captured by any endpoint");
  Status s = AuthorizeManage(who, *rt);
  if (!s.ok()) {
    if (!MayQuery(who, rt->endpoint.owner, rt->grants)) {
      return Status::NotFound("request '" + request_id + "' was not captured by any endpoint");
    }
    return Status::PermissionDenied(
        "tracing request '" + request_id + "' needs MANAGE on endpoint '" + r.endpoint +
        "'; ask its owner (" + rt->endpoint.owner + ") or an admin to grant it");
  }
  return r;
}

Result<ServingService::Resolved> ServingService::Resolve(const ServedEntity& e,
                                                         const std::string& field) {
  Result<registry::ModelVersion> mv = e.version
                                          ? registry_.GetModelVersion(e.model, *e.version)
                                          : registry_.GetModelVersionByAlias(e.model, e.alias);
  if (!mv.ok()) {
    if (mv.status().code() == StatusCode::kNotFound) {
      return Status::NotFound(field + ": " + mv.status().message());
    }
    return mv.status();
  }
  if (mv->status != registry::ModelVersionStatus::kReady) {
    return Status::FailedPrecondition(
        field + ": version " + std::to_string(mv->version) + " of model " + e.model +
        " is not READY (it is " + std::string(registry::ModelVersionStatusName(mv->status)) + ")");
  }
  Resolved r;
  r.version = mv->version;
  auto dir = resolver_(mv->storage_location);
  if (!dir.ok()) {
    return Status::FailedPrecondition(field + ": version " + std::to_string(mv->version) +
                                      " of model " + e.model + ": " + dir.status().message());
  }
  r.dir = *dir;
  if (!e.flavor.empty()) {
    TY_ASSIGN_OR_RETURN(r.flavor, ParseFlavor(e.flavor, field + ".flavor"));
    return r;
  }
  std::error_code ec;
  if (fs::exists(r.dir + "/config.json", ec)) {
    r.flavor = Flavor::kLlm;
  } else if (fs::exists(r.dir + "/MLmodel", ec) &&
             ReadSmallFile(r.dir + "/MLmodel").find("python_function") != std::string::npos) {
    r.flavor = Flavor::kPyfunc;
  } else {
    return Status::FailedPrecondition(
        field + ": version " + std::to_string(mv->version) + " of model " + e.model +
        " has neither a Hugging Face config.json nor an MLflow MLmodel with the "
        "python_function flavor at " +
        mv->storage_location + "; register a model directory that has one");
  }
  return r;
}

Status ServingService::CheckEntities(const identity::Principal& who, const EndpointConfig& config) {
  for (size_t i = 0; i < config.served_entities.size(); ++i) {
    const auto& e = config.served_entities[i];
    std::string field = "served_entities[" + std::to_string(i) + "]";
    Status readable = registry_.AuthorizeRead(who, e.model);
    if (!readable.ok()) {
      if (readable.code() == StatusCode::kNotFound) {
        return Status::NotFound(field + ".model: registered model '" + e.model +
                                "' does not exist");
      }
      return Status(readable.code(), field + ".model: " + readable.message());
    }
    TY_RETURN_IF_ERROR(Resolve(e, field).status());
  }
  return Status::Ok();
}

Status ServingService::CheckRateLimitPrincipals(const EndpointConfig& config) {
  for (size_t i = 0; i < config.rate_limits.size(); ++i) {
    const RateLimit& l = config.rate_limits[i];
    if (l.principal.empty()) continue;
    std::string field = "rate_limits[" + std::to_string(i) + "].principal";
    auto kind = identity_.GetPrincipalKind(l.principal);
    bool group = l.key == RateLimitKey::kGroup;
    if (!kind.ok()) {
      if (kind.status().code() != StatusCode::kNotFound) return kind.status();
      return Status::InvalidArgument(field + ": no " + (group ? "group" : "user") + " named '" +
                                     l.principal + "'; list them with 'trainyard " +
                                     (group ? "groups" : "users") + " list'");
    }
    if (group != (*kind == identity::PrincipalKind::kGroup)) {
      return Status::InvalidArgument(field + ": '" + l.principal + "' is a " +
                                     std::string(identity::PrincipalKindName(*kind)) + ", not a " +
                                     (group ? "group" : "user") + "; use key " +
                                     (group ? "user" : "group") + " for it");
    }
  }
  return Status::Ok();
}

Result<EndpointState> ServingService::Create(const identity::Principal& who,
                                             const json::object& body) {
  if (!who.scope.empty()) {
    return Status::PermissionDenied("a job's scoped token may not create endpoints");
  }
  TY_ASSIGN_OR_RETURN(auto name, OptionalString(body, "name"));
  if (!name) return Status::InvalidArgument("name is required: the endpoint's name");
  TY_RETURN_IF_ERROR(ValidateEndpointName(*name));
  Endpoint e;
  e.name = *name;
  e.owner = who.user;
  e.created_at = e.updated_at = clock_.NowMillis();
  for (const auto& kv : body) {
    std::string_view k = kv.key();
    if (k != "name" && k != "served_entities" && k != "routes" && k != "traffic_config" &&
        k != "min_replicas" && k != "max_replicas" && k != "scale_to_zero_seconds" &&
        k != "target_concurrency" && k != "rate_limits" && k != "capture" && k != "resources" &&
        k != "project") {
      return Status::InvalidArgument(std::string(k) + " is not a field of an endpoint");
    }
  }
  if (!body.contains("served_entities")) {
    return Status::InvalidArgument(
        "served_entities is required: e.g. [{\"model\": \"my-model\", \"version\": 1}]");
  }
  TY_RETURN_IF_ERROR(DecodeEndpointConfig(body, e.config, options_.limits));
  TY_RETURN_IF_ERROR(CheckEntities(who, e.config));
  TY_RETURN_IF_ERROR(CheckRateLimitPrincipals(e.config));
  TY_RETURN_IF_ERROR(CheckCaptureTable(e));
  TY_RETURN_IF_ERROR(CheckResources(e.config.resources));
  TY_RETURN_IF_ERROR(CheckProject(e));
  TY_RETURN_IF_ERROR(store_.Create(e));
  EndpointState state;
  {
    MutexLock lock(mu_);
    Runtime rt;
    rt.endpoint = e;
    Install(std::move(rt));
    state = StateLocked(endpoints_.at(e.name));
  }
  NotifyServes(who, e.name, e.config.served_entities);
  return state;
}

Result<std::vector<EndpointState>> ServingService::List(const identity::Principal& who) {
  std::vector<std::pair<std::string, std::pair<std::string, std::vector<EndpointGrant>>>> all;
  {
    MutexLock lock(mu_);
    for (const auto& [name, rt] : endpoints_) {
      all.push_back({name, {rt.endpoint.owner, rt.grants}});
    }
  }
  std::set<std::string> visible;
  for (const auto& [name, access] : all) {
    if (!identity::QueryTokenAllows(who, name)) continue;
    if (MayQuery(who, access.first, access.second)) visible.insert(name);
  }
  std::vector<EndpointState> out;
  MutexLock lock(mu_);
  for (const auto& name : visible) {
    if (Runtime* rt = FindLocked(name)) out.push_back(StateLocked(*rt));
  }
  return out;
}

Result<EndpointState> ServingService::Get(const identity::Principal& who, const std::string& name) {
  std::string owner;
  std::vector<EndpointGrant> grants;
  {
    MutexLock lock(mu_);
    Runtime* rt = FindLocked(name);
    if (!rt) {
      return Status::NotFound("endpoint '" + name +
                              "' does not exist; list endpoints with 'trainyard endpoints list'");
    }
    owner = rt->endpoint.owner;
    grants = rt->grants;
  }
  if (!MayQuery(who, owner, grants)) {
    return Status::PermissionDenied(
        "you have no grant on endpoint '" + name + "'; ask its owner (" + owner +
        ") for QUERY: 'trainyard endpoints grant " + name + " QUERY <user>'");
  }
  MutexLock lock(mu_);
  Runtime* rt = FindLocked(name);
  if (!rt) return Status::NotFound("endpoint '" + name + "' does not exist");
  return StateLocked(*rt);
}

Result<EndpointState> ServingService::Update(const identity::Principal& who,
                                             const std::string& name, const json::object& body) {
  Endpoint e;
  {
    MutexLock lock(mu_);
    Runtime* rt = FindLocked(name);
    if (!rt) return Status::NotFound("endpoint '" + name + "' does not exist");
    TY_RETURN_IF_ERROR(AuthorizeManage(who, *rt));
    e = rt->endpoint;
  }
  for (const auto& kv : body) {
    std::string_view k = kv.key();
    if (k != "served_entities" && k != "routes" && k != "traffic_config" && k != "min_replicas" &&
        k != "max_replicas" && k != "scale_to_zero_seconds" && k != "target_concurrency" &&
        k != "rate_limits" && k != "name" && k != "capture" && k != "resources" && k != "project") {
      return Status::InvalidArgument(std::string(k) + " is not a field of an endpoint");
    }
  }
  if (body.contains("name")) {
    TY_ASSIGN_OR_RETURN(auto new_name, OptionalString(body, "name"));
    if (new_name && *new_name != name) {
      return Status::InvalidArgument("name cannot be changed (create a new endpoint instead)");
    }
  }
  TY_RETURN_IF_ERROR(DecodeEndpointConfig(body, e.config, options_.limits));
  if (body.contains("served_entities")) TY_RETURN_IF_ERROR(CheckEntities(who, e.config));
  if (body.contains("rate_limits")) TY_RETURN_IF_ERROR(CheckRateLimitPrincipals(e.config));
  if (body.contains("capture")) TY_RETURN_IF_ERROR(CheckCaptureTable(e));
  if (body.contains("resources")) TY_RETURN_IF_ERROR(CheckResources(e.config.resources));
  if (body.contains("project")) TY_RETURN_IF_ERROR(CheckProject(e));
  e.updated_at = clock_.NowMillis();
  TY_RETURN_IF_ERROR(store_.Update(e));
  EndpointState state;
  {
    MutexLock lock(mu_);
    Runtime* rt = FindLocked(name);
    if (!rt) return Status::NotFound("endpoint '" + name + "' does not exist");
    Runtime next;
    next.endpoint = e;
    next.grants = rt->grants;
    Install(std::move(next));
    state = StateLocked(endpoints_.at(name));
  }
  if (body.contains("served_entities")) NotifyServes(who, name, e.config.served_entities);
  return state;
}

Status ServingService::AuthorizeManage(const identity::Principal& who, const std::string& name) {
  MutexLock lock(mu_);
  Runtime* rt = FindLocked(name);
  if (!rt) return Status::NotFound("endpoint '" + name + "' does not exist");
  return AuthorizeManage(who, *rt);
}

Status ServingService::Delete(const identity::Principal& who, const std::string& name) {
  {
    MutexLock lock(mu_);
    Runtime* rt = FindLocked(name);
    if (!rt) return Status::NotFound("endpoint '" + name + "' does not exist");
    TY_RETURN_IF_ERROR(AuthorizeManage(who, *rt));
  }
  TY_RETURN_IF_ERROR(store_.Delete(name));
  {
    MutexLock lock(mu_);
    for (auto& [id, r] : replicas_) {
      if (r.endpoint == name) StopReplicaLocked(r);
    }
    endpoints_.erase(name);
    ready_cv_.NotifyAll();
  }
  NotifyServes(who, name, {});
  return Status::Ok();
}

void ServingService::NotifyServes(const identity::Principal& who, const std::string& endpoint,
                                  const std::vector<ServedEntity>& entities) {
  if (!serves_listener_) return;
  std::vector<ServedModelVersion> versions;
  for (const auto& e : entities) {
    auto mv = e.version ? registry_.GetModelVersion(e.model, *e.version)
                        : registry_.GetModelVersionByAlias(e.model, e.alias);
    if (!mv.ok()) continue;
    ServedModelVersion v{e.model, mv->version};
    if (std::find(versions.begin(), versions.end(), v) == versions.end()) versions.push_back(v);
  }
  serves_listener_(who, endpoint, versions);
}

Status ServingService::Grant(const identity::Principal& who, const std::string& name,
                             const std::string& principal, const std::string& privilege) {
  if (privilege != "QUERY" && privilege != "MANAGE") {
    return Status::InvalidArgument("privilege must be QUERY or MANAGE (got '" +
                                   Abbreviate(privilege) + "')");
  }
  if (principal.empty()) return Status::InvalidArgument("principal is required");
  TY_RETURN_IF_ERROR(identity_.GetPrincipalKind(principal).status());
  {
    MutexLock lock(mu_);
    Runtime* rt = FindLocked(name);
    if (!rt) return Status::NotFound("endpoint '" + name + "' does not exist");
    TY_RETURN_IF_ERROR(AuthorizeManage(who, *rt));
  }
  TY_RETURN_IF_ERROR(store_.Grant(name, {principal, privilege}));
  TY_ASSIGN_OR_RETURN(auto grants, store_.Grants(name));
  MutexLock lock(mu_);
  if (Runtime* rt = FindLocked(name)) rt->grants = std::move(grants);
  return Status::Ok();
}

Status ServingService::Revoke(const identity::Principal& who, const std::string& name,
                              const std::string& principal, const std::string& privilege) {
  {
    MutexLock lock(mu_);
    Runtime* rt = FindLocked(name);
    if (!rt) return Status::NotFound("endpoint '" + name + "' does not exist");
    TY_RETURN_IF_ERROR(AuthorizeManage(who, *rt));
  }
  TY_RETURN_IF_ERROR(store_.Revoke(name, {principal, privilege}));
  TY_ASSIGN_OR_RETURN(auto grants, store_.Grants(name));
  MutexLock lock(mu_);
  if (Runtime* rt = FindLocked(name)) rt->grants = std::move(grants);
  return Status::Ok();
}

EndpointState ServingService::StateLocked(const Runtime& rt) {
  EndpointState s;
  s.endpoint = rt.endpoint;
  s.grants = rt.grants;
  for (const auto& [name, pool] : rt.pools) {
    s.entities.push_back({name, pool.target, pool.restarts, pool.last_error});
  }
  for (const auto& [id, r] : replicas_) {
    if (r.endpoint != rt.endpoint.name) continue;
    s.replicas.push_back({r.id, r.entity, r.resolved.version,
                          std::string(FlavorName(r.resolved.flavor)),
                          std::string(StateName(static_cast<int>(r.state))), r.url, r.outstanding,
                          r.served, r.started_at, r.log, r.pid, r.job_id, r.pending_reason});
  }
  s.capture = capture_.Stats(rt.endpoint.name);
  s.capture_path = capture_.PathFor(rt.endpoint.name);
  s.last_request_at = rt.last_request_at;
  return s;
}

Result<Lease> ServingService::Acquire(const identity::Principal& who, const std::string& name,
                                      RateDecision* rate_limited) {
  std::string owner;
  std::vector<EndpointGrant> grants;
  std::vector<TrafficRoute> routes;
  std::vector<RateLimit> rate_limits;
  if (!identity::QueryTokenAllows(who, name)) {
    return Status::PermissionDenied("this query-only token may query only endpoint(s) " +
                                    who.scope.substr(identity::kQueryScope.size() + 1) + ", not '" +
                                    name +
                                    "'; create a token for it with "
                                    "'trainyard tokens create --query-only --endpoint " +
                                    name + "'");
  }
  {
    MutexLock lock(mu_);
    Runtime* rt = FindLocked(name);
    if (!rt) {
      return Status::NotFound("endpoint '" + name +
                              "' does not exist; list endpoints with 'trainyard endpoints list'");
    }
    owner = rt->endpoint.owner;
    grants = rt->grants;
    routes = rt->endpoint.config.routes;
    rate_limits = rt->endpoint.config.rate_limits;
  }
  if (!MayQuery(who, owner, grants)) {
    return Status::PermissionDenied("you may not query endpoint '" + name + "'; ask its owner (" +
                                    owner + ") for QUERY: 'trainyard endpoints grant " + name +
                                    " QUERY " + who.user + "'");
  }
  RateCharge rate_charge;
  if (!rate_limits.empty()) {
    std::shared_ptr<const std::vector<std::string>> groups;
    bool by_group = std::any_of(rate_limits.begin(), rate_limits.end(),
                                [](const RateLimit& l) { return l.key == RateLimitKey::kGroup; });
    if (by_group) {
      TY_ASSIGN_OR_RETURN(groups, identity_.GroupsOf(who.user));
    }
    RateDecision d =
        limiter_.Admit(name, rate_limits, who.user, groups ? *groups : std::vector<std::string>{});
    if (!d.allowed) {
      std::string message = "rate limit of endpoint '" + name + "' exceeded (" + d.limit +
                            "); retry after " + std::to_string(d.retry_after_seconds) + " s";
      if (rate_limited) *rate_limited = std::move(d);
      return Status::Unavailable(message);
    }
    rate_charge = std::move(d.charge);
  }
  // The traffic split: a uniform draw in [0, 100) per request.
  double draw = static_cast<double>(random_.Next64() >> 11) * 0x1.0p-53 * 100.0;
  std::string entity = routes[PickRoute(routes, draw)].served_entity;
  auto deadline = clock_.MonotonicNow() + options_.cold_start_wait;
  MutexLock lock(mu_);
  bool waiting = false;
  while (true) {
    Runtime* rt = FindLocked(name);
    auto pool_it = rt ? rt->pools.find(entity) : std::map<std::string, Pool>::iterator();
    if (!rt || pool_it == rt->pools.end()) {
      return Status::Unavailable("endpoint '" + name + "' changed while the request waited; retry");
    }
    Pool& pool = pool_it->second;
    rt->last_activity = clock_.MonotonicNow();
    rt->last_request_at = clock_.NowMillis();
    Replica* best = nullptr;
    for (auto& [id, r] : replicas_) {
      if (r.endpoint != name || r.entity != entity || r.state != ReplicaState::kReady) continue;
      if (!best || r.outstanding < best->outstanding ||
          (r.outstanding == best->outstanding && r.served < best->served)) {
        best = &r;
      }
    }
    if (best) {
      if (waiting) --pool.waiters;
      ++best->outstanding;
      ++best->served;
      Lease lease;
      lease.endpoint = name;
      lease.served_entity = entity;
      lease.model = pool.entity.model;
      lease.model_version = best->resolved.version;
      lease.flavor = best->resolved.flavor;
      lease.capture_table = rt->endpoint.config.capture_table;
      lease.owner = rt->endpoint.owner;
      lease.replica_id = best->id;
      lease.url = best->url;
      lease.rate_charge = std::move(rate_charge);
      lease.service_ = this;
      // Concurrency may call for another replica.
      loop_cv_.NotifyAll();
      return lease;
    }
    if (stop_) {
      if (waiting) --pool.waiters;
      return Status::Unavailable("the server is stopping");
    }
    if (!waiting) {
      waiting = true;
      ++pool.waiters;
      loop_cv_.NotifyAll();
    }
    if (clock_.MonotonicNow() >= deadline) {
      --pool.waiters;
      std::string why = pool.last_error.empty() ? "its replica is still starting"
                                                : "the last replica failed: " + pool.last_error;
      for (const auto& [id, r] : replicas_) {
        if (r.endpoint == name && r.entity == entity && r.state == ReplicaState::kPending) {
          why = "replica " + r.id + (r.job_id.empty() ? "" : " (job " + r.job_id + ")") +
                " waits for resources" + (r.pending_reason.empty() ? "" : ": " + r.pending_reason);
          break;
        }
      }
      return Status::Unavailable("endpoint '" + name + "' (served entity '" + entity +
                                 "') has no ready replica after " +
                                 std::to_string(options_.cold_start_wait.count() / 1000) + " s (" +
                                 why + "); retry, and see 'trainyard endpoints show " + name + "'");
    }
    ready_cv_.WaitUntil(mu_, std::min(deadline, clock_.MonotonicNow() + options_.tick));
  }
}

void ServingService::Release(const std::string& replica_id) {
  MutexLock lock(mu_);
  auto it = replicas_.find(replica_id);
  if (it != replicas_.end() && it->second.outstanding > 0) --it->second.outstanding;
  if (it != replicas_.end()) {
    if (Runtime* rt = FindLocked(it->second.endpoint)) rt->last_activity = clock_.MonotonicNow();
  }
}

void ServingService::MarkSuspect(const std::string& replica_id) {
  MutexLock lock(mu_);
  auto it = replicas_.find(replica_id);
  if (it != replicas_.end() && it->second.state == ReplicaState::kReady) {
    spdlog::warn("serving: replica {} failed a request; no more requests until it is healthy",
                 replica_id);
    it->second.state = ReplicaState::kStarting;
  }
  loop_cv_.NotifyAll();
}

void ServingService::StopReplicaLocked(Replica& r) {
  if (r.state == ReplicaState::kStopping) return;
  r.state = ReplicaState::kStopping;
  Status s = launcher_.Stop(r.id);
  if (!s.ok()) spdlog::info("serving: stopping replica {}: {}", r.id, s.ToString());
}

void ServingService::OnExit(const std::string& id, const ReplicaEnd& end) {
  MutexLock lock(mu_);
  auto it = replicas_.find(id);
  if (it == replicas_.end()) return;
  Replica r = std::move(it->second);
  replicas_.erase(it);
  if (r.state == ReplicaState::kStopping || end.stopped) {
    spdlog::info("serving: replica {} of endpoint {} stopped ({})", id, r.endpoint, end.cause);
    ready_cv_.NotifyAll();
    return;
  }
  Runtime* rt = FindLocked(r.endpoint);
  std::string message = "replica " + id + (r.job_id.empty() ? "" : " (job " + r.job_id + ")") +
                        " ended: " + end.cause + (r.log.empty() ? "" : " (log: " + r.log + ")");
  spdlog::warn("serving: {}; starting another", message);
  if (!rt) return;
  auto pool = rt->pools.find(r.entity);
  if (pool == rt->pools.end()) return;
  std::string tail = LogTail(r.log);
  ++pool->second.restarts;
  pool->second.last_error = tail.empty() ? message : message + ": " + tail;
  pool->second.not_before = clock_.MonotonicNow() + Backoff(pool->second.failures_in_a_row++);
  loop_cv_.NotifyAll();
}

std::chrono::milliseconds ServingService::Backoff(int failures) const {
  auto backoff = options_.restart_backoff;
  for (int i = 0; i < failures && backoff < options_.max_restart_backoff; ++i) backoff *= 2;
  return std::min(backoff, options_.max_restart_backoff);
}

void ServingService::Loop() {
  auto saved = clock_.MonotonicNow();
  while (true) {
    Tick();
    if (clock_.MonotonicNow() - saved >= options_.rate_limit_save) {
      SaveRateBuckets();
      saved = clock_.MonotonicNow();
    }
    MutexLock lock(mu_);
    if (stop_) break;
    loop_cv_.WaitFor(mu_, options_.tick);
    if (stop_) break;
  }
  SaveRateBuckets();
  launcher_.Shutdown(options_.stop_grace);
}

void ServingService::SaveRateBuckets() {
  auto changed = limiter_.TakeChanged();
  Status s = rate_buckets_.Save(changed);
  if (!s.ok()) {
    spdlog::warn("serving: cannot save {} rate limit buckets: {}", changed.size(), s.message());
  }
}

void ServingService::CheckAliases() {
  std::vector<std::tuple<std::string, std::string, ServedEntity>> due;  // endpoint, entity
  {
    MutexLock lock(mu_);
    auto now = clock_.MonotonicNow();
    for (auto& [name, rt] : endpoints_) {
      for (auto& [entity, pool] : rt.pools) {
        if (pool.entity.alias.empty() || now < pool.alias_checked + options_.alias_check) continue;
        pool.alias_checked = now;
        due.emplace_back(name, entity, pool.entity);
      }
    }
  }
  // Endpoints whose aliases resolved to another version (or for the first time since the
  // server started): what they serve goes to lineage, as their owners.
  std::map<std::string, std::pair<std::string, std::vector<ServedEntity>>> moved;
  for (const auto& [name, entity, served] : due) {
    auto mv = registry_.GetModelVersionByAlias(served.model, served.alias);
    if (!mv.ok()) continue;  // the next replica start reports it
    MutexLock lock(mu_);
    Runtime* rt = FindLocked(name);
    if (!rt) continue;
    auto pool = rt->pools.find(entity);
    if (pool == rt->pools.end()) continue;
    if (pool->second.alias_version != 0 && pool->second.alias_version != mv->version) {
      spdlog::info("serving: alias {}@{} of endpoint {} moved to version {}: rolling", served.model,
                   served.alias, name, mv->version);
    }
    if (pool->second.alias_version != mv->version) {
      moved[name] = {rt->endpoint.owner, rt->endpoint.config.served_entities};
    }
    pool->second.alias_version = mv->version;
  }
  for (const auto& [name, endpoint] : moved) {
    NotifyServes(identity::Principal{endpoint.first, false, "", ""}, name, endpoint.second);
  }
}

void ServingService::Tick() {
  CheckAliases();
  UpdatePlacements();
  std::vector<StartAction> starts;
  std::vector<std::pair<std::string, std::string>> probes;  // id, url
  {
    MutexLock lock(mu_);
    auto now = clock_.MonotonicNow();
    for (auto& [name, rt] : endpoints_) {
      const EndpointConfig& config = rt.endpoint.config;
      bool idle = config.scale_to_zero_seconds > 0 &&
                  now - rt.last_activity > std::chrono::seconds(config.scale_to_zero_seconds);
      for (auto& [entity, pool] : rt.pools) {
        std::vector<Replica*> live;   // current: what the pool counts
        std::vector<Replica*> stale;  // serving the version an alias pointed to before
        int outstanding = 0, ready = 0;
        for (auto& [id, r] : replicas_) {
          if (r.endpoint != name || r.entity != entity || r.state == ReplicaState::kStopping) {
            continue;
          }
          outstanding += r.outstanding;
          if (pool.alias_version != 0 && r.resolved.version != 0 &&
              r.resolved.version != pool.alias_version) {
            stale.push_back(&r);
            continue;
          }
          live.push_back(&r);
          if (r.state == ReplicaState::kReady) ++ready;
        }
        // The alias moved: replicas of the new version start (the pool counts only them), and
        // the old ones stop once one of the new is ready and they have nothing in flight.
        if (!stale.empty() && pool.target == 0) pool.target = 1;
        for (Replica* r : stale) {
          if (ready > 0 && r->outstanding == 0) StopReplicaLocked(*r);
        }
        if (pool.waiters > 0 && pool.target == 0) pool.target = 1;
        int demand = (outstanding + pool.waiters + config.target_concurrency - 1) /
                     config.target_concurrency;
        if (ready > 0 && demand > static_cast<int>(live.size())) {
          pool.target = std::max(pool.target, demand);
        }
        if (idle && outstanding == 0 && pool.waiters == 0) {
          pool.target = config.min_replicas;
          if (pool.target == 0) {
            for (Replica* r : stale) StopReplicaLocked(*r);
          }
        }
        pool.target = std::clamp(pool.target, config.min_replicas, config.max_replicas);
        int have = static_cast<int>(live.size());
        if (have < pool.target && !stop_ && now >= pool.not_before) {
          for (int i = have; i < pool.target; ++i) {
            Replica r;
            r.id = "ep-" + name + "-" + entity + "-" + run_tag_ + "-" +
                   std::to_string(next_replica_++);
            r.endpoint = name;
            r.entity = entity;
            r.started = now;
            r.started_at = clock_.NowMillis();
            starts.push_back({r.id, name, pool.entity});
            replicas_[r.id] = std::move(r);
          }
        } else if (have > pool.target) {
          // The idlest go first.
          std::sort(live.begin(), live.end(), [](const Replica* a, const Replica* b) {
            return a->outstanding < b->outstanding;
          });
          for (int i = 0; i < have - pool.target; ++i) {
            if (live[i]->outstanding == 0) StopReplicaLocked(*live[i]);
          }
        }
        for (Replica* r : live) {
          if (r->state != ReplicaState::kStarting) continue;
          if (now - r->started > options_.startup_timeout) {
            pool.last_error =
                "replica " + r->id +
                (r->url.empty() ? " did not report its port" : " did not pass its health check") +
                " within " + std::to_string(options_.startup_timeout.count() / 1000) +
                " s (log: " + r->log + ")";
            spdlog::warn("serving: {}; stopping it", pool.last_error);
            StopReplicaLocked(*r);
            continue;
          }
          if (r->url.empty()) continue;  // placed, its port not reported yet
          probes.push_back({r->id, r->url + r->health_path});
        }
      }
    }
  }
  for (const auto& action : starts) LaunchReplica(action);
  std::vector<std::string> healthy;
  for (const auto& [id, url] : probes) {
    if (probe_(url)) healthy.push_back(id);
  }
  if (healthy.empty()) return;
  MutexLock lock(mu_);
  for (const auto& id : healthy) {
    auto it = replicas_.find(id);
    if (it == replicas_.end() || it->second.state != ReplicaState::kStarting) continue;
    it->second.state = ReplicaState::kReady;
    spdlog::info("serving: replica {} of endpoint {} is ready at {} ({} ms after its start)", id,
                 it->second.endpoint, it->second.url,
                 std::chrono::duration_cast<std::chrono::milliseconds>(clock_.MonotonicNow() -
                                                                       it->second.started)
                     .count());
    if (Runtime* rt = FindLocked(it->second.endpoint)) {
      auto pool = rt->pools.find(it->second.entity);
      if (pool != rt->pools.end()) {
        pool->second.last_error.clear();
        pool->second.failures_in_a_row = 0;
      }
    }
  }
  ready_cv_.NotifyAll();
}

void ServingService::UpdatePlacements() {
  std::vector<std::string> placing;
  {
    MutexLock lock(mu_);
    for (const auto& [id, r] : replicas_) {
      bool unplaced = r.state == ReplicaState::kPending && r.launched;
      bool port_unknown = r.state == ReplicaState::kStarting && r.url.empty();
      if (unplaced || port_unknown) placing.push_back(id);
    }
  }
  if (placing.empty()) return;
  std::vector<std::pair<std::string, ReplicaPlacement>> placements;
  for (const auto& id : placing) placements.emplace_back(id, launcher_.Placement(id));
  MutexLock lock(mu_);
  for (auto& [id, p] : placements) {
    auto it = replicas_.find(id);
    if (it == replicas_.end()) continue;
    Replica& r = it->second;
    bool placed_before = r.state == ReplicaState::kStarting;
    if (!placed_before && r.state != ReplicaState::kPending) continue;
    if (placed_before && !r.url.empty()) continue;
    if (!p.job_id.empty()) r.job_id = p.job_id;
    if (p.state == ReplicaPlacement::State::kPending) {
      r.pending_reason = p.reason;
      continue;
    }
    if (p.state != ReplicaPlacement::State::kRunning) continue;  // the exit callback follows
    if (!placed_before) {
      r.state = ReplicaState::kStarting;
      r.pending_reason.clear();
      r.log = p.log;
      r.pid = p.pid;
      // The startup timeout counts from the placement, not from the wait in the queue.
      r.started = clock_.MonotonicNow();
    }
    if (p.port > 0) r.port = p.port;
    if (r.port <= 0) {
      // It picks its port on its node and reports it once it listens.
      if (!placed_before) {
        spdlog::info(
            "serving: replica {} of endpoint {} placed (job {}) on {}, waiting for its "
            "port",
            id, r.endpoint, r.job_id, p.host);
      }
      continue;
    }
    r.url = "http://" + (p.host.find(':') != std::string::npos ? "[" + p.host + "]" : p.host) +
            ":" + std::to_string(r.port);
    spdlog::info("serving: replica {} of endpoint {} placed ({}job {}), starting at {}", id,
                 r.endpoint, r.pid > 0 ? "pid " + std::to_string(r.pid) + ", " : "", r.job_id,
                 r.url);
  }
}

void ServingService::LaunchReplica(const StartAction& action) {
  auto fail = [&](const std::string& why) {
    MutexLock lock(mu_);
    replicas_.erase(action.replica_id);
    if (Runtime* rt = FindLocked(action.endpoint)) {
      auto pool = rt->pools.find(action.entity.name);
      if (pool != rt->pools.end()) {
        pool->second.last_error = why;
        pool->second.not_before = clock_.MonotonicNow() + Backoff(pool->second.failures_in_a_row++);
      }
    }
    spdlog::warn("serving: cannot start a replica of endpoint {}: {}", action.endpoint, why);
    ready_cv_.NotifyAll();
  };
  auto resolved = Resolve(action.entity, "served entity " + action.entity.name);
  if (!resolved.ok()) return fail(resolved.status().message());
  // The replica's port: one free here, or (replicas on other machines) one it picks on its
  // node and writes to $TRAINYARD_REPLICA_PORT_FILE.
  const bool reports_port = launcher_.ReplicasReportPorts();
  Result<int> port = 0;
  if (!reports_port) port = FreePort();
  if (!port.ok()) return fail(port.status().message());
  const std::string port_file = std::string("\"$") + kPortFileEnv + "\"";
  std::string host = launcher_.BindHost();
  ReplicaLaunch launch;
  launch.id = action.replica_id;
  launch.endpoint = action.endpoint;
  launch.served_entity = action.entity.name;
  launch.stop_grace = options_.stop_grace;
  launch.model_dir = resolved->dir;
  launch.env[kModelDirEnv] = resolved->dir;
  const std::string model_dir = std::string("\"$") + kModelDirEnv + "\"";
  std::string health;
  if (resolved->flavor == Flavor::kPyfunc) {
    health = "/ping";
    auto serve = [&](const std::string& port_arg) {
      return ShellQuote(options_.mlflow_program) + " models serve -m " + model_dir + " --host " +
             ShellQuote(host) + " --port " + port_arg + " --env-manager local";
    };
    if (!reports_port) {
      launch.command = serve(std::to_string(*port));
    } else {
      // MLflow's scoring server cannot report a port it bound; pick a free one on the node
      // (with the Python mlflow runs on) just before it starts.
      launch.command =
          "port=$(python3 -c 'import socket; s = socket.socket(); s.bind((\"\", 0)); "
          "print(s.getsockname()[1])') && printf '%s\\n' \"$port\" > " +
          port_file + ".tmp && mv -f " + port_file + ".tmp " + port_file + " && exec " +
          serve("\"$port\"");
    }
    // The scoring server runs Python from the environment mlflow is installed in.
    std::string bin = fs::path(options_.mlflow_program).parent_path().string();
    launch.env["PATH"] = (bin.empty() ? "" : bin + ":") + "/usr/local/bin:/usr/bin:/bin";
  } else {
    health = "/health";
    launch.command =
        ShellQuote(options_.serve_model_program) + " --model-dir " + model_dir +
        " --served-model-name " + ShellQuote(action.endpoint) + " --host " + ShellQuote(host) +
        " --device " + ShellQuote(options_.device) +
        (reports_port ? " --port 0 --port-file " + port_file : " --port " + std::to_string(*port));
  }
  {
    MutexLock lock(mu_);
    auto it = replicas_.find(action.replica_id);
    if (it == replicas_.end()) return;
    if (stop_ || it->second.state == ReplicaState::kStopping) {
      replicas_.erase(it);  // stopped (endpoint deleted or changed) before it was launched
      return;
    }
    Runtime* rt = FindLocked(action.endpoint);
    if (!rt) {
      replicas_.erase(it);
      return;
    }
    launch.owner = rt->endpoint.owner;
    launch.resources = rt->endpoint.config.resources;
    launch.project = rt->endpoint.config.project;
    it->second.resolved = *resolved;
    it->second.port = *port;
    it->second.health_path = health;
    it->second.launched = true;
  }
  spdlog::info("serving: queueing replica {} of endpoint {}: {} version {} ({})", action.replica_id,
               action.endpoint, action.entity.model, resolved->version,
               FlavorName(resolved->flavor));
  Status launched = launcher_.Launch(launch);
  if (!launched.ok()) return fail("cannot launch: " + launched.message());
  MutexLock lock(mu_);
  auto it = replicas_.find(action.replica_id);
  // Stopped while it was being launched: StopReplicaLocked found nothing to stop then.
  if (it != replicas_.end() && it->second.state == ReplicaState::kStopping) {
    (void)launcher_.Stop(action.replica_id);
  }
}

}  // namespace trainyard::serving
