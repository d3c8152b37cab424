// ServingService: the serving control plane. Endpoints (stored through EndpointStore), who
// may query and manage them, their replicas (started through a ReplicaLauncher, health-
// checked, restarted when they die, scaled on concurrency and to zero when idle), and the
// choice of replica for each request (Acquire: the traffic split, then the ready replica
// with the fewest requests in flight; a request to an endpoint with no ready replica starts
// one and waits for it, up to a bound).
//
// Authorization: anyone authenticated may create an endpoint (and must be able to read the
// models it serves); its owner and admins may do anything to it; others need a grant on it:
// QUERY (send requests) or MANAGE (also update, delete and grant), to them or to one of
// their groups.
//
// The HTTP side (forwarding a request to the chosen replica, streaming, the OpenAI and MLflow
// shapes) lives in api/serving_api.cc: this service never speaks HTTP; it is handed a
// HealthProbe for the replicas' health checks.
//
// Thread-safe. Start() runs the control loop on its own thread; Stop() stops it and every
// replica.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "trainyard/common/clock.h"
#include "trainyard/common/mutex.h"
#include "trainyard/common/status.h"
#include "trainyard/identity/identity_service.h"
#include "trainyard/registry/registry_service.h"
#include "trainyard/serving/capture.h"
#include "trainyard/serving/endpoint.h"
#include "trainyard/serving/endpoint_store.h"
#include "trainyard/serving/rate_limiter.h"
#include "trainyard/serving/replica_launcher.h"
#include "trainyard/store/database.h"

namespace trainyard::serving {

// A model version's storage location ("mlflow-artifacts:/...", "file:///...") as a local
// directory a replica can read, or an error saying why it cannot be served from here.
using LocationResolver = std::function<Result<std::string>(const std::string& location)>;
// Whether GET `url` answers 200 (a replica's /health or /ping). Must not block for long.
using HealthProbe = std::function<bool(const std::string& url)>;

struct ServingOptions {
  std::string serve_model_program = "trainyard-serve-model";  // serves `llm` entities
  std::string mlflow_program = "mlflow";                      // serves `pyfunc` entities
  std::string device = "auto";                                // trainyard-serve-model --device
  std::chrono::milliseconds tick{200};
  // How often the rate limits' buckets charged since are saved (rate_limiter.h), so that a
  // restart does not refill them; they are also saved when the service stops.
  std::chrono::milliseconds rate_limit_save{std::chrono::seconds(5)};
  // How often an alias is resolved again: when it moves, the endpoint rolls to the new version
  // (new replicas start; the old ones stop once a new one is ready, without dropping requests).
  std::chrono::milliseconds alias_check{std::chrono::seconds(2)};
  // How long a request waits for a replica to become ready (scale from zero).
  std::chrono::milliseconds cold_start_wait{std::chrono::seconds(120)};
  // How long a starting replica may take to pass its health check before it is restarted.
  std::chrono::milliseconds startup_timeout{std::chrono::seconds(600)};
  // Wait after a replica died before its replacement starts; doubled for each failure in a
  // row (a replica that never becomes ready), up to max_restart_backoff.
  std::chrono::milliseconds restart_backoff{std::chrono::seconds(1)};
  std::chrono::milliseconds max_restart_backoff{std::chrono::seconds(60)};
  std::chrono::milliseconds stop_grace{std::chrono::seconds(10)};
  EndpointLimits limits;
  // Whether an endpoint owned by `owner` may capture into catalog table `table` (CREATE
  // TABLE on its schema while it does not exist, MODIFY on it once it does): Ok, or the
  // error naming capture.table. Unset: no endpoint may name a capture table.
  std::function<Status(const std::string& owner, const std::string& table)> check_capture_table;
  // Whether a replica asking for `resources` fits a node of the pool it is placed on: Ok, or
  // why not. Unset: anything is accepted (and refused when a replica is launched).
  std::function<Status(const ReplicaResources& resources)> check_resources;
  // Whether an endpoint owned by `owner` may count its replicas against `project` (the
  // owner may submit jobs to it): Ok, or the error naming the project. Unset: any project.
  std::function<Status(const std::string& owner, const std::string& project)> check_project;
};

struct ReplicaInfo {
  std::string id;
  std::string served_entity;
  int64_t model_version = 0;
  std::string flavor;
  // "PENDING" (queued for resources), "STARTING", "READY", "STOPPING"
  std::string state;
  std::string url;  // "" until its port is known
  int outstanding = 0;
  int64_t served = 0;
  int64_t started_at = 0;
  std::string log;             // the replica's log file
  int pid = 0;                 // its process (group) on this machine; 0 until placed
  std::string job_id;          // the job it runs as
  std::string pending_reason;  // PENDING: why the scheduler has not placed it yet
};

struct ServedEntityState {
  std::string name;
  int target_replicas = 0;
  int restarts = 0;
  std::string last_error;  // "" when none
};

struct EndpointState {
  Endpoint endpoint;
  std::vector<EndpointGrant> grants;
  std::vector<ServedEntityState> entities;
  std::vector<ReplicaInfo> replicas;
  CaptureStats capture;
  int64_t last_request_at = 0;  // 0 = none since the server started
  std::string capture_path;
};

class ServingService;

// One model version an endpoint serves: the model and the version a served entity resolves to.
using ServedModelVersion = std::pair<std::string, int64_t>;
// Told what an endpoint serves whenever that may have changed: on create and on an update of
// its served entities (as `who`), when an alias it serves moves (as its owner), and on delete
// (nothing). Called without the service's lock, on the caller's thread or the control loop's.
using ServesListener =
    std::function<void(const identity::Principal& who, const std::string& endpoint,
                       const std::vector<ServedModelVersion>& versions)>;

// A request's claim on a replica: its in-flight count drops when the lease is destroyed.
class Lease {
 public:
  Lease() = default;
  Lease(Lease&& other) noexcept { *this = std::move(other); }
  Lease& operator=(Lease&& other) noexcept;
  ~Lease();

  // Tells the service the replica failed this request at the connection level: it gets no
  // more requests until it passes its health check again.
  void ReportFailure();

  std::string endpoint;
  std::string served_entity;
  std::string model;
  int64_t model_version = 0;
  Flavor flavor = Flavor::kPyfunc;
  std::string capture_table;  // the endpoint's, "" = none
  std::string owner;          // the endpoint's owner
  std::string replica_id;
  std::string url;  // the replica's base URL, e.g. http://127.0.0.1:41234
  // Charges the answer's tokens to the endpoint's token limits that applied to the request.
  RateCharge rate_charge;

 private:
  friend class ServingService;
  ServingService* service_ = nullptr;
};

class ServingService {
 public:
  ServingService(store::Database& db, Clock& clock, Random& random,
                 identity::IdentityService& identity, registry::RegistryService& registry,
                 ReplicaLauncher& launcher, CaptureWriter& capture, LocationResolver resolver,
                 HealthProbe probe, ServingOptions options);
  ~ServingService();
  ServingService(const ServingService&) = delete;
  ServingService& operator=(const ServingService&) = delete;

  static std::vector<store::Migration> Migrations() {
    auto m = EndpointStore::Migrations();
    for (auto& r : RateBucketStore::Migrations()) m.push_back(std::move(r));
    return m;
  }

  // Lineage's hook (see ServesListener); set once, before Start().
  void SetServesListener(ServesListener listener) { serves_listener_ = std::move(listener); }

  // Loads the stored endpoints and starts the control loop (replicas for min_replicas).
  Status Start() TY_EXCLUDES(mu_);
  // Stops the loop and every replica. Idempotent.
  void Stop() TY_EXCLUDES(mu_);

  // `body` holds the configuration's fields (see DecodeEndpointConfig) and "name".
  Result<EndpointState> Create(const identity::Principal& who, const json::object& body)
      TY_EXCLUDES(mu_);
  // Endpoints `who` may query.
  Result<std::vector<EndpointState>> List(const identity::Principal& who) TY_EXCLUDES(mu_);
  Result<EndpointState> Get(const identity::Principal& who, const std::string& name)
      TY_EXCLUDES(mu_);
  // Changes only the fields `body` names.
  Result<EndpointState> Update(const identity::Principal& who, const std::string& name,
                               const json::object& body) TY_EXCLUDES(mu_);
  Status Delete(const identity::Principal& who, const std::string& name) TY_EXCLUDES(mu_);
  // privilege: "QUERY" or "MANAGE".
  Status Grant(const identity::Principal& who, const std::string& name,
               const std::string& principal, const std::string& privilege) TY_EXCLUDES(mu_);
  Status Revoke(const identity::Principal& who, const std::string& name,
                const std::string& principal, const std::string& privilege) TY_EXCLUDES(mu_);

  // Chooses the replica for one request (see above). NotFound for an unknown endpoint,
  // PermissionDenied without QUERY (or for a query-only token limited to other endpoints),
  // Unavailable when no replica became ready in time. A request over one of the endpoint's
  // rate limits is refused before it waits for a replica: Unavailable, with the refusal in
  // `*rate_limited` (its `allowed` false) when given.
  Result<Lease> Acquire(const identity::Principal& who, const std::string& name,
                        RateDecision* rate_limited = nullptr) TY_EXCLUDES(mu_);

  // Ok when `who` may manage endpoint `name` (change, delete, grant, read its captured
  // requests): its owner, an admin or a MANAGE holder. NotFound for an unknown endpoint.
  Status AuthorizeManage(const identity::Principal& who, const std::string& name) TY_EXCLUDES(mu_);

  // A captured request, from the request index, for `who` to trace: admins, and those who
  // may MANAGE its endpoint. NotFound for an id never captured (or of an endpoint `who` may
  // not even query), PermissionDenied for a QUERY-only caller.
  Result<IndexedRequest> FindRequest(const identity::Principal& who, const std::string& request_id)
      TY_EXCLUDES(mu_);

  // A new request id (hex).
  std::string NewRequestId();
  CaptureWriter& capture() { return capture_; }

 private:
  friend class Lease;
  struct Resolved {
    int64_t version = 0;
    std::string dir;
    Flavor flavor = Flavor::kPyfunc;
  };
  enum class ReplicaState { kPending, kStarting, kReady, kStopping };
  struct Replica {
    std::string id;
    std::string endpoint;
    std::string entity;
    Resolved resolved;
    ReplicaState state = ReplicaState::kPending;
    bool launched = false;  // handed to the launcher (placement is asked about from then)
    int port = 0;     // the port it listens on: chosen before the launch, or reported (0 till then)
    std::string url;  // "" until it is placed and its port known
    std::string health_path;
    std::string job_id;
    std::string pending_reason;
    int outstanding = 0;
    int64_t served = 0;
    int64_t started_at = 0;
    Clock::MonotonicTime started{};
    std::string log;
    int pid = 0;
  };
  struct Pool {
    ServedEntity entity;
    int target = 0;
    int restarts = 0;
    int failures_in_a_row = 0;  // since a replica last became ready: the backoff doubles
    int waiters = 0;
    std::string last_error;
    Clock::MonotonicTime not_before{};  // no new replica before (restart backoff)
    int64_t alias_version = 0;          // what the alias resolved to last (0: not yet)
    Clock::MonotonicTime alias_checked{};
  };
  struct Runtime {
    Endpoint endpoint;
    std::vector<EndpointGrant> grants;
    std::map<std::string, Pool> pools;  // by served entity name
    Clock::MonotonicTime last_activity{};
    int64_t last_request_at = 0;
  };
  struct StartAction {
    std::string replica_id;
    std::string endpoint;
    ServedEntity entity;
  };

  Status AuthorizeManage(const identity::Principal& who, const Runtime& rt);
  bool MayQuery(const identity::Principal& who, const std::string& owner,
                const std::vector<EndpointGrant>& grants);
  // Resolves every served entity (validates it exists, `who` may read it, and its files
  // say how to serve it); InvalidArgument/NotFound naming served_entities[i].
  Status CheckEntities(const identity::Principal& who, const EndpointConfig& config);
  // The principals rate limits name exist and are of their key's kind (a user, a group);
  // InvalidArgument naming rate_limits[i].principal otherwise.
  Status CheckRateLimitPrincipals(const EndpointConfig& config);
  Result<Resolved> Resolve(const ServedEntity& entity, const std::string& field);
  // Tells the ServesListener the versions `entities` resolve to now (unresolvable ones left
  // out). Call without mu_.
  void NotifyServes(const identity::Principal& who, const std::string& endpoint,
                    const std::vector<ServedEntity>& entities) TY_EXCLUDES(mu_);
  Status CheckCaptureTable(const Endpoint& e);
  // InvalidArgument naming `resources` when options_.check_resources refuses them.
  Status CheckResources(const ReplicaResources& resources);
  // options_.check_project on the endpoint's owner and project.
  Status CheckProject(const Endpoint& e);
  void Install(Runtime rt) TY_REQUIRES(mu_);
  EndpointState StateLocked(const Runtime& rt) TY_REQUIRES(mu_);
  void Release(const std::string& replica_id) TY_EXCLUDES(mu_);
  void MarkSuspect(const std::string& replica_id) TY_EXCLUDES(mu_);
  void OnExit(const std::string& id, const ReplicaEnd& end) TY_EXCLUDES(mu_);
  // Asks the launcher where pending replicas are: placed ones start their health checks.
  void UpdatePlacements() TY_EXCLUDES(mu_);
  std::chrono::milliseconds Backoff(int failures_in_a_row) const;
  void Loop() TY_EXCLUDES(mu_);
  void Tick() TY_EXCLUDES(mu_);
  // Saves the rate buckets charged since the last save.
  void SaveRateBuckets();
  // Resolves the aliases of served entities that are due (every alias_check).
  void CheckAliases() TY_EXCLUDES(mu_);
  void LaunchReplica(const StartAction& action) TY_EXCLUDES(mu_);
  void StopReplicaLocked(Replica& r) TY_REQUIRES(mu_);
  Runtime* FindLocked(const std::string& name) TY_REQUIRES(mu_);

  Clock& clock_;
  Random& random_;
  identity::IdentityService& identity_;
  registry::RegistryService& registry_;
  ReplicaLauncher& launcher_;
  CaptureWriter& capture_;
  LocationResolver resolver_;
  HealthProbe probe_;
  const ServingOptions options_;
  EndpointStore store_;
  ServesListener serves_listener_;  // set before Start(), read-only after
  RateLimiter limiter_{clock_};
  RateBucketStore rate_buckets_;

  Mutex mu_;
  CondVar ready_cv_;  // a replica became ready, or an endpoint went away
  CondVar loop_cv_;
  std::map<std::string, Runtime> endpoints_ TY_GUARDED_BY(mu_);
  std::map<std::string, Replica> replicas_ TY_GUARDED_BY(mu_);  // by id
  uint64_t next_replica_ TY_GUARDED_BY(mu_) = 1;
  // Random per start, in every replica id: ids never repeat those of an earlier run, whose
  // leftover jobs (ended at start) and directories carry them.
  std::string run_tag_ TY_GUARDED_BY(mu_);
  bool stop_ TY_GUARDED_BY(mu_) = false;
  bool started_ TY_GUARDED_BY(mu_) = false;
  std::thread loop_;
};

}  // namespace trainyard::serving
