// Metric blocks: the codec, the merge of overlapping blocks, page cursors; and the
// tracking service's histories over blocks written out of order, checked against a
// plain model on both backends; and the migration of version-1 point rows into blocks.
#include "trainyard/tracking/metric_blocks.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <random>
#include <set>

#include "trainyard/common/clock.h"
#include "trainyard/common/page_token.h"
#include "trainyard/identity/identity_service.h"
#include "trainyard/testing/test_postgres.h"
#include "trainyard/tracking/schema.h"
#include "trainyard/tracking/tracking_service.h"

namespace trainyard::tracking {
namespace {

const identity::Principal kAdmin = identity::Principal::System();

const double kNaN = std::numeric_limits<double>::quiet_NaN();

bool Same(const MetricPoint& a, const MetricPoint& b) {
  return a.step == b.step && a.timestamp == b.timestamp &&
         (a.value == b.value || (std::isnan(a.value) && std::isnan(b.value)));
}

void ExpectSame(const std::vector<MetricPoint>& got, const std::vector<MetricPoint>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(Same(got[i], want[i]))
        << "point " << i << ": step " << got[i].step << " vs " << want[i].step << ", timestamp "
        << got[i].timestamp << " vs " << want[i].timestamp << ", value " << got[i].value << " vs "
        << want[i].value;
  }
}

TEST(MetricBlocksTest, RoundTripsPointsAndFiltersSteps) {
  std::vector<MetricPoint> points = {{INT64_MIN, -5, -0.0},
                                     {-3, 0, 1e-300},
                                     {0, INT64_MAX, std::numeric_limits<double>::infinity()},
                                     {7, 1, 2.5},
                                     {7, 1, -kNaN},
                                     {INT64_MAX, 2, -1.0}};
  std::string bytes = EncodeMetricBlock(points.data(), points.size());
  EXPECT_EQ(bytes.size(), 1 + points.size() * kBlockPointBytes);
  EXPECT_EQ(*MetricBlockSize(bytes), points.size());
  std::vector<MetricPoint> out;
  ASSERT_TRUE(DecodeMetricBlock(bytes, INT64_MIN, INT64_MAX, out).ok());
  ExpectSame(out, points);
  EXPECT_TRUE(std::signbit(out[0].value));  // -0.0 stays -0.0
  out.clear();
  ASSERT_TRUE(DecodeMetricBlock(bytes, -3, 7, out).ok());
  ExpectSame(out, {points[1], points[2], points[3], points[4]});
  // Appends to what is there.
  ASSERT_TRUE(DecodeMetricBlock(bytes, INT64_MAX, INT64_MAX, out).ok());
  EXPECT_EQ(out.size(), 5u);
}

TEST(MetricBlocksTest, DamagedBlocksAreErrorsNotGarbage) {
  MetricPoint p{1, 2, 3.0};
  std::string bytes = EncodeMetricBlock(&p, 1);
  std::vector<MetricPoint> out;
  for (std::string bad :
       {std::string(), bytes.substr(0, bytes.size() - 1), "\x02" + bytes.substr(1), bytes + "x"}) {
    Status s = DecodeMetricBlock(bad, INT64_MIN, INT64_MAX, out);
    EXPECT_EQ(s.code(), StatusCode::kInternal) << bad.size();
    EXPECT_NE(s.message().find("damaged"), std::string::npos);
  }
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(*MetricBlockSize(EncodeMetricBlock(nullptr, 0)), 0u);
}

TEST(MetricBlocksTest, HistoryOrderPutsNaNLastAndKeepsEachPointOnce) {
  std::vector<MetricPoint> points = {{2, 1, kNaN}, {2, 1, 0.5}, {1, 9, 3.0},  {2, 1, kNaN},
                                     {2, 0, 7.0},  {2, 1, 0.5}, {2, 1, -1.0}, {1, 9, 3.0}};
  SortAndDedup(points);
  ExpectSame(points, {{1, 9, 3.0}, {2, 0, 7.0}, {2, 1, -1.0}, {2, 1, 0.5}, {2, 1, kNaN}});
}

TEST(MetricBlocksTest, AssemblerConcatenatesDisjointBlocksAndMergesOverlappingOnes) {
  auto block = [](std::vector<MetricPoint> p) {
    SortAndDedup(p);
    return EncodeMetricBlock(p.data(), p.size());
  };
  HistoryAssembler disjoint(INT64_MIN, INT64_MAX);
  ASSERT_TRUE(disjoint.Add(block({{0, 0, 1.0}, {1, 0, 1.0}})).ok());
  ASSERT_TRUE(disjoint.Add(block({{2, 0, 1.0}, {3, 0, 1.0}})).ok());
  ExpectSame(disjoint.Finish(), {{0, 0, 1.0}, {1, 0, 1.0}, {2, 0, 1.0}, {3, 0, 1.0}});

  // Blocks handed over by first step, overlapping, with a point logged twice.
  HistoryAssembler overlapping(1, 5);
  ASSERT_TRUE(overlapping.Add(block({{0, 0, 0.0}, {2, 0, 2.0}, {4, 0, 4.0}})).ok());
  ASSERT_TRUE(overlapping.Add(block({{1, 0, 1.0}, {2, 0, 2.0}, {6, 0, 6.0}})).ok());
  ASSERT_TRUE(overlapping.Add(block({{4, 0, 4.0}, {4, 1, 4.5}, {5, 0, kNaN}})).ok());
  ExpectSame(overlapping.Finish(),
             {{1, 0, 1.0}, {2, 0, 2.0}, {4, 0, 4.0}, {4, 1, 4.5}, {5, 0, kNaN}});
}

// A whole-history scan hands the assembler the buffer of an earlier one: its points are
// dropped, its memory is used (no new allocation when it is large enough).
TEST(MetricBlocksTest, AssemblerReusesStorageButNotItsPoints) {
  std::vector<MetricPoint> storage(100, MetricPoint{7, 7, 7.0});
  const MetricPoint* memory = storage.data();
  std::vector<MetricPoint> points = {{0, 0, 1.0}, {1, 0, 2.0}, {2, 0, 3.0}};
  HistoryAssembler history(1, INT64_MAX, std::move(storage));
  ASSERT_TRUE(history.Add(EncodeMetricBlock(points.data(), points.size())).ok());
  std::vector<MetricPoint> got = history.Finish();
  ExpectSame(got, {{1, 0, 2.0}, {2, 0, 3.0}});
  EXPECT_EQ(got.data(), memory);
}

TEST(MetricBlocksTest, CursorsRoundTripAndOtherTokensAreRefused) {
  for (MetricPoint p : {MetricPoint{INT64_MIN, INT64_MAX, -0.0}, MetricPoint{5, -7, kNaN},
                        MetricPoint{1, 2, 0.1}}) {
    auto back = DecodeHistoryCursor(EncodeHistoryCursor(p));
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_TRUE(Same(*back, p));
    EXPECT_EQ(std::signbit(back->value), std::signbit(p.value));
  }
  for (std::string bad :
       {std::string("junk"), EncodePageToken(100), Base64Encode("h1:1:2"), Base64Encode("h1:1:2:x"),
        Base64Encode("h1:1:2:3:4"), Base64Encode("h1:99999999999999999999:2:3")}) {
    auto r = DecodeHistoryCursor(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_TRUE(r.status().IsInvalidArgument());
    EXPECT_NE(r.status().message().find("page_token"), std::string::npos);
  }
}

// --------------------------------------------------------------------------- service

class MetricHistoryTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "sqlite") {
      path_ = std::filesystem::temp_directory_path() / ("ty-blocks-" + random_.Hex(6) + ".db");
      url_ = path_;
    } else {
      auto url = store::PostgresUrlForTest();
      ASSERT_TRUE(url.ok()) << url.status().ToString();
      url_ = *url;
    }
    db_ = std::move(store::OpenDatabase({.url = url_})).value();
  }
  void TearDown() override {
    tracking_.reset();
    identity_.reset();
    db_.reset();
    if (!path_.empty()) {
      for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path_ + suffix);
    }
  }
  void StartService() {
    ASSERT_TRUE(store::ApplyMigrations(*db_, TrackingService::Migrations()).ok());
    identity_ = std::make_unique<identity::IdentityService>(*db_, clock_, random_);
    tracking_ =
        std::make_unique<TrackingService>(*db_, clock_, random_, *identity_, "mlflow-artifacts:");
    ASSERT_TRUE(tracking_->Init("admin").ok());
    auto run = tracking_->CreateRun(kAdmin, "0", "alice", "r", std::nullopt, {});
    ASSERT_TRUE(run.ok());
    run_id_ = run->info.run_id;
  }

  std::vector<MetricPoint> Whole(const std::string& key) {
    auto page = tracking_->GetMetricHistory(run_id_, key, std::nullopt, "");
    EXPECT_TRUE(page.ok()) << page.status().ToString();
    std::vector<MetricPoint> out;
    if (page.ok()) {
      for (const auto& m : page->items) out.push_back({m.step, m.timestamp, m.value});
    }
    return out;
  }

  std::vector<MetricPoint> Paged(const std::string& key, int64_t page_size) {
    std::vector<MetricPoint> out;
    std::string token;
    for (int pages = 0;; ++pages) {
      auto page = tracking_->GetMetricHistory(run_id_, key, page_size, token);
      EXPECT_TRUE(page.ok()) << page.status().ToString();
      if (!page.ok() || pages > 100000) break;
      EXPECT_LE(page->items.size(), static_cast<size_t>(page_size));
      for (const auto& m : page->items) out.push_back({m.step, m.timestamp, m.value});
      token = page->next_page_token;
      if (token.empty()) break;
      EXPECT_EQ(page->items.size(), static_cast<size_t>(page_size));
    }
    return out;
  }

  std::vector<MetricPoint> Ranges(const std::string& key, int threads, int64_t steps) {
    std::vector<std::vector<MetricPoint>> parts;
    EXPECT_TRUE(tracking_
                    ->ScanMetricHistoryRanges(
                        run_id_, key, threads, steps,
                        [&](int n) { parts.resize(static_cast<size_t>(n)); },
                        [&](int r, const MetricPoint* p, size_t n) {
                          parts[static_cast<size_t>(r)].insert(parts[static_cast<size_t>(r)].end(),
                                                               p, p + n);
                        })
                    .ok());
    std::vector<MetricPoint> out;
    for (size_t r = 0; r < parts.size(); ++r) {
      if (!out.empty() && !parts[r].empty()) {
        EXPECT_LT(out.back().step, parts[r].front().step) << "range " << r;
      }
      out.insert(out.end(), parts[r].begin(), parts[r].end());
    }
    return out;
  }

  FakeClock clock_;
  SeededRandom random_{5};
  std::string path_, url_;
  std::unique_ptr<store::Database> db_;
  std::unique_ptr<identity::IdentityService> identity_;
  std::unique_ptr<TrackingService> tracking_;
  std::string run_id_;
};

// Batches that log steps out of order, overlap each other, repeat points within and
// across batches, mix keys, and include NaN: every way of reading the history gives the
// model's answer (a sorted set of distinct points).
TEST_P(MetricHistoryTest, HistoriesOfOutOfOrderOverlappingBatchesMatchAModel) {
  StartService();
  std::mt19937_64 rng(42);
  std::vector<MetricPoint> model;  // of key "loss"
  for (int batch = 0; batch < 60; ++batch) {
    std::vector<Metric> metrics;
    int64_t base = static_cast<int64_t>(rng() % 400) - 50;
    size_t n = 1 + rng() % 40;
    for (size_t i = 0; i < n; ++i) {
      Metric m;
      m.key = rng() % 4 == 0 ? "acc" : "loss";
      m.step = base + static_cast<int64_t>(rng() % 30);
      m.timestamp = static_cast<int64_t>(rng() % 3);
      m.value = rng() % 17 == 0 ? kNaN : static_cast<double>(rng() % 5) / 4;
      metrics.push_back(m);
      if (rng() % 5 == 0) metrics.push_back(m);  // the same point twice in a batch
      if (m.key == "loss") model.push_back({m.step, m.timestamp, m.value});
    }
    if (batch % 7 == 3 && !metrics.empty()) {  // a batch repeated whole
      ASSERT_TRUE(tracking_->LogBatch(kAdmin, run_id_, metrics, {}, {}).ok());
    }
    ASSERT_TRUE(tracking_->LogBatch(kAdmin, run_id_, metrics, {}, {}).ok());
  }
  SortAndDedup(model);
  ASSERT_GT(model.size(), 300u);
  ExpectSame(Whole("loss"), model);
  for (int64_t page : {1, 2, 7, 100, 5000}) {
    SCOPED_TRACE("page size " + std::to_string(page));
    ExpectSame(Paged("loss", page), model);
  }
  for (int threads : {1, 2, 3}) {
    for (int64_t steps : {1, 13, 1000}) {
      SCOPED_TRACE("threads " + std::to_string(threads) + ", steps " + std::to_string(steps));
      ExpectSame(Ranges("loss", threads, steps), model);
    }
  }
  // Bulk interval: all points of the evenly picked steps, first and last included.
  std::set<int64_t> steps;
  for (const auto& p : model) {
    if (p.step >= 0 && p.step <= 200) steps.insert(p.step);
  }
  auto sampled = tracking_->GetMetricHistoryBulkInterval({run_id_}, "loss", 0, 200, 10);
  ASSERT_TRUE(sampled.ok()) << sampled.status().ToString();
  std::set<int64_t> got_steps;
  for (const auto& m : *sampled) got_steps.insert(m.step);
  EXPECT_EQ(got_steps.size(), 10u);
  EXPECT_EQ(*got_steps.begin(), *steps.begin());
  EXPECT_EQ(*got_steps.rbegin(), *steps.rbegin());
  std::vector<MetricPoint> want;
  for (const auto& p : model) {
    if (got_steps.count(p.step)) want.push_back(p);
  }
  std::vector<MetricPoint> got;
  for (const auto& m : *sampled) got.push_back({m.step, m.timestamp, m.value});
  ExpectSame(got, want);
  // A token from elsewhere is a clear error.
  auto bad = tracking_->GetMetricHistory(run_id_, "loss", 10, EncodePageToken(10));
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(bad.status().IsInvalidArgument());
}

// A trainer that logs each step as it goes (a batch of one point per key) fills blocks
// of up to 256 points, not a row per step; a late point still lands in its place.
TEST_P(MetricHistoryTest, StepByStepLoggingFillsBlocks) {
  StartService();
  std::vector<MetricPoint> loss;
  for (int64_t step = 1; step <= 1000; ++step) {
    std::vector<Metric> metrics;
    for (const char* key : {"loss", "lr"}) {
      Metric m;
      m.key = key;
      m.step = step;
      m.timestamp = 100 + step;
      m.value = 1.0 / static_cast<double>(step);
      metrics.push_back(m);
    }
    loss.push_back({step, 100 + step, 1.0 / static_cast<double>(step)});
    ASSERT_TRUE(tracking_->LogBatch(kAdmin, run_id_, metrics, {}, {}).ok());
  }
  Metric late;
  late.key = "loss";
  late.step = 0;
  late.timestamp = 5;
  late.value = 9.0;
  ASSERT_TRUE(tracking_->LogBatch(kAdmin, run_id_, {late}, {}, {}).ok());
  loss.insert(loss.begin(), {0, 5, 9.0});
  ExpectSame(Whole("loss"), loss);
  ExpectSame(Paged("loss", 300), loss);
  auto counted = db_->Read([&](store::Transaction& tx) -> Status {
    auto rows = tx.Query("SELECT COUNT(*), SUM(points), MAX(points) FROM metric_blocks");
    if (!rows.ok()) return rows.status();
    EXPECT_EQ((*rows)[0].Int(0), 2 * 4 + 1);  // per key 256 + 256 + 256 + 232; the late one
    EXPECT_EQ((*rows)[0].Int(1), 2001);
    EXPECT_EQ((*rows)[0].Int(2), 256);
    return Status::Ok();
  });
  EXPECT_TRUE(counted.ok()) << counted.ToString();
}

// A database written by version 1 (a row per point) is moved into blocks on start.
TEST_P(MetricHistoryTest, MigrationMovesVersionOnePointRowsIntoBlocks) {
  std::vector<store::Migration> v1 = TrackingService::Migrations();
  v1.resize(1);
  ASSERT_EQ(v1[0].version, 1);
  ASSERT_TRUE(store::ApplyMigrations(*db_, v1).ok());
  std::vector<MetricPoint> want;
  ASSERT_TRUE(db_->Write([&](store::Transaction& tx) -> Status {
                   TY_RETURN_IF_ERROR(tx.Exec("INSERT INTO runs (run_uuid, experiment_id, name, "
                                              "user_id, status, lifecycle_stage, artifact_uri) "
                                              "VALUES ('old', 0, 'old', 'u', 'FINISHED', "
                                              "'active', 'a')")
                                          .status());
                   TY_RETURN_IF_ERROR(tx.Exec("INSERT INTO metric_series (series_id, run_uuid, "
                                              "key) VALUES (1, 'old', 'loss'), (2, 'old', 'acc')")
                                          .status());
                   for (int64_t i = 9999; i >= 0; --i) {  // 3 blocks of the first series
                     bool nan = i % 1000 == 0;
                     TY_RETURN_IF_ERROR(tx.Exec("INSERT INTO metrics (series_id, step, timestamp, "
                                                "is_nan, value) VALUES (?, ?, ?, ?, ?)",
                                                {int64_t{1}, i / 2, i % 2, int64_t{nan ? 1 : 0},
                                                 nan ? 0.0 : i * 0.5})
                                            .status());
                     want.push_back({i / 2, i % 2, nan ? kNaN : i * 0.5});
                   }
                   return tx
                       .Exec(
                           "INSERT INTO metrics (series_id, step, timestamp, is_nan, "
                           "value) VALUES (2, 1, 1, 0, 0.25)")
                       .status();
                 })
                  .ok());
  SortAndDedup(want);
  StartService();
  run_id_ = "old";
  ExpectSame(Whole("loss"), want);
  ExpectSame(Paged("loss", 999), want);
  ExpectSame(Whole("acc"), {{1, 1, 0.25}});
  // The old table is gone; the blocks are there.
  auto counted = db_->Read([&](store::Transaction& tx) -> Status {
    auto rows = tx.Query("SELECT COUNT(*), SUM(points) FROM metric_blocks");
    if (!rows.ok()) return rows.status();
    EXPECT_EQ((*rows)[0].Int(0), 4);  // 4096 + 4096 + 1808 points, and 1
    EXPECT_EQ((*rows)[0].Int(1), 10001);
    return tx.Query("SELECT 1 FROM metrics").status();
  });
  EXPECT_FALSE(counted.ok());
}

INSTANTIATE_TEST_SUITE_P(Backends, MetricHistoryTest, ::testing::Values("sqlite", "postgresql"),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace trainyard::tracking
