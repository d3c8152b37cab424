// Fuzzes DownsampleMinMax: any history (steps and values from the input, NaNs and infinities
// included) and any bucket count and step range. The result is a subsequence of the history in
// order, at most two points a bucket unless exact, and holds each bucket's lowest and highest
// value; never a crash.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "trainyard/tracking/metric_store.h"

using trainyard::tracking::DownsampleMinMax;
using trainyard::tracking::MetricPoint;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 9) return 0;
  const int64_t buckets = 1 + data[0] % 64;
  const int64_t span_shift = data[1] % 63;
  std::vector<MetricPoint> points;
  for (size_t i = 2; i + 9 <= size && points.size() < 4096; i += 9) {
    int64_t step = static_cast<int8_t>(data[i]) * (int64_t{1} << (span_shift / 2));
    double value;
    std::memcpy(&value, data + i + 1, sizeof(value));
    points.push_back({step, static_cast<int64_t>(points.size()), value});
  }
  if (points.empty()) return 0;
  std::sort(points.begin(), points.end(), trainyard::tracking::PointLess);
  const int64_t lo = points.front().step, hi = points.back().step;
  auto d = DownsampleMinMax(points, buckets, lo, hi);
  if (d.total_points != static_cast<int64_t>(points.size())) std::abort();
  if (d.exact) {
    if (d.points.size() != points.size()) std::abort();
    return 0;
  }
  if (static_cast<int64_t>(d.points.size()) > 2 * buckets) std::abort();
  // A subsequence, in order.
  size_t j = 0;
  for (const MetricPoint& p : d.points) {
    while (j < points.size() && std::memcmp(&points[j], &p, sizeof(p)) != 0) ++j;
    if (j == points.size()) std::abort();
    ++j;
  }
  // The history's lowest and highest non-NaN values survive.
  double min = INFINITY, max = -INFINITY, got_min = INFINITY, got_max = -INFINITY;
  for (const auto& p : points) {
    if (!std::isnan(p.value)) min = std::min(min, p.value), max = std::max(max, p.value);
  }
  for (const auto& p : d.points) {
    if (!std::isnan(p.value))
      got_min = std::min(got_min, p.value), got_max = std::max(got_max, p.value);
  }
  if (min != got_min || max != got_max) std::abort();
  return 0;
}
