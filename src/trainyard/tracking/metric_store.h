// MetricStore: the metric histories of runs. It owns the tables that hold them
// (metric_series: a series id per (run, key); metric_blocks: the points, block-encoded
// as metric_blocks.h describes; latest_metrics: each series' latest value), their SQL,
// the cache of series ids, and the history scans. TrackingService owns runs (the
// `runs` table, which this store only reads to tell an unknown run from an empty one)
// and calls this store for everything about metric points.
//
// Writing is part of a caller's write transaction (a log-batch writes params, tags and
// metrics at once): PrepareWrite before it (encoding, outside the database's writer
// lock), Write inside it, Committed after it committed. Reads run in their own read
// transactions, except LoadLatest, which reads in the caller's.
//
// Thread-safe: the series cache is behind a mutex; all else is the Database's. A
// PendingWrite belongs to one caller. The Database must outlive the store.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "trainyard/common/mutex.h"
#include "trainyard/common/status.h"
#include "trainyard/store/database.h"
#include "trainyard/tracking/log_batch.h"
#include "trainyard/tracking/metric_blocks.h"
#include "trainyard/tracking/types.h"

namespace trainyard::tracking {

// A log-batch with at most this many points of a key adds them to the key's last
// block, if that has fewer than kTailBlockPoints; larger batches make blocks of their own.
inline constexpr size_t kSmallBatchPoints = 32;
inline constexpr int64_t kTailBlockPoints = 256;
// Series ids cached (run and key → id; ids never change). Past this many the cache
// starts over: at about 100 bytes an entry, it stays near 100 MB.
inline constexpr size_t kMaxCachedSeries = 1'000'000;
// A bulk-interval request names at most this many runs and asks for at most this many
// points per run (MLflow's limits).
inline constexpr size_t kMaxBulkIntervalRuns = 100;
inline constexpr int64_t kMaxBulkIntervalResults = 2500;
// The most step ranges a ranged scan splits a history into (bounds its bookkeeping).
inline constexpr int kMaxHistoryRanges = 1 << 20;
// Whole-history scans read into buffers kept for the next scan: at most this many, of at
// most this many points each (32 MiB). A new buffer for 1M points costs 6,000 page faults.
inline constexpr size_t kPooledPointBuffers = 2;
inline constexpr size_t kMaxPooledBufferPoints = (size_t{32} << 20) / sizeof(MetricPoint);

// Where range r of a ranged scan starts: the index in `points` (a history, in order) of
// its first point; starts[ranges] is points.size(), and a range may be empty.
struct StepRanges {
  int ranges = 0;
  int threads = 0;  // the threads to scan them with: at most `ranges`
  std::vector<size_t> starts;
};
// Splits a non-empty history's step span [first step, last step] into ranges of equal
// width: about `steps_per_range` steps each, at least `threads` ranges (when the span
// has that many steps) and at most kMaxHistoryRanges. Pure.
StepRanges PlanStepRanges(const std::vector<MetricPoint>& points, int threads,
                          int64_t steps_per_range);

// The steps a chart of at most `max_results` (>= 1) points shows of a history (in
// order): all its distinct steps when there are that few, else that many evenly
// spaced ones, the first and the last included. Ascending, distinct. Pure.
std::vector<int64_t> EvenlySpacedSteps(const std::vector<MetricPoint>& points, int64_t max_results);

// A chart's downsampled history (MetricStore::Downsample): the step range [min_step,
// max_step] split into `buckets` buckets of equal width, each keeping its lowest and its
// highest point (every peak and dip survives), in history order. `exact` when the range
// held at most 2 × buckets points: then they are all there, unchanged.
inline constexpr int64_t kMaxDownsampleBuckets = 10'000;
// The most runs one DownsampleMany reads (a chart of more runs asks in several requests).
inline constexpr size_t kMaxDownsampleRuns = 100;
struct DownsampledHistory {
  std::vector<MetricPoint> points;
  bool exact = true;
  int64_t total_points = 0;  // in the range, before downsampling
};

// The min/max-per-bucket downsampling of `points` (a history, in order, all within
// [min_step, max_step]) into `buckets` (>= 1) buckets. NaN points count as neither min nor
// max; a bucket of only NaNs keeps its first. Pure.
DownsampledHistory DownsampleMinMax(const std::vector<MetricPoint>& points, int64_t buckets,
                                    int64_t min_step, int64_t max_step);

class MetricStore {
 public:
  // `max_history_page`: the largest max_results a paged history read accepts.
  MetricStore(store::Database& db, int64_t max_history_page);
  MetricStore(const MetricStore&) = delete;
  MetricStore& operator=(const MetricStore&) = delete;

  // --- writing

  // One batch's metrics for one run, encoded for writing.
  struct PendingWrite {
    struct Series {
      SeriesPoints logged;
      int64_t id = -1;  // -1 until known (from the cache, or in Write)
      // The INSERT's parameters, built before the write transaction: while it is held,
      // a key costs one row, and only the series id is filled in.
      std::vector<store::Value> insert;
    };
    std::string run_id;
    std::vector<Series> series;
    std::vector<std::pair<std::string, int64_t>> created;  // series Write created: key, id
  };
  // Takes a validated batch's series (ValidateLogBatch). Cheap to call with none.
  PendingWrite PrepareWrite(const std::string& run_id, std::vector<SeriesPoints> series)
      TY_EXCLUDES(mu_);
  // Writes the points and latest values in `tx` (a write transaction in which the
  // caller has checked that the run exists and is active), creating series as needed.
  Status Write(store::Transaction& tx, PendingWrite& write) TY_EXCLUDES(mu_);
  // After the transaction of Write committed: caches the series it created.
  void Committed(const PendingWrite& write) TY_EXCLUDES(mu_);

  // --- reading

  // Streams the points of one metric of a run to `fn`, ordered by step then timestamp,
  // without materializing them; with max_results, one page. Returns the next page's
  // token ("" on the last page). NotFound for an unknown run; an empty history for a
  // run without the key.
  Result<std::string> ScanHistory(const std::string& run_id, const std::string& key,
                                  std::optional<int64_t> max_results, const std::string& page_token,
                                  const std::function<void(const MetricPoint&)>& fn);
  // A whole history scanned as consecutive step ranges of about `steps_per_range`
  // steps (at least `threads` ranges) by `threads` threads, each taking the next
  // unscanned range in step order: fn(range, points, n) hands over the next n points
  // of a range (in order, on one thread; the array is valid during the call), and range
  // i's steps all precede range i+1's. plan(ranges) comes first, once (not for an empty
  // history). NotFound for an unknown run, before any call.
  Status ScanHistoryRanges(const std::string& run_id, const std::string& key, int threads,
                           int64_t steps_per_range, const std::function<void(int)>& plan,
                           const std::function<void(int, const MetricPoint*, size_t)>& fn);
  // ScanHistory, collected.
  Result<Page<Metric>> GetHistory(const std::string& run_id, const std::string& key,
                                  std::optional<int64_t> max_results,
                                  const std::string& page_token);
  // For charts: per run, the points at EvenlySpacedSteps of its history within
  // [start_step, end_step], with run_id set.
  Result<std::vector<Metric>> GetHistoryBulkInterval(const std::vector<std::string>& run_ids,
                                                     const std::string& key,
                                                     std::optional<int64_t> start_step,
                                                     std::optional<int64_t> end_step,
                                                     int64_t max_results);
  // For zoomable charts: one metric of a run within [min_step, max_step] (either open),
  // downsampled by DownsampleMinMax into `buckets` (1..kMaxDownsampleBuckets). NotFound for
  // an unknown run; an empty history for a run without the key.
  Result<DownsampledHistory> Downsample(const std::string& run_id, const std::string& key,
                                        int64_t buckets, std::optional<int64_t> min_step,
                                        std::optional<int64_t> max_step);
  // Downsample of one metric of several runs (a chart of several runs), read in one
  // snapshot: one history per run, in the order of `run_ids`, each as Downsample would
  // answer it (an open end of the step range is that run's own first or last step).
  // InvalidArgument naming run_ids for none, more than kMaxDownsampleRuns or a run listed
  // twice; NotFound naming the first unknown run.
  Result<std::vector<DownsampledHistory>> DownsampleMany(const std::vector<std::string>& run_ids,
                                                         const std::string& key, int64_t buckets,
                                                         std::optional<int64_t> min_step,
                                                         std::optional<int64_t> max_step);
  // In the caller's transaction: hands the latest value of each metric of the runs
  // `run_ids` to `add`, ordered by key.
  Status LoadLatest(store::Transaction& tx, const std::vector<store::Value>& run_ids,
                    const std::function<void(const std::string& run_id, Metric)>& add);

 private:
  // The series of (run, key): from the cache, else the table; nullopt if none yet.
  Result<std::optional<int64_t>> FindSeries(store::Transaction& tx, const std::string& run_id,
                                            const std::string& key) TY_EXCLUDES(mu_);
  // FindSeries, but NotFound when the run does not exist either.
  Result<std::optional<int64_t>> FindRunSeries(store::Transaction& tx, const std::string& run_id,
                                               const std::string& key) TY_EXCLUDES(mu_);
  // Downsample's read and downsampling of one run in `tx` (the arguments checked).
  Result<DownsampledHistory> ReadDownsampled(store::Transaction& tx, const std::string& run_id,
                                             const std::string& key, int64_t buckets,
                                             std::optional<int64_t> min_step,
                                             std::optional<int64_t> max_step) TY_EXCLUDES(mu_);
  // The id of the write's k-th series, found or created in `tx`.
  Status ResolveSeries(store::Transaction& tx, PendingWrite& write, size_t k) TY_EXCLUDES(mu_);
  // A series' points (its id known): merged into its last block when both are small,
  // else a block of their own.
  Status WriteBlock(store::Transaction& tx, PendingWrite::Series& series);
  // Merges `series`' points into its last block when that block is small and starts
  // at or before them; false (nothing written) otherwise.
  Result<bool> AppendToTailBlock(store::Transaction& tx, const PendingWrite::Series& series);
  Status WriteLatest(store::Transaction& tx, const std::string& run_id, const SeriesPoints& series);
  // The points of a series with steps in [from_step, to_step], in history order.
  Status ReadHistory(store::Transaction& tx, int64_t series, int64_t from_step, int64_t to_step,
                     std::vector<MetricPoint>& out);
  // The first `want` points of a series after `after` (all of them, if fewer), in
  // history order, reading as few blocks as it can.
  Status ReadPage(store::Transaction& tx, int64_t series, const std::optional<MetricPoint>& after,
                  size_t want, std::vector<MetricPoint>& out);
  // A whole history of (run, key) in its own read; NotFound for an unknown run.
  Status ReadWholeHistory(const std::string& run_id, const std::string& key,
                          std::vector<MetricPoint>& out);
  // A buffer for a whole-history scan (empty, with the capacity a kept one has), and its
  // return when the scan is done.
  std::vector<MetricPoint> TakePointBuffer() TY_EXCLUDES(pool_mu_);
  void GivePointBuffer(std::vector<MetricPoint> buffer) TY_EXCLUDES(pool_mu_);

  static std::string CacheKey(const std::string& run_id, const std::string& key) {
    return run_id + '\0' + key;
  }

  store::Database& db_;
  const int64_t max_history_page_;

  Mutex mu_;
  // CacheKey(run, key) → series id, for committed series only.
  std::unordered_map<std::string, int64_t> series_ TY_GUARDED_BY(mu_);

  Mutex pool_mu_;
  std::vector<std::vector<MetricPoint>> spare_points_ TY_GUARDED_BY(pool_mu_);
};

}  // namespace trainyard::tracking
