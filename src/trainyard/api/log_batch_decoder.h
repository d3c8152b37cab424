// Decoding of MLflow `runs/log-batch` request bodies, the ingest hot path.
//
// DecodeLogBatch reads the body's JSON object (the general path: every type error is
// an InvalidArgument naming the field). DecodeLogBatchFast reads the body text with a
// streaming (SAX) parser straight into the request, without building a JSON tree: it
// handles only bodies that DecodeLogBatch would accept, and gives nullopt for anything
// else (malformed JSON, wrong types, duplicate or missing fields, NaN as a string, ...),
// so that the caller falls back to DecodeLogBatch for the exact error. Where both
// succeed they give the same request.
//
// Free functions; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "trainyard/common/json.h"
#include "trainyard/common/status.h"
#include "trainyard/tracking/types.h"

namespace trainyard::api {

struct LogBatchRequest {
  std::string run_id;
  std::vector<tracking::Metric> metrics;
  std::vector<tracking::KeyValue> params;
  std::vector<tracking::KeyValue> tags;
};

// MLflow sends the run id as run_id, older clients as run_uuid.
Result<std::string> RunIdField(const json::object& o);
// One metric object; errors name `where` ("metrics[3]").
Result<tracking::Metric> MetricFromJson(const json::object& o, std::string_view where);

Result<LogBatchRequest> DecodeLogBatch(const json::object& body);

std::optional<LogBatchRequest> DecodeLogBatchFast(std::string_view body);

}  // namespace trainyard::api
