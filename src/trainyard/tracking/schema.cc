#include "trainyard/tracking/schema.h"

namespace trainyard::tracking {

std::vector<store::Migration> TrackingMigrations() {
  return {
      {"tracking",
       1,
       {
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
       }},
  };
}

}  // namespace trainyard::tracking
