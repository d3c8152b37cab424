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
    if (fail_) return Status::Unavailable("the table store is down");
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
  void SetFail(bool fail) {
    MutexLock lock(mu_);
    fail_ = fail;
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
  bool hold_ TY_GUARDED_BY(mu_) = false;
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

TEST_F(CaptureTableTest, AFailingTableDropsItsRowsButNotTheRecords) {
  sink_.SetFail(true);
  CaptureWriter writer(Options(), &clock_, nullptr, &sink_);
  for (int i = 0; i < 3; ++i) writer.Enqueue(TableRecord(i));
  writer.FlushForTest();
  CaptureStats stats = writer.Stats("ep");
  EXPECT_EQ(stats.captured, 3);
  EXPECT_EQ(stats.table_captured, 0);
  EXPECT_EQ(stats.table_dropped, 3);
  EXPECT_EQ(stats.table_version, -1);
  EXPECT_NE(stats.table_error.find("the table store is down"), std::string::npos);

  // Once the table is back the error clears.
  sink_.SetFail(false);
  for (int i = 3; i < 6; ++i) writer.Enqueue(TableRecord(i));
  writer.FlushForTest();
  stats = writer.Stats("ep");
  EXPECT_EQ(stats.table_captured, 3);
  EXPECT_EQ(stats.table_error, "");
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

}  // namespace
}  // namespace trainyard::serving
