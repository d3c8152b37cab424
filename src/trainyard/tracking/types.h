// The tracking domain's value types: experiments, runs and their data, datasets,
// logged models. Plain structs; the MLflow wire format lives in api/.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace trainyard::tracking {

struct KeyValue {
  std::string key;
  std::string value;
};

enum class ViewType { kActiveOnly, kDeletedOnly, kAll };

struct Experiment {
  std::string experiment_id;
  std::string name;
  std::string artifact_location;
  std::string lifecycle_stage;  // "active" | "deleted"
  std::string owner;
  int64_t creation_time = 0;
  int64_t last_update_time = 0;
  std::vector<KeyValue> tags;
};

struct Metric {
  std::string key;
  double value = 0;
  int64_t timestamp = 0;
  int64_t step = 0;
  // Optional links (MLflow 3): the logged model and dataset the value is about.
  std::string model_id;
  std::string dataset_name;
  std::string dataset_digest;
  std::string run_id;  // set in bulk-interval results
};

struct RunInfo {
  std::string run_id;
  std::string experiment_id;
  std::string run_name;
  std::string user_id;
  std::string status;  // RUNNING | SCHEDULED | FINISHED | FAILED | KILLED
  std::optional<int64_t> start_time;
  std::optional<int64_t> end_time;
  std::string artifact_uri;
  std::string lifecycle_stage;
};

struct Dataset {
  std::string name;
  std::string digest;
  std::string source_type;
  std::string source;
  std::string schema;
  std::string profile;
};

struct DatasetInput {
  std::vector<KeyValue> tags;
  Dataset dataset;
};

struct ModelOutput {
  std::string model_id;
  int64_t step = 0;
};

struct Run {
  RunInfo info;
  std::vector<Metric> metrics;  // the latest value of each key
  std::vector<KeyValue> params;
  std::vector<KeyValue> tags;
  std::vector<DatasetInput> dataset_inputs;
  std::vector<std::string> model_inputs;  // model ids
  std::vector<ModelOutput> model_outputs;
};

struct LoggedModel {
  std::string model_id;
  std::string experiment_id;
  std::string name;
  std::string artifact_uri;
  int64_t creation_timestamp = 0;
  int64_t last_updated_timestamp = 0;
  std::string status;  // LOGGED_MODEL_PENDING | LOGGED_MODEL_READY | LOGGED_MODEL_UPLOAD_FAILED
  std::string status_message;
  std::string lifecycle_stage;
  std::string model_type;
  std::string source_run_id;
  std::string owner;
  std::vector<KeyValue> tags;
  std::vector<KeyValue> params;
  std::vector<Metric> metrics;
};

// A page of results and the token for the next page ("" when it is the last).
template <typename T>
struct Page {
  std::vector<T> items;
  std::string next_page_token;
};

}  // namespace trainyard::tracking
