// MetricStore on both backends: writes in a caller's transaction, histories (whole,
// paged, ranged, bulk interval), latest values, and a series cache that holds committed
// series only; and its pure helpers (step ranges, evenly spaced steps).
#include "trainyard/tracking/metric_store.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <thread>

#include "trainyard/common/clock.h"
#include "trainyard/testing/test_postgres.h"
#include "trainyard/tracking/schema.h"

namespace trainyard::tracking {
namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();

Metric M(std::string key, int64_t step, int64_t timestamp, double value) {
  Metric m;
  m.key = std::move(key);
  m.step = step;
  m.timestamp = timestamp;
  m.value = value;
  return m;
}

std::vector<MetricPoint> Steps(std::vector<int64_t> steps) {
  std::vector<MetricPoint> out;
  for (int64_t s : steps) out.push_back({s, 0, 0.0});
  return out;
}

// ------------------------------------------------------------------------ pure helpers

TEST(MetricStorePlanTest, RangesCoverTheSpanInOrderAndNeverExceedTheirBound) {
  std::vector<MetricPoint> points = Steps({-5, -5, 0, 1, 2, 10, 11, 40});
  StepRanges one = PlanStepRanges(points, 1, std::numeric_limits<int64_t>::max());
  EXPECT_EQ(one.ranges, 1);
  EXPECT_EQ(one.threads, 1);
  EXPECT_EQ(one.starts, (std::vector<size_t>{0, points.size()}));
  // Span -5..40 is 46 steps: 10 steps a range make 5 ranges, on at most 3 threads.
  StepRanges five = PlanStepRanges(points, 3, 10);
  EXPECT_EQ(five.ranges, 5);
  EXPECT_EQ(five.threads, 3);
  ASSERT_EQ(five.starts.size(), 6u);
  for (size_t r = 0; r + 1 < five.starts.size(); ++r) {
    EXPECT_LE(five.starts[r], five.starts[r + 1]);
  }
  // [-5, 4) [4, 13) [13, 22) [22, 31) [31, 40]: 5 points, 2, none, none, 1.
  EXPECT_EQ(five.starts, (std::vector<size_t>{0, 5, 7, 7, 7, 8}));
  // More threads than steps: one range per step, one thread per range.
  StepRanges few = PlanStepRanges(Steps({7, 8}), 16, 1);
  EXPECT_EQ(few.ranges, 2);
  EXPECT_EQ(few.threads, 2);
  // A wide span (2^40 steps) stays within kMaxHistoryRanges.
  StepRanges wide = PlanStepRanges(Steps({0, int64_t{1} << 40}), 4, 1);
  EXPECT_EQ(wide.ranges, kMaxHistoryRanges);
  EXPECT_EQ(wide.starts.front(), 0u);
  EXPECT_EQ(wide.starts[1], 1u);
  EXPECT_EQ(wide.starts.back(), 2u);
}

TEST(MetricStorePlanTest, EvenlySpacedStepsKeepTheEndsAndAreDistinct) {
  EXPECT_EQ(EvenlySpacedSteps(Steps({1, 1, 2, 5}), 10), (std::vector<int64_t>{1, 2, 5}));
  std::vector<int64_t> all;
  for (int64_t s = 0; s <= 100; ++s) all.push_back(s);
  EXPECT_EQ(EvenlySpacedSteps(Steps(all), 5), (std::vector<int64_t>{0, 25, 50, 75, 100}));
  EXPECT_EQ(EvenlySpacedSteps(Steps(all), 1), (std::vector<int64_t>{0}));
  EXPECT_EQ(EvenlySpacedSteps(Steps(all), 2), (std::vector<int64_t>{0, 100}));
  EXPECT_TRUE(EvenlySpacedSteps({}, 3).empty());
}

// ------------------------------------------------------------------------ the store

TEST(MetricStoreDownsampleTest, KeepsEveryPeakAndDipPerBucket) {
  // 1000 points of a flat 0 with one spike at step 333 and one dip at step 777.
  std::vector<MetricPoint> points;
  for (int64_t s = 0; s < 1000; ++s) {
    points.push_back({s, s, s == 333 ? 50.0 : s == 777 ? -20.0 : 0.0});
  }
  DownsampledHistory d = DownsampleMinMax(points, 10, 0, 999);
  EXPECT_FALSE(d.exact);
  EXPECT_EQ(d.total_points, 1000);
  EXPECT_LE(d.points.size(), 20u);
  bool peak = false, dip = false;
  for (size_t i = 0; i < d.points.size(); ++i) {
    if (i) {
      EXPECT_LT(d.points[i - 1].step, d.points[i].step) << "out of order";
    }
    peak |= d.points[i].step == 333 && d.points[i].value == 50.0;
    dip |= d.points[i].step == 777 && d.points[i].value == -20.0;
  }
  EXPECT_TRUE(peak);
  EXPECT_TRUE(dip);
  // Every bucket of 100 steps is represented.
  std::vector<bool> seen(10);
  for (const auto& p : d.points) seen[static_cast<size_t>(p.step / 100)] = true;
  for (size_t b = 0; b < seen.size(); ++b) EXPECT_TRUE(seen[b]) << "bucket " << b;
}

TEST(MetricStoreDownsampleTest, FewPointsComeBackExactAndNaNsDoNotHideValues) {
  std::vector<MetricPoint> few = {{1, 0, 1.0}, {5, 0, kNaN}, {9, 0, 3.0}};
  DownsampledHistory d = DownsampleMinMax(few, 2, 0, 100);
  EXPECT_TRUE(d.exact);
  ASSERT_EQ(d.points.size(), 3u);
  EXPECT_TRUE(std::isnan(d.points[1].value));
  // One bucket: the NaN is neither min nor max; a bucket of only NaNs keeps its first.
  std::vector<MetricPoint> nan_first = {{0, 0, kNaN},  {1, 0, 4.0},   {2, 0, 2.0},  {3, 0, kNaN},
                                        {10, 0, kNaN}, {11, 0, kNaN}, {12, 0, kNaN}};
  DownsampledHistory one = DownsampleMinMax(nan_first, 2, 0, 13);
  EXPECT_FALSE(one.exact);
  ASSERT_EQ(one.points.size(), 3u);
  EXPECT_EQ(one.points[0].step, 1);
  EXPECT_EQ(one.points[1].step, 2);
  EXPECT_EQ(one.points[2].step, 10);
}

class MetricStoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "sqlite") {
      path_ = std::filesystem::temp_directory_path() / ("ty-mstore-" + random_.Hex(6) + ".db");
      url_ = path_;
    } else {
      auto url = store::PostgresUrlForTest();
      ASSERT_TRUE(url.ok()) << url.status().ToString();
      url_ = *url;
    }
    db_ = std::move(store::OpenDatabase({.url = url_})).value();
    ASSERT_TRUE(store::ApplyMigrations(*db_, TrackingMigrations()).ok());
    store_ = std::make_unique<MetricStore>(*db_, 1000);
    for (const char* run : {"ra", "rb"}) {
      ASSERT_TRUE(db_->Write([&](store::Transaction& tx) -> Status {
                       return tx
                           .Exec(
                               "INSERT INTO runs (run_uuid, experiment_id, name, user_id, "
                               "status, lifecycle_stage, artifact_uri) VALUES (?, 0, ?, 'u', "
                               "'RUNNING', 'active', 'a')",
                               {std::string(run), std::string(run)})
                           .status();
                     })
                      .ok());
    }
  }
  void TearDown() override {
    store_.reset();
    db_.reset();
    if (!path_.empty()) {
      for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path_ + suffix);
    }
  }

  // What LogBatch does for metrics: validate, prepare, write in a transaction, commit.
  // With `fail`, the transaction fails after the write and is rolled back.
  Status Log(const std::string& run_id, const std::vector<Metric>& metrics, bool fail = false) {
    auto batch = ValidateLogBatch(metrics, {}, {}, {});
    if (!batch.ok()) return batch.status();
    MetricStore::PendingWrite write = store_->PrepareWrite(run_id, std::move(batch->series));
    Status s = db_->Write([&](store::Transaction& tx) -> Status {
      TY_RETURN_IF_ERROR(store_->Write(tx, write));
      return fail ? Status::Internal("rolled back for the test") : Status::Ok();
    });
    if (s.ok()) store_->Committed(write);
    return s;
  }

  std::vector<MetricPoint> History(const std::string& run_id, const std::string& key) {
    auto page = store_->GetHistory(run_id, key, std::nullopt, "");
    EXPECT_TRUE(page.ok()) << page.status().ToString();
    std::vector<MetricPoint> out;
    if (page.ok()) {
      for (const auto& m : page->items) out.push_back({m.step, m.timestamp, m.value});
    }
    return out;
  }

  std::map<std::string, Metric> Latest(const std::string& run_id) {
    std::map<std::string, Metric> out;
    Status s = db_->Read([&](store::Transaction& tx) -> Status {
      return store_->LoadLatest(tx, {run_id}, [&](const std::string& id, Metric m) {
        EXPECT_EQ(id, run_id);
        out[m.key] = m;
      });
    });
    EXPECT_TRUE(s.ok()) << s.ToString();
    return out;
  }

  static std::vector<int64_t> StepsOf(const std::vector<MetricPoint>& points) {
    std::vector<int64_t> out;
    for (const auto& p : points) out.push_back(p.step);
    return out;
  }

  SeededRandom random_{17};
  std::string path_, url_;
  std::unique_ptr<store::Database> db_;
  std::unique_ptr<MetricStore> store_;
};

TEST_P(MetricStoreTest, HistoriesComeBackInOrderWholePagedAndRanged) {
  ASSERT_TRUE(Log("ra", {M("loss", 5, 0, 0.5), M("loss", 1, 0, 0.1), M("acc", 1, 0, 0.7)}).ok());
  ASSERT_TRUE(Log("ra", {M("loss", 3, 0, 0.3), M("loss", 5, 0, 0.5), M("loss", 2, 1, kNaN)}).ok());
  std::vector<MetricPoint> loss = History("ra", "loss");
  EXPECT_EQ(StepsOf(loss), (std::vector<int64_t>{1, 2, 3, 5}));  // step 5 logged twice: once
  EXPECT_TRUE(std::isnan(loss[1].value));
  EXPECT_EQ(StepsOf(History("ra", "acc")), (std::vector<int64_t>{1}));

  std::vector<int64_t> paged;
  std::string token;
  int pages = 0;
  do {
    auto page = store_->GetHistory("ra", "loss", 3, token);
    ASSERT_TRUE(page.ok()) << page.status().ToString();
    for (const auto& m : page->items) paged.push_back(m.step);
    token = page->next_page_token;
    ++pages;
  } while (!token.empty() && pages < 10);
  EXPECT_EQ(pages, 2);
  EXPECT_EQ(paged, (std::vector<int64_t>{1, 2, 3, 5}));

  std::vector<std::vector<int64_t>> ranges;
  ASSERT_TRUE(store_
                  ->ScanHistoryRanges(
                      "ra", "loss", 2, 2, [&](int n) { ranges.resize(static_cast<size_t>(n)); },
                      [&](int r, const MetricPoint* p, size_t n) {
                        for (size_t i = 0; i < n; ++i) {
                          ranges[static_cast<size_t>(r)].push_back(p[i].step);
                        }
                      })
                  .ok());
  // Steps 1..5 in ranges of about 2 steps: [1, 2), [2, 4), [4, 5].
  std::vector<int64_t> joined;
  for (const auto& r : ranges) joined.insert(joined.end(), r.begin(), r.end());
  EXPECT_EQ(joined, (std::vector<int64_t>{1, 2, 3, 5}));
  EXPECT_EQ(ranges.size(), 3u);

  auto too_big = store_->GetHistory("ra", "loss", 1001, "");
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.status().message(), "max_results must be between 1 and 1000");
}

// Ranged scans read into buffers kept between scans: each scan sees its own history
// only, whether the kept buffer was larger or smaller, and concurrent scans do not mix.
TEST_P(MetricStoreTest, RangedScansInKeptBuffersSeeOnlyTheirOwnHistory) {
  for (int64_t batch = 0; batch < 3; ++batch) {
    std::vector<Metric> big;
    for (int64_t s = batch * 1000; s < (batch + 1) * 1000; ++s) big.push_back(M("loss", s, s, 0.5));
    ASSERT_TRUE(Log("ra", big).ok());
  }
  ASSERT_TRUE(
      Log("rb", {M("loss", 100, 0, 1.0), M("loss", 101, 0, 2.0), M("loss", 102, 0, 3.0)}).ok());
  auto scan = [&](const std::string& run) {
    std::vector<std::vector<MetricPoint>> ranges;
    EXPECT_TRUE(store_
                    ->ScanHistoryRanges(
                        run, "loss", 2, 1000, [&](int n) { ranges.resize(static_cast<size_t>(n)); },
                        [&](int r, const MetricPoint* p, size_t n) {
                          ranges[static_cast<size_t>(r)].insert(
                              ranges[static_cast<size_t>(r)].end(), p, p + n);
                        })
                    .ok());
    std::vector<MetricPoint> joined;
    for (const auto& r : ranges) joined.insert(joined.end(), r.begin(), r.end());
    return joined;
  };
  const std::vector<MetricPoint> want_big = History("ra", "loss");
  const std::vector<MetricPoint> want_small = History("rb", "loss");
  ASSERT_EQ(want_big.size(), 3000u);
  ASSERT_EQ(want_small.size(), 3u);
  for (int round = 0; round < 3; ++round) {
    EXPECT_EQ(StepsOf(scan("ra")), StepsOf(want_big));
    EXPECT_EQ(StepsOf(scan("rb")), StepsOf(want_small));
  }
  std::vector<std::thread> threads;
  std::vector<std::vector<MetricPoint>> got(4);
  for (size_t t = 0; t < got.size(); ++t) {
    threads.emplace_back([&, t] { got[t] = scan(t % 2 ? "rb" : "ra"); });
  }
  for (auto& t : threads) t.join();
  for (size_t t = 0; t < got.size(); ++t) {
    EXPECT_EQ(StepsOf(got[t]), StepsOf(t % 2 ? want_small : want_big)) << t;
  }
}

TEST_P(MetricStoreTest, UnknownRunsAreNotFoundAndMissingKeysAreEmpty) {
  EXPECT_TRUE(store_->GetHistory("nope", "loss", std::nullopt, "").status().IsNotFound());
  EXPECT_TRUE(store_->GetHistory("nope", "loss", 10, "").status().IsNotFound());
  int planned = 0;
  EXPECT_TRUE(store_
                  ->ScanHistoryRanges(
                      "nope", "loss", 2, 10, [&](int) { ++planned; },
                      [](int, const MetricPoint*, size_t) {})
                  .IsNotFound());
  EXPECT_EQ(planned, 0);
  EXPECT_TRUE(History("ra", "absent").empty());
  EXPECT_TRUE(store_->GetHistory("ra", "", std::nullopt, "").status().IsInvalidArgument());
  EXPECT_TRUE(store_->GetHistoryBulkInterval({"ra", "nope"}, "loss", std::nullopt, std::nullopt, 5)
                  .status()
                  .IsNotFound());
}

TEST_P(MetricStoreTest, LatestValuesFollowMLflowsOrderAcrossBatches) {
  ASSERT_TRUE(Log("ra", {M("loss", 5, 10, 1.0), M("acc", 1, 0, 0.5)}).ok());
  ASSERT_TRUE(Log("ra", {M("loss", 3, 99, 9.0)}).ok());  // an earlier step: not the latest
  auto latest = Latest("ra");
  ASSERT_EQ(latest.size(), 2u);
  EXPECT_EQ(latest["loss"].step, 5);
  EXPECT_EQ(latest["loss"].value, 1.0);
  ASSERT_TRUE(Log("ra", {M("loss", 5, 10, 0.5)}).ok());  // same step and time: the larger
  EXPECT_EQ(Latest("ra")["loss"].value, 1.0);
  ASSERT_TRUE(Log("ra", {M("loss", 5, 10, 3.0)}).ok());
  EXPECT_EQ(Latest("ra")["loss"].value, 3.0);
  ASSERT_TRUE(Log("ra", {M("loss", 5, 11, -1.0)}).ok());  // a later time on the same step
  EXPECT_EQ(Latest("ra")["loss"].value, -1.0);
  ASSERT_TRUE(Log("ra", {M("loss", 5, 12, kNaN), M("loss", 5, 12, 8.0)}).ok());
  EXPECT_TRUE(std::isnan(Latest("ra")["loss"].value));  // within a batch NaN is the largest
  ASSERT_TRUE(Log("ra", {M("loss", 6, 0, 2.0)}).ok());
  latest = Latest("ra");
  EXPECT_EQ(latest["loss"].step, 6);
  EXPECT_EQ(latest["loss"].value, 2.0);
  EXPECT_EQ(latest["acc"].value, 0.5);
  EXPECT_TRUE(Latest("rb").empty());
}

// A series created in a transaction that rolled back must not be cached: its id goes
// to the next series created, and a stale cache entry would mix two runs' points.
TEST_P(MetricStoreTest, SeriesOfARolledBackWriteAreNotCached) {
  ASSERT_FALSE(Log("ra", {M("loss", 1, 0, 1.0)}, /*fail=*/true).ok());
  EXPECT_TRUE(History("ra", "loss").empty());
  ASSERT_TRUE(Log("rb", {M("loss", 2, 0, 2.0)}).ok());
  ASSERT_TRUE(Log("ra", {M("loss", 3, 0, 3.0)}).ok());
  EXPECT_EQ(StepsOf(History("rb", "loss")), (std::vector<int64_t>{2}));
  EXPECT_EQ(StepsOf(History("ra", "loss")), (std::vector<int64_t>{3}));
  // And a cached series keeps taking writes.
  ASSERT_TRUE(Log("ra", {M("loss", 4, 0, 4.0)}).ok());
  EXPECT_EQ(StepsOf(History("ra", "loss")), (std::vector<int64_t>{3, 4}));
}

TEST_P(MetricStoreTest, SmallBatchesJoinTheTailBlockAndLargeOnesMakeTheirOwn) {
  std::vector<Metric> large;
  for (int64_t s = 0; s < static_cast<int64_t>(kSmallBatchPoints) + 1; ++s) {
    large.push_back(M("loss", s, 0, 1.0));
  }
  ASSERT_TRUE(Log("ra", large).ok());  // block 1
  for (int64_t s = 100; s < 105; ++s) {
    ASSERT_TRUE(Log("ra", {M("loss", s, 0, 1.0)}).ok());  // join block 1
  }
  ASSERT_TRUE(Log("ra", {M("loss", -1, 0, 1.0)}).ok());  // before the tail's start: block 2
  int64_t blocks = 0, points = 0;
  ASSERT_TRUE(db_->Read([&](store::Transaction& tx) -> Status {
                   auto rows = tx.Query("SELECT COUNT(*), SUM(points) FROM metric_blocks");
                   if (!rows.ok()) return rows.status();
                   blocks = (*rows)[0].Int(0);
                   points = (*rows)[0].Int(1);
                   return Status::Ok();
                 })
                  .ok());
  EXPECT_EQ(blocks, 2);
  EXPECT_EQ(points, static_cast<int64_t>(kSmallBatchPoints) + 1 + 5 + 1);
  EXPECT_EQ(History("ra", "loss").size(), static_cast<size_t>(points));
}

TEST_P(MetricStoreTest, BulkIntervalPicksEvenlySpacedStepsPerRun) {
  std::vector<Metric> batch;
  for (int64_t s = 0; s <= 20; ++s) batch.push_back(M("loss", s, 0, static_cast<double>(s)));
  ASSERT_TRUE(Log("ra", batch).ok());
  ASSERT_TRUE(Log("rb", {M("loss", 7, 0, 1.0), M("loss", 7, 1, 2.0)}).ok());
  auto got = store_->GetHistoryBulkInterval({"ra", "rb"}, "loss", 4, 12, 3);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  std::vector<std::pair<std::string, int64_t>> picked;
  for (const auto& m : *got) picked.emplace_back(m.run_id, m.step);
  EXPECT_EQ(picked, (std::vector<std::pair<std::string, int64_t>>{
                        {"ra", 4}, {"ra", 8}, {"ra", 12}, {"rb", 7}, {"rb", 7}}));
  EXPECT_EQ(store_->GetHistoryBulkInterval({"ra"}, "loss", 5, 4, 3).status().message(),
            "start_step must not be greater than end_step");
  EXPECT_EQ(store_->GetHistoryBulkInterval({"ra"}, "loss", std::nullopt, std::nullopt, 2501)
                .status()
                .message(),
            "max_results must be between 1 and 2500");
  std::vector<std::string> many(kMaxBulkIntervalRuns + 1, "ra");
  EXPECT_EQ(store_->GetHistoryBulkInterval(many, "loss", std::nullopt, std::nullopt, 3)
                .status()
                .message(),
            "run_ids may name at most 100 runs (got 101)");
}

TEST_P(MetricStoreTest, DownsampleReadsTheZoomedRangeExactlyWhenItIsSmall) {
  for (int64_t from = 0; from < 5000; from += 1000) {  // log-batch's limit is 1000 metrics
    std::vector<Metric> batch;
    for (int64_t s = from; s < from + 1000; ++s) {
      batch.push_back(M("loss", s, s, s == 4321 ? 99.0 : static_cast<double>(s % 7)));
    }
    ASSERT_TRUE(Log("ra", batch).ok());
  }
  auto whole = store_->Downsample("ra", "loss", 100, std::nullopt, std::nullopt);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  EXPECT_FALSE(whole->exact);
  EXPECT_EQ(whole->total_points, 5000);
  EXPECT_LE(whole->points.size(), 200u);
  bool peak = false;
  for (const auto& p : whole->points) peak |= p.step == 4321 && p.value == 99.0;
  EXPECT_TRUE(peak);
  auto zoomed = store_->Downsample("ra", "loss", 100, 4300, 4349);
  ASSERT_TRUE(zoomed.ok());
  EXPECT_TRUE(zoomed->exact);
  ASSERT_EQ(zoomed->points.size(), 50u);
  EXPECT_EQ(zoomed->points.front().step, 4300);
  EXPECT_EQ(zoomed->points.back().step, 4349);
  auto none = store_->Downsample("ra", "other", 100, std::nullopt, std::nullopt);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->points.empty());
  EXPECT_TRUE(
      store_->Downsample("nope", "loss", 100, std::nullopt, std::nullopt).status().IsNotFound());
  EXPECT_EQ(store_->Downsample("ra", "loss", 0, std::nullopt, std::nullopt).status().message(),
            "buckets must be between 1 and 10000 (got 0)");
  EXPECT_EQ(store_->Downsample("ra", "loss", 10, 9, 8).status().message(),
            "min_step must not be greater than max_step");
}

TEST_P(MetricStoreTest, DownsampleManyAnswersEachRunAsDownsampleDoesInTheOrderAsked) {
  for (int64_t from = 0; from < 5000; from += 1000) {
    std::vector<Metric> batch;
    for (int64_t s = from; s < from + 1000; ++s) {
      batch.push_back(M("loss", s, s, s == 4321 ? 99.0 : static_cast<double>(s % 7)));
    }
    ASSERT_TRUE(Log("ra", batch).ok());
  }
  std::vector<Metric> short_run;  // its own step range: 1000..1299, a dip at 1234
  for (int64_t s = 1000; s < 1300; ++s) {
    short_run.push_back(M("loss", s, s, s == 1234 ? -5.0 : 1.0));
  }
  ASSERT_TRUE(Log("rb", short_run).ok());
  auto same = [](const DownsampledHistory& a, const DownsampledHistory& b) {
    if (a.exact != b.exact || a.total_points != b.total_points) return false;
    if (a.points.size() != b.points.size()) return false;
    for (size_t i = 0; i < a.points.size(); ++i) {
      if (a.points[i].step != b.points[i].step || a.points[i].timestamp != b.points[i].timestamp ||
          a.points[i].value != b.points[i].value) {
        return false;
      }
    }
    return true;
  };

  auto whole = store_->DownsampleMany({"rb", "ra"}, "loss", 100, std::nullopt, std::nullopt);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  ASSERT_EQ(whole->size(), 2u);
  const DownsampledHistory& rb = (*whole)[0];
  const DownsampledHistory& ra = (*whole)[1];
  EXPECT_TRUE(same(rb, *store_->Downsample("rb", "loss", 100, std::nullopt, std::nullopt)));
  EXPECT_TRUE(same(ra, *store_->Downsample("ra", "loss", 100, std::nullopt, std::nullopt)));
  EXPECT_FALSE(ra.exact);
  EXPECT_EQ(ra.total_points, 5000);
  EXPECT_FALSE(rb.exact);
  EXPECT_EQ(rb.total_points, 300);
  // Its buckets span its own steps, not ra's 0..4999 (where it would fill 6 of them).
  EXPECT_GE(rb.points.size(), 100u);
  EXPECT_EQ(rb.points.front().step, 1000);
  EXPECT_LE(rb.points.back().step, 1299);
  bool peak = false, dip = false;
  for (const auto& p : ra.points) peak |= p.step == 4321 && p.value == 99.0;
  for (const auto& p : rb.points) dip |= p.step == 1234 && p.value == -5.0;
  EXPECT_TRUE(peak);
  EXPECT_TRUE(dip);

  // Zoomed in, every run's points in the range, exact.
  auto zoomed = store_->DownsampleMany({"ra", "rb"}, "loss", 100, 1100, 1149);
  ASSERT_TRUE(zoomed.ok()) << zoomed.status().ToString();
  for (const auto& h : *zoomed) {
    EXPECT_TRUE(h.exact);
    ASSERT_EQ(h.points.size(), 50u);
    EXPECT_EQ(h.points.front().step, 1100);
    EXPECT_EQ(h.points.back().step, 1149);
  }
  auto none = store_->DownsampleMany({"ra", "rb"}, "other", 100, std::nullopt, std::nullopt);
  ASSERT_TRUE(none.ok());
  ASSERT_EQ(none->size(), 2u);
  EXPECT_TRUE((*none)[0].points.empty() && (*none)[1].points.empty());

  auto message = [&](const std::vector<std::string>& ids, int64_t buckets = 100) {
    return store_->DownsampleMany(ids, "loss", buckets, std::nullopt, std::nullopt)
        .status()
        .message();
  };
  EXPECT_EQ(message({}), "run_ids must name at least one run");
  std::vector<std::string> many;
  for (size_t i = 0; i <= kMaxDownsampleRuns; ++i) many.push_back("r" + std::to_string(i));
  EXPECT_EQ(message(many),
            "run_ids may name at most 100 runs (got 101); split the runs into several requests");
  EXPECT_EQ(message({"ra", "rb", "ra"}), "run_ids names run 'ra' twice");
  EXPECT_EQ(message({"ra"}, 0), "buckets must be between 1 and 10000 (got 0)");
  auto unknown = store_->DownsampleMany({"ra", "nope"}, "loss", 100, std::nullopt, std::nullopt);
  EXPECT_TRUE(unknown.status().IsNotFound());
  EXPECT_EQ(unknown.status().message(), "run with id 'nope' does not exist");
}

INSTANTIATE_TEST_SUITE_P(Backends, MetricStoreTest, ::testing::Values("sqlite", "postgresql"),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace trainyard::tracking
