#include "trainyard/tracking/metric_store.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <string_view>
#include <thread>
#include <unordered_set>

#include "trainyard/common/strings.h"
#include "trainyard/store/sql.h"

namespace trainyard::tracking {
namespace {

using store::Row;
using store::Rows;
using store::Transaction;
using store::Value;
constexpr auto Exec = store::Run;

// Blocks a paged read fetches per query.
constexpr int64_t kBlocksPerQuery = 16;

Value MetricValue(double v) { return std::isnan(v) ? Value() : Value(v); }
int64_t NanFlag(double v) { return std::isnan(v) ? 1 : 0; }

Status RunNotFound(const std::string& run_id) {
  return Status::NotFound("run with id '" + Abbreviate(run_id) + "' does not exist");
}

Status CheckMetricKey(const std::string& key) {
  if (key.empty()) return Status::InvalidArgument("missing required field 'metric_key'");
  return Status::Ok();
}

Status CheckBulkInterval(const std::vector<std::string>& run_ids, const std::string& key,
                         std::optional<int64_t> start_step, std::optional<int64_t> end_step,
                         int64_t max_results) {
  if (run_ids.empty()) return Status::InvalidArgument("run_ids must name at least one run");
  if (run_ids.size() > kMaxBulkIntervalRuns) {
    return Status::InvalidArgument("run_ids may name at most " +
                                   std::to_string(kMaxBulkIntervalRuns) + " runs (got " +
                                   std::to_string(run_ids.size()) + ")");
  }
  TY_RETURN_IF_ERROR(CheckMetricKey(key));
  if (max_results <= 0 || max_results > kMaxBulkIntervalResults) {
    return Status::InvalidArgument("max_results must be between 1 and " +
                                   std::to_string(kMaxBulkIntervalResults));
  }
  if (start_step && end_step && *start_step > *end_step) {
    return Status::InvalidArgument("start_step must not be greater than end_step");
  }
  return Status::Ok();
}

Status CheckDownsample(const std::string& key, int64_t buckets, std::optional<int64_t> min_step,
                       std::optional<int64_t> max_step) {
  TY_RETURN_IF_ERROR(CheckMetricKey(key));
  if (buckets < 1 || buckets > kMaxDownsampleBuckets) {
    return Status::InvalidArgument("buckets must be between 1 and " +
                                   std::to_string(kMaxDownsampleBuckets) + " (got " +
                                   std::to_string(buckets) + ")");
  }
  if (min_step && max_step && *min_step > *max_step) {
    return Status::InvalidArgument("min_step must not be greater than max_step");
  }
  return Status::Ok();
}

// Drops the points from index `from` on that do not come after `after`.
void KeepAfter(std::vector<MetricPoint>& points, size_t from, const MetricPoint& after) {
  auto kept = std::remove_if(points.begin() + static_cast<ptrdiff_t>(from), points.end(),
                             [&](const MetricPoint& p) { return !PointLess(after, p); });
  points.erase(kept, points.end());
}

}  // namespace

StepRanges PlanStepRanges(const std::vector<MetricPoint>& points, int threads,
                          int64_t steps_per_range) {
  // Step ranges of equal width: [lo, b1), [b1, b2), ..., [bn-1, hi]. The span can reach
  // 2^64 (negative steps), so the arithmetic is in long double.
  const int64_t lo = points.front().step, hi = points.back().step;
  long double span = static_cast<long double>(hi) - lo + 1;
  threads = std::max(threads, 1);
  long double wanted = std::ceil(span / std::max<int64_t>(steps_per_range, 1));
  StepRanges out;
  out.ranges = static_cast<int>(std::clamp<long double>(
      std::max<long double>(wanted, threads), 1, std::min<long double>(span, kMaxHistoryRanges)));
  out.threads = std::min(threads, out.ranges);
  out.starts.assign(static_cast<size_t>(out.ranges) + 1, points.size());
  out.starts[0] = 0;
  for (size_t r = 1; r < static_cast<size_t>(out.ranges); ++r) {
    int64_t first_step = lo + static_cast<int64_t>(span * static_cast<long double>(r) / out.ranges);
    out.starts[r] = static_cast<size_t>(
        std::lower_bound(points.begin() + static_cast<ptrdiff_t>(out.starts[r - 1]), points.end(),
                         first_step, [](const MetricPoint& p, int64_t s) { return p.step < s; }) -
        points.begin());
  }
  return out;
}

std::vector<int64_t> EvenlySpacedSteps(const std::vector<MetricPoint>& points,
                                       int64_t max_results) {
  std::vector<int64_t> steps;  // distinct, ascending
  for (const MetricPoint& p : points) {
    if (steps.empty() || steps.back() != p.step) steps.push_back(p.step);
  }
  const size_t n = steps.size();
  if (static_cast<int64_t>(n) <= max_results) return steps;
  std::vector<int64_t> picked;
  for (int64_t i = 0; i < max_results; ++i) {
    picked.push_back(steps[static_cast<size_t>(
        std::llround(static_cast<double>(i) * (n - 1) / std::max<int64_t>(1, max_results - 1)))]);
  }
  picked.erase(std::unique(picked.begin(), picked.end()), picked.end());
  return picked;
}

MetricStore::MetricStore(store::Database& db, int64_t max_history_page)
    : db_(db), max_history_page_(max_history_page) {}

// ---------------------------------------------------------------- writing

MetricStore::PendingWrite MetricStore::PrepareWrite(const std::string& run_id,
                                                    std::vector<SeriesPoints> series) {
  PendingWrite write;
  write.run_id = run_id;
  write.series.resize(series.size());
  for (size_t k = 0; k < series.size(); ++k) {
    PendingWrite::Series& s = write.series[k];
    s.logged = std::move(series[k]);
    const std::vector<MetricPoint>& points = s.logged.points;
    const int64_t first = points.front().step;
    // series_id, first_step, last_step, points, data; series_id, first_step again.
    s.insert = {int64_t{0},
                first,
                points.back().step,
                static_cast<int64_t>(points.size()),
                store::Blob{EncodeMetricBlock(points.data(), points.size())},
                int64_t{0},
                first};
  }
  if (!write.series.empty()) {
    MutexLock lock(mu_);
    for (auto& s : write.series) {
      auto it = series_.find(CacheKey(run_id, s.logged.key));
      if (it != series_.end()) s.id = it->second;
    }
  }
  return write;
}

Status MetricStore::Write(Transaction& tx, PendingWrite& write) {
  // Series ids: cached ones were looked up before the write transaction; the rest are
  // found or created here, and cached only after the commit (Committed).
  for (size_t k = 0; k < write.series.size(); ++k) {
    TY_RETURN_IF_ERROR(ResolveSeries(tx, write, k));
  }
  for (auto& s : write.series) TY_RETURN_IF_ERROR(WriteBlock(tx, s));
  for (const auto& s : write.series) TY_RETURN_IF_ERROR(WriteLatest(tx, write.run_id, s.logged));
  return Status::Ok();
}

void MetricStore::Committed(const PendingWrite& write) {
  if (write.created.empty()) return;
  MutexLock lock(mu_);
  if (series_.size() > kMaxCachedSeries) series_.clear();
  for (const auto& [key, id] : write.created) series_[CacheKey(write.run_id, key)] = id;
}

Status MetricStore::ResolveSeries(Transaction& tx, PendingWrite& write, size_t k) {
  PendingWrite::Series& s = write.series[k];
  if (s.id >= 0) return Status::Ok();
  TY_ASSIGN_OR_RETURN(auto found, FindSeries(tx, write.run_id, s.logged.key));
  if (!found) {
    TY_ASSIGN_OR_RETURN(Rows next,
                        tx.Query("SELECT COALESCE(MAX(series_id), 0) + 1 FROM metric_series"));
    found = next[0].Int(0);
    TY_RETURN_IF_ERROR(Exec(tx,
                            "INSERT INTO metric_series (series_id, run_uuid, key) VALUES (?, ?, ?)",
                            {*found, write.run_id, s.logged.key}));
    write.created.emplace_back(s.logged.key, *found);
  }
  s.id = *found;
  return Status::Ok();
}

Status MetricStore::WriteBlock(Transaction& tx, PendingWrite::Series& series) {
  series.insert[0] = series.id;
  series.insert[5] = series.id;
  // A few points (a trainer logging each step as it goes) join the series' last block
  // while it is small, so that a history is not a row per step.
  if (series.logged.points.size() <= kSmallBatchPoints) {
    TY_ASSIGN_OR_RETURN(bool appended, AppendToTailBlock(tx, series));
    if (appended) return Status::Ok();
  }
  // seq: one more than that of any block of the series starting at the same step.
  return Exec(tx,
              "INSERT INTO metric_blocks (series_id, first_step, seq, last_step, points, data) "
              "SELECT ?, ?, COALESCE(MAX(seq) + 1, 0), ?, ?, ? FROM metric_blocks WHERE "
              "series_id = ? AND first_step = ?",
              series.insert);
}

Result<bool> MetricStore::AppendToTailBlock(Transaction& tx, const PendingWrite::Series& series) {
  const std::vector<MetricPoint>& points = series.logged.points;
  TY_ASSIGN_OR_RETURN(Rows tail, tx.Query("SELECT first_step, seq, points, data FROM metric_blocks "
                                          "WHERE series_id = ? ORDER BY first_step DESC, seq DESC "
                                          "LIMIT 1",
                                          {series.id}));
  if (tail.empty() || tail[0].Int(2) >= kTailBlockPoints || points.front().step < tail[0].Int(0)) {
    return false;
  }
  std::vector<MetricPoint> merged;
  TY_RETURN_IF_ERROR(DecodeMetricBlock(tail[0].Bytes(3), INT64_MIN, INT64_MAX, merged));
  merged.insert(merged.end(), points.begin(), points.end());
  SortAndDedup(merged);
  TY_RETURN_IF_ERROR(Exec(tx,
                          "UPDATE metric_blocks SET last_step = ?, points = ?, data = ? "
                          "WHERE series_id = ? AND first_step = ? AND seq = ?",
                          {merged.back().step, static_cast<int64_t>(merged.size()),
                           store::Blob{EncodeMetricBlock(merged.data(), merged.size())}, series.id,
                           tail[0].Int(0), tail[0].Int(1)}));
  return true;
}

Status MetricStore::WriteLatest(Transaction& tx, const std::string& run_id,
                                const SeriesPoints& series) {
  const MetricPoint& m = series.latest;
  return Exec(
      tx,
      "INSERT INTO latest_metrics (run_uuid, key, step, timestamp, value, is_nan) VALUES (?, "
      "?, ?, ?, ?, ?) ON CONFLICT (run_uuid, key) DO UPDATE SET step = excluded.step, "
      "timestamp = excluded.timestamp, value = excluded.value, is_nan = excluded.is_nan "
      "WHERE excluded.step > latest_metrics.step OR (excluded.step = latest_metrics.step AND "
      "(excluded.timestamp > latest_metrics.timestamp OR (excluded.timestamp = "
      "latest_metrics.timestamp AND (latest_metrics.is_nan = 1 OR (excluded.is_nan = 0 AND "
      "excluded.value > latest_metrics.value)))))",
      {run_id, series.key, m.step, m.timestamp, MetricValue(m.value), NanFlag(m.value)});
}

// ---------------------------------------------------------------- reading

Status MetricStore::LoadLatest(Transaction& tx, const std::vector<Value>& run_ids,
                               const std::function<void(const std::string&, Metric)>& add) {
  if (run_ids.empty()) return Status::Ok();
  TY_ASSIGN_OR_RETURN(Rows rows,
                      tx.Query("SELECT run_uuid, key, value, is_nan, timestamp, step FROM "
                               "latest_metrics WHERE run_uuid IN " +
                                   store::InList(run_ids.size()) + " ORDER BY key",
                               run_ids));
  for (const auto& r : rows) {
    Metric metric;
    metric.key = r.Text(1);
    metric.value = r.Int(3) ? std::nan("") : r.Double(2);
    metric.timestamp = r.Int(4);
    metric.step = r.Int(5);
    add(r.Text(0), std::move(metric));
  }
  return Status::Ok();
}

Result<std::optional<int64_t>> MetricStore::FindSeries(Transaction& tx, const std::string& run_id,
                                                       const std::string& key) {
  {
    MutexLock lock(mu_);
    auto it = series_.find(CacheKey(run_id, key));
    if (it != series_.end()) return std::optional<int64_t>(it->second);
  }
  TY_ASSIGN_OR_RETURN(Rows rows, tx.Query("SELECT series_id FROM metric_series WHERE run_uuid = ? "
                                          "AND key = ?",
                                          {run_id, key}));
  if (rows.empty()) return std::optional<int64_t>();
  return std::optional<int64_t>(rows[0].Int(0));
}

Result<std::optional<int64_t>> MetricStore::FindRunSeries(Transaction& tx,
                                                          const std::string& run_id,
                                                          const std::string& key) {
  TY_ASSIGN_OR_RETURN(auto series, FindSeries(tx, run_id, key));
  if (series) return series;
  TY_ASSIGN_OR_RETURN(Rows run, tx.Query("SELECT 1 FROM runs WHERE run_uuid = ?", {run_id}));
  if (run.empty()) return RunNotFound(run_id);
  return series;
}

Status MetricStore::ReadHistory(Transaction& tx, int64_t series, int64_t from_step, int64_t to_step,
                                std::vector<MetricPoint>& out) {
  HistoryAssembler history(from_step, to_step, std::move(out));
  TY_RETURN_IF_ERROR(tx.QueryEach(
      "SELECT data FROM metric_blocks WHERE series_id = ? AND last_step >= ? AND first_step <= ? "
      "ORDER BY first_step, seq",
      {series, from_step, to_step},
      [&](const store::RowView& row) -> Status { return history.Add(row.Bytes(0)); }));
  out = history.Finish();
  return Status::Ok();
}

Status MetricStore::ReadPage(Transaction& tx, int64_t series,
                             const std::optional<MetricPoint>& after, size_t want,
                             std::vector<MetricPoint>& out) {
  const int64_t from = after ? after->step : INT64_MIN;
  // Blocks in order of their first step, a few at a time, until no later block can hold
  // one of the first `want` points after the cursor: once `want` points are collected,
  // the step of the last of them bounds the blocks still needed.
  std::optional<int64_t> bound;
  auto settle = [&] {
    SortAndDedup(out);
    if (out.size() >= want) {
      out.resize(want);
      bound = out.back().step;
    }
  };
  int64_t last_first = INT64_MIN, last_seq = -1;
  while (true) {
    TY_ASSIGN_OR_RETURN(
        Rows blocks,
        tx.Query("SELECT first_step, seq, data FROM metric_blocks WHERE series_id = ? AND "
                 "(first_step, seq) > (?, ?) AND last_step >= ? ORDER BY first_step, seq "
                 "LIMIT ?",
                 {series, last_first, last_seq, from, kBlocksPerQuery}));
    for (const auto& b : blocks) {
      if (bound && b.Int(0) > *bound) return Status::Ok();
      size_t before = out.size();
      TY_RETURN_IF_ERROR(DecodeMetricBlock(b.Bytes(2), from, INT64_MAX, out));
      if (after) KeepAfter(out, before, *after);
      if (out.size() >= (bound ? 2 * want : want)) settle();
    }
    if (blocks.size() < static_cast<size_t>(kBlocksPerQuery)) return Status::Ok();
    last_first = blocks.back().Int(0);
    last_seq = blocks.back().Int(1);
  }
}

Result<std::string> MetricStore::ScanHistory(const std::string& run_id, const std::string& key,
                                             std::optional<int64_t> max_results,
                                             const std::string& page_token,
                                             const std::function<void(const MetricPoint&)>& fn) {
  TY_RETURN_IF_ERROR(CheckMetricKey(key));
  if (max_results && (*max_results <= 0 || *max_results > max_history_page_)) {
    return Status::InvalidArgument("max_results must be between 1 and " +
                                   std::to_string(max_history_page_));
  }
  std::optional<MetricPoint> after;  // the previous page's last point
  if (!page_token.empty()) {
    TY_ASSIGN_OR_RETURN(after, DecodeHistoryCursor(page_token));
  }
  // The page, plus one point that tells whether another page follows.
  const size_t want = max_results ? static_cast<size_t>(*max_results) + 1 : SIZE_MAX;
  std::vector<MetricPoint> points;
  Status s = db_.Read([&](Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(auto series, FindRunSeries(tx, run_id, key));
    if (!series) return Status::Ok();  // the run has no such metric: an empty history
    if (max_results) return ReadPage(tx, *series, after, want, points);
    TY_RETURN_IF_ERROR(
        ReadHistory(tx, *series, after ? after->step : INT64_MIN, INT64_MAX, points));
    if (after) {
      points.erase(points.begin(),
                   std::upper_bound(points.begin(), points.end(), *after, PointLess));
    }
    return Status::Ok();
  });
  if (!s.ok()) return s;
  std::string next_page_token;
  if (max_results) {  // a whole history came from ReadHistory in order already
    SortAndDedup(points);
    if (points.size() >= want) {
      points.resize(want);
      points.pop_back();
      next_page_token = EncodeHistoryCursor(points.back());
    }
  }
  for (const MetricPoint& p : points) fn(p);
  return next_page_token;
}

Status MetricStore::ReadWholeHistory(const std::string& run_id, const std::string& key,
                                     std::vector<MetricPoint>& out) {
  return db_.Read([&](Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(auto series, FindRunSeries(tx, run_id, key));
    if (!series) return Status::Ok();
    return ReadHistory(tx, *series, INT64_MIN, INT64_MAX, out);
  });
}

std::vector<MetricPoint> MetricStore::TakePointBuffer() {
  MutexLock lock(pool_mu_);
  if (spare_points_.empty()) return {};
  std::vector<MetricPoint> buffer = std::move(spare_points_.back());
  spare_points_.pop_back();
  return buffer;
}

void MetricStore::GivePointBuffer(std::vector<MetricPoint> buffer) {
  if (buffer.capacity() == 0 || buffer.capacity() > kMaxPooledBufferPoints) return;
  buffer.clear();
  MutexLock lock(pool_mu_);
  if (spare_points_.size() < kPooledPointBuffers) spare_points_.push_back(std::move(buffer));
}

Status MetricStore::ScanHistoryRanges(
    const std::string& run_id, const std::string& key, int threads, int64_t steps_per_range,
    const std::function<void(int)>& plan,
    const std::function<void(int, const MetricPoint*, size_t)>& fn) {
  TY_RETURN_IF_ERROR(CheckMetricKey(key));
  // The points go back to the pool on every return.
  struct Buffer {
    MetricStore* store;
    std::vector<MetricPoint> points;
    ~Buffer() { store->GivePointBuffer(std::move(points)); }
  } buffer{this, TakePointBuffer()};
  std::vector<MetricPoint>& points = buffer.points;
  TY_RETURN_IF_ERROR(ReadWholeHistory(run_id, key, points));
  if (points.empty()) return Status::Ok();
  const StepRanges ranges = PlanStepRanges(points, threads, steps_per_range);
  plan(ranges.ranges);
  std::atomic<int> next{0};
  auto work = [&] {
    for (int r = next.fetch_add(1); r < ranges.ranges; r = next.fetch_add(1)) {
      size_t from = ranges.starts[static_cast<size_t>(r)];
      size_t to = ranges.starts[static_cast<size_t>(r) + 1];
      if (to > from) fn(r, points.data() + from, to - from);
    }
  };
  std::vector<std::thread> workers;
  for (int i = 1; i < ranges.threads; ++i) workers.emplace_back(work);
  work();
  for (auto& t : workers) t.join();
  return Status::Ok();
}

Result<Page<Metric>> MetricStore::GetHistory(const std::string& run_id, const std::string& key,
                                             std::optional<int64_t> max_results,
                                             const std::string& page_token) {
  Page<Metric> page;
  TY_ASSIGN_OR_RETURN(page.next_page_token,
                      ScanHistory(run_id, key, max_results, page_token, [&](const MetricPoint& p) {
                        Metric m;
                        m.key = key;
                        m.step = p.step;
                        m.timestamp = p.timestamp;
                        m.value = p.value;
                        page.items.push_back(std::move(m));
                      }));
  return page;
}

Result<std::vector<Metric>> MetricStore::GetHistoryBulkInterval(
    const std::vector<std::string>& run_ids, const std::string& key,
    std::optional<int64_t> start_step, std::optional<int64_t> end_step, int64_t max_results) {
  TY_RETURN_IF_ERROR(CheckBulkInterval(run_ids, key, start_step, end_step, max_results));
  std::vector<Metric> out;
  Status s = db_.Read([&](Transaction& tx) -> Status {
    for (const auto& run_id : run_ids) {
      TY_ASSIGN_OR_RETURN(auto series, FindRunSeries(tx, run_id, key));
      if (!series) continue;
      std::vector<MetricPoint> points;
      TY_RETURN_IF_ERROR(ReadHistory(tx, *series, start_step.value_or(INT64_MIN),
                                     end_step.value_or(INT64_MAX), points));
      const std::vector<int64_t> wanted = EvenlySpacedSteps(points, max_results);
      for (const MetricPoint& p : points) {
        if (!std::binary_search(wanted.begin(), wanted.end(), p.step)) continue;
        Metric m;
        m.key = key;
        m.run_id = run_id;
        m.step = p.step;
        m.timestamp = p.timestamp;
        m.value = p.value;
        out.push_back(std::move(m));
      }
    }
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return out;
}

DownsampledHistory DownsampleMinMax(const std::vector<MetricPoint>& points, int64_t buckets,
                                    int64_t min_step, int64_t max_step) {
  DownsampledHistory out;
  out.total_points = static_cast<int64_t>(points.size());
  if (buckets < 1) buckets = 1;
  if (out.total_points <= 2 * buckets || max_step <= min_step) {
    out.points = points;
    return out;
  }
  out.exact = false;
  // Bucket b holds steps [min_step + b*width, min_step + (b+1)*width); long double keeps
  // the width exact enough over the whole int64 span.
  const long double width =
      (static_cast<long double>(max_step) - static_cast<long double>(min_step) + 1) /
      static_cast<long double>(buckets);
  auto bucket_of = [&](int64_t step) {
    auto b = static_cast<int64_t>(
        (static_cast<long double>(step) - static_cast<long double>(min_step)) / width);
    return std::clamp<int64_t>(b, 0, buckets - 1);
  };
  out.points.reserve(static_cast<size_t>(std::min<int64_t>(2 * buckets, out.total_points)));
  size_t i = 0;
  while (i < points.size()) {
    const int64_t b = bucket_of(points[i].step);
    size_t end = i;
    std::optional<size_t> lo, hi;
    for (; end < points.size() && bucket_of(points[end].step) == b; ++end) {
      const double v = points[end].value;
      if (std::isnan(v)) continue;
      if (!lo || v < points[*lo].value) lo = end;
      if (!hi || v > points[*hi].value) hi = end;
    }
    if (!lo) {
      out.points.push_back(points[i]);
    } else if (*lo == *hi) {
      out.points.push_back(points[*lo]);
    } else {
      out.points.push_back(points[std::min(*lo, *hi)]);
      out.points.push_back(points[std::max(*lo, *hi)]);
    }
    i = end;
  }
  return out;
}

Result<DownsampledHistory> MetricStore::Downsample(const std::string& run_id,
                                                   const std::string& key, int64_t buckets,
                                                   std::optional<int64_t> min_step,
                                                   std::optional<int64_t> max_step) {
  TY_RETURN_IF_ERROR(CheckDownsample(key, buckets, min_step, max_step));
  DownsampledHistory out;
  Status s = db_.Read([&](Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(out, ReadDownsampled(tx, run_id, key, buckets, min_step, max_step));
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return out;
}

Result<std::vector<DownsampledHistory>> MetricStore::DownsampleMany(
    const std::vector<std::string>& run_ids, const std::string& key, int64_t buckets,
    std::optional<int64_t> min_step, std::optional<int64_t> max_step) {
  if (run_ids.empty()) return Status::InvalidArgument("run_ids must name at least one run");
  if (run_ids.size() > kMaxDownsampleRuns) {
    return Status::InvalidArgument(
        "run_ids may name at most " + std::to_string(kMaxDownsampleRuns) + " runs (got " +
        std::to_string(run_ids.size()) + "); split the runs into several requests");
  }
  std::unordered_set<std::string_view> seen;
  for (const auto& id : run_ids) {
    if (!seen.insert(id).second) {
      return Status::InvalidArgument("run_ids names run '" + Abbreviate(id) + "' twice");
    }
  }
  TY_RETURN_IF_ERROR(CheckDownsample(key, buckets, min_step, max_step));
  std::vector<DownsampledHistory> out;
  out.reserve(run_ids.size());
  // Each run is downsampled as soon as it is read, so only one whole history is held.
  Status s = db_.Read([&](Transaction& tx) -> Status {
    out.clear();
    for (const auto& run_id : run_ids) {
      TY_ASSIGN_OR_RETURN(auto history,
                          ReadDownsampled(tx, run_id, key, buckets, min_step, max_step));
      out.push_back(std::move(history));
    }
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return out;
}

Result<DownsampledHistory> MetricStore::ReadDownsampled(Transaction& tx, const std::string& run_id,
                                                        const std::string& key, int64_t buckets,
                                                        std::optional<int64_t> min_step,
                                                        std::optional<int64_t> max_step) {
  TY_ASSIGN_OR_RETURN(auto series, FindRunSeries(tx, run_id, key));
  if (!series) return DownsampledHistory{};
  std::vector<MetricPoint> points;
  TY_RETURN_IF_ERROR(
      ReadHistory(tx, *series, min_step.value_or(INT64_MIN), max_step.value_or(INT64_MAX), points));
  if (points.empty()) return DownsampledHistory{};
  return DownsampleMinMax(points, buckets, min_step.value_or(points.front().step),
                          max_step.value_or(points.back().step));
}

}  // namespace trainyard::tracking
