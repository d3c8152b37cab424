// Metric points stored in blocks: one metric_blocks row holds the points that one
// log-batch wrote to one series (run, key), packed, instead of one row per point.
// Ingest then writes a row per series and batch, and a history is read as a few
// hundred blobs rather than a million rows.
//
// A block's bytes: a format byte (1), then per point step (int64), timestamp (int64)
// and value (IEEE double; NaN stored as the quiet NaN), little-endian, 24 bytes. The
// points of a block are in history order (PointLess) without duplicates. Blocks of one
// series may overlap in steps (points logged out of order); readers merge them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "trainyard/common/status.h"

namespace trainyard::tracking {

struct MetricPoint {
  int64_t step;
  int64_t timestamp;
  double value;
};

// History order: step, then timestamp, then value with NaN last. Points equal in this
// order (same step, timestamp and value, or both NaN) are one point: logging the very
// same point twice keeps one, as in MLflow.
bool PointLess(const MetricPoint& a, const MetricPoint& b);
bool SamePoint(const MetricPoint& a, const MetricPoint& b);

// Sorts into history order and drops repeats.
void SortAndDedup(std::vector<MetricPoint>& points);

constexpr size_t kBlockPointBytes = 24;
// Encodes points already in history order without repeats.
std::string EncodeMetricBlock(const MetricPoint* points, size_t n);
// The number of points in a block, or an error if its size or format byte is wrong.
Result<size_t> MetricBlockSize(std::string_view bytes);
// Appends the points of `bytes` whose step is in [from_step, to_step] to `out`.
Status DecodeMetricBlock(std::string_view bytes, int64_t from_step, int64_t to_step,
                         std::vector<MetricPoint>& out);

// Collects blocks of one series, handed over in ascending order of their first step,
// into one history: in order, without repeats. Blocks that do not overlap (the usual
// case: training logs steps in order) are concatenated; overlapping ones are merged.
class HistoryAssembler {
 public:
  HistoryAssembler(int64_t from_step, int64_t to_step) : from_(from_step), to_(to_step) {}
  // Collects into `storage`'s memory (its points are dropped): a buffer that an earlier
  // history was read into, already grown and faulted in.
  HistoryAssembler(int64_t from_step, int64_t to_step, std::vector<MetricPoint> storage)
      : from_(from_step), to_(to_step), points_(std::move(storage)) {
    points_.clear();
  }
  Status Add(std::string_view block);
  // The history; call once, after the last Add.
  std::vector<MetricPoint> Finish();

 private:
  int64_t from_, to_;
  bool sorted_ = true;
  std::vector<MetricPoint> points_;
};

// Page tokens of a paged history: the last point of the previous page (a cursor, so
// that a page costs the same wherever it starts). "" is the first page.
std::string EncodeHistoryCursor(const MetricPoint& last);
// InvalidArgument naming page_token for a token that is not a history cursor.
Result<MetricPoint> DecodeHistoryCursor(std::string_view token);

}  // namespace trainyard::tracking
