#include "trainyard/tracking/log_batch.h"

#include <cctype>
#include <cstdint>
#include <unordered_map>

#include "trainyard/common/strings.h"

namespace trainyard::tracking {
namespace {

Status CheckCount(size_t count, size_t limit, std::string_view what) {
  if (count <= limit) return Status::Ok();
  return Status::InvalidArgument("a batch may contain at most " + std::to_string(limit) + " " +
                                 std::string(what) + " (got " + std::to_string(count) +
                                 "); split it into several requests");
}

Status CheckCounts(const std::vector<Metric>& metrics, const std::vector<KeyValue>& params,
                   const std::vector<KeyValue>& tags, const TrackingLimits& limits) {
  TY_RETURN_IF_ERROR(CheckCount(metrics.size(), limits.max_metrics_per_batch, "metrics"));
  TY_RETURN_IF_ERROR(CheckCount(params.size(), limits.max_params_per_batch, "params"));
  TY_RETURN_IF_ERROR(CheckCount(tags.size(), limits.max_tags_per_batch, "tags"));
  if (metrics.size() + params.size() + tags.size() > limits.max_entities_per_batch) {
    return Status::InvalidArgument("a batch may contain at most " +
                                   std::to_string(limits.max_entities_per_batch) +
                                   " metrics, params and tags together");
  }
  return Status::Ok();
}

Result<std::map<std::string, std::string>> ValidateParams(const std::vector<KeyValue>& params,
                                                          const TrackingLimits& limits) {
  std::map<std::string, std::string> out;
  for (const auto& p : params) {
    TY_RETURN_IF_ERROR(ValidateKey("param", p.key, limits.max_key_length));
    if (p.value.size() > limits.max_param_value_length) {
      return Status::InvalidArgument("param '" + p.key + "' value is longer than " +
                                     std::to_string(limits.max_param_value_length) + " characters");
    }
    auto [it, inserted] = out.emplace(p.key, p.value);
    if (!inserted && it->second != p.value) {
      return Status::InvalidArgument("param '" + p.key +
                                     "' appears twice in the batch with different values");
    }
  }
  return out;
}

Status ValidateTags(const std::vector<KeyValue>& tags, const TrackingLimits& limits) {
  for (const auto& t : tags) {
    TY_RETURN_IF_ERROR(ValidateKey("tag", t.key, limits.max_key_length));
    if (t.value.size() > limits.max_tag_value_length) {
      return Status::InvalidArgument("tag '" + t.key + "' value is longer than " +
                                     std::to_string(limits.max_tag_value_length) + " characters");
    }
  }
  return Status::Ok();
}

// Groups the metrics by key (validating each key once): per key its points in history
// order without repeats and its latest point.
Result<std::vector<SeriesPoints>> GroupMetrics(const std::vector<Metric>& metrics,
                                               const TrackingLimits& limits) {
  std::vector<SeriesPoints> series;
  std::unordered_map<std::string_view, uint32_t> key_pos;
  uint32_t prev = 0;  // the previous metric's key: batches usually repeat it
  for (const auto& m : metrics) {
    if (series.empty() || m.key != series[prev].key) {
      auto [pos, inserted] = key_pos.emplace(m.key, static_cast<uint32_t>(series.size()));
      if (inserted) {
        TY_RETURN_IF_ERROR(ValidateKey("metric", m.key, limits.max_key_length));
        series.push_back({m.key, {}, MetricPoint{m.step, m.timestamp, m.value}});
      }
      prev = pos->second;
    }
    SeriesPoints& s = series[prev];
    const MetricPoint p{m.step, m.timestamp, m.value};
    s.points.push_back(p);
    // PointLess's order is MLflow's "latest" order: a point it puts after is later.
    if (PointLess(s.latest, p)) s.latest = p;
  }
  for (auto& s : series) SortAndDedup(s.points);
  return series;
}

}  // namespace

Status ValidateKey(std::string_view what, const std::string& key, size_t max_length) {
  if (key.empty()) return Status::InvalidArgument(std::string(what) + " key must not be empty");
  if (key.size() > max_length) {
    return Status::InvalidArgument(std::string(what) + " key '" + Abbreviate(key) +
                                   "' is longer than " + std::to_string(max_length) +
                                   " characters");
  }
  for (char c : key) {
    bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' ||
              c == ' ' || c == '/' || c == ':';
    if (!ok) {
      return Status::InvalidArgument(
          "invalid " + std::string(what) + " key '" + Abbreviate(key) +
          "': names may only contain alphanumerics, underscores (_), dashes (-), periods (.), "
          "spaces ( ), colons (:) and slashes (/)");
    }
  }
  if (key.front() == '/' || key.find("..") != std::string::npos) {
    return Status::InvalidArgument("invalid " + std::string(what) + " key '" + Abbreviate(key) +
                                   "': it must be a relative path without '..'");
  }
  return Status::Ok();
}

Result<ValidatedBatch> ValidateLogBatch(const std::vector<Metric>& metrics,
                                        const std::vector<KeyValue>& params,
                                        const std::vector<KeyValue>& tags,
                                        const TrackingLimits& limits) {
  TY_RETURN_IF_ERROR(CheckCounts(metrics, params, tags, limits));
  ValidatedBatch batch;
  TY_ASSIGN_OR_RETURN(batch.params, ValidateParams(params, limits));
  TY_RETURN_IF_ERROR(ValidateTags(tags, limits));
  batch.tags = tags;
  TY_ASSIGN_OR_RETURN(batch.series, GroupMetrics(metrics, limits));
  for (const auto& m : metrics) {
    if (!m.model_id.empty()) batch.model_metrics.push_back(m);
  }
  return batch;
}

}  // namespace trainyard::tracking
