#include "trainyard/tracking/tracking_service.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "trainyard/identity/identity_service.h"

namespace trainyard::tracking {
namespace {

const identity::Principal kAdmin = identity::Principal::System();

class TrackingServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A file, not :memory:, so that concurrent readers (sharded scans) have their own
    // connections as in the server.
    path_ = std::filesystem::temp_directory_path() / ("ty-tracking-" + random_.Hex(6) + ".db");
    db_ = std::move(store::OpenDatabase({.url = path_})).value();
    ASSERT_TRUE(store::ApplyMigrations(*db_, TrackingService::Migrations()).ok());
    identity_ = std::make_unique<identity::IdentityService>(*db_, clock_, random_);
    tracking_ =
        std::make_unique<TrackingService>(*db_, clock_, random_, *identity_, "mlflow-artifacts:");
    ASSERT_TRUE(tracking_->Init("admin").ok());
    auto run = tracking_->CreateRun(kAdmin, "0", "alice", "r", std::nullopt, {});
    ASSERT_TRUE(run.ok());
    run_id_ = run->info.run_id;
  }
  void TearDown() override {
    tracking_.reset();
    identity_.reset();
    db_.reset();
    for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path_ + suffix);
  }

  // Ranges of about `steps_per_range` steps on `threads` threads, concatenated in order.
  std::vector<std::tuple<int64_t, int64_t, double>> Ranges(int threads, int64_t steps_per_range) {
    std::vector<std::vector<std::tuple<int64_t, int64_t, double>>> parts;
    EXPECT_TRUE(tracking_
                    ->ScanMetricHistoryRanges(
                        run_id_, "loss", threads, steps_per_range,
                        [&](int n) { parts.resize(static_cast<size_t>(n)); },
                        [&](int r, const TrackingService::MetricPoint* p, size_t n) {
                          for (size_t i = 0; i < n; ++i) {
                            parts[static_cast<size_t>(r)].emplace_back(p[i].step, p[i].timestamp,
                                                                       p[i].value);
                          }
                        })
                    .ok());
    std::vector<std::tuple<int64_t, int64_t, double>> out;
    for (auto& p : parts) out.insert(out.end(), p.begin(), p.end());
    return out;
  }

  std::vector<std::tuple<int64_t, int64_t, double>> Sharded(int shards) {
    std::vector<std::vector<std::tuple<int64_t, int64_t, double>>> parts(shards);
    EXPECT_TRUE(tracking_
                    ->ScanMetricHistorySharded(run_id_, "loss", shards,
                                               [&](int s, const TrackingService::MetricPoint& p) {
                                                 parts[s].emplace_back(p.step, p.timestamp,
                                                                       p.value);
                                               })
                    .ok());
    std::vector<std::tuple<int64_t, int64_t, double>> out;
    for (auto& p : parts) out.insert(out.end(), p.begin(), p.end());
    return out;
  }

  FakeClock clock_;
  SeededRandom random_{11};
  std::string path_;
  std::unique_ptr<store::Database> db_;
  std::unique_ptr<identity::IdentityService> identity_;
  std::unique_ptr<TrackingService> tracking_;
  std::string run_id_;
};

TEST_F(TrackingServiceTest, ShardedHistoryEqualsSequentialHistory) {
  std::vector<Metric> batch;
  for (int64_t step = 0; step < 997; ++step) {
    for (int64_t t = 0; t < (step % 3) + 1; ++t) {  // several points on some steps
      Metric m;
      m.key = "loss";
      m.step = step * 7 - 100;
      m.timestamp = 1000 + t;
      m.value = step % 50 == 0 ? std::nan("") : 1.0 / (step + 1) + t;
      batch.push_back(m);
      if (batch.size() == 1000) {
        ASSERT_TRUE(tracking_->LogBatch(kAdmin, run_id_, batch, {}, {}).ok());
        batch.clear();
      }
    }
  }
  ASSERT_TRUE(tracking_->LogBatch(kAdmin, run_id_, batch, {}, {}).ok());
  auto all = tracking_->GetMetricHistory(run_id_, "loss", std::nullopt, "");
  ASSERT_TRUE(all.ok());
  std::vector<std::tuple<int64_t, int64_t, double>> expected;
  for (const auto& m : all->items) expected.emplace_back(m.step, m.timestamp, m.value);
  ASSERT_EQ(expected.size(), 1993u);  // 332 cycles of 1+2+3 points, then 1
  auto same = [&](const auto& got) {
    ASSERT_EQ(got.size(), expected.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(std::get<0>(got[i]), std::get<0>(expected[i])) << i;
      EXPECT_EQ(std::get<1>(got[i]), std::get<1>(expected[i])) << i;
      double a = std::get<2>(got[i]), b = std::get<2>(expected[i]);
      EXPECT_TRUE(a == b || (std::isnan(a) && std::isnan(b))) << i;
    }
  };
  for (int shards : {1, 2, 3, 4, 16}) same(Sharded(shards));
  // Steps span -100..6872: from one range to one range per step, on 1 to 4 threads.
  for (int threads : {1, 2, 4}) {
    for (int64_t steps : {int64_t{1}, int64_t{7}, int64_t{500}, int64_t{100000}}) {
      SCOPED_TRACE("threads " + std::to_string(threads) + ", steps " + std::to_string(steps));
      same(Ranges(threads, steps));
    }
  }
  EXPECT_TRUE(tracking_
                  ->ScanMetricHistoryRanges(
                      "nope", "loss", 2, 10, [](int) {},
                      [](int, const TrackingService::MetricPoint*, size_t) {})
                  .IsNotFound());
  // Pages add up to the whole, in order.
  std::vector<std::tuple<int64_t, int64_t, double>> paged;
  std::string token;
  do {
    auto page = tracking_->GetMetricHistory(run_id_, "loss", 300, token);
    ASSERT_TRUE(page.ok());
    for (const auto& m : page->items) paged.emplace_back(m.step, m.timestamp, m.value);
    token = page->next_page_token;
  } while (!token.empty());
  same(paged);
}

TEST_F(TrackingServiceTest, IdenticalPointsAreKeptOnceAndParamsAreImmutable) {
  Metric m;
  m.key = "acc";
  m.value = 0.5;
  m.timestamp = 7;
  m.step = 1;
  ASSERT_TRUE(tracking_->LogBatch(kAdmin, run_id_, {m, m}, {{"lr", "0.1"}}, {}).ok());
  ASSERT_TRUE(tracking_->LogBatch(kAdmin, run_id_, {m}, {{"lr", "0.1"}}, {}).ok());
  EXPECT_EQ(tracking_->GetMetricHistory(run_id_, "acc", std::nullopt, "")->items.size(), 1u);
  Status changed = tracking_->LogBatch(kAdmin, run_id_, {}, {{"lr", "0.2"}}, {});
  EXPECT_TRUE(changed.IsInvalidArgument());
  EXPECT_NE(changed.message().find("lr"), std::string::npos);
  EXPECT_TRUE(tracking_->GetMetricHistory("nope", "acc", std::nullopt, "").status().IsNotFound());
  EXPECT_TRUE(tracking_->GetMetricHistory(run_id_, "absent", std::nullopt, "")->items.empty());
  auto run = tracking_->GetRun(run_id_);
  ASSERT_TRUE(run.ok());
  ASSERT_EQ(run->metrics.size(), 1u);
  EXPECT_EQ(run->metrics[0].value, 0.5);
}

}  // namespace
}  // namespace trainyard::tracking
