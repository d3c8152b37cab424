#include "trainyard/serving/capture.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "trainyard/common/clock.h"
#include "trainyard/common/json.h"
#include "trainyard/testing/status_matchers.h"
#include "trainyard/testing/test_database.h"

namespace trainyard::serving {
namespace {

namespace fs = std::filesystem;

std::vector<json::object> ReadLines(const std::string& path) {
  std::ifstream in(path);
  std::vector<json::object> out;
  for (std::string line; std::getline(in, line);) {
    auto o = ParseJsonObject(line);
    EXPECT_TRUE(o.ok()) << line;
    if (o.ok()) out.push_back(*o);
  }
  return out;
}

class CaptureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("capture-test-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  CaptureRecord Record(std::string request, std::string response) {
    CaptureRecord r;
    r.endpoint = "ep";
    r.served_entity = "a";
    r.model = "m";
    r.model_version = 3;
    r.request_id = "rid";
    r.status = 200;
    r.request_body = std::move(request);
    r.response_body = std::move(response);
    return r;
  }

  fs::path dir_;
};

TEST_F(CaptureTest, WritesOneJsonLinePerRecordWithTokenCounts) {
  CaptureWriter writer({dir_.string(), 100, 1024});
  writer.Enqueue(Record(R"({"prompt": "hi"})",
                        R"({"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 5,
                            "total_tokens": 7}})"));
  writer.Enqueue(Record("not json",
                        "data: {\"choices\": []}\n\ndata: {\"choices\": [], "
                        "\"usage\": {\"completion_tokens\": 4}}\n\ndata: [DONE]\n\n"));
  writer.FlushForTest();
  auto lines = ReadLines(writer.PathFor("ep"));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].at("model_version").as_int64(), 3);
  EXPECT_EQ(lines[0].at("request").as_object().at("prompt").as_string(), "hi");
  EXPECT_EQ(lines[0].at("total_tokens").as_int64(), 7);
  EXPECT_EQ(lines[1].at("request").as_string(), "not json");
  EXPECT_EQ(lines[1].at("completion_tokens").as_int64(), 4);
  EXPECT_EQ(writer.Stats("ep").captured, 2);
  EXPECT_EQ(writer.Stats("ep").dropped, 0);
}

TEST_F(CaptureTest, PayloadsAreCutAtTheLimit) {
  CaptureWriter writer({dir_.string(), 100, 16});
  writer.Enqueue(Record(std::string(100, 'x'), "{}"));
  writer.FlushForTest();
  auto lines = ReadLines(writer.PathFor("ep"));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].at("request").as_string().size(), 16u);
  EXPECT_TRUE(lines[0].at("request_truncated").as_bool());
}

TEST_F(CaptureTest, AFailedWriteIsCountedNotThrown) {
  fs::create_directories(dir_);
  // The endpoint's file is a directory: every write fails.
  fs::create_directories(dir_ / "ep.jsonl");
  CaptureWriter writer({dir_.string(), 100, 1024});
  for (int i = 0; i < 5; ++i) writer.Enqueue(Record("{}", "{}"));
  writer.FlushForTest();
  EXPECT_EQ(writer.Stats("ep").captured, 0);
  EXPECT_EQ(writer.Stats("ep").dropped, 5);
}

TEST_F(CaptureTest, AFullQueueDropsAndCounts) {
  CaptureWriter writer({dir_.string(), 1, 1024});
  const int n = 2000;
  for (int i = 0; i < n; ++i) writer.Enqueue(Record("{}", "{}"));
  writer.FlushForTest();
  CaptureStats stats = writer.Stats("ep");
  EXPECT_EQ(stats.captured + stats.dropped, n);
  EXPECT_EQ(static_cast<int64_t>(ReadLines(writer.PathFor("ep")).size()), stats.captured);
}

TEST_F(CaptureTest, ReadsTheLastRecordsNewestFirst) {
  CaptureWriter writer({dir_.string(), 100, 1024});
  for (int i = 0; i < 5; ++i) {
    CaptureRecord r = Record(R"({"x": )" + std::to_string(i) + "}", R"({"y": 1})");
    r.request_id = "r" + std::to_string(i);
    r.latency_ms = 10 * i;
    writer.Enqueue(r);
  }
  writer.FlushForTest();
  auto last = ReadRecentCaptures(writer.PathFor("ep"), 3);
  ASSERT_TRUE(last.ok()) << last.status().message();
  ASSERT_EQ(last->size(), 3u);
  EXPECT_EQ((*last)[0].at("request_id").as_string(), "r4");
  EXPECT_EQ((*last)[2].at("request_id").as_string(), "r2");
  EXPECT_EQ((*last)[0].at("latency_ms").as_int64(), 40);

  auto all = ReadRecentCaptures(writer.PathFor("ep"), 100);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 5u);

  // A line being appended (no newline yet, not JSON) is skipped; records cut by max_bytes are
  // left out rather than half-read.
  std::ofstream(writer.PathFor("ep"), std::ios::app) << R"({"request_id": "half)";
  auto partial = ReadRecentCaptures(writer.PathFor("ep"), 2);
  ASSERT_TRUE(partial.ok());
  ASSERT_EQ(partial->size(), 2u);
  EXPECT_EQ((*partial)[0].at("request_id").as_string(), "r4");
  auto cut = ReadRecentCaptures(writer.PathFor("ep"), 100, 300);
  ASSERT_TRUE(cut.ok());
  EXPECT_LT(cut->size(), 5u);
  for (const auto& r : *cut) EXPECT_TRUE(r.contains("request_id"));

  auto none = ReadRecentCaptures((dir_ / "nobody.jsonl").string(), 10);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

}  // namespace
}  // namespace trainyard::serving

namespace trainyard::serving {
namespace {

// A table sink that records each batch; Append fails while `fail` is set and waits while
// `hold` is set (a lagging table).
class RecordingSink : public CaptureTableSink {
 public:
  Result<int64_t> Append(const std::string& endpoint, const std::string& owner,
                         const std::string& table, const std::vector<json::object>& rows) override {
    MutexLock lock(mu_);
    while (hold_) cv_.Wait(mu_);
    ++calls_;
    if (fail_) return Status(fail_code_, "the table store is down");
    batches_.push_back({endpoint, owner, table, rows});
    return static_cast<int64_t>(batches_.size());
  }
  struct Batch {
    std::string endpoint, owner, table;
    std::vector<json::object> rows;
  };
  std::vector<Batch> batches() {
    MutexLock lock(mu_);
    return batches_;
  }
  void SetFail(bool fail, StatusCode code = StatusCode::kUnavailable) {
    MutexLock lock(mu_);
    fail_ = fail;
    fail_code_ = code;
  }
  int calls() {
    MutexLock lock(mu_);
    return calls_;
  }
  void SetHold(bool hold) {
    {
      MutexLock lock(mu_);
      hold_ = hold;
    }
    cv_.NotifyAll();
  }

 private:
  Mutex mu_;
  CondVar cv_;
  std::vector<Batch> batches_ TY_GUARDED_BY(mu_);
  bool fail_ TY_GUARDED_BY(mu_) = false;
  StatusCode fail_code_ TY_GUARDED_BY(mu_) = StatusCode::kUnavailable;
  bool hold_ TY_GUARDED_BY(mu_) = false;
  int calls_ TY_GUARDED_BY(mu_) = 0;
};

// Polls `done` until it holds or 10 s pass (the writer's thread works on its own).
template <typename F>
bool Eventually(F done) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

class CaptureTableTest : public CaptureTest {
 protected:
  CaptureOptions Options() {
    CaptureOptions o;
    o.dir = dir_.string();
    o.table_batch_rows = 3;
    o.table_flush_interval = std::chrono::seconds(5);
    return o;
  }
  CaptureRecord TableRecord(int i) {
    CaptureRecord r = Record(R"({"prompt": "p)" + std::to_string(i) + R"("})",
                             R"({"usage": {"prompt_tokens": 1, "completion_tokens": 2,
                                 "total_tokens": 3}})");
    r.request_id = "r" + std::to_string(i);
    r.capture_table = "main.serving.requests";
    r.owner = "alice";
    return r;
  }
  // One more record through the loop (for an endpoint without a table): when FlushForTest
  // returns, the loop has looked at the clock since the caller's last change.
  void Cycle(CaptureWriter& writer) {
    writer.Enqueue(Record("{}", "{}"));
    writer.FlushForTest();
  }

  FakeClock clock_;
  RecordingSink sink_;
};

TEST_F(CaptureTableTest, AppendsFullBatchesAtOnceAndTheRestWhenTheIntervalPasses) {
  CaptureWriter writer(Options(), &clock_, nullptr, &sink_);
  for (int i = 0; i < 7; ++i) writer.Enqueue(TableRecord(i));
  writer.FlushForTest();
  auto batches = sink_.batches();
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_EQ(batches[0].rows.size(), 3u);
  EXPECT_EQ(batches[1].rows.size(), 3u);
  EXPECT_EQ(batches[0].table, "main.serving.requests");
  EXPECT_EQ(batches[0].owner, "alice");
  EXPECT_EQ(batches[0].rows[0].at("request_id").as_string(), "r0");
  EXPECT_EQ(batches[0].rows[0].at("request").as_string(), R"({"prompt": "p0"})");
  EXPECT_EQ(batches[0].rows[0].at("total_tokens").as_int64(), 3);
  EXPECT_EQ(writer.Stats("ep").table_pending, 1);

  // Not due yet: the seventh row waits.
  clock_.AdvanceMillis(4999);
  Cycle(writer);
  EXPECT_EQ(sink_.batches().size(), 2u);

  clock_.AdvanceMillis(1);
  writer.WakeForTest();
  ASSERT_TRUE(Eventually([&] { return writer.TableBatchesForTest() == 3; }));
  batches = sink_.batches();
  ASSERT_EQ(batches.size(), 3u);
  ASSERT_EQ(batches[2].rows.size(), 1u);
  EXPECT_EQ(batches[2].rows[0].at("request_id").as_string(), "r6");
  CaptureStats stats = writer.Stats("ep");
  EXPECT_EQ(stats.table_captured, 7);
  EXPECT_EQ(stats.table_dropped, 0);
  EXPECT_EQ(stats.table_pending, 0);
  EXPECT_EQ(stats.table_version, 3);
  // The JSON lines hold every record too.
  EXPECT_EQ(stats.captured, 8);
}

TEST_F(CaptureTableTest, AFailingTableDropsItsRowsAfterTheLastAttemptButNotTheRecords) {
  sink_.SetFail(true);
  CaptureOptions o = Options();
  o.table_attempts = 3;
  o.table_retry_backoff = std::chrono::milliseconds(1000);
  o.table_retry_max_backoff = std::chrono::milliseconds(1500);
  CaptureWriter writer(o, &clock_, nullptr, &sink_);
  for (int i = 0; i < 3; ++i) writer.Enqueue(TableRecord(i));
  writer.FlushForTest();
  CaptureStats stats = writer.Stats("ep");
  EXPECT_EQ(stats.captured, 3);
  EXPECT_EQ(writer.TableBatchesForTest(), 1);
  // Failed once: waiting for a retry, not lost yet.
  EXPECT_EQ(stats.table_retrying, 3);
  EXPECT_EQ(stats.table_dropped, 0);
  EXPECT_NE(stats.table_error.find("the table store is down"), std::string::npos);

  // The second attempt after the backoff, the third after twice it (capped at 1.5 s).
  clock_.AdvanceMillis(999);
  Cycle(writer);
  EXPECT_EQ(writer.TableBatchesForTest(), 1);
  clock_.AdvanceMillis(1);
  writer.WakeForTest();
  ASSERT_TRUE(Eventually([&] { return writer.TableBatchesForTest() == 2; }));
  EXPECT_EQ(writer.Stats("ep").table_retrying, 3);
  clock_.AdvanceMillis(1499);
  Cycle(writer);
  EXPECT_EQ(writer.TableBatchesForTest(), 2);
  clock_.AdvanceMillis(1);
  writer.WakeForTest();
  ASSERT_TRUE(Eventually([&] { return writer.TableBatchesForTest() == 3; }));
  // The last attempt failed: now the rows are lost to the table (the JSON lines keep them).
  stats = writer.Stats("ep");
  EXPECT_EQ(stats.table_captured, 0);
  EXPECT_EQ(stats.table_dropped, 3);
  EXPECT_EQ(stats.table_retrying, 0);
  EXPECT_EQ(stats.table_version, -1);
  clock_.AdvanceMillis(60000);
  Cycle(writer);
  EXPECT_EQ(sink_.calls(), 3);  // given up: never tried again

  // Once the table is back the error clears.
  sink_.SetFail(false);
  for (int i = 3; i < 6; ++i) writer.Enqueue(TableRecord(i));
  writer.FlushForTest();
  stats = writer.Stats("ep");
  EXPECT_EQ(stats.table_captured, 3);
  EXPECT_EQ(stats.table_error, "");
}

TEST_F(CaptureTableTest, ARetriedBatchThatSucceedsLosesNothing) {
  sink_.SetFail(true);
  CaptureWriter writer(Options(), &clock_, nullptr, &sink_);
  for (int i = 0; i < 3; ++i) writer.Enqueue(TableRecord(i));
  writer.FlushForTest();
  EXPECT_EQ(writer.Stats("ep").table_retrying, 3);
  sink_.SetFail(false);
  clock_.AdvanceMillis(1000);  // the default first backoff
  writer.WakeForTest();
  ASSERT_TRUE(Eventually([&] { return writer.Stats("ep").table_captured == 3; }));
  CaptureStats stats = writer.Stats("ep");
  EXPECT_EQ(stats.table_dropped, 0);
  EXPECT_EQ(stats.table_retrying, 0);
  EXPECT_EQ(stats.table_error, "");
  auto batches = sink_.batches();
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_EQ(batches[0].rows[0].at("request_id").as_string(), "r0");
}

TEST_F(CaptureTableTest, ABadBatchIsNotRetriedAndAStoppingWriterTriesOnceMore) {
  sink_.SetFail(true, StatusCode::kInvalidArgument);  // waiting cannot cure it
  {
    CaptureWriter writer(Options(), &clock_, nullptr, &sink_);
    for (int i = 0; i < 3; ++i) writer.Enqueue(TableRecord(i));
    writer.FlushForTest();
    EXPECT_EQ(writer.Stats("ep").table_dropped, 3);
    EXPECT_EQ(writer.Stats("ep").table_retrying, 0);

    // A batch waiting for its retry when the writer stops gets its last attempt then.
    sink_.SetFail(true);
    for (int i = 3; i < 6; ++i) writer.Enqueue(TableRecord(i));
    writer.FlushForTest();
    EXPECT_EQ(writer.Stats("ep").table_retrying, 3);
    sink_.SetFail(false);
  }
  ASSERT_EQ(sink_.batches().size(), 1u);
  EXPECT_EQ(sink_.batches()[0].rows[0].at("request_id").as_string(), "r3");
}

TEST_F(CaptureTableTest, RetriesStayWithinTheEndpointsPendingLimit) {
  sink_.SetFail(true);
  CaptureOptions o = Options();
  o.max_table_pending = 5;  // batches of 3: a second failed batch pushes the first out
  CaptureWriter writer(o, &clock_, nullptr, &sink_);
  for (int i = 0; i < 6; ++i) writer.Enqueue(TableRecord(i));
  writer.FlushForTest();
  CaptureStats stats = writer.Stats("ep");
  EXPECT_EQ(stats.table_retrying, 3);
  EXPECT_EQ(stats.table_dropped, 3);
  sink_.SetFail(false);
  clock_.AdvanceMillis(1000);
  writer.WakeForTest();
  ASSERT_TRUE(Eventually([&] { return writer.Stats("ep").table_captured == 3; }));
  EXPECT_EQ(sink_.batches()[0].rows[0].at("request_id").as_string(), "r3");
}

TEST_F(CaptureTableTest, ALaggingTableNeverBlocksEnqueue) {
  CaptureOptions o = Options();
  o.max_queue = 10;
  sink_.SetHold(true);  // the first batch's append hangs until released
  CaptureWriter writer(o, &clock_, nullptr, &sink_);
  const int n = 1000;
  // Enqueue returns at once whatever the table does (the test would hang otherwise).
  for (int i = 0; i < n; ++i) writer.Enqueue(TableRecord(i));
  sink_.SetHold(false);
  writer.FlushForTest();
  clock_.AdvanceMillis(5000);
  writer.WakeForTest();
  ASSERT_TRUE(Eventually([&] { return writer.Stats("ep").table_pending == 0; }));
  CaptureStats stats = writer.Stats("ep");
  EXPECT_EQ(stats.captured + stats.dropped, n);
  EXPECT_GT(stats.dropped, 0);
  EXPECT_EQ(stats.table_captured + stats.table_dropped, n);
  EXPECT_EQ(stats.table_captured, stats.captured);
}

TEST_F(CaptureTableTest, PendingRowsAreAppendedWhenTheWriterStops) {
  {
    CaptureWriter writer(Options(), &clock_, nullptr, &sink_);
    writer.Enqueue(TableRecord(0));
    writer.FlushForTest();
    EXPECT_TRUE(sink_.batches().empty());
  }
  ASSERT_EQ(sink_.batches().size(), 1u);
}

TEST_F(CaptureTableTest, TheRequestIndexFindsCapturedRequestsAndTheirTableVersion) {
  std::vector<store::Migration> migrations = RequestIndex::Migrations();
  TY_ASSERT_OK_AND_ASSIGN(auto db, store::OpenTestDatabase("sqlite", migrations));
  RequestIndex index(*db);
  {
    CaptureWriter writer(Options(), &clock_, &index, &sink_);
    for (int i = 0; i < 4; ++i) writer.Enqueue(TableRecord(i));
    writer.FlushForTest();
  }
  TY_ASSERT_OK_AND_ASSIGN(IndexedRequest r0, index.Find("r0"));
  EXPECT_EQ(r0.endpoint, "ep");
  EXPECT_EQ(r0.served_entity, "a");
  EXPECT_EQ(r0.model, "m");
  EXPECT_EQ(r0.model_version, 3);
  EXPECT_EQ(r0.capture_table, "main.serving.requests");
  EXPECT_EQ(r0.capture_table_version, 1);
  TY_ASSERT_OK_AND_ASSIGN(IndexedRequest r3, index.Find("r3"));
  EXPECT_EQ(r3.capture_table_version, 2);  // appended when the writer stopped
  EXPECT_THAT(index.Find("nope").status(), StatusIs(StatusCode::kNotFound));
}

TEST_F(CaptureTableTest, TheRequestIndexForgetsRequestsOlderThanItsRetention) {
  std::vector<store::Migration> migrations = RequestIndex::Migrations();
  TY_ASSERT_OK_AND_ASSIGN(auto db, store::OpenTestDatabase("sqlite", migrations));
  RequestIndex index(*db);
  CaptureOptions o = Options();
  o.index_retention = std::chrono::hours(24);
  o.index_prune_interval = std::chrono::minutes(10);
  CaptureWriter writer(o, &clock_, &index, &sink_);
  // Pruned once as the writer starts.
  ASSERT_TRUE(Eventually([&] { return writer.IndexPrunesForTest() == 1; }));
  const int64_t now = clock_.NowMillis();
  const int64_t hour = 3600 * 1000;
  for (auto [id, age] :
       {std::pair{"old", 25 * hour}, {"edge", 24 * hour - 5 * 60 * 1000}, {"new", int64_t{0}}}) {
    CaptureRecord r = Record("{}", "{}");
    r.request_id = id;
    r.timestamp_ms = now - age;
    writer.Enqueue(r);
  }
  writer.FlushForTest();
  TY_EXPECT_OK(index.Find("old").status());  // not yet: the next prune is 10 minutes away

  clock_.AdvanceMillis(10 * 60 * 1000 - 1);
  Cycle(writer);
  EXPECT_EQ(writer.IndexPrunesForTest(), 1);
  clock_.AdvanceMillis(1);
  writer.WakeForTest();
  ASSERT_TRUE(Eventually([&] { return writer.IndexPrunesForTest() == 2; }));
  EXPECT_THAT(index.Find("old").status(), StatusIs(StatusCode::kNotFound));
  EXPECT_THAT(index.Find("edge").status(), StatusIs(StatusCode::kNotFound));  // 24 h 5 min old
  TY_EXPECT_OK(index.Find("new").status());
}

}  // namespace
}  // namespace trainyard::serving
