#include "trainyard/api/job_log_stream.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "trainyard/common/json.h"

namespace trainyard::api {
namespace {

namespace fs = std::filesystem;

class JobLogStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ty-logstream-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    path_ = (dir_ / "rank-0.log").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  void Append(const std::string& text) { std::ofstream(path_, std::ios::app) << text; }

  std::unique_ptr<JobLogStream> Open(int64_t offset = 0, std::vector<std::string> secrets = {}) {
    JobLogStreamOptions o;
    o.path = path_;
    o.offset = offset;
    o.secrets = std::move(secrets);
    o.heartbeat_ms = 15000;
    o.state_check_ms = 1000;
    ++*open_;
    return std::make_unique<JobLogStream>(
        o, clock_, [this]() -> Result<LogFollowState> { return state_; }, open_);
  }

  // The text of the log events in a chunk.
  static std::string LogText(const std::string& chunk) {
    std::string out;
    size_t at = 0;
    while ((at = chunk.find("event: log\ndata: ", at)) != std::string::npos) {
      at += 17;
      size_t end = chunk.find('\n', at);
      auto data = ParseJsonObject(chunk.substr(at, end - at));
      EXPECT_TRUE(data.ok());
      if (data.ok()) out += std::string(data->at("text").as_string());
    }
    return out;
  }

  fs::path dir_;
  std::string path_;
  FakeClock clock_;
  LogFollowState state_{false, "RUNNING", 1};
  std::shared_ptr<std::atomic<int>> open_ = std::make_shared<std::atomic<int>>(0);
};

TEST_F(JobLogStreamTest, SendsWhatIsWrittenThenEndsAfterTheAttemptIsOver) {
  auto stream = Open();
  std::string chunk;
  // Nothing written yet (no file): the retry hint, then nothing but polls.
  ASSERT_TRUE(stream->Next(&chunk));
  EXPECT_EQ(chunk, "retry: 2000\n\n");
  ASSERT_TRUE(stream->Next(&chunk));
  EXPECT_EQ(chunk, "");
  Append("one\n");
  ASSERT_TRUE(stream->Next(&chunk));
  EXPECT_EQ(LogText(chunk), "one\n");
  EXPECT_NE(chunk.find("id: 4\n"), std::string::npos) << chunk;
  ASSERT_TRUE(stream->Next(&chunk));
  EXPECT_EQ(chunk, "");
  // The attempt ends with bytes still unread: they come before the end.
  Append("two\n");
  state_ = {true, "SUCCEEDED", 1};
  clock_.AdvanceMillis(1000);
  std::string all;
  bool more = true;
  for (int i = 0; i < 10 && more; ++i) {
    more = stream->Next(&chunk);
    all += chunk;
  }
  EXPECT_FALSE(more);
  EXPECT_EQ(LogText(all), "two\n");
  EXPECT_NE(all.find("event: end\ndata: {\"state\":\"SUCCEEDED\",\"attempts\":1,\"next\":8}"),
            std::string::npos)
      << all;
  EXPECT_LT(all.find("event: log"), all.find("event: end"));
}

TEST_F(JobLogStreamTest, HeartbeatsOnlyAfterSilenceAndAsksTheStateAtMostEachInterval) {
  int asked = 0;
  JobLogStreamOptions o;
  o.path = path_;
  ++*open_;
  JobLogStream stream(
      o, clock_,
      [&]() -> Result<LogFollowState> {
        ++asked;
        return state_;
      },
      open_);
  std::string chunk;
  ASSERT_TRUE(stream.Next(&chunk));  // the retry hint
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(stream.Next(&chunk));
  EXPECT_EQ(asked, 1);
  EXPECT_EQ(chunk, "");
  clock_.AdvanceMillis(14999);
  ASSERT_TRUE(stream.Next(&chunk));
  EXPECT_EQ(chunk, "");
  EXPECT_EQ(asked, 2);
  clock_.AdvanceMillis(1);
  ASSERT_TRUE(stream.Next(&chunk));
  EXPECT_EQ(chunk, ": heartbeat\n\n");
  ASSERT_TRUE(stream.Next(&chunk));
  EXPECT_EQ(chunk, "");
}

TEST_F(JobLogStreamTest, ResumesFromAnOffsetAndBoundsEachEvent) {
  Append("abc\n" + std::string(kMaxLogEventBytes + 10, 'x'));
  auto stream = Open(2);
  std::string chunk;
  ASSERT_TRUE(stream->Next(&chunk));
  std::string first = LogText(chunk);
  EXPECT_EQ(first.size(), kMaxLogEventBytes);
  EXPECT_EQ(first.substr(0, 3), "c\nx");
  ASSERT_TRUE(stream->Next(&chunk));
  EXPECT_EQ(LogText(chunk), std::string(12, 'x'));
}

TEST_F(JobLogStreamTest, RedactsSecretsAndCountsOpenStreams) {
  Append("token=hunter2-secret\n");
  {
    auto stream = Open(0, {"hunter2-secret"});
    EXPECT_EQ(open_->load(), 1);
    std::string chunk;
    ASSERT_TRUE(stream->Next(&chunk));
    EXPECT_EQ(LogText(chunk), "token=***\n");
    EXPECT_EQ(chunk.find("hunter2"), std::string::npos);
    stream->Cancel();
    EXPECT_FALSE(stream->Next(&chunk));
  }
  EXPECT_EQ(open_->load(), 0);
}

TEST_F(JobLogStreamTest, AnUnreadableLogEndsTheStreamWithAnError) {
  fs::create_directory(path_);  // not a regular file
  auto stream = Open();
  std::string chunk;
  EXPECT_FALSE(stream->Next(&chunk));
  EXPECT_NE(chunk.find("event: error\ndata: {\"message\":"), std::string::npos) << chunk;
}

}  // namespace
}  // namespace trainyard::api
