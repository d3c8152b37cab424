// What a training workload says to the Trainyard control plane, over its public REST API
// only (it is a workload like any user's script): MLflow params, metrics and artifacts for
// the job's run, heartbeats, and checkpoints.
//
// WorkloadEnv reads the variables the executors set (TRAINYARD_URL, TRAINYARD_TOKEN,
// TRAINYARD_JOB_ID, TRAINYARD_ATTEMPT, TRAINYARD_RESUME_FROM, MLFLOW_TRACKING_URI,
// MLFLOW_TRACKING_TOKEN, MLFLOW_RUN_ID, and torchrun's RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT, plus GLOO_SOCKET_IFNAME). Outside a job the trainer still
// runs: metrics go to stdout (and to MLflow when MLFLOW_TRACKING_URI is set), checkpoints to
// a local checkpoint store under the output directory.
//
// RunLogger and the CheckpointSinks are thread-compatible: the trainer calls a sink from
// one background thread at a time and the logger from its loop thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "trainyard/checkpoints/types.h"
#include "trainyard/common/status.h"

namespace trainyard::train {

struct WorkloadEnv {
  std::string url;    // the Trainyard server, e.g. http://127.0.0.1:5000
  std::string token;  // the job's scoped token
  std::string job_id;
  int64_t attempt = 0;
  std::string resume_from;  // trainyard-checkpoint://PROJECT/JOB/STEP
  std::string tracking_uri;
  std::string tracking_token;
  std::string run_id;
  int rank = 0;
  int world_size = 1;
  int local_world_size = 1;  // ranks on this machine
  std::string master_addr;   // rendezvous of a data-parallel gang (WORLD_SIZE > 1)
  int master_port = 0;
  std::string gloo_socket_ifname;

  static Result<WorkloadEnv> FromProcess();
  bool in_job() const { return !url.empty() && !job_id.empty(); }
};

struct MetricPoint {
  std::string key;
  double value = 0;
  int64_t step = 0;
  int64_t timestamp_ms = 0;
};

// One MLflow dataset input of a run (runs/log-inputs): the dataset's name and digest, where it
// is (source_type and source, MLflow's DatasetSource JSON), an optional profile (JSON) and the
// context it was used in (the mlflow.data.context tag: "training", "validation").
struct DatasetInputSpec {
  std::string name;
  std::string digest;
  std::string source_type;
  std::string source;
  std::string profile;
  std::string context;
};

// MLflow REST client for one run. Disabled (every call a no-op) without a tracking URI.
class RunLogger {
 public:
  // Uses MLFLOW_RUN_ID when set; otherwise, with a tracking URI, creates a run named
  // `run_name` in experiment MLFLOW_EXPERIMENT_NAME (default "Default").
  static Result<std::unique_ptr<RunLogger>> Open(const WorkloadEnv& env,
                                                 const std::string& run_name);
  bool enabled() const { return !base_.empty(); }
  const std::string& run_id() const { return run_id_; }
  // The run's params when it was opened (an earlier attempt's, for a job's run); empty when
  // disabled.
  const std::map<std::string, std::string>& params() const { return params_; }

  Status LogParams(const std::vector<std::pair<std::string, std::string>>& params);
  Status LogMetrics(const std::vector<MetricPoint>& points);
  Status LogInputs(const std::vector<DatasetInputSpec>& inputs);
  // Uploads a file or a directory tree under `artifact_path` of the run's artifacts.
  Status LogArtifacts(const std::string& local_path, const std::string& artifact_path);
  // Marks the run FINISHED / FAILED / KILLED (only a run this logger created).
  Status End(const std::string& status);

 private:
  Result<std::string> Post(const std::string& path, const std::string& json_body);
  Status PutArtifact(const std::string& local_file, const std::string& relative);

  std::string base_;  // tracking URI without a trailing slash
  std::string token_;
  std::string run_id_;
  std::string artifact_root_;  // the run's artifact_uri below mlflow-artifacts:/
  std::map<std::string, std::string> params_;
  bool owns_run_ = false;
};

// A checkpoint the trainer resumes from.
struct LoadedCheckpoint {
  std::string uri;
  int64_t step = 0;
  checkpoints::CheckpointData data;
};

// Where the trainer's checkpoints go. Save blocks until the checkpoint is durable and
// registered; the trainer runs it on a background thread for asynchronous saves.
class CheckpointSink {
 public:
  virtual ~CheckpointSink() = default;
  // Returns the checkpoint's URI.
  virtual Result<std::string> Save(int64_t step, int rank, int world_size,
                                   checkpoints::CheckpointData data) = 0;
  // The checkpoint to resume from: TRAINYARD_RESUME_FROM when set, else nothing for a job
  // (a job's first attempt starts fresh), else the local store's latest.
  virtual Result<std::optional<LoadedCheckpoint>> LoadResume(int rank) = 0;
  // A sign of life for the server's hang detection (no-op outside a job).
  virtual Status Heartbeat() = 0;
  virtual std::string Describe() const = 0;
};

// Checkpoints through the server's API (/api/trainyard/v1/checkpoints/...).
std::unique_ptr<CheckpointSink> ServerCheckpoints(const WorkloadEnv& env);
// Checkpoints in a local checkpoint store at `dir` (project "local", job `job`).
Result<std::unique_ptr<CheckpointSink>> LocalCheckpoints(const std::string& dir,
                                                         const std::string& job,
                                                         const std::string& resume_from);

}  // namespace trainyard::train
