#include "trainyard/tracking/schema.h"

#include <cmath>

#include "trainyard/tracking/metric_blocks.h"

namespace trainyard::tracking {
namespace {

using store::Rows;
using store::Transaction;
using store::Value;

// Version 2: every series' rows of `metrics` become blocks of up to this many points.
constexpr size_t kMigratedBlockPoints = 4096;

Status MoveMetricRowsIntoBlocks(Transaction& tx) {
  TY_ASSIGN_OR_RETURN(Rows series, tx.Query("SELECT DISTINCT series_id FROM metrics"));
  for (const auto& s : series) {
    int64_t id = s.Int(0);
    std::vector<MetricPoint> points;
    TY_RETURN_IF_ERROR(tx.QueryEach(
        "SELECT step, timestamp, is_nan, value FROM metrics WHERE series_id = ?", {id},
        [&](const store::RowView& r) -> Status {
          points.push_back({r.Int(0), r.Int(1), r.Int(2) ? std::nan("") : r.Double(3)});
          return Status::Ok();
        }));
    SortAndDedup(points);
    for (size_t at = 0; at < points.size(); at += kMigratedBlockPoints) {
      size_t n = std::min(kMigratedBlockPoints, points.size() - at);
      auto r = tx.Exec(
          "INSERT INTO metric_blocks (series_id, first_step, seq, last_step, points, data) "
          "VALUES (?, ?, ?, ?, ?, ?)",
          {id, points[at].step, static_cast<int64_t>(at / kMigratedBlockPoints),
           points[at + n - 1].step, static_cast<int64_t>(n),
           store::Blob{EncodeMetricBlock(points.data() + at, n)}});
      if (!r.ok()) return r.status();
    }
  }
  auto r = tx.Exec("DROP TABLE metrics");
  return r.ok() ? Status::Ok() : r.status();
}

// Version 1, in three parts: experiments and runs with their params and tags; metric
// points; dataset inputs, logged models and run outputs.
std::vector<std::string> RunTables() {
  return {
      "CREATE TABLE experiments ("
      " experiment_id BIGINT PRIMARY KEY,"
      " name TEXT NOT NULL UNIQUE,"
      " artifact_location TEXT NOT NULL,"
      " lifecycle_stage TEXT NOT NULL,"  // 'active' | 'deleted'
      " owner TEXT NOT NULL,"
      " creation_time BIGINT NOT NULL,"
      " last_update_time BIGINT NOT NULL)",
      "CREATE TABLE experiment_tags ("
      " experiment_id BIGINT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,"
      " PRIMARY KEY (experiment_id, key))",
      "CREATE TABLE runs ("
      " run_uuid TEXT PRIMARY KEY,"
      " experiment_id BIGINT NOT NULL,"
      " name TEXT NOT NULL,"
      " user_id TEXT NOT NULL,"
      " status TEXT NOT NULL,"  // RUNNING | SCHEDULED | FINISHED | FAILED | KILLED
      " start_time BIGINT,"
      " end_time BIGINT,"
      " lifecycle_stage TEXT NOT NULL,"
      " artifact_uri TEXT NOT NULL,"
      " deleted_time BIGINT)",
      "CREATE INDEX runs_by_experiment ON runs (experiment_id, start_time)",
      "CREATE TABLE params ("
      " run_uuid TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,"
      " PRIMARY KEY (run_uuid, key))",
      "CREATE TABLE tags ("
      " run_uuid TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,"
      " PRIMARY KEY (run_uuid, key))",
  };
}

std::vector<std::string> MetricTables() {
  return {
      // One series per (run, metric key); points refer to it by number, so that a
      // point row holds no strings.
      "CREATE TABLE metric_series ("
      " series_id BIGINT PRIMARY KEY, run_uuid TEXT NOT NULL, key TEXT NOT NULL,"
      " UNIQUE (run_uuid, key))",
      // Every logged point, clustered by series then step: a history is one range scan.
      // NaN is stored as value 0 with is_nan = 1 (SQLite cannot store NaN). As in MLflow,
      // logging the very same point twice keeps one.
      "CREATE TABLE metrics ("
      " series_id BIGINT NOT NULL, step BIGINT NOT NULL, timestamp BIGINT NOT NULL,"
      " is_nan INTEGER NOT NULL, value DOUBLE PRECISION NOT NULL,"
      " PRIMARY KEY (series_id, step, timestamp, is_nan, value)) WITHOUT ROWID",
      // The latest point of each (run, key): highest step, then timestamp, then value.
      // Search filters and ordering on metrics read this table.
      "CREATE TABLE latest_metrics ("
      " run_uuid TEXT NOT NULL, key TEXT NOT NULL, step BIGINT NOT NULL,"
      " timestamp BIGINT NOT NULL, value DOUBLE PRECISION, is_nan INTEGER NOT NULL,"
      " PRIMARY KEY (run_uuid, key))",
  };
}

std::vector<std::string> InputAndModelTables() {
  return {
      "CREATE TABLE datasets ("
      " dataset_uuid TEXT PRIMARY KEY, experiment_id BIGINT NOT NULL, name TEXT NOT NULL,"
      " digest TEXT NOT NULL, source_type TEXT NOT NULL, source TEXT NOT NULL,"
      " schema_json TEXT, profile TEXT,"
      " UNIQUE (experiment_id, name, digest))",
      // context is the value of the input's "mlflow.data.context" tag ("training", ...).
      "CREATE TABLE run_inputs ("
      " run_uuid TEXT NOT NULL, dataset_uuid TEXT NOT NULL, context TEXT,"
      " tags_json TEXT NOT NULL, PRIMARY KEY (run_uuid, dataset_uuid))",
      "CREATE TABLE logged_models ("
      " model_id TEXT PRIMARY KEY, experiment_id BIGINT NOT NULL, name TEXT NOT NULL,"
      " artifact_location TEXT NOT NULL, creation_timestamp BIGINT NOT NULL,"
      " last_updated_timestamp BIGINT NOT NULL, status TEXT NOT NULL,"
      " status_message TEXT, lifecycle_stage TEXT NOT NULL, model_type TEXT,"
      " source_run_id TEXT, owner TEXT NOT NULL)",
      "CREATE INDEX logged_models_by_experiment ON logged_models (experiment_id)",
      "CREATE TABLE logged_model_params ("
      " model_id TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,"
      " PRIMARY KEY (model_id, key))",
      "CREATE TABLE logged_model_tags ("
      " model_id TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,"
      " PRIMARY KEY (model_id, key))",
      "CREATE TABLE logged_model_metrics ("
      " model_id TEXT NOT NULL, key TEXT NOT NULL, value DOUBLE PRECISION,"
      " is_nan INTEGER NOT NULL, step BIGINT NOT NULL, timestamp BIGINT NOT NULL,"
      " run_id TEXT, dataset_name TEXT, dataset_digest TEXT)",
      "CREATE INDEX logged_model_metrics_by_model ON logged_model_metrics (model_id, key)",
      "CREATE TABLE run_model_inputs ("
      " run_uuid TEXT NOT NULL, model_id TEXT NOT NULL, PRIMARY KEY (run_uuid, model_id))",
      // Models a run produced (runs/outputs).
      "CREATE TABLE run_outputs ("
      " run_uuid TEXT NOT NULL, model_id TEXT NOT NULL, step BIGINT NOT NULL,"
      " PRIMARY KEY (run_uuid, model_id))",
  };
}

std::vector<std::string> VersionOneStatements() {
  std::vector<std::string> out = RunTables();
  for (auto* part : {MetricTables, InputAndModelTables}) {
    std::vector<std::string> more = part();
    out.insert(out.end(), more.begin(), more.end());
  }
  return out;
}

}  // namespace

std::vector<store::Migration> TrackingMigrations() {
  return {
      {"tracking", 1, VersionOneStatements()},
      // Points are stored in blocks (metric_blocks.h): a row per series and log-batch,
      // in the order of the block's first step. `seq` tells apart blocks that start at
      // the same step; `points` is the block's count, readable without its data.
      {"tracking",
       2,
       {
           "CREATE TABLE metric_blocks ("
           " series_id BIGINT NOT NULL, first_step BIGINT NOT NULL, seq BIGINT NOT NULL,"
           " last_step BIGINT NOT NULL, points BIGINT NOT NULL, data BYTEA NOT NULL,"
           " PRIMARY KEY (series_id, first_step, seq))",
       },
       MoveMetricRowsIntoBlocks},
  };
}

}  // namespace trainyard::tracking
