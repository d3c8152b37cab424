#include "trainyard/tracking/tracking_service.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "trainyard/common/json.h"
#include "trainyard/common/page_token.h"
#include "trainyard/common/strings.h"
#include "trainyard/store/sql.h"
#include "trainyard/tracking/log_batch.h"
#include "trainyard/tracking/names.h"
#include "trainyard/tracking/schema.h"

namespace trainyard::tracking {
namespace {

using store::Row;
using store::Rows;
using store::Transaction;
using store::Value;

constexpr char kActive[] = "active";
constexpr char kDeleted[] = "deleted";
constexpr char kRunNameTag[] = "mlflow.runName";
// The most a logged dataset may hold (MLflow's column sizes).
constexpr size_t kMaxDatasetNameLength = 500;
constexpr size_t kMaxDatasetDigestLength = 36;
constexpr size_t kMaxDatasetSchemaBytes = 1 << 20;
constexpr size_t kMaxDatasetProfileBytes = 1 << 20;
constexpr size_t kMaxDatasetSourceBytes = 65535;
constexpr auto OptInt = store::OptionalInt;

using store::InList;
using store::NullIfEmpty;
constexpr auto Exec = store::Run;

bool ValidRunStatus(std::string_view s) {
  return s == "RUNNING" || s == "SCHEDULED" || s == "FINISHED" || s == "FAILED" || s == "KILLED";
}

bool IsTerminal(std::string_view s) { return s == "FINISHED" || s == "FAILED" || s == "KILLED"; }

Status ParseExperimentId(const std::string& id) {
  if (!ParseInt64(id) || *ParseInt64(id) < 0) {
    return Status::InvalidArgument("experiment_id must be a non-negative integer (got '" +
                                   Abbreviate(id) + "')");
  }
  return Status::Ok();
}

// Sets each key of a logged model's params or tags (`table`), replacing old values.
Status UpsertModelKeyValues(Transaction& tx, const std::string& table, const std::string& model_id,
                            const std::vector<KeyValue>& kvs) {
  for (const auto& kv : kvs) {
    TY_RETURN_IF_ERROR(Exec(tx,
                            "INSERT INTO " + table +
                                " (model_id, key, value) VALUES (?, ?, ?) ON CONFLICT (model_id, "
                                "key) DO UPDATE SET value = excluded.value",
                            {model_id, kv.key, kv.value}));
  }
  return Status::Ok();
}

// Hands each (owner id, key, value) row of `table` whose `id_column` is in `ids` to
// `add`, ordered by key: the params or tags of a page of runs or logged models.
Status ForEachKeyValue(Transaction& tx, const std::string& table, const std::string& id_column,
                       const std::vector<Value>& ids,
                       const std::function<void(const std::string&, KeyValue)>& add) {
  TY_ASSIGN_OR_RETURN(Rows rows,
                      tx.Query("SELECT " + id_column + ", key, value FROM " + table + " WHERE " +
                                   id_column + " IN " + InList(ids.size()) + " ORDER BY key",
                               ids));
  for (const auto& r : rows) add(r.Text(0), KeyValue{r.Text(1), r.Text(2)});
  return Status::Ok();
}

Status EnsureLoggedModelExists(Transaction& tx, const std::string& model_id) {
  TY_ASSIGN_OR_RETURN(Rows rows,
                      tx.Query("SELECT 1 FROM logged_models WHERE model_id = ?", {model_id}));
  if (rows.empty()) {
    return Status::NotFound("logged model '" + Abbreviate(model_id) + "' does not exist");
  }
  return Status::Ok();
}

Value MetricValue(double v) { return std::isnan(v) ? Value() : Value(v); }
int64_t NanFlag(double v) { return std::isnan(v) ? 1 : 0; }
double ReadMetricValue(const Row& row, size_t value_col, size_t nan_col) {
  if (row.Int(nan_col)) return std::nan("");
  return row.Double(value_col);
}

}  // namespace

TrackingService::TrackingService(store::Database& db, Clock& clock, Random& random,
                                 identity::Authorizer& authz, std::string artifact_root,
                                 TrackingLimits limits)
    : db_(db),
      clock_(clock),
      random_(random),
      authz_(authz),
      artifact_root_(std::move(artifact_root)),
      limits_(limits),
      metrics_(db, limits.max_history_page) {}

std::vector<store::Migration> TrackingService::Migrations() { return TrackingMigrations(); }

Status TrackingService::Init(const std::string& default_owner) {
  return db_.Write([&](Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(Rows rows, tx.Query("SELECT 1 FROM experiments WHERE experiment_id = 0"));
    if (!rows.empty()) return Status::Ok();
    int64_t now = clock_.NowMillis();
    return Exec(tx,
                "INSERT INTO experiments (experiment_id, name, artifact_location, "
                "lifecycle_stage, owner, creation_time, last_update_time) VALUES (0, 'Default', "
                "?, 'active', ?, ?, ?)",
                {artifact_root_ + "/0", default_owner, now, now});
  });
}

Status TrackingService::ValidateKey(std::string_view what, const std::string& key) const {
  return tracking::ValidateKey(what, key, limits_.max_key_length);
}

// ---------------------------------------------------------------- experiments

Result<std::string> TrackingService::NextExperimentId(Transaction& tx) {
  TY_ASSIGN_OR_RETURN(Rows rows, tx.Query("SELECT MAX(experiment_id) FROM experiments"));
  int64_t next = rows.empty() || rows[0].IsNull(0) ? 1 : rows[0].Int(0) + 1;
  return std::to_string(next);
}

Result<std::string> TrackingService::CreateExperiment(const identity::Principal& who,
                                                      const std::string& name,
                                                      const std::string& artifact_location,
                                                      const std::vector<KeyValue>& tags) {
  const std::string& owner = who.user;
  if (Trim(name).empty()) return Status::InvalidArgument("experiment name must not be empty");
  if (name.size() > limits_.max_experiment_name_length) {
    return Status::InvalidArgument("experiment name is longer than " +
                                   std::to_string(limits_.max_experiment_name_length) +
                                   " characters");
  }
  for (const auto& t : tags) {
    TY_RETURN_IF_ERROR(ValidateKey("tag", t.key));
    if (t.value.size() > limits_.max_tag_value_length) {
      return Status::InvalidArgument("tag '" + t.key + "' value is longer than " +
                                     std::to_string(limits_.max_tag_value_length));
    }
  }
  std::string id;
  Status s = db_.Write([&](Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(Rows existing,
                        tx.Query("SELECT lifecycle_stage FROM experiments WHERE name = ?", {name}));
    if (!existing.empty()) {
      std::string extra = existing[0].Text(0) == kDeleted
                              ? " (it is deleted: restore it, or choose another name)"
                              : "";
      return Status::AlreadyExists("experiment '" + name + "' already exists" + extra);
    }
    TY_ASSIGN_OR_RETURN(id, NextExperimentId(tx));
    std::string location =
        artifact_location.empty() ? artifact_root_ + "/" + id : artifact_location;
    int64_t now = clock_.NowMillis();
    TY_RETURN_IF_ERROR(Exec(tx,
                            "INSERT INTO experiments (experiment_id, name, artifact_location, "
                            "lifecycle_stage, owner, creation_time, last_update_time) VALUES (?, "
                            "?, ?, 'active', ?, ?, ?)",
                            {*ParseInt64(id), name, location, owner, now, now}));
    for (const auto& t : tags) {
      TY_RETURN_IF_ERROR(Exec(tx,
                              "INSERT INTO experiment_tags (experiment_id, key, value) VALUES (?, "
                              "?, ?) ON CONFLICT (experiment_id, key) DO UPDATE SET value = "
                              "excluded.value",
                              {*ParseInt64(id), t.key, t.value}));
    }
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return id;
}

Result<Experiment> TrackingService::LoadExperiment(Transaction& tx, const std::string& where,
                                                   const Value& arg) {
  TY_ASSIGN_OR_RETURN(Rows rows,
                      tx.Query("SELECT experiment_id, name, artifact_location, lifecycle_stage, "
                               "owner, creation_time, last_update_time FROM experiments WHERE " +
                                   where,
                               {arg}));
  if (rows.empty()) return Status::NotFound("");
  const Row& r = rows[0];
  Experiment e{r.Text(0), r.Text(1), r.Text(2), r.Text(3), r.Text(4), r.Int(5), r.Int(6), {}};
  TY_ASSIGN_OR_RETURN(Rows tags, tx.Query("SELECT key, value FROM experiment_tags WHERE "
                                          "experiment_id = ? ORDER BY key",
                                          {r.Int(0)}));
  for (const auto& t : tags) e.tags.push_back({t.Text(0), t.Text(1)});
  return e;
}

Result<Experiment> TrackingService::FindExperiment(const std::string& where, const Value& arg,
                                                   const std::string& not_found) {
  Experiment out;
  Status s = db_.Read([&](Transaction& tx) -> Status {
    auto e = LoadExperiment(tx, where, arg);
    if (!e.ok()) return e.status().IsNotFound() ? Status::NotFound(not_found) : e.status();
    out = std::move(e).value();
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return out;
}

Result<Experiment> TrackingService::GetExperiment(const std::string& experiment_id) {
  TY_RETURN_IF_ERROR(ParseExperimentId(experiment_id));
  return FindExperiment("experiment_id = ?", Value(*ParseInt64(experiment_id)),
                        "experiment with id '" + experiment_id + "' does not exist");
}

Result<Experiment> TrackingService::GetExperimentByName(const std::string& name) {
  return FindExperiment("name = ?", Value(name), "experiment '" + name + "' does not exist");
}

Result<std::string> TrackingService::ExperimentOwner(const std::string& experiment_id) {
  {
    MutexLock lock(cache_mu_);
    auto it = experiment_owner_.find(experiment_id);
    if (it != experiment_owner_.end()) return it->second;
  }
  TY_ASSIGN_OR_RETURN(Experiment e, GetExperiment(experiment_id));
  MutexLock lock(cache_mu_);
  if (experiment_owner_.size() > kMaxCachedExperimentOwners) experiment_owner_.clear();
  experiment_owner_[experiment_id] = e.owner;
  return e.owner;
}

Status TrackingService::RenameExperiment(const identity::Principal& who,
                                         const std::string& experiment_id,
                                         const std::string& new_name) {
  TY_RETURN_IF_ERROR(AuthorizeExperiment(who, experiment_id, identity::Action::kEdit));
  TY_RETURN_IF_ERROR(ParseExperimentId(experiment_id));
  if (Trim(new_name).empty()) return Status::InvalidArgument("new_name must not be empty");
  if (new_name.size() > limits_.max_experiment_name_length) {
    return Status::InvalidArgument("new_name is too long");
  }
  return db_.Write([&](Transaction& tx) -> Status {
    int64_t id = *ParseInt64(experiment_id);
    TY_ASSIGN_OR_RETURN(
        Rows rows,
        tx.Query("SELECT lifecycle_stage FROM experiments WHERE experiment_id = ?", {id}));
    if (rows.empty()) {
      return Status::NotFound("experiment with id '" + experiment_id + "' does not exist");
    }
    if (rows[0].Text(0) != kActive) {
      return Status::FailedPrecondition("cannot rename a deleted experiment; restore it first");
    }
    TY_ASSIGN_OR_RETURN(Rows clash, tx.Query("SELECT experiment_id FROM experiments WHERE name = ? "
                                             "AND experiment_id != ?",
                                             {new_name, id}));
    if (!clash.empty()) {
      return Status::AlreadyExists("experiment '" + new_name + "' already exists");
    }
    return Exec(tx, "UPDATE experiments SET name = ?, last_update_time = ? WHERE experiment_id = ?",
                {new_name, clock_.NowMillis(), id});
  });
}

Status TrackingService::DeleteExperiment(const identity::Principal& who,
                                         const std::string& experiment_id) {
  TY_RETURN_IF_ERROR(AuthorizeExperiment(who, experiment_id, identity::Action::kEdit));
  TY_RETURN_IF_ERROR(ParseExperimentId(experiment_id));
  if (experiment_id == "0") {
    return Status::InvalidArgument("the default experiment (id 0) cannot be deleted");
  }
  return db_.Write([&](Transaction& tx) -> Status {
    int64_t id = *ParseInt64(experiment_id);
    int64_t now = clock_.NowMillis();
    TY_ASSIGN_OR_RETURN(int64_t n, tx.Exec("UPDATE experiments SET lifecycle_stage = 'deleted', "
                                           "last_update_time = ? WHERE experiment_id = ?",
                                           {now, id}));
    if (n == 0) {
      return Status::NotFound("experiment with id '" + experiment_id + "' does not exist");
    }
    return Exec(tx,
                "UPDATE runs SET lifecycle_stage = 'deleted', deleted_time = ? WHERE "
                "experiment_id = ? AND lifecycle_stage = 'active'",
                {now, id});
  });
}

Status TrackingService::RestoreExperiment(const identity::Principal& who,
                                          const std::string& experiment_id) {
  TY_RETURN_IF_ERROR(AuthorizeExperiment(who, experiment_id, identity::Action::kEdit));
  TY_RETURN_IF_ERROR(ParseExperimentId(experiment_id));
  return db_.Write([&](Transaction& tx) -> Status {
    int64_t id = *ParseInt64(experiment_id);
    TY_ASSIGN_OR_RETURN(
        Rows rows,
        tx.Query("SELECT lifecycle_stage FROM experiments WHERE experiment_id = ?", {id}));
    if (rows.empty()) {
      return Status::NotFound("experiment with id '" + experiment_id + "' does not exist");
    }
    if (rows[0].Text(0) != kDeleted) {
      return Status::FailedPrecondition("experiment '" + experiment_id + "' is not deleted");
    }
    TY_RETURN_IF_ERROR(Exec(tx,
                            "UPDATE experiments SET lifecycle_stage = 'active', last_update_time "
                            "= ? WHERE experiment_id = ?",
                            {clock_.NowMillis(), id}));
    return Exec(tx,
                "UPDATE runs SET lifecycle_stage = 'active', deleted_time = NULL WHERE "
                "experiment_id = ? AND lifecycle_stage = 'deleted'",
                {id});
  });
}

Status TrackingService::SetExperimentTag(const identity::Principal& who,
                                         const std::string& experiment_id, const KeyValue& tag) {
  TY_RETURN_IF_ERROR(AuthorizeExperiment(who, experiment_id, identity::Action::kEdit));
  TY_RETURN_IF_ERROR(ParseExperimentId(experiment_id));
  TY_RETURN_IF_ERROR(ValidateKey("tag", tag.key));
  if (tag.value.size() > limits_.max_tag_value_length) {
    return Status::InvalidArgument("tag '" + tag.key + "' value is longer than " +
                                   std::to_string(limits_.max_tag_value_length));
  }
  return db_.Write([&](Transaction& tx) -> Status {
    int64_t id = *ParseInt64(experiment_id);
    TY_ASSIGN_OR_RETURN(
        Rows rows,
        tx.Query("SELECT lifecycle_stage FROM experiments WHERE experiment_id = ?", {id}));
    if (rows.empty()) {
      return Status::NotFound("experiment with id '" + experiment_id + "' does not exist");
    }
    if (rows[0].Text(0) != kActive) {
      return Status::FailedPrecondition("experiment '" + experiment_id +
                                        "' is deleted; restore it first");
    }
    return Exec(tx,
                "INSERT INTO experiment_tags (experiment_id, key, value) VALUES (?, ?, ?) ON "
                "CONFLICT (experiment_id, key) DO UPDATE SET value = excluded.value",
                {id, tag.key, tag.value});
  });
}

Status TrackingService::DeleteExperimentTag(const identity::Principal& who,
                                            const std::string& experiment_id,
                                            const std::string& key) {
  TY_RETURN_IF_ERROR(AuthorizeExperiment(who, experiment_id, identity::Action::kEdit));
  TY_RETURN_IF_ERROR(ParseExperimentId(experiment_id));
  return db_.Write([&](Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(int64_t n,
                        tx.Exec("DELETE FROM experiment_tags WHERE experiment_id = ? AND key = ?",
                                {*ParseInt64(experiment_id), key}));
    if (n == 0) {
      return Status::NotFound("experiment '" + experiment_id + "' has no tag '" + key + "'");
    }
    return Status::Ok();
  });
}

// ---------------------------------------------------------------- runs

Result<Run> TrackingService::CreateRun(const identity::Principal& who,
                                       const std::string& experiment_id, const std::string& user_id,
                                       const std::string& run_name,
                                       std::optional<int64_t> start_time,
                                       const std::vector<KeyValue>& tags) {
  TY_RETURN_IF_ERROR(AuthorizeExperiment(who, experiment_id.empty() ? "0" : experiment_id,
                                         identity::Action::kEdit));
  std::string eid = experiment_id.empty() ? "0" : experiment_id;
  TY_RETURN_IF_ERROR(ParseExperimentId(eid));
  std::string name = run_name;
  for (const auto& t : tags) {
    TY_RETURN_IF_ERROR(ValidateKey("tag", t.key));
    if (t.value.size() > limits_.max_tag_value_length) {
      return Status::InvalidArgument("tag '" + t.key + "' value is longer than " +
                                     std::to_string(limits_.max_tag_value_length));
    }
    if (t.key == kRunNameTag) {
      if (!name.empty() && name != t.value) {
        return Status::InvalidArgument("run_name '" + name + "' and the '" + kRunNameTag +
                                       "' tag '" + t.value +
                                       "' differ; give one or make them equal");
      }
      name = t.value;
    }
  }
  if (name.empty()) name = GenerateRunName(random_);
  std::string run_id = random_.Hex(16);
  Run run;
  Status s = db_.Write([&](Transaction& tx) -> Status {
    int64_t id = *ParseInt64(eid);
    TY_ASSIGN_OR_RETURN(Rows rows, tx.Query("SELECT lifecycle_stage, artifact_location FROM "
                                            "experiments WHERE experiment_id = ?",
                                            {id}));
    if (rows.empty()) {
      return Status::NotFound("experiment with id '" + eid + "' does not exist");
    }
    if (rows[0].Text(0) != kActive) {
      return Status::FailedPrecondition("experiment '" + eid +
                                        "' is deleted; runs cannot be created in it");
    }
    RunInfo& info = run.info;
    info.run_id = run_id;
    info.experiment_id = eid;
    info.run_name = name;
    info.user_id = user_id;
    info.status = "RUNNING";
    info.start_time = start_time.value_or(clock_.NowMillis());
    info.artifact_uri = rows[0].Text(1) + "/" + run_id + "/artifacts";
    info.lifecycle_stage = kActive;
    TY_RETURN_IF_ERROR(
        Exec(tx,
             "INSERT INTO runs (run_uuid, experiment_id, name, user_id, status, "
             "start_time, end_time, lifecycle_stage, artifact_uri) VALUES (?, ?, ?, "
             "?, ?, ?, NULL, 'active', ?)",
             {run_id, id, name, user_id, info.status, *info.start_time, info.artifact_uri}));
    std::map<std::string, std::string> all_tags;
    for (const auto& t : tags) all_tags[t.key] = t.value;
    all_tags[kRunNameTag] = name;
    for (const auto& [k, v] : all_tags) {
      TY_RETURN_IF_ERROR(
          Exec(tx, "INSERT INTO tags (run_uuid, key, value) VALUES (?, ?, ?)", {run_id, k, v}));
      run.tags.push_back({k, v});
    }
    return Status::Ok();
  });
  if (!s.ok()) return s;
  CacheRunExperiment(run_id, eid);
  return run;
}

Result<std::string> TrackingService::RunExperiment(const std::string& run_id) {
  {
    MutexLock lock(cache_mu_);
    auto it = run_experiment_.find(run_id);
    if (it != run_experiment_.end()) return it->second;
  }
  std::string eid;
  Status s = db_.Read([&](Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(Rows rows,
                        tx.Query("SELECT experiment_id FROM runs WHERE run_uuid = ?", {run_id}));
    if (rows.empty()) {
      return Status::NotFound("run with id '" + Abbreviate(run_id) + "' does not exist");
    }
    eid = rows[0].Text(0);
    return Status::Ok();
  });
  if (!s.ok()) return s;
  CacheRunExperiment(run_id, eid);
  return eid;
}

Result<std::string> TrackingService::RunName(const std::string& run_id) {
  std::string name;
  Status s = db_.Read([&](Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(Rows rows, tx.Query("SELECT name FROM runs WHERE run_uuid = ?", {run_id}));
    if (rows.empty()) {
      return Status::NotFound("run with id '" + Abbreviate(run_id) + "' does not exist");
    }
    name = rows[0].Text(0);
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return name;
}

void TrackingService::CacheRunExperiment(const std::string& run_id,
                                         const std::string& experiment_id) {
  MutexLock lock(cache_mu_);
  if (run_experiment_.size() > kMaxCachedRunExperiments) run_experiment_.clear();
  run_experiment_[run_id] = experiment_id;
}

Status TrackingService::LoadRunData(Transaction& tx, std::vector<Run>& runs) {
  if (runs.empty()) return Status::Ok();
  std::unordered_map<std::string, Run*> by_id;
  std::vector<Value> ids;
  for (auto& r : runs) {
    by_id[r.info.run_id] = &r;
    ids.emplace_back(r.info.run_id);
  }
  std::string in = InList(ids.size());
  TY_RETURN_IF_ERROR(ForEachKeyValue(
      tx, "params", "run_uuid", ids,
      [&](const std::string& id, KeyValue kv) { by_id[id]->params.push_back(std::move(kv)); }));
  TY_RETURN_IF_ERROR(ForEachKeyValue(
      tx, "tags", "run_uuid", ids,
      [&](const std::string& id, KeyValue kv) { by_id[id]->tags.push_back(std::move(kv)); }));
  TY_RETURN_IF_ERROR(metrics_.LoadLatest(tx, ids, [&](const std::string& id, Metric metric) {
    by_id[id]->metrics.push_back(std::move(metric));
  }));
  TY_ASSIGN_OR_RETURN(
      Rows inputs,
      tx.Query("SELECT i.run_uuid, i.tags_json, d.name, d.digest, d.source_type, d.source, "
               "d.schema_json, d.profile FROM run_inputs i JOIN datasets d ON d.dataset_uuid = "
               "i.dataset_uuid WHERE i.run_uuid IN " +
                   in + " ORDER BY d.name, d.digest",
               ids));
  for (const auto& i : inputs) {
    DatasetInput input;
    auto tags_json = ParseJsonObject(i.Text(1));
    if (tags_json.ok()) {
      for (const auto& [k, v] : *tags_json) {
        if (v.is_string()) input.tags.push_back({std::string(k), std::string(v.as_string())});
      }
    }
    input.dataset = Dataset{i.Text(2), i.Text(3), i.Text(4), i.Text(5), i.Text(6), i.Text(7)};
    by_id[i.Text(0)]->dataset_inputs.push_back(std::move(input));
  }
  TY_ASSIGN_OR_RETURN(Rows model_inputs, tx.Query("SELECT run_uuid, model_id FROM "
                                                  "run_model_inputs WHERE run_uuid IN " +
                                                      in,
                                                  ids));
  for (const auto& m : model_inputs) by_id[m.Text(0)]->model_inputs.push_back(m.Text(1));
  TY_ASSIGN_OR_RETURN(Rows outputs, tx.Query("SELECT run_uuid, model_id, step FROM run_outputs "
                                             "WHERE run_uuid IN " +
                                                 in + " ORDER BY model_id",
                                             ids));
  for (const auto& o : outputs) {
    by_id[o.Text(0)]->model_outputs.push_back({o.Text(1), o.Int(2)});
  }
  return Status::Ok();
}

static RunInfo ReadRunInfo(const Row& r) {
  RunInfo info;
  info.run_id = r.Text(0);
  info.experiment_id = r.Text(1);
  info.run_name = r.Text(2);
  info.user_id = r.Text(3);
  info.status = r.Text(4);
  info.start_time = OptInt(r, 5);
  info.end_time = OptInt(r, 6);
  info.lifecycle_stage = r.Text(7);
  info.artifact_uri = r.Text(8);
  return info;
}

static constexpr char kRunColumns[] =
    "runs.run_uuid, runs.experiment_id, runs.name, runs.user_id, runs.status, runs.start_time, "
    "runs.end_time, runs.lifecycle_stage, runs.artifact_uri";

Result<Run> TrackingService::LoadRun(Transaction& tx, const std::string& run_id) {
  TY_ASSIGN_OR_RETURN(
      Rows rows,
      tx.Query(std::string("SELECT ") + kRunColumns + " FROM runs WHERE run_uuid = ?", {run_id}));
  if (rows.empty()) {
    return Status::NotFound("run with id '" + Abbreviate(run_id) + "' does not exist");
  }
  std::vector<Run> runs(1);
  runs[0].info = ReadRunInfo(rows[0]);
  TY_RETURN_IF_ERROR(LoadRunData(tx, runs));
  return std::move(runs[0]);
}

Result<Run> TrackingService::GetRun(const std::string& run_id) {
  Run out;
  Status s = db_.Read([&](Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(out, LoadRun(tx, run_id));
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return out;
}

Status TrackingService::EnsureRunActive(Transaction& tx, const std::string& run_id) {
  TY_ASSIGN_OR_RETURN(Rows rows,
                      tx.Query("SELECT lifecycle_stage FROM runs WHERE run_uuid = ?", {run_id}));
  if (rows.empty()) {
    return Status::NotFound("run with id '" + Abbreviate(run_id) + "' does not exist");
  }
  if (rows[0].Text(0) != kActive) {
    return Status::FailedPrecondition("run '" + run_id +
                                      "' is deleted; restore it before logging to it");
  }
  return Status::Ok();
}

Result<RunInfo> TrackingService::UpdateRun(const identity::Principal& who,
                                           const std::string& run_id,
                                           const std::optional<std::string>& status,
                                           std::optional<int64_t> end_time,
                                           const std::optional<std::string>& run_name) {
  TY_RETURN_IF_ERROR(AuthorizeRun(who, run_id, identity::Action::kEdit));
  if (status && !ValidRunStatus(*status)) {
    return Status::InvalidArgument(
        "status must be one of RUNNING, SCHEDULED, FINISHED, FAILED, KILLED (got '" +
        Abbreviate(*status) + "')");
  }
  RunInfo info;
  Status s = db_.Write([&](Transaction& tx) -> Status {
    TY_RETURN_IF_ERROR(EnsureRunActive(tx, run_id));
    if (status) {
      std::optional<int64_t> end = end_time;
      if (!end && IsTerminal(*status)) end = clock_.NowMillis();
      if (end) {
        TY_RETURN_IF_ERROR(Exec(tx, "UPDATE runs SET status = ?, end_time = ? WHERE run_uuid = ?",
                                {*status, *end, run_id}));
      } else {
        TY_RETURN_IF_ERROR(
            Exec(tx, "UPDATE runs SET status = ? WHERE run_uuid = ?", {*status, run_id}));
      }
    } else if (end_time) {
      TY_RETURN_IF_ERROR(
          Exec(tx, "UPDATE runs SET end_time = ? WHERE run_uuid = ?", {*end_time, run_id}));
    }
    if (run_name && !run_name->empty()) {
      TY_RETURN_IF_ERROR(
          Exec(tx, "UPDATE runs SET name = ? WHERE run_uuid = ?", {*run_name, run_id}));
      TY_RETURN_IF_ERROR(Exec(tx,
                              "INSERT INTO tags (run_uuid, key, value) VALUES (?, ?, ?) ON "
                              "CONFLICT (run_uuid, key) DO UPDATE SET value = excluded.value",
                              {run_id, std::string(kRunNameTag), *run_name}));
    }
    TY_ASSIGN_OR_RETURN(
        Rows rows,
        tx.Query(std::string("SELECT ") + kRunColumns + " FROM runs WHERE run_uuid = ?", {run_id}));
    info = ReadRunInfo(rows[0]);
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return info;
}

Status TrackingService::SetLifecycle(const std::string& table, const std::string& id_column,
                                     const std::string& id, const std::string& what, bool deleted) {
  return db_.Write([&](Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(
        Rows rows,
        tx.Query("SELECT lifecycle_stage FROM " + table + " WHERE " + id_column + " = ?", {id}));
    if (rows.empty()) {
      return Status::NotFound(what + " with id '" + Abbreviate(id) + "' does not exist");
    }
    if (!deleted && rows[0].Text(0) != kDeleted) {
      return Status::FailedPrecondition(what + " '" + id + "' is not deleted");
    }
    if (table == "runs") {
      return Exec(tx, "UPDATE runs SET lifecycle_stage = ?, deleted_time = ? WHERE run_uuid = ?",
                  {std::string(deleted ? kDeleted : kActive),
                   deleted ? Value(clock_.NowMillis()) : Value(), id});
    }
    return Exec(tx, "UPDATE " + table + " SET lifecycle_stage = ? WHERE " + id_column + " = ?",
                {std::string(deleted ? kDeleted : kActive), id});
  });
}

Status TrackingService::DeleteRun(const identity::Principal& who, const std::string& run_id) {
  TY_RETURN_IF_ERROR(AuthorizeRun(who, run_id, identity::Action::kEdit));
  return SetLifecycle("runs", "run_uuid", run_id, "run", true);
}

Status TrackingService::RestoreRun(const identity::Principal& who, const std::string& run_id) {
  TY_RETURN_IF_ERROR(AuthorizeRun(who, run_id, identity::Action::kEdit));
  return SetLifecycle("runs", "run_uuid", run_id, "run", false);
}

Status TrackingService::LogBatch(const identity::Principal& who, const std::string& run_id,
                                 const std::vector<Metric>& metrics,
                                 const std::vector<KeyValue>& params,
                                 const std::vector<KeyValue>& tags) {
  TY_RETURN_IF_ERROR(AuthorizeRun(who, run_id, identity::Action::kEdit));
  TY_ASSIGN_OR_RETURN(ValidatedBatch batch, ValidateLogBatch(metrics, params, tags, limits_));
  MetricStore::PendingWrite points = metrics_.PrepareWrite(run_id, std::move(batch.series));
  Status s = db_.Write([&](Transaction& tx) -> Status {
    TY_RETURN_IF_ERROR(EnsureRunActive(tx, run_id));
    TY_RETURN_IF_ERROR(WriteParams(tx, run_id, batch.params));
    TY_RETURN_IF_ERROR(WriteTags(tx, run_id, batch.tags));
    TY_RETURN_IF_ERROR(metrics_.Write(tx, points));
    return WriteModelMetrics(tx, run_id, batch.model_metrics);
  });
  if (!s.ok()) return s;
  metrics_.Committed(points);
  if (activity_listener_) activity_listener_(run_id);
  return Status::Ok();
}

Status TrackingService::WriteParams(Transaction& tx, const std::string& run_id,
                                    const std::map<std::string, std::string>& params) {
  if (params.empty()) return Status::Ok();
  // Params are immutable: the same value again is fine, a different one is an error.
  std::vector<Value> args{run_id};
  for (const auto& [k, v] : params) args.emplace_back(k);
  TY_ASSIGN_OR_RETURN(Rows existing,
                      tx.Query("SELECT key, value FROM params WHERE run_uuid = ? AND key IN " +
                                   InList(params.size()),
                               args));
  for (const auto& row : existing) {
    auto it = params.find(row.Text(0));
    if (it == params.end()) continue;  // the query asked for these keys only
    const std::string& want = it->second;
    if (row.Text(1) != want) {
      return Status::InvalidArgument("changing param values is not allowed: param '" + row.Text(0) +
                                     "' was already logged with value '" + Abbreviate(row.Text(1)) +
                                     "' for run '" + run_id + "'; attempted new value '" +
                                     Abbreviate(want) + "'");
    }
  }
  for (const auto& [k, v] : params) {
    TY_RETURN_IF_ERROR(Exec(tx,
                            "INSERT INTO params (run_uuid, key, value) VALUES (?, ?, ?) ON "
                            "CONFLICT (run_uuid, key) DO NOTHING",
                            {run_id, k, v}));
  }
  return Status::Ok();
}

Status TrackingService::WriteTags(Transaction& tx, const std::string& run_id,
                                  const std::vector<KeyValue>& tags) {
  for (const auto& t : tags) {
    TY_RETURN_IF_ERROR(Exec(tx,
                            "INSERT INTO tags (run_uuid, key, value) VALUES (?, ?, ?) ON "
                            "CONFLICT (run_uuid, key) DO UPDATE SET value = excluded.value",
                            {run_id, t.key, t.value}));
    if (t.key == kRunNameTag) {
      TY_RETURN_IF_ERROR(
          Exec(tx, "UPDATE runs SET name = ? WHERE run_uuid = ?", {t.value, run_id}));
    }
  }
  return Status::Ok();
}

Status TrackingService::WriteModelMetrics(Transaction& tx, const std::string& run_id,
                                          const std::vector<Metric>& metrics) {
  for (const auto& m : metrics) {
    TY_RETURN_IF_ERROR(EnsureLoggedModelExists(tx, m.model_id));
    TY_RETURN_IF_ERROR(Exec(tx,
                            "INSERT INTO logged_model_metrics (model_id, key, value, is_nan, "
                            "step, timestamp, run_id, dataset_name, dataset_digest) VALUES (?, "
                            "?, ?, ?, ?, ?, ?, ?, ?)",
                            {m.model_id, m.key, MetricValue(m.value), NanFlag(m.value), m.step,
                             m.timestamp, run_id, m.dataset_name, m.dataset_digest}));
  }
  return Status::Ok();
}

Status TrackingService::DeleteTag(const identity::Principal& who, const std::string& run_id,
                                  const std::string& key) {
  TY_RETURN_IF_ERROR(AuthorizeRun(who, run_id, identity::Action::kEdit));
  return db_.Write([&](Transaction& tx) -> Status {
    TY_RETURN_IF_ERROR(EnsureRunActive(tx, run_id));
    TY_ASSIGN_OR_RETURN(int64_t n,
                        tx.Exec("DELETE FROM tags WHERE run_uuid = ? AND key = ?", {run_id, key}));
    if (n == 0) {
      return Status::NotFound("no tag with key '" + Abbreviate(key) + "' on run '" + run_id + "'");
    }
    return Status::Ok();
  });
}

Status TrackingService::LogInputs(const identity::Principal& who, const std::string& run_id,
                                  const std::vector<DatasetInput>& datasets,
                                  const std::vector<std::string>& model_ids) {
  TY_RETURN_IF_ERROR(AuthorizeRun(who, run_id, identity::Action::kEdit));
  for (const auto& d : datasets) {
    if (d.dataset.name.empty() || d.dataset.digest.empty()) {
      return Status::InvalidArgument("datasets[].dataset needs a name and a digest");
    }
    if (d.dataset.name.size() > kMaxDatasetNameLength ||
        d.dataset.digest.size() > kMaxDatasetDigestLength) {
      return Status::InvalidArgument("dataset name (500) or digest (36) is too long");
    }
    if (d.dataset.schema.size() > kMaxDatasetSchemaBytes ||
        d.dataset.profile.size() > kMaxDatasetProfileBytes ||
        d.dataset.source.size() > kMaxDatasetSourceBytes) {
      return Status::InvalidArgument("dataset schema/profile/source is too large");
    }
  }
  Status written = db_.Write([&](Transaction& tx) -> Status {
    TY_RETURN_IF_ERROR(EnsureRunActive(tx, run_id));
    TY_ASSIGN_OR_RETURN(Rows run,
                        tx.Query("SELECT experiment_id FROM runs WHERE run_uuid = ?", {run_id}));
    int64_t eid = run[0].Int(0);
    for (const auto& d : datasets) {
      TY_ASSIGN_OR_RETURN(Rows existing,
                          tx.Query("SELECT dataset_uuid FROM datasets WHERE experiment_id = ? AND "
                                   "name = ? AND digest = ?",
                                   {eid, d.dataset.name, d.dataset.digest}));
      std::string uuid;
      if (existing.empty()) {
        uuid = random_.Hex(16);
        TY_RETURN_IF_ERROR(Exec(tx,
                                "INSERT INTO datasets (dataset_uuid, experiment_id, name, digest, "
                                "source_type, source, schema_json, profile) VALUES (?, ?, ?, ?, "
                                "?, ?, ?, ?)",
                                {uuid, eid, d.dataset.name, d.dataset.digest, d.dataset.source_type,
                                 d.dataset.source, d.dataset.schema, d.dataset.profile}));
      } else {
        uuid = existing[0].Text(0);
      }
      json::object tags;
      std::string context;
      for (const auto& t : d.tags) {
        tags[t.key] = t.value;
        if (t.key == "mlflow.data.context") context = t.value;
      }
      TY_RETURN_IF_ERROR(
          Exec(tx,
               "INSERT INTO run_inputs (run_uuid, dataset_uuid, context, "
               "tags_json) VALUES (?, ?, ?, ?) ON CONFLICT (run_uuid, "
               "dataset_uuid) DO UPDATE SET context = excluded.context, tags_json "
               "= excluded.tags_json",
               {run_id, uuid, context.empty() ? Value() : Value(context), json::serialize(tags)}));
    }
    for (const auto& model_id : model_ids) {
      TY_RETURN_IF_ERROR(Exec(tx,
                              "INSERT INTO run_model_inputs (run_uuid, model_id) VALUES (?, ?) "
                              "ON CONFLICT (run_uuid, model_id) DO NOTHING",
                              {run_id, model_id}));
    }
    return Status::Ok();
  });
  if (written.ok() && inputs_listener_) inputs_listener_(who, run_id, datasets);
  return written;
}

Status TrackingService::LogOutputs(const identity::Principal& who, const std::string& run_id,
                                   const std::vector<ModelOutput>& models) {
  TY_RETURN_IF_ERROR(AuthorizeRun(who, run_id, identity::Action::kEdit));
  return db_.Write([&](Transaction& tx) -> Status {
    TY_RETURN_IF_ERROR(EnsureRunActive(tx, run_id));
    for (const auto& m : models) {
      TY_RETURN_IF_ERROR(EnsureLoggedModelExists(tx, m.model_id));
      TY_RETURN_IF_ERROR(Exec(tx,
                              "INSERT INTO run_outputs (run_uuid, model_id, step) VALUES (?, ?, "
                              "?) ON CONFLICT (run_uuid, model_id) DO UPDATE SET step = "
                              "excluded.step",
                              {run_id, m.model_id, m.step}));
    }
    return Status::Ok();
  });
}

// ---------------------------------------------------------------- metrics

Result<std::string> TrackingService::ScanMetricHistory(
    const std::string& run_id, const std::string& key, std::optional<int64_t> max_results,
    const std::string& page_token, const std::function<void(const MetricPoint&)>& fn) {
  return metrics_.ScanHistory(run_id, key, max_results, page_token, fn);
}

Status TrackingService::ScanMetricHistorySharded(
    const std::string& run_id, const std::string& key, int shards,
    const std::function<void(int, const MetricPoint&)>& fn) {
  // One range per thread: `steps_per_range` large enough that the span makes `shards`.
  return metrics_.ScanHistoryRanges(
      run_id, key, shards, std::numeric_limits<int64_t>::max(), [](int) {},
      [&](int r, const MetricPoint* points, size_t n) {
        for (size_t i = 0; i < n; ++i) fn(r, points[i]);
      });
}

Status TrackingService::ScanMetricHistoryRanges(
    const std::string& run_id, const std::string& key, int threads, int64_t steps_per_range,
    const std::function<void(int)>& plan,
    const std::function<void(int, const MetricPoint*, size_t)>& fn) {
  return metrics_.ScanHistoryRanges(run_id, key, threads, steps_per_range, plan, fn);
}

Result<Page<Metric>> TrackingService::GetMetricHistory(const std::string& run_id,
                                                       const std::string& key,
                                                       std::optional<int64_t> max_results,
                                                       const std::string& page_token) {
  return metrics_.GetHistory(run_id, key, max_results, page_token);
}

Result<std::vector<Metric>> TrackingService::GetMetricHistoryBulkInterval(
    const std::vector<std::string>& run_ids, const std::string& key,
    std::optional<int64_t> start_step, std::optional<int64_t> end_step, int64_t max_results) {
  return metrics_.GetHistoryBulkInterval(run_ids, key, start_step, end_step, max_results);
}

Result<DownsampledHistory> TrackingService::DownsampleMetricHistory(
    const std::string& run_id, const std::string& key, int64_t buckets,
    std::optional<int64_t> min_step, std::optional<int64_t> max_step) {
  return metrics_.Downsample(run_id, key, buckets, min_step, max_step);
}

Result<std::vector<DownsampledHistory>> TrackingService::DownsampleMetricHistories(
    const std::vector<std::string>& run_ids, const std::string& key, int64_t buckets,
    std::optional<int64_t> min_step, std::optional<int64_t> max_step) {
  return metrics_.DownsampleMany(run_ids, key, buckets, min_step, max_step);
}

// ---------------------------------------------------------------- logged models

Result<std::string> TrackingService::LoggedModelExperiment(const std::string& model_id) {
  std::string eid;
  Status s = db_.Read([&](Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(Rows rows, tx.Query("SELECT experiment_id FROM logged_models WHERE "
                                            "model_id = ?",
                                            {model_id}));
    if (rows.empty()) {
      return Status::NotFound("logged model '" + Abbreviate(model_id) + "' does not exist");
    }
    eid = rows[0].Text(0);
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return eid;
}

Result<LoggedModel> TrackingService::CreateLoggedModel(
    const identity::Principal& who, const std::string& experiment_id, const std::string& name,
    const std::string& model_type, const std::string& source_run_id,
    const std::vector<KeyValue>& params, const std::vector<KeyValue>& tags) {
  TY_RETURN_IF_ERROR(AuthorizeNewLoggedModel(who, experiment_id, source_run_id));
  const std::string& owner = who.user;
  TY_RETURN_IF_ERROR(ParseExperimentId(experiment_id));
  for (const auto& p : params) TY_RETURN_IF_ERROR(ValidateKey("param", p.key));
  for (const auto& t : tags) TY_RETURN_IF_ERROR(ValidateKey("tag", t.key));
  std::string model_id = "m-" + random_.Hex(16);
  std::string model_name = name.empty() ? GenerateRunName(random_) : name;
  Status s = db_.Write([&](Transaction& tx) -> Status {
    int64_t eid = *ParseInt64(experiment_id);
    TY_ASSIGN_OR_RETURN(Rows rows, tx.Query("SELECT lifecycle_stage, artifact_location FROM "
                                            "experiments WHERE experiment_id = ?",
                                            {eid}));
    if (rows.empty()) {
      return Status::NotFound("experiment with id '" + experiment_id + "' does not exist");
    }
    if (rows[0].Text(0) != kActive) {
      return Status::FailedPrecondition("experiment '" + experiment_id + "' is deleted");
    }
    if (!source_run_id.empty()) {
      TY_ASSIGN_OR_RETURN(Rows run,
                          tx.Query("SELECT 1 FROM runs WHERE run_uuid = ?", {source_run_id}));
      if (run.empty()) {
        return Status::NotFound("source run '" + Abbreviate(source_run_id) + "' does not exist");
      }
    }
    int64_t now = clock_.NowMillis();
    std::string artifact_uri = rows[0].Text(1) + "/models/" + model_id + "/artifacts";
    TY_RETURN_IF_ERROR(Exec(tx,
                            "INSERT INTO logged_models (model_id, experiment_id, name, "
                            "artifact_location, creation_timestamp, last_updated_timestamp, "
                            "status, status_message, lifecycle_stage, model_type, source_run_id, "
                            "owner) VALUES (?, ?, ?, ?, ?, ?, 'LOGGED_MODEL_PENDING', NULL, "
                            "'active', ?, ?, ?)",
                            {model_id, eid, model_name, artifact_uri, now, now,
                             model_type.empty() ? Value() : Value(model_type),
                             source_run_id.empty() ? Value() : Value(source_run_id), owner}));
    TY_RETURN_IF_ERROR(UpsertModelKeyValues(tx, "logged_model_params", model_id, params));
    TY_RETURN_IF_ERROR(UpsertModelKeyValues(tx, "logged_model_tags", model_id, tags));
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return GetLoggedModel(model_id);
}

static constexpr char kLoggedModelColumns[] =
    "logged_models.model_id, logged_models.experiment_id, logged_models.name, "
    "logged_models.artifact_location, logged_models.creation_timestamp, "
    "logged_models.last_updated_timestamp, logged_models.status, logged_models.status_message, "
    "logged_models.lifecycle_stage, logged_models.model_type, logged_models.source_run_id, "
    "logged_models.owner";

static LoggedModel ReadLoggedModel(const Row& r) {
  LoggedModel m;
  m.model_id = r.Text(0);
  m.experiment_id = r.Text(1);
  m.name = r.Text(2);
  m.artifact_uri = r.Text(3);
  m.creation_timestamp = r.Int(4);
  m.last_updated_timestamp = r.Int(5);
  m.status = r.Text(6);
  m.status_message = r.Text(7);
  m.lifecycle_stage = r.Text(8);
  m.model_type = r.Text(9);
  m.source_run_id = r.Text(10);
  m.owner = r.Text(11);
  return m;
}

Status TrackingService::LoadLoggedModelData(Transaction& tx, std::vector<LoggedModel>& models) {
  if (models.empty()) return Status::Ok();
  std::unordered_map<std::string, LoggedModel*> by_id;
  std::vector<Value> ids;
  for (auto& m : models) {
    by_id[m.model_id] = &m;
    ids.emplace_back(m.model_id);
  }
  std::string in = InList(ids.size());
  TY_RETURN_IF_ERROR(ForEachKeyValue(
      tx, "logged_model_params", "model_id", ids,
      [&](const std::string& id, KeyValue kv) { by_id[id]->params.push_back(std::move(kv)); }));
  TY_RETURN_IF_ERROR(ForEachKeyValue(
      tx, "logged_model_tags", "model_id", ids,
      [&](const std::string& id, KeyValue kv) { by_id[id]->tags.push_back(std::move(kv)); }));
  TY_ASSIGN_OR_RETURN(Rows metrics,
                      tx.Query("SELECT model_id, key, value, is_nan, step, timestamp, run_id, "
                               "dataset_name, dataset_digest FROM logged_model_metrics WHERE "
                               "model_id IN " +
                                   in + " ORDER BY key, step, timestamp",
                               ids));
  for (const auto& r : metrics) {
    Metric m;
    m.model_id = r.Text(0);
    m.key = r.Text(1);
    m.value = ReadMetricValue(r, 2, 3);
    m.step = r.Int(4);
    m.timestamp = r.Int(5);
    m.run_id = r.Text(6);
    m.dataset_name = r.Text(7);
    m.dataset_digest = r.Text(8);
    by_id[m.model_id]->metrics.push_back(std::move(m));
  }
  return Status::Ok();
}

Result<LoggedModel> TrackingService::GetLoggedModel(const std::string& model_id) {
  LoggedModel out;
  Status s = db_.Read([&](Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(Rows rows, tx.Query(std::string("SELECT ") + kLoggedModelColumns +
                                                " FROM logged_models WHERE model_id = ?",
                                            {model_id}));
    if (rows.empty()) {
      return Status::NotFound("logged model '" + Abbreviate(model_id) + "' does not exist");
    }
    std::vector<LoggedModel> models{ReadLoggedModel(rows[0])};
    TY_RETURN_IF_ERROR(LoadLoggedModelData(tx, models));
    out = std::move(models[0]);
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return out;
}

Result<LoggedModel> TrackingService::FinalizeLoggedModel(const identity::Principal& who,
                                                         const std::string& model_id,
                                                         const std::string& status) {
  TY_RETURN_IF_ERROR(AuthorizeLoggedModel(who, model_id, identity::Action::kEdit));
  if (status != "LOGGED_MODEL_READY" && status != "LOGGED_MODEL_UPLOAD_FAILED") {
    return Status::InvalidArgument(
        "status must be LOGGED_MODEL_READY or LOGGED_MODEL_UPLOAD_FAILED (got '" +
        Abbreviate(status) + "')");
  }
  Status s = db_.Write([&](Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(int64_t n, tx.Exec("UPDATE logged_models SET status = ?, "
                                           "last_updated_timestamp = ? WHERE model_id = ?",
                                           {status, clock_.NowMillis(), model_id}));
    if (n == 0) {
      return Status::NotFound("logged model '" + Abbreviate(model_id) + "' does not exist");
    }
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return GetLoggedModel(model_id);
}

Status TrackingService::DeleteLoggedModel(const identity::Principal& who,
                                          const std::string& model_id) {
  TY_RETURN_IF_ERROR(AuthorizeLoggedModel(who, model_id, identity::Action::kEdit));
  return SetLifecycle("logged_models", "model_id", model_id, "logged model", true);
}

Result<LoggedModel> TrackingService::SetLoggedModelTags(const identity::Principal& who,
                                                        const std::string& model_id,
                                                        const std::vector<KeyValue>& tags) {
  TY_RETURN_IF_ERROR(AuthorizeLoggedModel(who, model_id, identity::Action::kEdit));
  for (const auto& t : tags) TY_RETURN_IF_ERROR(ValidateKey("tag", t.key));
  Status s = db_.Write([&](Transaction& tx) -> Status {
    TY_RETURN_IF_ERROR(EnsureLoggedModelExists(tx, model_id));
    return UpsertModelKeyValues(tx, "logged_model_tags", model_id, tags);
  });
  if (!s.ok()) return s;
  return GetLoggedModel(model_id);
}

Status TrackingService::DeleteLoggedModelTag(const identity::Principal& who,
                                             const std::string& model_id, const std::string& key) {
  TY_RETURN_IF_ERROR(AuthorizeLoggedModel(who, model_id, identity::Action::kEdit));
  return db_.Write([&](Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(
        int64_t n,
        tx.Exec("DELETE FROM logged_model_tags WHERE model_id = ? AND key = ?", {model_id, key}));
    if (n == 0) {
      return Status::NotFound("logged model '" + Abbreviate(model_id) + "' has no tag '" +
                              Abbreviate(key) + "'");
    }
    return Status::Ok();
  });
}

Status TrackingService::LogLoggedModelParams(const identity::Principal& who,
                                             const std::string& model_id,
                                             const std::vector<KeyValue>& params) {
  TY_RETURN_IF_ERROR(AuthorizeLoggedModel(who, model_id, identity::Action::kEdit));
  for (const auto& p : params) TY_RETURN_IF_ERROR(ValidateKey("param", p.key));
  return db_.Write([&](Transaction& tx) -> Status {
    TY_RETURN_IF_ERROR(EnsureLoggedModelExists(tx, model_id));
    return UpsertModelKeyValues(tx, "logged_model_params", model_id, params);
  });
}

}  // namespace trainyard::tracking
