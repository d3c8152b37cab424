// MLflow wire encoding of tracking objects (proto3 JSON as the MLflow server
// writes it: int64 as numbers, NaN/Infinity as strings, absent optionals omitted).
#pragma once

#include <string>

#include "trainyard/common/json.h"
#include "trainyard/tracking/types.h"

namespace trainyard::api {

json::object ExperimentToJson(const tracking::Experiment& e);
json::object RunInfoToJson(const tracking::RunInfo& info);
json::object RunToJson(const tracking::Run& run);
json::object MetricToJson(const tracking::Metric& m);
json::object LoggedModelToJson(const tracking::LoggedModel& m);
json::array KeyValuesToJson(const std::vector<tracking::KeyValue>& kvs);

// Appends {"key":...,"value":...,"timestamp":...,"step":...} without building a
// JSON tree: the metric-history hot path.
void AppendMetricJson(std::string& out, const tracking::Metric& m, bool with_run_id);
// The same for one point whose key is already JSON-encoded (`key_json`, with quotes).
void AppendMetricPointJson(std::string& out, std::string_view key_json, double value,
                           int64_t timestamp, int64_t step);

// Decoders for repeated {key, value} lists, naming the field in errors.
Result<std::vector<tracking::KeyValue>> KeyValuesFromJson(const json::object& o,
                                                          std::string_view field);

}  // namespace trainyard::api
