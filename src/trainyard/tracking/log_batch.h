// ValidateLogBatch: the pure half of a log-batch request. It checks a batch against
// MLflow's rules and the limits, and normalizes it into what the write transaction
// needs: params once per key, each metric key's points sorted and without repeats,
// each key's latest point. No I/O, no clock; thread-safe.
//
// What it cannot check without the database (the run exists and is active, a param is
// not changed from a stored value, a metric's logged model exists) the write checks.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "trainyard/common/status.h"
#include "trainyard/tracking/limits.h"
#include "trainyard/tracking/metric_blocks.h"
#include "trainyard/tracking/types.h"

namespace trainyard::tracking {

// The points one batch logs to one metric key of a run.
struct SeriesPoints {
  std::string key;
  std::vector<MetricPoint> points;  // history order (PointLess), no repeats; never empty
  // The latest point in MLflow's order (step, timestamp, then value with NaN highest);
  // of equal ones, the first given.
  MetricPoint latest;
};

struct ValidatedBatch {
  std::map<std::string, std::string> params;  // by key (a key given twice had one value)
  std::vector<KeyValue> tags;                 // as given: a later one of a key wins
  std::vector<SeriesPoints> series;           // per distinct key, in order of first appearance
  std::vector<Metric> model_metrics;          // the metrics that name a logged model, in order
};

// InvalidArgument naming the field (and saying what to do) for a batch over a limit,
// a bad key, a too-long value or a param given twice with different values; checked in
// that order, as MLflow does.
Result<ValidatedBatch> ValidateLogBatch(const std::vector<Metric>& metrics,
                                        const std::vector<KeyValue>& params,
                                        const std::vector<KeyValue>& tags,
                                        const TrackingLimits& limits);

// A param, tag or metric key (`what` names which): not empty, at most `max_length`
// characters, MLflow's character set, a relative path without "..".
Status ValidateKey(std::string_view what, const std::string& key, size_t max_length);

}  // namespace trainyard::tracking
