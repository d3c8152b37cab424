// TrackingLimits: MLflow's limits on what one request may log or ask for, as numbers a
// deployment (or a test) can change. Plain values; thread-safe to read.
#pragma once

#include <cstddef>
#include <cstdint>

namespace trainyard::tracking {

struct TrackingLimits {
  size_t max_metrics_per_batch = 1000;
  size_t max_params_per_batch = 100;
  size_t max_tags_per_batch = 100;
  size_t max_entities_per_batch = 1000;
  size_t max_key_length = 250;
  size_t max_param_value_length = 6000;
  size_t max_tag_value_length = 8000;
  size_t max_experiment_name_length = 500;
  int64_t max_results = 50000;  // search_runs and friends
  int64_t max_history_page = 25'000'000;
};

}  // namespace trainyard::tracking
