// Server: the composition root. A plain config struct, one Init step per subsystem,
// members declared in dependency order (store → blob → services → api → http).
// This is the only place that constructs services.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "trainyard/api/api.h"
#include "trainyard/blob/blob_store.h"
#include "trainyard/blob/sts.h"
#include "trainyard/common/clock.h"
#include "trainyard/common/status.h"
#include "trainyard/http/router.h"
#include "trainyard/http/server.h"
#include "trainyard/identity/identity_service.h"
#include "trainyard/store/database.h"
#include "trainyard/tracking/tracking_service.h"

namespace trainyard::registry {
class RegistryService;
}
namespace trainyard::executors {
class Executor;
}
namespace trainyard::jobs {
class JobService;
struct JobServiceOptions;
class ProjectService;
class SecretService;
}  // namespace trainyard::jobs
namespace trainyard::checkpoints {
class CheckpointService;
}
namespace trainyard::server {
class LineageWiring;
class DeferredCaptureSink;
}  // namespace trainyard::server
namespace trainyard::serving {
class CaptureWriter;
class RequestIndex;
class CaptureTableSink;
class ReplicaLauncher;
class ServingService;
}  // namespace trainyard::serving
namespace trainyard::catalog {
class CatalogService;
class CatalogAuthorizer;
class ModelService;
class TableService;
}  // namespace trainyard::catalog

namespace trainyard::server {

struct ServerConfig {
  std::string data_dir = ".trainyard";
  std::string host = "127.0.0.1";
  int port = 5000;
  std::string db;           // "" → SQLite at <data_dir>/trainyard.db
  std::string artifacts;    // "" → <data_dir>/artifacts
  std::string checkpoints;  // "" → <data_dir>/checkpoints
  // Temporary credentials for catalog objects on S3: the IAM role the server assumes (STS
  // AssumeRole with a session policy per location) and for how long; "" → none are issued.
  std::string s3_credentials_role_arn;
  int s3_credentials_duration_s = 3600;
  bool sqlite_sync_full = false;
  int io_threads = 2;
  int worker_threads = 16;
  size_t max_body_bytes = 16 << 20;            // JSON and other in-memory bodies
  size_t max_upload_bytes = size_t{64} << 30;  // artifact and checkpoint uploads (to disk)
  // The HTTP server's limits (see http::ServerOptions).
  int64_t idle_timeout_ms = 120000;
  int max_connections = 4096;
  int max_connections_per_client = 512;
  size_t max_inflight_bytes_per_client = size_t{256} << 20;
  // Records of failed authentications per client address and minute (the rest are counted).
  int failed_auth_audit_per_minute = 20;
  // The local compute pool. Unset values are detected from this machine; several
  // nodes (each with the given resources) simulate a multi-node pool on one host.
  int local_nodes = 1;
  int local_gpus = -1;  // per node
  int local_cpus = -1;  // per node
  int64_t local_memory_bytes = -1;
  std::string price_catalog;  // YAML file; "" = no prices (cost 0)
  std::string pool_name;      // "" → the executor's name ("local" or "slurm")
  // Where jobs run: "local" (this machine) or "slurm" (sbatch/srun on a Slurm cluster; the
  // data directory must be on a filesystem the cluster's nodes share).
  std::string executor = "local";
  std::string slurm_partition;
  std::string slurm_account;
  std::string slurm_qos;
  std::string slurm_conf;  // SLURM_CONF for the Slurm commands; "" = their default
  std::vector<std::string> slurm_sbatch_args;
  // The URL workloads use to reach this server; "" → http://<host>:<port> (127.0.0.1 when
  // listening on all addresses). Set it when jobs run on other machines.
  std::string advertise_url;
  // Jobs run as the server's own OS account and only admins may submit. Implied when the
  // server is not root; otherwise (multi-user mode) every job runs as its owner's mapped
  // OS account (`trainyard users update NAME --os-user ACCT`).
  bool single_user = false;
  // Where jobs' private directories live; "" = <data_dir>/jobs in single-user mode and
  // <data_dir>-jobs (outside the 0700 data directory) in multi-user mode.
  std::string job_dir;
  // Serving endpoints: the programs their replicas run ("" = `mlflow` found on PATH, and
  // trainyard-serve-model beside this binary), the llm replicas' device, and how long a
  // request waits for a replica to start.
  std::string serving_mlflow;
  std::string serving_engine;
  std::string serving_device = "auto";
  int serving_cold_start_s = 120;
  // Multi-user mode: how long a model copy no replica uses is kept for a restart or scale-up.
  int serving_model_copy_grace_s = 30;
  // Request capture into catalog tables: a batch is appended at this age (or 500 rows).
  int capture_flush_ms = 5000;
  // The request index (request id -> endpoint, model version, capture table version) keeps a
  // request this many days; 0 keeps every request.
  int capture_index_retention_days = 30;
  // The built web UI (scripts/build's output) served at `/`; "" → the first of
  // <binary's dir>/web and <binary's dir>/../share/trainyard/web holding an index.html.
  std::string ui_dir;
};

class Server {
 public:
  explicit Server(ServerConfig config);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Opens the store (applying migrations), the blob store and the services, and
  // starts serving.
  Status Start();
  void Stop();
  int port() const;
  bool multi_user() const { return multi_user_; }

 private:
  Status SecureDataDir();
  Status InitStore();
  Status InitBlobs();
  Status InitServices();
  Status InitJobs();
  Status InitIdentityMode(jobs::JobServiceOptions& options);
  Status InitCheckpoints();
  Status InitServing();
  void InitLineage();
  void InitApi();
  // The web UI's directory: `configured`, else found beside the binary (ServerConfig::ui_dir).
  static std::string UiDirectory(const std::string& configured);

  ServerConfig config_;
  bool multi_user_ = false;
  std::string job_dir_root_;  // the jobs' private directories' root ("" = in the data dir)
  SystemClock clock_;
  SecureRandom random_;
  std::unique_ptr<store::Database> db_;
  // Before the services whose listeners record into it, so it is destroyed after them.
  std::unique_ptr<LineageWiring> lineage_;
  std::unique_ptr<blob::BlobStore> blobs_;
  std::unique_ptr<blob::S3CredentialIssuer> s3_credentials_;  // nullptr: none configured
  std::unique_ptr<identity::IdentityService> identity_;
  std::unique_ptr<catalog::CatalogService> catalog_;
  std::unique_ptr<catalog::CatalogAuthorizer> authorizer_;  // catalog grants, then identity's
  std::unique_ptr<catalog::TableService> tables_;           // a table's data (after lineage_)
  std::unique_ptr<tracking::TrackingService> tracking_;
  std::unique_ptr<registry::RegistryService> registry_;
  // UC's registered models: catalog securables over the registry's models (its namespace).
  std::unique_ptr<catalog::ModelService> models_;
  std::unique_ptr<executors::Executor> executor_;
  std::unique_ptr<jobs::ProjectService> projects_;
  std::unique_ptr<jobs::SecretService> secrets_;
  std::unique_ptr<jobs::JobService> jobs_;
  std::unique_ptr<checkpoints::CheckpointService> checkpoints_;
  std::unique_ptr<serving::RequestIndex> request_index_;
  // Forwards to the catalog's sink, set in InitLineage (see DeferredCaptureSink).
  std::unique_ptr<DeferredCaptureSink> capture_sink_;
  std::unique_ptr<serving::CaptureWriter> capture_;
  std::unique_ptr<serving::ReplicaLauncher> replica_launcher_;
  std::unique_ptr<serving::ServingService> serving_;
  http::Router router_;
  std::unique_ptr<api::Api> api_;
  std::unique_ptr<http::HttpServer> http_;
};

}  // namespace trainyard::server
