#include "trainyard/server/server.h"

#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "trainyard/api/checkpoints_api.h"
#include "trainyard/api/identity_api.h"
#include "trainyard/api/jobs_api.h"
#include "trainyard/api/lineage_api.h"
#include "trainyard/api/mlflow_artifacts_api.h"
#include "trainyard/api/mlflow_registry_api.h"
#include "trainyard/api/mlflow_tracking_api.h"
#include "trainyard/api/request_lineage_api.h"
#include "trainyard/api/serving_api.h"
#include "trainyard/api/tables_api.h"
#include "trainyard/api/uc_api.h"
#include "trainyard/api/uc_model_api.h"
#include "trainyard/api/web_ui_api.h"
#include "trainyard/catalog/catalog_authorizer.h"
#include "trainyard/catalog/catalog_service.h"
#include "trainyard/catalog/model_service.h"
#include "trainyard/catalog/table_service.h"
#include "trainyard/checkpoints/checkpoint_service.h"
#include "trainyard/common/os_account.h"
#include "trainyard/common/paths.h"
#include "trainyard/common/strings.h"
#include "trainyard/executors/host_resources.h"
#include "trainyard/executors/local_executor.h"
#include "trainyard/executors/slurm_executor.h"
#include "trainyard/http/client.h"
#include "trainyard/http/static_files.h"
#include "trainyard/jobs/job_service.h"
#include "trainyard/registry/registry_service.h"
#include "trainyard/server/capture_table_sink.h"
#include "trainyard/server/lineage_wiring.h"
#include "trainyard/server/scheduled_replica_launcher.h"
#include "trainyard/serving/capture.h"
#include "trainyard/serving/replica_launcher.h"
#include "trainyard/serving/serving_service.h"

namespace trainyard::server {
namespace {

// How often the Slurm executor polls squeue/sacct for its jobs' states.
constexpr auto kSlurmPollInterval = std::chrono::milliseconds(500);
// The most simulated nodes --local-nodes may split this machine into.
constexpr int kMaxLocalNodes = 10000;
// How long Stop() lets in-flight requests finish before closing connections.
constexpr auto kHttpDrainTime = std::chrono::seconds(10);

namespace fs = std::filesystem;

bool IsLocalPath(const std::string& location) {
  return !location.empty() && location.find("://") == std::string::npos;
}

// Takes group and other permissions from one file or directory this process owns.
bool TightenOne(const std::string& path, const struct stat& st) {
  if (S_ISLNK(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 077) == 0) return false;
  return ::chmod(path.c_str(), st.st_mode & 07700) == 0;
}

// Makes `root` a 0700 directory. When it was open to others (an install from before modes
// were tightened), also takes group and other permissions from everything under it that
// this process owns (symbolic links are not followed). Later files are private by the umask.
void TightenTree(const std::string& root) {
  struct stat st {};
  if (::lstat(root.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return;
  bool loose = (st.st_mode & 077) != 0;
  int64_t changed = 0;
  if (loose) {
    std::error_code ec;
    fs::recursive_directory_iterator it(root, fs::directory_options::skip_permission_denied, ec);
    for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      struct stat entry {};
      std::string path = it->path().string();
      if (::lstat(path.c_str(), &entry) == 0 && TightenOne(path, entry)) ++changed;
    }
  }
  if ((st.st_mode & 07777) != 0700 && st.st_uid == ::geteuid()) ::chmod(root.c_str(), 0700);
  if (loose) {
    spdlog::info("{} was open to other users: made it 0700 and {} entries under it private", root,
                 changed);
  }
}

void TightenFile(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) TightenOne(path, st);
}

}  // namespace

Server::Server(ServerConfig config) : config_(std::move(config)) {}

Server::~Server() { Stop(); }

// The data directory is the server's alone: 0700, its files 0600 (the umask keeps new ones
// so). Request bodies a crashed server was receiving are removed.
Status Server::SecureDataDir() {
  std::error_code ec;
  fs::create_directories(config_.data_dir, ec);
  if (ec) {
    return Status::IOError("cannot create data directory " + config_.data_dir + ": " +
                           ec.message());
  }
  TightenTree(config_.data_dir);
  if (IsLocalPath(config_.db) && !StartsWith(config_.db, "postgres")) {
    for (const char* suffix : {"", "-wal", "-shm", "-journal"}) TightenFile(config_.db + suffix);
  }
  // Nothing reads them any more: the requests they belonged to were never answered.
  int64_t removed = 0;
  for (const auto& entry : fs::directory_iterator(config_.data_dir + "/uploads", ec)) {
    std::error_code rec;
    if (fs::remove_all(entry.path(), rec) > 0) ++removed;
  }
  if (removed > 0) spdlog::info("removed {} partial upload(s) left by a crash", removed);
  return Status::Ok();
}

Status Server::InitStore() {
  std::error_code ec;
  std::filesystem::create_directories(config_.data_dir, ec);
  if (ec) {
    return Status::IOError("cannot create data directory " + config_.data_dir + ": " +
                           ec.message());
  }
  store::DatabaseOptions options;
  options.url = config_.db.empty() ? config_.data_dir + "/trainyard.db" : config_.db;
  options.sqlite_sync_full = config_.sqlite_sync_full;
  TY_ASSIGN_OR_RETURN(db_, store::OpenDatabase(options));
  std::vector<store::Migration> migrations = identity::IdentityService::Migrations();
  for (auto& m : tracking::TrackingService::Migrations()) migrations.push_back(std::move(m));
  for (auto& m : registry::RegistryService::Migrations()) migrations.push_back(std::move(m));
  for (auto& m : jobs::JobService::Migrations()) migrations.push_back(std::move(m));
  for (auto& m : checkpoints::CheckpointService::Migrations()) migrations.push_back(std::move(m));
  for (auto& m : jobs::ProjectService::Migrations()) migrations.push_back(std::move(m));
  for (auto& m : jobs::SecretService::Migrations()) migrations.push_back(std::move(m));
  for (auto& m : lineage::LineageService::Migrations()) migrations.push_back(std::move(m));
  for (auto& m : catalog::CatalogService::Migrations()) migrations.push_back(std::move(m));
  for (auto& m : serving::ServingService::Migrations()) migrations.push_back(std::move(m));
  for (auto& m : serving::RequestIndex::Migrations()) migrations.push_back(std::move(m));
  TY_RETURN_IF_ERROR(store::ApplyMigrations(*db_, migrations));
  spdlog::info("metadata store: {} ({})", db_->Backend(),
               db_->Backend() == "sqlite" ? options.url : "postgresql");
  return Status::Ok();
}

Status Server::InitBlobs() {
  std::string root =
      config_.artifacts.empty() ? config_.data_dir + "/artifacts" : config_.artifacts;
  TY_ASSIGN_OR_RETURN(blobs_, blob::OpenBlobStore(root, config_.data_dir + "/s3-cache"));
  if (IsLocalPath(root)) {
    TightenTree(root);
    blob::RemoveLocalTemporaryFiles(root);
  }
  spdlog::info("artifact store: {}", root);
  return Status::Ok();
}

Status Server::InitServices() {
  identity_ = std::make_unique<identity::IdentityService>(*db_, clock_, random_);
  TY_RETURN_IF_ERROR(identity_->Bootstrap(config_.data_dir));
  // Managed tables and volumes live under the metastore's root in the data directory.
  catalog::CatalogServiceOptions catalog_options;
  catalog_options.metastore_root =
      std::filesystem::absolute(config_.data_dir + "/catalog").lexically_normal().string();
  if (!config_.s3_credentials_role_arn.empty()) {
    TY_ASSIGN_OR_RETURN(
        blob::StsConfig sts,
        blob::StsConfigFromEnv(config_.s3_credentials_role_arn, config_.s3_credentials_duration_s));
    sts.clock = &clock_;
    TY_ASSIGN_OR_RETURN(s3_credentials_, blob::MakeStsCredentialIssuer(std::move(sts)));
    spdlog::info("S3 temporary credentials: {}", s3_credentials_->Describe());
  }
  catalog_options.s3_credentials = s3_credentials_.get();
  catalog_ =
      std::make_unique<catalog::CatalogService>(*db_, *identity_, clock_, random_, catalog_options);
  TY_RETURN_IF_ERROR(catalog_->Init());
  // Securables that live in the catalog go to its grants, the rest to identity's rules.
  authorizer_ = std::make_unique<catalog::CatalogAuthorizer>(*catalog_, *identity_);
  tracking_ = std::make_unique<tracking::TrackingService>(*db_, clock_, random_, *authorizer_,
                                                          "mlflow-artifacts:");
  TY_RETURN_IF_ERROR(tracking_->Init("admin"));
  registry_ = std::make_unique<registry::RegistryService>(*db_, clock_, *authorizer_, *tracking_);
  // One registry seen two ways: three-level names are catalog models (decision 0013).
  models_ = std::make_unique<catalog::ModelService>(*catalog_, *registry_);
  registry_->SetNamespace(models_.get());
  return Status::Ok();
}

Status Server::InitJobs() {
  jobs::PoolConfig pool;
  pool.name = config_.pool_name.empty() ? config_.executor : config_.pool_name;
  if (config_.executor == "slurm") {
    executors::SlurmPoolConfig slurm;
    slurm.partition = config_.slurm_partition;
    slurm.account = config_.slurm_account;
    slurm.qos = config_.slurm_qos;
    slurm.extra_sbatch_args = config_.slurm_sbatch_args;
    if (!config_.slurm_conf.empty()) slurm.client_env["SLURM_CONF"] = config_.slurm_conf;
    TY_ASSIGN_OR_RETURN(auto nodes, executors::DiscoverSlurmNodes(slurm, clock_));
    for (const auto& n : nodes) {
      pool.nodes.push_back({n.name, n.gpus, n.cpus, n.memory_bytes});
      if (!n.address.empty()) pool.node_addresses[n.name] = n.address;
    }
    pool.master_addr = "";  // the batch script takes the allocation's first node
    executor_ = executors::MakeSlurmExecutor({slurm, kSlurmPollInterval}, clock_);
  } else if (config_.executor == "local") {
    executors::HostResources host = executors::DetectHostResources();
    if (config_.local_nodes < 1 || config_.local_nodes > kMaxLocalNodes) {
      return Status::InvalidArgument("--local-nodes must be between 1 and " +
                                     std::to_string(kMaxLocalNodes));
    }
    for (int i = 0; i < config_.local_nodes; ++i) {
      jobs::NodeInfo node;
      node.name =
          config_.local_nodes == 1 ? host.hostname : host.hostname + "-" + std::to_string(i);
      node.gpus = config_.local_gpus >= 0 ? config_.local_gpus : static_cast<int>(host.gpus.size());
      node.cpus = config_.local_cpus >= 0 ? config_.local_cpus : host.cpus;
      node.memory_bytes =
          config_.local_memory_bytes >= 0 ? config_.local_memory_bytes : host.memory_bytes;
      pool.nodes.push_back(node);
    }
    executor_ = executors::MakeLocalExecutor({}, clock_);
    spdlog::info("per-attempt cgroups: {}", executor_->Containment());
  } else {
    return Status::InvalidArgument("--executor must be local or slurm (got '" + config_.executor +
                                   "')");
  }
  cost::PriceCatalog prices;
  if (!config_.price_catalog.empty()) {
    TY_ASSIGN_OR_RETURN(prices, cost::PriceCatalog::Load(config_.price_catalog));
  }
  jobs::JobServiceOptions options;
  // Absolute: cluster nodes write logs there from their own working directories.
  options.data_dir = std::filesystem::absolute(config_.data_dir).string();
  TY_RETURN_IF_ERROR(InitIdentityMode(options));
  // Slurm's ranks write their own logs, as the job's account: they go to its private dir.
  options.logs_in_job_dir = config_.executor == "slurm";
  job_dir_root_ = options.job_dir_root;
  spdlog::info("compute pool '{}': {} node(s) with {} GPU(s), {} CPU(s), {:.1f} GiB each",
               pool.name, pool.nodes.size(), pool.nodes[0].gpus, pool.nodes[0].cpus,
               static_cast<double>(pool.nodes[0].memory_bytes) / (1 << 30));
  projects_ = std::make_unique<jobs::ProjectService>(*db_, clock_);
  TY_ASSIGN_OR_RETURN(identity::SecretCipher cipher,
                      identity::SecretCipher::LoadOrCreate(config_.data_dir + "/secrets.key"));
  secrets_ = std::make_unique<jobs::SecretService>(*db_, clock_, std::move(cipher), *projects_);
  jobs_ =
      std::make_unique<jobs::JobService>(*db_, clock_, random_, *identity_, *tracking_, *executor_,
                                         std::move(prices), std::move(pool), options);
  jobs::SecretService* secrets = secrets_.get();
  jobs::ProjectService* projects = projects_.get();
  identity_->SetUserDeletedListener([projects, secrets](const std::string& user) -> Status {
    TY_RETURN_IF_ERROR(projects->ForgetUser(user));
    return secrets->ForgetUser(user);
  });
  jobs_->SetSecretResolver([secrets](const std::string& owner, const std::string& name) {
    return secrets->Resolve(owner, name);
  });
  return Status::Ok();
}

Status Server::InitIdentityMode(jobs::JobServiceOptions& options) {
  std::string data_dir = options.data_dir;
  while (data_dir.size() > 1 && data_dir.back() == '/') data_dir.pop_back();
  if (config_.single_user) {
    spdlog::info(
        "mode: single-user (--single-user): jobs run as this server's OS account "
        "(uid {}); only admins may submit jobs",
        geteuid());
  } else if (geteuid() != 0) {
    spdlog::warn(
        "mode: single-user: the server is not root, so it cannot run jobs as their "
        "users' OS accounts; jobs run as this server's account (uid {}) and only "
        "admins may submit jobs",
        geteuid());
  } else {
    multi_user_ = true;
    spdlog::info(
        "mode: multi-user: every job runs as its owner's mapped OS account (never "
        "root); map one with `trainyard users update NAME --os-user ACCT`");
  }
  options.multi_user = multi_user_;
  // Jobs run as other accounts: nothing in the data directory is theirs to read.
  if (multi_user_ && ::chmod(data_dir.c_str(), 0700) != 0) {
    return Status::IOError("cannot make the data directory " + data_dir +
                           " private (0700): " + std::strerror(errno));
  }
  options.job_dir_root = config_.job_dir;
  if (options.job_dir_root.empty() && multi_user_) options.job_dir_root = data_dir + "-jobs";
  if (!options.job_dir_root.empty()) {
    options.job_dir_root = std::filesystem::absolute(options.job_dir_root).string();
    std::error_code ec;
    std::filesystem::create_directories(options.job_dir_root, ec);
    // Traversable, not listable: a job reaches its own directory (0700, its account's) only.
    if (ec || ::chmod(options.job_dir_root.c_str(), multi_user_ ? 0711 : 0700) != 0) {
      return Status::IOError("cannot prepare the job directory " + options.job_dir_root + ": " +
                             (ec ? ec.message() : std::string(std::strerror(errno))) +
                             "; pass --job-dir DIR");
    }
    spdlog::info("job directories: {}", options.job_dir_root);
    // Jobs' accounts must be able to reach their directories through every parent.
    for (std::filesystem::path p = options.job_dir_root; multi_user_ && p.has_relative_path();
         p = p.parent_path()) {
      struct stat st {};
      if (::stat(p.c_str(), &st) == 0 && (st.st_mode & S_IXOTH) == 0) {
        spdlog::warn(
            "jobs cannot reach their directories under {}: {} is not traversable by "
            "other accounts (mode {:o}); pass --job-dir DIR under traversable "
            "directories",
            options.job_dir_root, p.string(), st.st_mode & 07777);
        break;
      }
    }
  }
  return Status::Ok();
}

Status Server::InitCheckpoints() {
  std::string root =
      config_.checkpoints.empty() ? config_.data_dir + "/checkpoints" : config_.checkpoints;
  TY_ASSIGN_OR_RETURN(std::unique_ptr<blob::BlobStore> blobs,
                      blob::OpenBlobStore(root, config_.data_dir + "/s3-cache"));
  if (IsLocalPath(root)) {
    TightenTree(root);
    blob::RemoveLocalTemporaryFiles(root);
  }
  checkpoints::CheckpointStoreOptions options;
  options.root = "";  // the BlobStore is the checkpoints' own
  // The server hands owned buffers to the store: no snapshot buffers to keep.
  options.reuse_snapshot_buffers = false;
  auto store = std::make_shared<checkpoints::CheckpointStore>(
      std::shared_ptr<blob::BlobStore>(std::move(blobs)), clock_, random_, options);
  checkpoints_ = std::make_unique<checkpoints::CheckpointService>(
      *db_, clock_, random_, *identity_, *jobs_, std::move(store),
      config_.data_dir + "/checkpoint-staging");
  checkpoints_->RemoveLeftoversAtStart();
  spdlog::info("checkpoint store: {}", root);
  return Status::Ok();
}

// `name` as an absolute path: itself when it has a slash, else the first match on PATH.
static std::string FindProgram(const std::string& name) {
  if (name.find('/') != std::string::npos) return fs::absolute(name).string();
  const char* path = std::getenv("PATH");
  for (const auto& dir : SplitString(path ? path : "", ':')) {
    if (dir.empty()) continue;
    fs::path candidate = fs::path(dir) / name;
    if (::access(candidate.c_str(), X_OK) == 0) return fs::absolute(candidate).string();
  }
  return name;
}

// The sink serving is built with, before the catalog's sink can exist (that one needs the
// TableService, which needs lineage, which needs serving): it forwards to the sink Set()
// gives it, which InitLineage sets before the server takes requests; until then a batch
// fails (counted as dropped, like any failed batch). Owns the target. Thread-safe.
class DeferredCaptureSink : public serving::CaptureTableSink {
 public:
  void Set(std::unique_ptr<serving::CaptureTableSink> target) {
    owned_ = std::move(target);
    target_.store(owned_.get(), std::memory_order_release);
  }
  Result<int64_t> Append(const std::string& endpoint, const std::string& owner,
                         const std::string& table, const std::vector<json::object>& rows) override {
    serving::CaptureTableSink* target = target_.load(std::memory_order_acquire);
    if (target == nullptr) {
      return Status::Unavailable("the catalog's tables are not open yet (the server is starting)");
    }
    return target->Append(endpoint, owner, table, rows);
  }

 private:
  std::unique_ptr<serving::CaptureTableSink> owned_;  // written once, by Set()
  std::atomic<serving::CaptureTableSink*> target_{nullptr};
};

Status Server::InitServing() {
  std::string data_dir = fs::absolute(config_.data_dir).string();
  serving::CaptureOptions capture;
  capture.dir = data_dir + "/serving/capture";
  request_index_ = std::make_unique<serving::RequestIndex>(*db_);
  capture_sink_ = std::make_unique<DeferredCaptureSink>();
  capture.table_flush_interval = std::chrono::milliseconds(config_.capture_flush_ms);
  capture.index_retention = std::chrono::hours(24) * config_.capture_index_retention_days;
  capture_ = std::make_unique<serving::CaptureWriter>(capture, &clock_, request_index_.get(),
                                                      capture_sink_.get());
  // Replicas are jobs of kind service on the training pool (scheduled_replica_launcher.h).
  ScheduledReplicaLauncherOptions placement;
  placement.cluster_nodes = config_.executor == "slurm";
  placement.model_copy_grace = std::chrono::seconds(config_.serving_model_copy_grace_s);
  if (multi_user_ || placement.cluster_nodes) {
    // Replicas get directories beside the jobs' (see scheduled_replica_launcher.h): in
    // multi-user mode a copy of their model shared by their owner's replicas of it (their
    // owners cannot read the private artifact store), on Slurm a private one for the file they
    // report their port in (the jobs' root is on the filesystem the nodes share).
    placement.staging_root =
        (job_dir_root_.empty() ? data_dir + "/jobs" : job_dir_root_) + "/serving-models";
    std::error_code staging_ec;
    fs::create_directories(placement.staging_root, staging_ec);
    if (staging_ec || ::chmod(placement.staging_root.c_str(), 0711) != 0) {
      return Status::IOError("cannot prepare " + placement.staging_root + ": " +
                             (staging_ec ? staging_ec.message() : std::strerror(errno)));
    }
  }
  if (multi_user_) {
    placement.owner_account =
        [ids = identity_.get()](const std::string& owner) -> Result<std::pair<uid_t, gid_t>> {
      TY_ASSIGN_OR_RETURN(identity::User user, ids->GetUser(owner));
      if (user.os_user.empty()) {
        return Status::FailedPrecondition("the endpoint's owner " + owner +
                                          " has no OS account; an admin maps one with "
                                          "'trainyard users update " +
                                          owner + " --os-user ACCT'");
      }
      TY_ASSIGN_OR_RETURN(OsAccount account, ValidateJobAccount(user.os_user));
      return std::make_pair(account.uid, account.gid);
    };
  }
  replica_launcher_ = MakeScheduledReplicaLauncher(*jobs_, placement);
  serving::ServingOptions options;
  options.mlflow_program =
      FindProgram(config_.serving_mlflow.empty() ? "mlflow" : config_.serving_mlflow);
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  options.serve_model_program =
      !config_.serving_engine.empty()
          ? fs::absolute(config_.serving_engine).string()
          : (ec ? std::string("trainyard-serve-model")
                : (self.parent_path() / "trainyard-serve-model").string());
  options.device = config_.serving_device;
  options.cold_start_wait = std::chrono::seconds(config_.serving_cold_start_s);
  options.check_resources = [jobs = jobs_.get()](const serving::ReplicaResources& r) {
    return jobs->CheckFits({1, r.gpus, r.cpus, r.memory_bytes});
  };
  options.check_capture_table = [ids = identity_.get(), catalog = catalog_.get()](
                                    const std::string& owner, const std::string& table) {
    return CheckCaptureTable(*ids, *catalog, owner, table);
  };
  // The owner must be allowed to submit to the project, as for a job of their own.
  options.check_project = [ids = identity_.get(), projects = projects_.get()](
                              const std::string& owner, const std::string& project) -> Status {
    TY_ASSIGN_OR_RETURN(identity::User user, ids->GetUser(owner));
    return projects->AuthorizeSubmit(identity::Principal{user.name, user.is_admin, "", ""}, project,
                                     0);
  };
  std::string artifacts = config_.artifacts.empty() ? data_dir + "/artifacts" : config_.artifacts;
  bool local_artifacts = IsLocalPath(artifacts);
  artifacts = local_artifacts ? fs::absolute(artifacts).string() : artifacts;
  serving::LocationResolver resolver =
      [artifacts, local_artifacts](const std::string& location) -> Result<std::string> {
    std::string path;
    if (StartsWith(location, "mlflow-artifacts:")) {
      if (!local_artifacts) {
        return Status::FailedPrecondition(
            "its files are in the artifact store " + artifacts +
            ", which is not on this machine; serving reads a model's files from a local "
            "artifact store");
      }
      std::string key = location.substr(std::string_view("mlflow-artifacts:").size());
      if (StartsWith(key, "//")) {
        size_t slash = key.find('/', 2);
        key = slash == std::string::npos ? "" : key.substr(slash);
      }
      while (StartsWith(key, "/")) key.erase(0, 1);
      TY_RETURN_IF_ERROR(ValidateRelativePath(key, "storage_location"));
      path = artifacts + "/" + key;
    } else if (StartsWith(location, "file://")) {
      path = location.substr(7);
    } else if (StartsWith(location, "/")) {
      path = location;
    } else {
      return Status::FailedPrecondition("its storage location " + location +
                                        " is not a local directory this server can read");
    }
    std::error_code dir_ec;
    if (!fs::is_directory(path, dir_ec)) {
      return Status::FailedPrecondition("its files are not at " + path);
    }
    return path;
  };
  serving::HealthProbe probe = [](const std::string& url) {
    auto r = http::Fetch("GET", url, {}, "", std::chrono::seconds(2));
    return r.ok() && r->status == 200;
  };
  serving_ = std::make_unique<serving::ServingService>(
      *db_, clock_, random_, *identity_, *registry_, *replica_launcher_, *capture_,
      std::move(resolver), std::move(probe), options);
  return Status::Ok();
}

void Server::InitLineage() {
  lineage_ = std::make_unique<LineageWiring>(
      *db_, clock_, *authorizer_,
      LineageSources{*tracking_, *registry_, *jobs_, *checkpoints_, *serving_});
  lineage_->Connect();
  catalog::TableServiceOptions table_options;
  table_options.blob_cache_dir = config_.data_dir + "/s3-cache";
  // Naming a run puts the read or write in its lineage: only who may log to the run may.
  tracking::TrackingService* tracking = tracking_.get();
  identity::Authorizer* authz = authorizer_.get();
  table_options.authorize_run = [tracking, authz](const identity::Principal& who,
                                                  const std::string& run_id) -> Status {
    TY_ASSIGN_OR_RETURN(std::string experiment, tracking->RunExperiment(run_id));
    TY_ASSIGN_OR_RETURN(std::string owner, tracking->ExperimentOwner(experiment));
    return authz->Authorize(who, identity::Action::kEdit, {"experiment", experiment, owner},
                            {"run", run_id, owner});
  };
  tables_ = std::make_unique<catalog::TableService>(*catalog_, &lineage_->service(), clock_,
                                                    table_options);
  capture_sink_->Set(MakeCatalogCaptureSink(*identity_, *catalog_, *tables_, &lineage_->service()));
}

std::string Server::UiDirectory(const std::string& configured) {
  namespace fs = std::filesystem;
  if (!configured.empty()) return fs::absolute(configured).lexically_normal().string();
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "web";
  const fs::path candidates[] = {self.parent_path() / "web",
                                 self.parent_path() / ".." / "share" / "trainyard" / "web"};
  for (const fs::path& dir : candidates) {
    if (fs::exists(dir / "index.html", ec)) return dir.lexically_normal().string();
  }
  return candidates[0].lexically_normal().string();
}

void Server::InitApi() {
  api_ = std::make_unique<api::Api>(router_, *identity_, clock_);
  router_.SetErrorRenderer(api::TransportErrorResponse);
  api::RegisterIdentityRoutes(*api_);
  api::RegisterTrackingRoutes(*api_, *tracking_);
  api::RegisterArtifactRoutes(*api_, *blobs_, *tracking_);
  api::RegisterRegistryRoutes(*api_, *registry_);
  api::RegisterJobRoutes(*api_, *jobs_, *projects_, *secrets_);
  api::RegisterProjectRoutes(*api_, *projects_);
  api::RegisterSecretRoutes(*api_, *secrets_);
  api::RegisterCheckpointRoutes(*api_, *checkpoints_);
  api::RegisterLineageRoutes(*api_, lineage_->service());
  api::RegisterUnityCatalogRoutes(*api_, *catalog_, tables_.get());
  api::RegisterUcModelRoutes(*api_, *models_, *catalog_);
  api::RegisterTableRoutes(*api_, *catalog_, *tables_);
  api::RegisterServingRoutes(*api_, *serving_);
  api::RegisterRequestLineageRoute(*api_, *serving_, lineage_->service());
  tracking::TrackingService* tracking = tracking_.get();
  api::RegisterGrantRoute(*api_, "experiment", [tracking](const std::string& id) {
    return tracking->ExperimentOwner(id);
  });
  // Who may run jobs as a service principal (JobSpec::run_as): EDIT on it is its use.
  identity::IdentityService* ids = identity_.get();
  api::RegisterGrantRoute(
      *api_, std::string(identity::kServicePrincipalSecurable),
      [ids](const std::string& name) -> Result<std::string> {
        auto kind = ids->GetPrincipalKind(name);
        if (!kind.ok() || *kind != identity::PrincipalKind::kServicePrincipal) {
          return Status::NotFound("id: '" + name +
                                  "' is no service principal; list them with 'trainyard "
                                  "service-principals list'");
        }
        return std::string();  // no owner: admins and MANAGE holders grant
      });
  registry::RegistryService* registry = registry_.get();
  catalog::ModelService* models = models_.get();
  api::RegisterGrantRoute(
      *api_, "registered_model",
      [registry, models](const std::string& name) -> Result<std::string> {
        // A catalog model's grants are the catalog's; identity's would never be consulted.
        if (auto full_name = models->Claim(name)) {
          return Status::InvalidArgument(
              "id: '" + *full_name +
              "' is a catalog model; grant on it with 'trainyard grant EXECUTE ON MODEL " +
              *full_name +
              " TO <principal>' (or PATCH /api/2.1/unity-catalog/permissions/"
              "registered_model/" +
              *full_name + ")");
        }
        return registry->RegisteredModelOwner(name);
      });
  // Last: the API's routes keep precedence over the UI's.
  std::string ui_dir = UiDirectory(config_.ui_dir);
  spdlog::info("web UI from {}", ui_dir);
  api::RegisterWebUiRoutes(*api_, std::make_shared<http::StaticFiles>(ui_dir));
}

Status Server::Start() {
  // Everything the server creates is its own (database, logs, uploads, artifacts, chunks).
  ::umask(077);
  // Room for --max-connections: the soft limit on descriptors is often 1024.
  if (struct rlimit nofile{};
      ::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &nofile);
  }
  TY_RETURN_IF_ERROR(SecureDataDir());
  TY_RETURN_IF_ERROR(InitStore());
  TY_RETURN_IF_ERROR(InitBlobs());
  TY_RETURN_IF_ERROR(InitServices());
  TY_RETURN_IF_ERROR(InitJobs());
  TY_RETURN_IF_ERROR(InitCheckpoints());
  TY_RETURN_IF_ERROR(InitServing());
  InitLineage();  // connects to serving too
  InitApi();
  http::ServerOptions options;
  options.host = config_.host;
  options.port = config_.port;
  options.io_threads = config_.io_threads;
  options.worker_threads = config_.worker_threads;
  options.max_body_bytes = config_.max_body_bytes;
  options.max_upload_bytes = config_.max_upload_bytes;
  options.idle_timeout = std::chrono::milliseconds(config_.idle_timeout_ms);
  options.max_connections = config_.max_connections;
  options.max_connections_per_client = config_.max_connections_per_client;
  options.max_inflight_bytes_per_client = config_.max_inflight_bytes_per_client;
  options.upload_dir = config_.data_dir + "/uploads";
  options.stream_body_to_file = [](http::Method method, std::string_view path) {
    return api::IsArtifactUpload(method, path) || api::IsCheckpointBlobUpload(method, path) ||
           api::IsTableImport(method, path);
  };
  options.render_error = api::TransportErrorResponse;
  // Credentials are checked before a body is read (api::Api::CheckHeader).
  options.check_header = [this](const http::Request& r, bool may_block) {
    return api_->CheckHeader(r, may_block);
  };
  // Reads answered from memory skip the hand-off to a worker and back (Api's inline routes).
  options.answer_inline = [this](http::Request& r) { return router_.TryInline(r); };
  identity_->SetFailedAuthRecordsPerMinute(config_.failed_auth_audit_per_minute);
  http_ = std::make_unique<http::HttpServer>(
      options, [this](http::Request& r) { return router_.Dispatch(r); });
  TY_RETURN_IF_ERROR(http_->Start());
  // The job loop starts last: workloads need the URL the server listens on.
  std::string url_host = config_.host == "0.0.0.0" || config_.host == "::" || config_.host.empty()
                             ? "127.0.0.1"
                             : config_.host;
  jobs_->SetServerUrl(config_.advertise_url.empty()
                          ? "http://" + url_host + ":" + std::to_string(http_->port())
                          : config_.advertise_url);
  TY_RETURN_IF_ERROR(jobs_->Start());
  TY_RETURN_IF_ERROR(serving_->Start());
  spdlog::info("trainyard server listening on http://{}:{}", config_.host, http_->port());
  return Status::Ok();
}

void Server::Stop() {
  if (http_) {
    http_->Stop(kHttpDrainTime);
    http_.reset();
  }
  // Unlike jobs, replicas stop with the server: the next start brings up min_replicas anew.
  // They are jobs, so this comes while the job loop still runs to see them end.
  if (serving_) serving_->Stop();
  // Running jobs keep running; the next start re-adopts them.
  if (jobs_) jobs_->Stop();
  if (executor_) executor_->Shutdown();
}

int Server::port() const { return http_ ? http_->port() : 0; }

}  // namespace trainyard::server
