#include "trainyard/train/platform.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "trainyard/blob/blob_store.h"
#include "trainyard/checkpoints/checkpoint_service.h"
#include "trainyard/checkpoints/checkpoint_store.h"
#include "trainyard/common/json.h"
#include "trainyard/common/page_token.h"
#include "trainyard/common/strings.h"
#include "trainyard/http/api_call.h"
#include "trainyard/train/server_api.h"

namespace trainyard::train {
namespace {

namespace fs = std::filesystem;

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

Result<int64_t> EnvInt(const char* name, int64_t fallback, int64_t lo, int64_t hi) {
  std::string v = Env(name);
  if (v.empty()) return fallback;
  auto parsed = ParseInt64(v);
  if (!parsed || *parsed < lo || *parsed > hi) {
    return Status::InvalidArgument(std::string(name) + " must be an integer between " +
                                   std::to_string(lo) + " and " + std::to_string(hi) + " (got '" +
                                   Abbreviate(v) + "')");
  }
  return *parsed;
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// --- checkpoints through the server

class ServerSink : public CheckpointSink {
 public:
  explicit ServerSink(WorkloadEnv env) : env_(std::move(env)) {}

  Result<std::string> Save(int64_t step, int rank, int world_size,
                           checkpoints::CheckpointData data) override {
    const std::string api = StripSlash(env_.url) + "/api/trainyard/v1/checkpoints";
    TY_ASSIGN_OR_RETURN(auto upload, http::CallApiJson("POST", api + "/uploads", env_.token,
                                                       json::object{{"job_id", env_.job_id},
                                                                    {"step", step},
                                                                    {"rank", rank},
                                                                    {"world_size", world_size}},
                                                       "starting checkpoint upload"));
    TY_ASSIGN_OR_RETURN(std::string id, RequiredString(upload, "upload_id"));
    const std::string base = api + "/uploads/" + UrlEncode(id);
    json::array names;
    for (const auto& b : data.blobs) {
      std::string url = base + "/blob?name=" + UrlEncode(b.name);
      if (b.kind == checkpoints::BlobKind::kTensor) {
        url += "&dtype=" + std::string(checkpoints::DTypeName(b.dtype)) +
               "&shape=" + UrlEncode(checkpoints::FormatShape(b.shape));
      }
      auto put = http::CallApi("PUT", url, env_.token, std::string(b.view()),
                               "application/octet-stream", "uploading checkpoint blob " + b.name);
      if (!put.ok()) {
        (void)http::CallApi("DELETE", base, env_.token, "", "", "abandoning upload");
        return put.status();
      }
      names.emplace_back(b.name);
    }
    json::object metrics;
    for (const auto& [k, v] : data.metrics) metrics[k] = v;
    json::object commit{{"blobs", names}, {"metrics", metrics}};
    if (!data.user_metadata.empty()) {
      auto meta = ParseJsonExact(data.user_metadata);
      commit["metadata"] = meta.ok() ? *meta : json::value(data.user_metadata);
    }
    if (!data.rng_state.empty()) commit["rng_state_base64"] = Base64Encode(data.rng_state);
    TY_ASSIGN_OR_RETURN(auto done, http::CallApiJson("POST", base + "/commit", env_.token, commit,
                                                     "committing checkpoint"));
    TY_ASSIGN_OR_RETURN(std::string uri, RequiredString(done, "uri"));
    return uri;
  }

  Result<std::optional<LoadedCheckpoint>> LoadResume(int rank) override {
    if (env_.resume_from.empty()) return std::optional<LoadedCheckpoint>();
    TY_ASSIGN_OR_RETURN(auto addr, checkpoints::ParseCheckpointUri(env_.resume_from));
    const std::string base = StripSlash(env_.url) + "/api/trainyard/v1/checkpoints/jobs/" +
                             UrlEncode(addr.job) + "/steps/" + std::to_string(addr.step);
    TY_ASSIGN_OR_RETURN(auto info, http::CallApiJson("GET", base, env_.token, {},
                                                     "reading checkpoint " + env_.resume_from));
    const json::value* ck = info.if_contains("checkpoint");
    if (ck == nullptr || !ck->is_object()) return Status::Internal("no checkpoint in answer");
    const json::value* ranks = ck->as_object().if_contains("ranks");
    if (ranks == nullptr || !ranks->is_array() || ranks->as_array().empty()) {
      return Status::Internal("checkpoint " + env_.resume_from + " has no ranks");
    }
    const json::array& rs = ranks->as_array();
    // A checkpoint saved by rank 0 alone is every rank's.
    size_t want = rs.size() == 1 ? 0 : static_cast<size_t>(rank);
    if (want >= rs.size()) {
      return Status::FailedPrecondition("checkpoint " + env_.resume_from + " has " +
                                        std::to_string(rs.size()) + " ranks; there is no rank " +
                                        std::to_string(rank));
    }
    const json::object& m = rs[want].as_object();
    LoadedCheckpoint out;
    out.uri = env_.resume_from;
    out.step = addr.step;
    if (const json::value* meta = m.if_contains("metadata"); meta && !meta->is_null()) {
      out.data.user_metadata =
          meta->is_string() ? std::string(meta->as_string()) : json::serialize(*meta);
    }
    if (const json::value* metrics = m.if_contains("metrics"); metrics && metrics->is_object()) {
      for (const auto& kv : metrics->as_object()) {
        if (kv.value().is_number()) out.data.metrics[kv.key()] = kv.value().to_number<double>();
      }
    }
    const json::value* blobs = m.if_contains("blobs");
    if (blobs == nullptr || !blobs->is_array()) return Status::Internal("manifest has no blobs");
    for (const auto& b : blobs->as_array()) {
      TY_ASSIGN_OR_RETURN(std::string name, RequiredString(b.as_object(), "name"));
      TY_ASSIGN_OR_RETURN(
          auto r,
          http::CallApi("GET",
                        base + "/blob?name=" + UrlEncode(name) + "&rank=" + std::to_string(want),
                        env_.token, "", "", "downloading checkpoint blob " + name));
      checkpoints::Bytes bytes(r.body.size());
      if (!r.body.empty()) std::memcpy(bytes.data(), r.body.data(), r.body.size());
      if (r.headers["x-trainyard-blob-kind"] == "tensor") {
        auto dtype = checkpoints::ParseDType(r.headers["x-trainyard-dtype"]);
        if (!dtype) return Status::Internal("bad X-Trainyard-Dtype for blob " + name);
        auto shape = checkpoints::ParseShape(r.headers["x-trainyard-shape"]);
        if (!shape.ok()) return Status::Internal("bad X-Trainyard-Shape for blob " + name);
        out.data.blobs.push_back(
            checkpoints::Blob::OwnedTensor(name, *dtype, std::move(*shape), std::move(bytes)));
      } else {
        out.data.blobs.push_back(checkpoints::Blob::OwnedFile(name, std::move(bytes)));
      }
    }
    return std::optional<LoadedCheckpoint>(std::move(out));
  }

  Status Heartbeat() override {
    auto r = http::CallApiJson(
        "POST",
        StripSlash(env_.url) + "/api/trainyard/v1/jobs/" + UrlEncode(env_.job_id) + "/heartbeat",
        env_.token, json::object{}, "heartbeat");
    return r.status();
  }

  std::string Describe() const override { return "the Trainyard server at " + env_.url; }

 private:
  WorkloadEnv env_;
};

// --- checkpoints in a local store (outside a job)

class LocalSink : public CheckpointSink {
 public:
  LocalSink(std::unique_ptr<checkpoints::CheckpointStore> store, std::string job,
            std::string resume_from, std::string dir)
      : store_(std::move(store)),
        job_(std::move(job)),
        resume_from_(std::move(resume_from)),
        dir_(std::move(dir)) {}

  Result<std::string> Save(int64_t step, int rank, int world_size,
                           checkpoints::CheckpointData data) override {
    checkpoints::CheckpointRef ref{kProject, job_, step, rank, world_size, 0};
    TY_RETURN_IF_ERROR(store_->Save(ref, std::move(data)).status());
    return checkpoints::CheckpointUri(kProject, job_, step);
  }

  Result<std::optional<LoadedCheckpoint>> LoadResume(int rank) override {
    int64_t step = 0;
    std::string job = job_;
    if (resume_from_ == "latest") {
      TY_ASSIGN_OR_RETURN(auto latest, store_->Latest(kProject, job_));
      if (!latest) return std::optional<LoadedCheckpoint>();
      step = latest->step;
    } else if (!resume_from_.empty()) {
      TY_ASSIGN_OR_RETURN(auto addr, checkpoints::ParseCheckpointUri(resume_from_));
      if (addr.project != kProject) {
        return Status::InvalidArgument("resume_from " + resume_from_ +
                                       " is not in the local checkpoint store (project local)");
      }
      job = addr.job;
      step = addr.step;
    } else {
      TY_ASSIGN_OR_RETURN(auto latest, store_->Latest(kProject, job_));
      if (latest) {
        return Status::FailedPrecondition(
            dir_ + " already holds checkpoints of an earlier run (latest step " +
            std::to_string(latest->step) +
            "): pass --resume to continue it, or set output.dir to a new directory");
      }
      return std::optional<LoadedCheckpoint>();
    }
    TY_ASSIGN_OR_RETURN(auto info, store_->Get(kProject, job, step));
    int want = info.world_size == 1 ? 0 : rank;
    LoadedCheckpoint out;
    out.uri = checkpoints::CheckpointUri(kProject, job, step);
    out.step = step;
    TY_ASSIGN_OR_RETURN(out.data, store_->Load(kProject, job, step, want));
    return std::optional<LoadedCheckpoint>(std::move(out));
  }

  Status Heartbeat() override { return Status::Ok(); }
  std::string Describe() const override { return "the local checkpoint store " + dir_; }

 private:
  static constexpr const char* kProject = "local";
  std::unique_ptr<checkpoints::CheckpointStore> store_;
  std::string job_;
  std::string resume_from_;
  std::string dir_;
};

}  // namespace

// --- WorkloadEnv

Result<WorkloadEnv> WorkloadEnv::FromProcess() {
  WorkloadEnv e;
  e.url = Env("TRAINYARD_URL");
  e.token = Env("TRAINYARD_TOKEN");
  e.job_id = Env("TRAINYARD_JOB_ID");
  TY_ASSIGN_OR_RETURN(e.attempt, EnvInt("TRAINYARD_ATTEMPT", 0, 0, 1 << 30));
  e.resume_from = Env("TRAINYARD_RESUME_FROM");
  e.tracking_uri = Env("MLFLOW_TRACKING_URI");
  e.tracking_token = Env("MLFLOW_TRACKING_TOKEN");
  e.run_id = Env("MLFLOW_RUN_ID");
  TY_ASSIGN_OR_RETURN(int64_t world, EnvInt("WORLD_SIZE", 1, 1, 65536));
  TY_ASSIGN_OR_RETURN(int64_t rank, EnvInt("RANK", 0, 0, 65535));
  if (rank >= world) {
    return Status::InvalidArgument("RANK (" + std::to_string(rank) +
                                   ") must be less than WORLD_SIZE (" + std::to_string(world) +
                                   ")");
  }
  e.rank = static_cast<int>(rank);
  e.world_size = static_cast<int>(world);
  TY_ASSIGN_OR_RETURN(int64_t local, EnvInt("LOCAL_WORLD_SIZE", 1, 1, 65536));
  e.local_world_size = static_cast<int>(local);
  e.master_addr = Env("MASTER_ADDR");
  TY_ASSIGN_OR_RETURN(int64_t port, EnvInt("MASTER_PORT", 0, 0, 65535));
  e.master_port = static_cast<int>(port);
  e.gloo_socket_ifname = Env("GLOO_SOCKET_IFNAME");
  if (e.world_size > 1 && (e.master_addr.empty() || e.master_port == 0)) {
    return Status::InvalidArgument(
        "WORLD_SIZE > 1 needs MASTER_ADDR and MASTER_PORT; launch through a Trainyard job or "
        "torchrun");
  }
  if (!e.resume_from.empty()) {
    TY_RETURN_IF_ERROR(checkpoints::ParseCheckpointUri(e.resume_from).status());
  }
  return e;
}

// --- RunLogger

Result<std::unique_ptr<RunLogger>> RunLogger::Open(const WorkloadEnv& env,
                                                   const std::string& run_name) {
  auto logger = std::unique_ptr<RunLogger>(new RunLogger());
  if (env.tracking_uri.empty()) return logger;
  if (env.tracking_uri.rfind("http://", 0) != 0) {
    return Status::InvalidArgument(
        "MLFLOW_TRACKING_URI must be an http:// URL of a Trainyard or "
        "MLflow server (got '" +
        Abbreviate(env.tracking_uri) + "')");
  }
  logger->base_ = StripSlash(env.tracking_uri);
  logger->token_ = env.tracking_token;
  const std::string api = logger->base_ + "/api/2.0/mlflow";
  logger->run_id_ = env.run_id;
  if (logger->run_id_.empty()) {
    std::string experiment = Env("MLFLOW_EXPERIMENT_NAME");
    if (experiment.empty()) experiment = "Default";
    std::string experiment_id;
    auto found = http::CallApiJson(
        "GET", api + "/experiments/get-by-name?experiment_name=" + UrlEncode(experiment),
        logger->token_, {}, "finding experiment " + experiment);
    if (found.ok()) {
      const json::value* exp = found->if_contains("experiment");
      if (exp && exp->is_object()) {
        TY_ASSIGN_OR_RETURN(experiment_id, RequiredString(exp->as_object(), "experiment_id"));
      }
    } else if (found.status().code() == StatusCode::kNotFound) {
      TY_ASSIGN_OR_RETURN(auto created,
                          http::CallApiJson("POST", api + "/experiments/create", logger->token_,
                                            json::object{{"name", experiment}},
                                            "creating experiment " + experiment));
      TY_ASSIGN_OR_RETURN(experiment_id, RequiredString(created, "experiment_id"));
    } else {
      return found.status();
    }
    TY_ASSIGN_OR_RETURN(auto run, http::CallApiJson("POST", api + "/runs/create", logger->token_,
                                                    json::object{{"experiment_id", experiment_id},
                                                                 {"run_name", run_name},
                                                                 {"start_time", NowMs()}},
                                                    "creating a run"));
    const json::value* info = run.if_contains("run");
    if (info == nullptr) return Status::Internal("runs/create answered without a run");
    const json::value* i = info->as_object().if_contains("info");
    if (i == nullptr) return Status::Internal("runs/create answered without run.info");
    TY_ASSIGN_OR_RETURN(logger->run_id_, RequiredString(i->as_object(), "run_id"));
    logger->owns_run_ = true;
  }
  TY_ASSIGN_OR_RETURN(
      auto got, http::CallApiJson("GET", api + "/runs/get?run_id=" + UrlEncode(logger->run_id_),
                                  logger->token_, {}, "reading run " + logger->run_id_));
  const json::value* run = got.if_contains("run");
  const json::value* info = run ? run->as_object().if_contains("info") : nullptr;
  const json::value* data = run ? run->as_object().if_contains("data") : nullptr;
  const json::value* params =
      data && data->is_object() ? data->as_object().if_contains("params") : nullptr;
  if (params != nullptr && params->is_array()) {
    for (const auto& p : params->as_array()) {
      if (!p.is_object()) continue;
      auto key = OptionalString(p.as_object(), "key");
      auto value = OptionalString(p.as_object(), "value");
      if (key.ok() && *key && value.ok() && *value) logger->params_[**key] = **value;
    }
  }
  if (info != nullptr && info->is_object()) {
    auto uri = OptionalString(info->as_object(), "artifact_uri");
    constexpr std::string_view kProxy = "mlflow-artifacts:";
    if (uri.ok() && *uri && (*uri)->rfind(kProxy, 0) == 0) {
      std::string rest = (*uri)->substr(kProxy.size());
      while (!rest.empty() && rest.front() == '/') rest.erase(0, 1);
      logger->artifact_root_ = rest;
    }
  }
  return logger;
}

Result<std::string> RunLogger::Post(const std::string& path, const std::string& json_body) {
  TY_ASSIGN_OR_RETURN(auto r, http::CallApi("POST", base_ + "/api/2.0/mlflow" + path, token_,
                                            json_body, "application/json", "MLflow " + path));
  return std::move(r.body);
}

Status RunLogger::LogParams(const std::vector<std::pair<std::string, std::string>>& params) {
  if (!enabled()) return Status::Ok();
  for (size_t i = 0; i < params.size(); i += 100) {
    json::array batch;
    for (size_t j = i; j < std::min(params.size(), i + 100); ++j) {
      batch.push_back(json::object{{"key", params[j].first}, {"value", params[j].second}});
    }
    TY_RETURN_IF_ERROR(
        Post("/runs/log-batch",
             json::serialize(json::object{{"run_id", run_id_}, {"params", std::move(batch)}}))
            .status());
  }
  return Status::Ok();
}

Status RunLogger::LogMetrics(const std::vector<MetricPoint>& points) {
  if (!enabled()) return Status::Ok();
  for (size_t i = 0; i < points.size(); i += 1000) {
    json::array batch;
    for (size_t j = i; j < std::min(points.size(), i + 1000); ++j) {
      const MetricPoint& p = points[j];
      batch.push_back(json::object{{"key", p.key},
                                   {"value", p.value},
                                   {"step", p.step},
                                   {"timestamp", p.timestamp_ms ? p.timestamp_ms : NowMs()}});
    }
    TY_RETURN_IF_ERROR(
        Post("/runs/log-batch",
             json::serialize(json::object{{"run_id", run_id_}, {"metrics", std::move(batch)}}))
            .status());
  }
  return Status::Ok();
}

Status RunLogger::LogInputs(const std::vector<DatasetInputSpec>& inputs) {
  if (!enabled() || inputs.empty()) return Status::Ok();
  json::array datasets;
  for (const DatasetInputSpec& d : inputs) {
    json::object dataset{{"name", d.name},
                         {"digest", d.digest},
                         {"source_type", d.source_type},
                         {"source", d.source}};
    if (!d.profile.empty()) dataset["profile"] = d.profile;
    json::array tags;
    if (!d.context.empty()) {
      tags.push_back(json::object{{"key", "mlflow.data.context"}, {"value", d.context}});
    }
    datasets.push_back(json::object{{"tags", std::move(tags)}, {"dataset", std::move(dataset)}});
  }
  return Post("/runs/log-inputs",
              json::serialize(json::object{{"run_id", run_id_}, {"datasets", std::move(datasets)}}))
      .status();
}

Status RunLogger::PutArtifact(const std::string& local_file, const std::string& relative) {
  std::ifstream in(local_file, std::ios::binary);
  if (!in) return Status::IOError("cannot read " + local_file);
  std::ostringstream buf;
  buf << in.rdbuf();
  std::string path;
  for (const std::string& part : SplitString(artifact_root_ + "/" + relative, '/')) {
    if (part.empty()) continue;
    path += "/" + UrlEncode(part);
  }
  return http::CallApi("PUT", base_ + "/api/2.0/mlflow-artifacts/artifacts" + path, token_,
                       buf.str(), "application/octet-stream", "uploading artifact " + relative)
      .status();
}

Status RunLogger::LogArtifacts(const std::string& local_path, const std::string& artifact_path) {
  if (!enabled()) return Status::Ok();
  if (artifact_root_.empty()) {
    return Status::FailedPrecondition("run " + run_id_ +
                                      " does not store artifacts through the mlflow-artifacts "
                                      "proxy; artifacts were not uploaded");
  }
  std::error_code ec;
  if (fs::is_regular_file(local_path, ec)) {
    return PutArtifact(local_path, artifact_path + "/" + fs::path(local_path).filename().string());
  }
  std::vector<fs::path> files;
  for (auto it = fs::recursive_directory_iterator(local_path, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file()) files.push_back(it->path());
  }
  if (ec) return Status::IOError("cannot list " + local_path + ": " + ec.message());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    TY_RETURN_IF_ERROR(
        PutArtifact(f.string(), artifact_path + "/" + fs::relative(f, local_path).string()));
  }
  return Status::Ok();
}

Status RunLogger::End(const std::string& status) {
  if (!enabled() || !owns_run_) return Status::Ok();
  return Post("/runs/update", json::serialize(json::object{
                                  {"run_id", run_id_}, {"status", status}, {"end_time", NowMs()}}))
      .status();
}

// --- sinks

std::unique_ptr<CheckpointSink> ServerCheckpoints(const WorkloadEnv& env) {
  return std::make_unique<ServerSink>(env);
}

Result<std::unique_ptr<CheckpointSink>> LocalCheckpoints(const std::string& dir,
                                                         const std::string& job,
                                                         const std::string& resume_from) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::IOError("cannot create " + dir + ": " + ec.message());
  TY_ASSIGN_OR_RETURN(auto blobs, blob::OpenLocalBlobStore(dir));
  // The store borrows its clock and random source: these live as long as the process.
  static SystemClock clock;
  static SecureRandom random;
  auto store = std::make_unique<checkpoints::CheckpointStore>(
      std::shared_ptr<blob::BlobStore>(std::move(blobs)), clock, random);
  return std::unique_ptr<CheckpointSink>(
      std::make_unique<LocalSink>(std::move(store), job, resume_from, dir));
}

}  // namespace trainyard::train
