#include "trainyard/cli/cli.h"

#include <malloc.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>

#include "trainyard/cli/catalog_commands.h"
#include "trainyard/cli/checkpoint_commands.h"
#include "trainyard/cli/client.h"
#include "trainyard/cli/endpoint_commands.h"
#include "trainyard/cli/jobs_commands.h"
#include "trainyard/cli/lineage_commands.h"
#include "trainyard/cli/prep_commands.h"
#include "trainyard/cli/security_commands.h"
#include "trainyard/cli/table.h"
#include "trainyard/cli/table_data_commands.h"
#include "trainyard/common/json.h"
#include "trainyard/common/log.h"
#include "trainyard/common/strings.h"
#include "trainyard/executors/rank_shim.h"
#include "trainyard/http/client.h"
#include "trainyard/server/server.h"

namespace trainyard::cli {
namespace {

// --- server

int RunServer(server::ServerConfig config, const std::string& log_level,
              const std::string& log_format, const std::string& port_file) {
  InitLogging(log_level, log_format == "json");
  // Large response bodies (a metric history can be 100 MB) would otherwise be fresh
  // mmap()s, page-faulted in on every request: keep them in the heap for reuse.
  mallopt(M_MMAP_THRESHOLD, 512 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);  // inherited by every thread started below
  signal(SIGPIPE, SIG_IGN);
  server::Server server(config);
  Status s = server.Start();
  if (!s.ok()) {
    spdlog::error("{}", s.message());
    return 1;
  }
  if (!port_file.empty()) {
    // Written after listening starts, atomically, so a launcher may poll for it.
    std::string tmp = port_file + ".tmp";
    std::ofstream(tmp) << server.port() << "\n";
    std::rename(tmp.c_str(), port_file.c_str());
  }
  int sig = 0;
  sigwait(&signals, &sig);
  spdlog::info("received {}, draining in-flight requests", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  server.Stop();
  spdlog::info("stopped");
  return 0;
}

// --- experiments, runs, models

int ExperimentsList(Client& client, bool all) {
  json::object body{{"max_results", 1000}};
  if (all) body["view_type"] = "ALL";
  auto r = client.Call("GET", "/api/2.0/mlflow/experiments/search", body);
  if (!r.ok()) return Fail(r.status());
  std::vector<std::vector<std::string>> rows;
  for (const auto& e : Arr(*r, "experiments")) {
    rows.push_back({Str(e, "experiment_id"), Str(e, "name"), Str(e, "lifecycle_stage"),
                    FormatTime(Int(e, "creation_time")), Str(e, "artifact_location")});
  }
  PrintTable(std::cout, {"ID", "NAME", "STATE", "CREATED", "ARTIFACTS"}, rows);
  return 0;
}

int ExperimentsShow(Client& client, const std::string& id_or_name) {
  bool numeric = ParseInt64(id_or_name).has_value();
  auto r = numeric ? client.Call("GET", "/api/2.0/mlflow/experiments/get",
                                 {{"experiment_id", id_or_name}})
                   : client.Call("GET", "/api/2.0/mlflow/experiments/get-by-name",
                                 {{"experiment_name", id_or_name}});
  if (!r.ok()) return Fail(r.status());
  const json::value& e = r->as_object().at("experiment");
  std::cout << "Experiment " << Str(e, "experiment_id") << ": " << Str(e, "name") << "\n"
            << "  state:     " << Str(e, "lifecycle_stage") << "\n"
            << "  created:   " << FormatTime(Int(e, "creation_time")) << "\n"
            << "  artifacts: " << Str(e, "artifact_location") << "\n";
  for (const auto& t : Arr(e, "tags")) {
    std::cout << "  tag " << Str(t, "key") << " = " << Str(t, "value") << "\n";
  }
  return 0;
}

int RunsList(Client& client, const std::string& experiment, const std::string& filter,
             int max_results) {
  std::string eid = experiment;
  if (!ParseInt64(eid)) {
    auto e = client.Call("GET", "/api/2.0/mlflow/experiments/get-by-name",
                         {{"experiment_name", experiment}});
    if (!e.ok()) return Fail(e.status());
    eid = Str(e->as_object().at("experiment"), "experiment_id");
  }
  auto r = client.Call(
      "POST", "/api/2.0/mlflow/runs/search",
      {{"experiment_ids", json::array{eid}}, {"filter", filter}, {"max_results", max_results}});
  if (!r.ok()) return Fail(r.status());
  std::vector<std::vector<std::string>> rows;
  for (const auto& run : Arr(*r, "runs")) {
    const auto& info = run.as_object().at("info");
    std::string metrics;
    for (const auto& m : Arr(run.as_object().at("data"), "metrics")) {
      if (metrics.size() > 40) break;
      metrics += (metrics.empty() ? "" : " ") + Str(m, "key") + "=" +
                 FormatNumber(m.as_object().at("value"));
    }
    int64_t start = Int(info, "start_time"), end = Int(info, "end_time");
    rows.push_back({Str(info, "run_id"), Str(info, "run_name"), Str(info, "status"),
                    FormatTime(start), end ? FormatDuration(end - start) : "", metrics});
  }
  PrintTable(std::cout, {"RUN ID", "NAME", "STATUS", "STARTED", "DURATION", "METRICS"}, rows, 64);
  return 0;
}

int RunsShow(Client& client, const std::string& run_id) {
  auto r = client.Call("GET", "/api/2.0/mlflow/runs/get", {{"run_id", run_id}});
  if (!r.ok()) return Fail(r.status());
  const auto& run = r->as_object().at("run");
  const auto& info = run.as_object().at("info");
  const auto& data = run.as_object().at("data");
  int64_t start = Int(info, "start_time"), end = Int(info, "end_time");
  std::cout << "Run " << Str(info, "run_id") << " (" << Str(info, "run_name") << ")\n"
            << "  experiment: " << Str(info, "experiment_id") << "\n"
            << "  status:     " << Str(info, "status") << "\n"
            << "  user:       " << Str(info, "user_id") << "\n"
            << "  started:    " << FormatTime(start) << "\n"
            << "  duration:   " << (end ? FormatDuration(end - start) : "running") << "\n"
            << "  artifacts:  " << Str(info, "artifact_uri") << "\n\n";
  std::vector<std::vector<std::string>> rows;
  for (const auto& m : Arr(data, "metrics")) {
    rows.push_back({Str(m, "key"), FormatNumber(m.as_object().at("value")), Str(m, "step")});
  }
  PrintTable(std::cout, {"METRIC", "LATEST", "STEP"}, rows);
  rows.clear();
  for (const auto& p : Arr(data, "params")) rows.push_back({Str(p, "key"), Str(p, "value")});
  std::cout << "\n";
  PrintTable(std::cout, {"PARAM", "VALUE"}, rows, 64);
  rows.clear();
  for (const auto& t : Arr(data, "tags")) {
    if (StartsWith(Str(t, "key"), "mlflow.log-model")) continue;
    rows.push_back({Str(t, "key"), Str(t, "value")});
  }
  std::cout << "\n";
  PrintTable(std::cout, {"TAG", "VALUE"}, rows, 64);
  return 0;
}

int ModelsList(Client& client) {
  auto r = client.Call("GET", "/api/2.0/mlflow/registered-models/search", {{"max_results", 1000}});
  if (!r.ok()) return Fail(r.status());
  std::vector<std::vector<std::string>> rows;
  for (const auto& m : Arr(*r, "registered_models")) {
    std::string latest, aliases;
    for (const auto& v : Arr(m, "latest_versions")) {
      latest = std::max(latest, Str(v, "version"), [](const std::string& a, const std::string& b) {
        return ParseInt64(a).value_or(0) < ParseInt64(b).value_or(0);
      });
    }
    for (const auto& a : Arr(m, "aliases")) {
      aliases += (aliases.empty() ? "" : ", ") + Str(a, "alias") + "=v" + Str(a, "version");
    }
    rows.push_back({Str(m, "name"), latest, aliases, FormatTime(Int(m, "last_updated_timestamp"))});
  }
  PrintTable(std::cout, {"NAME", "LATEST", "ALIASES", "UPDATED"}, rows);
  return 0;
}

int ModelsShow(Client& client, const std::string& name) {
  auto r = client.Call("GET", "/api/2.0/mlflow/registered-models/get", {{"name", name}});
  if (!r.ok()) return Fail(r.status());
  const auto& m = r->as_object().at("registered_model");
  std::cout << "Model " << Str(m, "name") << "\n";
  if (!Str(m, "description").empty()) std::cout << "  " << Str(m, "description") << "\n";
  auto versions = client.Call("GET", "/api/2.0/mlflow/model-versions/search",
                              {{"filter", "name = '" + name + "'"}});
  if (!versions.ok()) return Fail(versions.status());
  std::vector<std::vector<std::string>> rows;
  for (const auto& v : Arr(*versions, "model_versions")) {
    std::string aliases;
    for (const auto& a : Arr(v, "aliases")) {
      aliases += (aliases.empty() ? "" : ", ") + std::string(a.as_string());
    }
    rows.push_back({Str(v, "version"), Str(v, "status"), Str(v, "current_stage"), aliases,
                    Str(v, "run_id"), FormatTime(Int(v, "creation_timestamp"))});
  }
  std::cout << "\n";
  PrintTable(std::cout, {"VERSION", "STATUS", "STAGE", "ALIASES", "RUN", "CREATED"}, rows);
  return 0;
}

// --- tokens and users

std::optional<int64_t> ParseTtl(const std::string& s) {
  if (s.empty()) return std::nullopt;
  int64_t unit = 1;
  std::string digits = s;
  switch (s.back()) {
    case 's':
      unit = 1;
      digits.pop_back();
      break;
    case 'm':
      unit = 60;
      digits.pop_back();
      break;
    case 'h':
      unit = 3600;
      digits.pop_back();
      break;
    case 'd':
      unit = 86400;
      digits.pop_back();
      break;
    default:
      break;
  }
  auto n = ParseInt64(digits);
  if (!n || *n <= 0) return std::nullopt;
  return *n * unit;
}

int TokenCreate(Client& client, const std::string& user, const std::string& description,
                const std::string& expires_in, bool query_only,
                const std::vector<std::string>& endpoints) {
  json::object body{{"description", description}};
  if (!user.empty()) body["user"] = user;
  if (!endpoints.empty() && !query_only) {
    return Fail(Status::InvalidArgument("--endpoint limits a query-only token: add --query-only"));
  }
  if (query_only) {
    body["query_only"] = true;
    json::array names;
    for (const auto& e : endpoints) names.emplace_back(e);
    body["endpoints"] = std::move(names);
  }
  if (!expires_in.empty()) {
    auto ttl = ParseTtl(expires_in);
    if (!ttl) {
      return Fail(Status::InvalidArgument(
          "--expires-in must look like 90d, 12h, 30m or 3600s (got '" + expires_in + "')"));
    }
    body["expires_in_seconds"] = *ttl;
  }
  auto r = client.Call("POST", "/api/trainyard/v1/tokens", body);
  if (!r.ok()) return Fail(r.status());
  const auto& info = r->as_object().at("info");
  std::cerr << "Created " << (query_only ? "query-only token " : "token ") << Str(info, "token_id")
            << " for " << Str(info, "user");
  if (query_only) {
    std::string names;
    for (const auto& e : endpoints) names += (names.empty() ? "" : ", ") + e;
    std::cerr << " (it may only query "
              << (endpoints.empty() ? std::string("the endpoints you may query")
                                    : "endpoint(s) " + names)
              << ")";
  }
  std::cerr << ". It is shown only once:\n";
  std::cout << Str(*r, "token") << "\n";
  return 0;
}

int TokenList(Client& client) {
  auto r = client.Call("GET", "/api/trainyard/v1/tokens");
  if (!r.ok()) return Fail(r.status());
  std::vector<std::vector<std::string>> rows;
  for (const auto& t : Arr(*r, "tokens")) {
    std::string state = Int(t, "revoked_at") ? "revoked" : "active";
    std::string scope = Str(t, "scope");
    if (scope == "query") scope = "query-only";
    if (scope.rfind("query:", 0) == 0) scope = "query-only: " + scope.substr(6);
    rows.push_back({Str(t, "token_id"), Str(t, "user"), state, FormatTime(Int(t, "created_at")),
                    FormatTime(Int(t, "expires_at")), scope.empty() ? "-" : scope,
                    Str(t, "description")});
  }
  PrintTable(std::cout, {"ID", "USER", "STATE", "CREATED", "EXPIRES", "SCOPE", "DESCRIPTION"},
             rows);
  return 0;
}

// Runs `program` (trainyard-train, trainyard-serve-model: installed beside this one) with the
// arguments after the subcommand.
int ExecBeside(const char* program, int argc, char** argv) {
  std::error_code ec;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  std::filesystem::path path = self.parent_path() / program;
  if (ec || !std::filesystem::exists(path)) {
    std::cerr << "error: " << program << " was not found beside " << self.string()
              << "; build it (scripts/build) or install it next to trainyard\n";
    return 2;
  }
  std::vector<char*> args;
  std::string name = path.string();
  args.push_back(name.data());
  for (int i = 2; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  ::execv(name.c_str(), args.data());
  std::cerr << "error: cannot run " << name << ": " << std::strerror(errno) << "\n";
  return 2;
}

int TokenRevoke(Client& client, const std::string& token_id) {
  auto r = client.Call("DELETE", "/api/trainyard/v1/tokens/" + UrlEncode(token_id));
  if (!r.ok()) return Fail(r.status());
  std::cout << "Revoked token " << token_id << "\n";
  return 0;
}

int UserCreate(Client& client, const std::string& user_name, bool user_admin,
               const std::string& user_os_user) {
  auto r = client.Call("POST", "/api/trainyard/v1/users",
                       {{"name", user_name}, {"is_admin", user_admin}, {"os_user", user_os_user}});
  if (!r.ok()) return Fail(r.status());
  std::cout << "Created user " << user_name << (user_admin ? " (admin)" : "")
            << (user_os_user.empty() ? "" : ", jobs run as OS account " + user_os_user) << "\n";
  return 0;
}

int UserUpdate(Client& client, const std::string& user_name, const std::string& user_os_user) {
  auto r = client.Call("PATCH", "/api/trainyard/v1/users/" + UrlEncode(user_name),
                       {{"os_user", user_os_user}});
  if (!r.ok()) return Fail(r.status());
  std::cout << "User " << user_name
            << (user_os_user.empty() ? " has no OS account now"
                                     : "'s jobs run as OS account " + user_os_user)
            << "\n";
  return 0;
}

int UsersList(Client& client) {
  auto r = client.Call("GET", "/api/trainyard/v1/users");
  if (!r.ok()) return Fail(r.status());
  std::vector<std::vector<std::string>> rows;
  for (const auto& u : Arr(*r, "users")) {
    std::string os_user = Str(u, "os_user");
    rows.push_back({Str(u, "name"), Str(u, "is_admin") == "true" ? "yes" : "no",
                    os_user.empty() ? "-" : os_user, FormatTime(Int(u, "created_at"))});
  }
  PrintTable(std::cout, {"USER", "ADMIN", "OS USER", "CREATED"}, rows);
  return 0;
}

// --- subcommand registration, one function per group. Each Add...Commands registers its
// subcommands and returns a function that runs the parsed one, or returns nullopt when none
// of its subcommands was parsed (like AddCheckpointCommands).

using AddClientOptions = std::function<void(CLI::App*)>;
using CommandRunner = std::function<std::optional<int>(Client&)>;

struct ServerOptions {
  server::ServerConfig config;
  std::string log_level = "info";
  std::string port_file;
  std::string log_format = "text";
  double idle_timeout_s = 0;
};

// Where the server keeps its state, how it listens and what it admits.
void AddServerListenOptions(CLI::App* server_cmd, ServerOptions& o) {
  server::ServerConfig& config = o.config;
  server_cmd->add_option("--data-dir", config.data_dir,
                         "where state lives (env TRAINYARD_DATA_DIR)");
  server_cmd->add_option("--host", config.host, "address to listen on")->capture_default_str();
  server_cmd->add_option("--port", config.port, "port to listen on (0: any free port)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)
      ->capture_default_str();
  server_cmd->add_option("--db", config.db,
                         "metadata store: a SQLite path (default <data-dir>/trainyard.db) or "
                         "postgresql://user@host:port/db");
  server_cmd->add_option("--artifacts", config.artifacts,
                         "artifact store: a directory (default <data-dir>/artifacts) or "
                         "s3://BUCKET/PREFIX (credentials from AWS_* variables)");
  server_cmd->add_option("--checkpoints", config.checkpoints,
                         "checkpoint store: a directory (default <data-dir>/checkpoints) or "
                         "s3://BUCKET/PREFIX");
  server_cmd->add_option("--s3-credentials-role-arn", config.s3_credentials_role_arn,
                         "IAM role to assume (STS AssumeRole, credentials from AWS_* variables) "
                         "for temporary credentials scoped to catalog objects on S3; unset: "
                         "none are issued");
  server_cmd
      ->add_option("--s3-credentials-duration", config.s3_credentials_duration_s,
                   "seconds such a credential lasts (900-43200; the role's maximum session "
                   "duration must allow it)")
      ->capture_default_str();
  server_cmd->add_flag("--sync-full", config.sqlite_sync_full,
                       "SQLite: fsync every commit (survives power loss, slower)");
  server_cmd->add_option("--workers", config.worker_threads, "request worker threads")
      ->capture_default_str();
  server_cmd
      ->add_option("--max-body-bytes", config.max_body_bytes,
                   "largest JSON (in-memory) request body")
      ->capture_default_str();
  server_cmd
      ->add_option("--max-upload-bytes", config.max_upload_bytes,
                   "largest artifact or checkpoint upload")
      ->capture_default_str();
  o.idle_timeout_s = static_cast<double>(config.idle_timeout_ms) / 1000;
  server_cmd
      ->add_option("--idle-timeout", o.idle_timeout_s,
                   "seconds a connection may send nothing before it is dropped (a request may "
                   "take longer while it keeps sending)")
      ->check(CLI::Range(0.1, 86400.0))
      ->capture_default_str();
  server_cmd->add_option("--max-connections", config.max_connections, "open connections in total")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  server_cmd
      ->add_option("--max-connections-per-client", config.max_connections_per_client,
                   "open connections from one client address")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  server_cmd
      ->add_option("--max-inflight-bytes-per-client", config.max_inflight_bytes_per_client,
                   "bytes of in-memory request bodies one client address may have in flight")
      ->capture_default_str();
  server_cmd
      ->add_option("--audit-failed-auth-per-minute", config.failed_auth_audit_per_minute,
                   "audit records of failed authentications per client address and minute "
                   "(the rest are counted in a summary record)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  server_cmd->add_option("--port-file", o.port_file,
                         "write the bound port here once listening (useful with --port 0)");
  server_cmd->add_option("--log-level", o.log_level, "trace, debug, info, warn, error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}))
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)
      ->capture_default_str();
}

// Where and as whom jobs run (--log-format stays last, where the help has always listed it).
void AddServerExecutionOptions(CLI::App* server_cmd, ServerOptions& o) {
  server::ServerConfig& config = o.config;
  server_cmd
      ->add_option("--local-nodes", config.local_nodes,
                   "simulate this many nodes of the local pool on this machine")
      ->capture_default_str();
  server_cmd->add_option("--local-gpus", config.local_gpus,
                         "GPUs per local node (default: detected through NVML)");
  server_cmd->add_option("--local-cpus", config.local_cpus,
                         "CPUs per local node (default: this machine's)");
  server_cmd->add_option("--price-catalog", config.price_catalog,
                         "YAML prices per compute pool (see examples/prices-2026.yaml)");
  server_cmd->add_option("--pool-name", config.pool_name,
                         "name of the compute pool (its price entry; default: the executor's)");
  server_cmd->add_option("--executor", config.executor, "where jobs run: local or slurm")
      ->check(CLI::IsMember({"local", "slurm"}))
      ->capture_default_str();
  server_cmd->add_option("--slurm-partition", config.slurm_partition, "Slurm partition for jobs");
  server_cmd->add_option("--slurm-account", config.slurm_account, "Slurm account (sbatch -A)");
  server_cmd->add_option("--slurm-qos", config.slurm_qos, "Slurm QoS (sbatch --qos)");
  server_cmd->add_option("--slurm-conf", config.slurm_conf,
                         "slurm.conf for the Slurm commands (SLURM_CONF)");
  server_cmd->add_option("--slurm-sbatch-arg", config.slurm_sbatch_args,
                         "extra sbatch argument, e.g. --constraint=a100 (repeatable)");
  server_cmd->add_flag("--single-user", config.single_user,
                       "run every job as this server's OS account; only admins may submit "
                       "(implied when not root; as root, jobs otherwise run as their users' "
                       "mapped OS accounts)");
  server_cmd->add_option("--job-dir", config.job_dir,
                         "where jobs' private directories live (default: <data-dir>/jobs, or "
                         "<data-dir>-jobs in multi-user mode)");
  server_cmd->add_option("--advertise-url", config.advertise_url,
                         "URL workloads use to reach this server (default http://HOST:PORT)");
  server_cmd->add_option("--serving-mlflow", config.serving_mlflow,
                         "the `mlflow` program that serves pyfunc endpoints (default: found on "
                         "PATH)");
  server_cmd->add_option("--serving-engine", config.serving_engine,
                         "the trainyard-serve-model program that serves llm endpoints (default: "
                         "beside this binary)");
  server_cmd->add_option("--ui-dir", config.ui_dir,
                         "the built web UI served at / (default: web/ beside this binary, as "
                         "scripts/build puts it, or ../share/trainyard/web)");
  server_cmd
      ->add_option("--serving-device", config.serving_device,
                   "--device for llm replicas: auto, cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  server_cmd
      ->add_option("--capture-flush-ms", config.capture_flush_ms,
                   "how long captured requests wait before they are appended to an endpoint's "
                   "capture table (a batch goes at 500 rows sooner)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  server_cmd
      ->add_option("--capture-index-retention-days", config.capture_index_retention_days,
                   "how long the request index remembers a captured request (its id's lineage: "
                   "endpoint, model version, capture table version); older ones are pruned "
                   "hourly; 0 keeps them all")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  server_cmd
      ->add_option("--serving-cold-start-s", config.serving_cold_start_s,
                   "how long a request waits for a replica to start (scale from zero)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  server_cmd
      ->add_option("--serving-model-copy-grace-s", config.serving_model_copy_grace_s,
                   "multi-user mode: how long the copy of a model that no replica uses any more "
                   "is kept, so that a restart or scale-up soon after does not copy it again")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  server_cmd->add_option("--log-format", o.log_format, "text, or json (one object per line)")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
}

// Adds `server`. The returned function runs the server when it was parsed (it needs no client).
std::function<std::optional<int>()> AddServerCommand(CLI::App& app) {
  auto o = std::make_shared<ServerOptions>();
  o->config.data_dir = DefaultDataDir();
  auto* server_cmd = app.add_subcommand("server", "run the Trainyard server");
  AddServerListenOptions(server_cmd, *o);
  AddServerExecutionOptions(server_cmd, *o);
  return [o, server_cmd]() -> std::optional<int> {
    if (!server_cmd->parsed()) return std::nullopt;
    o->config.idle_timeout_ms = static_cast<int64_t>(o->idle_timeout_s * 1000);
    return RunServer(o->config, o->log_level, o->log_format, o->port_file);
  };
}

// Adds `experiments`, `runs` and `models`.
CommandRunner AddTrackingCommands(CLI::App& app, const AddClientOptions& add_client_options) {
  struct Options {
    bool all_experiments = false;
    std::string exp_id;
    std::string run_experiment = "0", run_filter, run_id;
    int run_max = 100;
    std::string model_name;
  };
  auto o = std::make_shared<Options>();
  auto* experiments = app.add_subcommand("experiments", "list and inspect experiments");
  experiments->require_subcommand(1);
  auto* exp_list = experiments->add_subcommand("list", "list experiments");
  exp_list->add_flag("--all", o->all_experiments, "include deleted experiments");
  add_client_options(exp_list);
  auto* exp_show = experiments->add_subcommand("show", "show one experiment");
  exp_show->add_option("experiment", o->exp_id, "experiment id or name")->required();
  add_client_options(exp_show);

  auto* runs = app.add_subcommand("runs", "list and inspect runs");
  runs->require_subcommand(1);
  auto* runs_list = runs->add_subcommand("list", "list the runs of an experiment");
  runs_list->add_option("-e,--experiment", o->run_experiment, "experiment id or name")
      ->capture_default_str();
  runs_list->add_option("--filter", o->run_filter, "MLflow filter, e.g. \"metrics.loss < 0.5\"");
  runs_list->add_option("--max", o->run_max, "at most this many runs")->capture_default_str();
  add_client_options(runs_list);
  auto* runs_show = runs->add_subcommand("show", "show a run's metrics, params and tags");
  runs_show->add_option("run_id", o->run_id, "run id")->required();
  add_client_options(runs_show);

  auto* models = app.add_subcommand("models", "list and inspect registered models");
  models->require_subcommand(1);
  auto* models_list = models->add_subcommand("list", "list registered models");
  add_client_options(models_list);
  auto* models_show = models->add_subcommand("show", "show a model's versions and aliases");
  models_show->add_option("name", o->model_name, "registered model name")->required();
  add_client_options(models_show);

  return [=](Client& client) -> std::optional<int> {
    if (exp_list->parsed()) return ExperimentsList(client, o->all_experiments);
    if (exp_show->parsed()) return ExperimentsShow(client, o->exp_id);
    if (runs_list->parsed()) return RunsList(client, o->run_experiment, o->run_filter, o->run_max);
    if (runs_show->parsed()) return RunsShow(client, o->run_id);
    if (models_list->parsed()) return ModelsList(client);
    if (models_show->parsed()) return ModelsShow(client, o->model_name);
    return std::nullopt;
  };
}

// Adds `token`.
CommandRunner AddTokenCommands(CLI::App& app, const AddClientOptions& add_client_options) {
  struct Options {
    std::string token_user, token_description, token_expires, token_id;
    bool token_query_only = false;
    std::vector<std::string> token_endpoints;
  };
  auto o = std::make_shared<Options>();
  auto* token = app.add_subcommand("token", "create, list and revoke API tokens");
  token->require_subcommand(1);
  auto* token_create = token->add_subcommand("create", "create a token (printed once)");
  token_create->add_option("--user", o->token_user, "for this user (admins only; default: you)");
  token_create->add_option("--description", o->token_description, "what the token is for");
  token_create->add_option("--expires-in", o->token_expires, "lifetime, e.g. 90d, 12h");
  token_create->add_flag("--query-only", o->token_query_only,
                         "a token that may only query serving endpoints (refused elsewhere)");
  token_create->add_option("--endpoint", o->token_endpoints,
                           "with --query-only: only this endpoint (repeatable)");
  add_client_options(token_create);
  auto* token_list = token->add_subcommand("list", "list tokens");
  add_client_options(token_list);
  auto* token_revoke = token->add_subcommand("revoke", "revoke a token");
  token_revoke->add_option("token_id", o->token_id, "token id (from 'token list')")->required();
  add_client_options(token_revoke);
  return [=](Client& client) -> std::optional<int> {
    if (token_create->parsed()) {
      return TokenCreate(client, o->token_user, o->token_description, o->token_expires,
                         o->token_query_only, o->token_endpoints);
    }
    if (token_list->parsed()) return TokenList(client);
    if (token_revoke->parsed()) return TokenRevoke(client, o->token_id);
    return std::nullopt;
  };
}

// Adds create, update and list to `users` (AddSecurityCommands adds the rest).
CommandRunner AddUserCommands(CLI::App& users, const AddClientOptions& add_client_options) {
  struct Options {
    std::string user_name, user_os_user;
    bool user_admin = false;
  };
  auto o = std::make_shared<Options>();
  users.require_subcommand(1);
  auto* users_create = users.add_subcommand("create", "create a user");
  users_create->add_option("name", o->user_name, "user name")->required();
  users_create->add_flag("--admin", o->user_admin, "make the user an admin");
  users_create->add_option("--os-user", o->user_os_user,
                           "the OS account the user's jobs run as (multi-user mode)");
  add_client_options(users_create);
  auto* users_update = users.add_subcommand("update", "change a user's OS account mapping");
  users_update->add_option("name", o->user_name, "user name")->required();
  users_update
      ->add_option("--os-user", o->user_os_user,
                   "the OS account the user's jobs run as (\"\" removes the mapping)")
      ->required();
  add_client_options(users_update);
  auto* users_list = users.add_subcommand("list", "list users");
  add_client_options(users_list);
  return [=](Client& client) -> std::optional<int> {
    if (users_create->parsed()) {
      return UserCreate(client, o->user_name, o->user_admin, o->user_os_user);
    }
    if (users_update->parsed()) return UserUpdate(client, o->user_name, o->user_os_user);
    if (users_list->parsed()) return UsersList(client);
    return std::nullopt;
  };
}

// Adds `submit`, `jobs`, `describe`, `logs`, `cancel` and `cluster`.
CommandRunner AddJobCommands(CLI::App& app, const AddClientOptions& add_client_options) {
  struct Options {
    std::string job_file, job_id, job_project;
    bool job_follow = false, jobs_active = false;
    int job_attempt = 0, job_rank = 0, jobs_max = 50;
    std::vector<std::string> job_env;
  };
  auto o = std::make_shared<Options>();
  auto* submit = app.add_subcommand("submit", "submit a job (prints its id)");
  submit->add_option("file", o->job_file, "job spec (YAML)")->required();
  submit->add_flag("-f,--follow", o->job_follow, "stream state changes and rank 0's output");
  submit->add_option("--env", o->job_env, "NAME=VALUE added to the job's env (repeatable)");
  add_client_options(submit);
  auto* jobs_cmd = app.add_subcommand("jobs", "list jobs: state, queue position, why they wait");
  jobs_cmd->add_flag("--active", o->jobs_active, "only pending and running jobs");
  jobs_cmd->add_option("--project", o->job_project, "only this project's jobs");
  jobs_cmd->add_option("--max", o->jobs_max, "at most this many jobs")->capture_default_str();
  add_client_options(jobs_cmd);
  auto* describe = app.add_subcommand("describe", "show a job: attempts, causes, cost, goodput");
  describe->add_option("job", o->job_id, "job id")->required();
  add_client_options(describe);
  auto* logs = app.add_subcommand("logs", "print a job's output");
  logs->add_option("job", o->job_id, "job id")->required();
  logs->add_flag("-f,--follow", o->job_follow, "keep printing as the job runs, across attempts");
  logs->add_option("--attempt", o->job_attempt, "attempt number (default: the latest)");
  logs->add_option("--rank", o->job_rank, "rank (default: 0)");
  add_client_options(logs);
  auto* cancel = app.add_subcommand("cancel", "cancel a job (running ranks get SIGTERM first)");
  cancel->add_option("job", o->job_id, "job id")->required();
  add_client_options(cancel);
  auto* cluster = app.add_subcommand("cluster", "show the compute pool's nodes and their use");
  add_client_options(cluster);
  return [=](Client& client) -> std::optional<int> {
    if (submit->parsed()) return SubmitJob(client, o->job_file, o->job_follow, o->job_env);
    if (jobs_cmd->parsed()) return ListJobs(client, o->jobs_active, o->job_project, o->jobs_max);
    if (describe->parsed()) return DescribeJob(client, o->job_id);
    if (logs->parsed()) {
      return JobLogs(client, o->job_id, o->job_follow, o->job_attempt, o->job_rank);
    }
    if (cancel->parsed()) return CancelJob(client, o->job_id);
    if (cluster->parsed()) return ShowCluster(client);
    return std::nullopt;
  };
}

}  // namespace

int Main(int argc, char** argv) {
  // Hidden: the local executor runs each rank under `trainyard __rank-shim ...`.
  if (argc >= 2 && std::string_view(argv[1]) == "__rank-shim") {
    return executors::RunRankShim(argc - 1, argv + 1);
  }
  // The trainer and the inference replica are programs of their own (they link libtorch,
  // which this one does not load).
  if (argc >= 2 && std::string_view(argv[1]) == "train") {
    return ExecBeside("trainyard-train", argc, argv);
  }
  if (argc >= 2 && std::string_view(argv[1]) == "serve-model") {
    return ExecBeside("trainyard-serve-model", argc, argv);
  }
  CLI::App app{"Trainyard: train, track, register and serve LLMs on your own machines",
               "trainyard"};
  app.require_subcommand(1);
  app.add_subcommand("train",
                     "fine-tune a model (LoRA or full): trainyard train config.yaml; "
                     "see trainyard train --help");
  app.add_subcommand("serve-model",
                     "serve a model directory with the OpenAI API: trainyard serve-model "
                     "--model-dir DIR --port PORT; see trainyard serve-model --help");
  ClientOptions client_options;
  auto add_client_options = [&](CLI::App* cmd) {
    cmd->add_option("--url", client_options.url, "server URL (env TRAINYARD_URL)");
    cmd->add_option("--token", client_options.token, "API token (env TRAINYARD_TOKEN)");
    cmd->add_option("--data-dir", client_options.data_dir,
                    "server data directory whose admin.token to use when no token is given");
  };

  // Registered in the order `trainyard --help` lists them.
  auto run_server = AddServerCommand(app);
  auto run_tracking = AddTrackingCommands(app, add_client_options);
  auto run_tokens = AddTokenCommands(app, add_client_options);
  auto* users = app.add_subcommand("users", "manage users (admins)");
  auto run_users = AddUserCommands(*users, add_client_options);
  auto run_jobs = AddJobCommands(app, add_client_options);
  auto run_checkpoints = AddCheckpointCommands(app, add_client_options);
  auto run_endpoints = AddEndpointCommands(app, add_client_options);
  auto run_lineage = AddLineageCommands(app, add_client_options);
  auto run_security = AddSecurityCommands(app, *users, add_client_options);
  auto run_catalog = AddCatalogCommands(app, add_client_options);
  auto run_table_data = AddTableDataCommands(app, add_client_options);
  auto run_prep = AddPrepCommands(app, add_client_options);

  CLI11_PARSE(app, argc, argv);

  if (auto rc = run_server()) return *rc;
  Client client(client_options);
  if (auto rc = run_jobs(client)) return *rc;
  if (auto rc = run_checkpoints(client)) return *rc;
  if (auto rc = run_endpoints(client)) return *rc;
  if (auto rc = run_lineage(client)) return *rc;
  if (auto rc = run_security(client)) return *rc;
  if (auto rc = run_table_data(client)) return *rc;
  if (auto rc = run_prep(client)) return *rc;
  if (auto rc = run_catalog(client)) return *rc;
  if (auto rc = run_tracking(client)) return *rc;
  if (auto rc = run_tokens(client)) return *rc;
  if (auto rc = run_users(client)) return *rc;
  return 2;
}

}  // namespace trainyard::cli
