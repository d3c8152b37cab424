#include "trainyard/serving/capture.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "trainyard/common/json.h"

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
