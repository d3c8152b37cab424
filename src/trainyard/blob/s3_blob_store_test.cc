// The S3 backend against a real S3-compatible server: moto's S3 server with signature
// verification on, started by tests/moto_s3.py (installed into .venv by scripts/install-deps).
#include "trainyard/blob/s3_blob_store.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <boost/json.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <latch>
#include <map>
#include <thread>

#include "trainyard/common/strings.h"
#include "trainyard/testing/moto_s3.h"

extern char** environ;

namespace trainyard::blob {
namespace {

namespace fs = std::filesystem;

// The suite's S3 server: moto, started once per process (testing/moto_s3.h).
class MotoServer {
 public:
  static MotoServer& Get() {
    static MotoServer server(testing::MotoS3::Get());
    return server;
  }
  static MotoServer& GetTls() {
    static MotoServer server(testing::MotoS3::GetTls());
    return server;
  }

  bool ok() const { return moto_.ok(); }
  const std::string& error() const { return moto_.error(); }

  S3Config Config(const std::string& prefix) const {
    S3Config c;
    c.endpoint = moto_.endpoint();
    c.region = moto_.region();
    c.bucket = moto_.bucket();
    c.prefix = prefix;
    c.credentials = {moto_.access_key_id(), moto_.secret_access_key(), ""};
    c.ca_file = moto_.ca_file();
    c.retry_base_millis = 1;
    c.retry_max_millis = 10;
    c.cache_dir = testing::MotoS3::TempDir("cache");
    return c;
  }

 private:
  explicit MotoServer(const testing::MotoS3& moto) : moto_(moto) {}
  const testing::MotoS3& moto_;
};

std::string TestPrefix() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return std::string("unit/") + info->name() + "-" + std::to_string(::getpid());
}

std::string Pattern(size_t size, int seed) {
  std::string s(size, '\0');
  uint64_t x = 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(seed + 1);
  for (size_t i = 0; i < size; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    s[i] = static_cast<char>(x);
  }
  return s;
}

class S3BlobStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(MotoServer::Get().ok()) << MotoServer::Get().error(); }

  std::unique_ptr<BlobStore> Open(S3Config config) {
    auto store = OpenS3BlobStore(std::move(config));
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return store.ok() ? std::move(store).value() : nullptr;
  }
  std::unique_ptr<BlobStore> Open() { return Open(MotoServer::Get().Config(TestPrefix())); }
};

TEST_F(S3BlobStoreTest, SmallObjectsRoundTrip) {
  auto store = Open();
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->PutBytes("e/r/a.txt", "hello").ok());
  std::string odd_key = "e/r/odd name+(1)=é&x.txt";
  ASSERT_TRUE(store->PutBytes(odd_key, std::string("\0\1\2", 3)).ok());
  ASSERT_TRUE(store->PutBytes("e/r/empty", "").ok());
  EXPECT_EQ(*store->GetBytes("e/r/a.txt"), "hello");
  EXPECT_EQ(*store->GetBytes(odd_key), std::string("\0\1\2", 3));
  EXPECT_EQ(*store->GetBytes("e/r/empty"), "");
  EXPECT_TRUE(*store->Exists("e/r/a.txt"));
  EXPECT_FALSE(*store->Exists("e/r/none"));
  EXPECT_FALSE(*store->Exists("e/r"));  // a directory is not an object
  ASSERT_TRUE(store->PutBytes("e/r/a.txt", "replaced").ok());
  EXPECT_EQ(*store->GetBytes("e/r/a.txt"), "replaced");

  char buf[16];
  Result<size_t> n = store->ReadInto("e/r/a.txt", buf, sizeof(buf));
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(std::string(buf, *n), "replaced");
  EXPECT_EQ(store->ReadInto("e/r/a.txt", buf, 3).status().code(), StatusCode::kFailedPrecondition);
  // The store still works after a read was cut short.
  EXPECT_EQ(*store->GetBytes("e/r/a.txt"), "replaced");

  Result<std::string> local = store->LocalPathForRead(odd_key);
  ASSERT_TRUE(local.ok()) << local.status().ToString();
  std::ifstream f(*local, std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(f), {}), std::string("\0\1\2", 3));

  EXPECT_TRUE(store->PutBytes("../escape", "x").IsInvalidArgument());
}

TEST_F(S3BlobStoreTest, MissingObjectsAreNotFound) {
  auto store = Open();
  ASSERT_TRUE(store);
  Status s = store->GetBytes("no/such/key").status();
  EXPECT_TRUE(s.IsNotFound()) << s.ToString();
  EXPECT_NE(s.message().find("no/such/key"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("NoSuchKey"), std::string::npos) << s.message();
  EXPECT_TRUE(store->LocalPathForRead("no/such/key").status().IsNotFound());
  char buf[4];
  EXPECT_TRUE(store->ReadInto("no/such/key", buf, 4).status().IsNotFound());
  EXPECT_TRUE(store->Delete("no/such/key").IsNotFound());
  EXPECT_TRUE(store->List("no/such")->empty());
  EXPECT_FALSE(*store->IsDirectory("no/such"));
}

TEST_F(S3BlobStoreTest, MultipartUploadsInParallelParts) {
  S3Config config = MotoServer::Get().Config(TestPrefix());
  std::atomic<int> part_puts{0}, completes{0};
  config.inject_failure_for_test = [&](std::string_view method, std::string_view target) {
    if (method == "PUT" && target.find("partNumber=") != std::string_view::npos) ++part_puts;
    if (method == "POST" && target.find("uploadId=") != std::string_view::npos) ++completes;
    return std::optional<InjectedS3Failure>();
  };
  auto store = Open(config);
  ASSERT_TRUE(store);
  size_t size = (20u << 20) + 123;  // three 8 MiB parts, the last one short
  std::string data = Pattern(size, 1);
  std::string path =
      (fs::temp_directory_path() / ("ty-s3-big-" + std::to_string(::getpid()))).string();
  {
    std::ofstream f(path, std::ios::binary);
    f.write(data.data(), static_cast<std::streamsize>(data.size()));
  }
  auto start = std::chrono::steady_clock::now();
  Status s = store->PutFile("ckpt/big.bin", path);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::cout << "multipart PutFile of " << size / 1e6 << " MB to moto: " << size / 1e6 / secs
            << " MB/s\n";
  EXPECT_EQ(part_puts.load(), 3);
  EXPECT_EQ(completes.load(), 1);
  EXPECT_FALSE(fs::exists(path));  // the store took the file
  EXPECT_EQ(*store->GetBytes("ckpt/big.bin"), data);
  auto list = store->List("ckpt");
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].size, static_cast<int64_t>(size));

  // PutBytes of a large buffer goes the same way; ReadInto lands it in the caller's buffer.
  std::string data2 = Pattern((9u << 20) + 1, 2);
  ASSERT_TRUE(store->PutBytes("ckpt/big2.bin", data2).ok());
  EXPECT_EQ(part_puts.load(), 5);
  std::string back(data2.size(), '\0');
  Result<size_t> n = store->ReadInto("ckpt/big2.bin", back.data(), back.size());
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, data2.size());
  EXPECT_TRUE(back == data2);
  Result<std::string> local = store->LocalPathForRead("ckpt/big2.bin");
  ASSERT_TRUE(local.ok());
  EXPECT_EQ(fs::file_size(*local), data2.size());
}

TEST_F(S3BlobStoreTest, FailedMultipartUploadIsAbortedAndLeavesNoObject) {
  S3Config config = MotoServer::Get().Config(TestPrefix());
  std::atomic<int> aborts{0};
  config.max_attempts = 3;
  config.inject_failure_for_test = [&](std::string_view method, std::string_view target) {
    if (method == "DELETE" && target.find("uploadId=") != std::string_view::npos) ++aborts;
    if (method == "PUT" && target.find("partNumber=2&") != std::string_view::npos) {
      return std::optional<InjectedS3Failure>(InjectedS3Failure{500, "InternalError"});
    }
    return std::optional<InjectedS3Failure>();
  };
  auto store = Open(config);
  ASSERT_TRUE(store);
  Status s = store->PutBytes("ckpt/broken.bin", Pattern(17u << 20, 3));
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("part 2 of 3"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("InternalError"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("ckpt/broken.bin"), std::string::npos) << s.message();
  EXPECT_EQ(aborts.load(), 1);
  EXPECT_FALSE(*store->Exists("ckpt/broken.bin"));
}

TEST_F(S3BlobStoreTest, ListsDirectoriesAcrossPages) {
  S3Config config = MotoServer::Get().Config(TestPrefix());
  config.list_page_size = 7;  // 25 files and 3 directories take several pages
  auto store = Open(config);
  ASSERT_TRUE(store);
  for (int i = 0; i < 25; ++i) {
    char name[32];
    std::snprintf(name, sizeof(name), "run/f%02d.txt", i);
    ASSERT_TRUE(store->PutBytes(name, std::string(static_cast<size_t>(i), 'x')).ok());
  }
  for (const char* k : {"run/sub/a", "run/sub/deeper/b", "run/zz/c", "run/aa/d", "other/e"}) {
    ASSERT_TRUE(store->PutBytes(k, "y").ok());
  }
  auto list = store->List("run/");  // a trailing '/' means the same directory
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  ASSERT_EQ(list->size(), 28u);
  EXPECT_EQ((*list)[0].name, "aa");
  EXPECT_TRUE((*list)[0].is_dir);
  EXPECT_EQ((*list)[1].name, "f00.txt");
  EXPECT_EQ((*list)[25].name, "f24.txt");
  EXPECT_EQ((*list)[25].size, 24);
  EXPECT_FALSE((*list)[25].is_dir);
  // LastModified (second precision on moto) is within a few seconds of now.
  int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  EXPECT_GT((*list)[25].modified_ms, now_ms - 120'000);
  EXPECT_LT((*list)[25].modified_ms, now_ms + 120'000);
  EXPECT_EQ((*list)[26].name, "sub");
  EXPECT_TRUE((*list)[26].is_dir);
  EXPECT_EQ((*list)[27].name, "zz");

  auto root = store->List("");
  ASSERT_TRUE(root.ok());
  ASSERT_EQ(root->size(), 2u);
  EXPECT_EQ((*root)[0].name, "other");
  EXPECT_EQ((*root)[1].name, "run");

  auto sub = store->List("run/sub");
  ASSERT_EQ(sub->size(), 2u);
  EXPECT_EQ((*sub)[0].name, "a");
  EXPECT_EQ((*sub)[1].name, "deeper");

  EXPECT_TRUE(*store->IsDirectory(""));
  EXPECT_TRUE(*store->IsDirectory("run"));
  EXPECT_TRUE(*store->IsDirectory("run/sub/"));
  EXPECT_FALSE(*store->IsDirectory("run/f00.txt"));
  EXPECT_FALSE(*store->IsDirectory("ru"));  // a prefix of a name is not a directory
}

TEST_F(S3BlobStoreTest, DeletesObjectsAndWholeDirectories) {
  S3Config config = MotoServer::Get().Config(TestPrefix());
  config.list_page_size = 5;
  auto store = Open(config);
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->PutBytes("d/keep.txt", "k").ok());
  ASSERT_TRUE(store->PutBytes("d/one.txt", "1").ok());
  for (int i = 0; i < 12; ++i) {
    ASSERT_TRUE(
        store->PutBytes("d/tree/" + std::to_string(i % 3) + "/f" + std::to_string(i), "t").ok());
  }
  ASSERT_TRUE(store->Delete("d/one.txt").ok());
  EXPECT_FALSE(*store->Exists("d/one.txt"));
  EXPECT_TRUE(store->Delete("d/one.txt").IsNotFound());
  ASSERT_TRUE(store->Delete("d/tree/").ok());
  EXPECT_FALSE(*store->IsDirectory("d/tree"));
  auto list = store->List("d");
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].name, "keep.txt");
  EXPECT_TRUE(store->Delete("d/tree").IsNotFound());
}

TEST_F(S3BlobStoreTest, WrongSecretKeyIsAClearAuthError) {
  S3Config config = MotoServer::Get().Config(TestPrefix());
  config.credentials.secret_access_key += "x";
  auto store = OpenS3BlobStore(config);
  ASSERT_FALSE(store.ok());
  const Status& s = store.status();
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << s.ToString();
  EXPECT_NE(s.message().find("SignatureDoesNotMatch"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(config.bucket), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("AWS_SECRET_ACCESS_KEY"), std::string::npos) << s.message();

  config = MotoServer::Get().Config(TestPrefix());
  config.credentials.access_key_id = "AKIAIOSFODNN7EXAMPLE";
  store = OpenS3BlobStore(config);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(store.status().message().find("InvalidAccessKeyId"), std::string::npos)
      << store.status().message();
}

TEST_F(S3BlobStoreTest, MissingBucketIsNotFound) {
  S3Config config = MotoServer::Get().Config(TestPrefix());
  config.bucket = "no-such-bucket-" + std::to_string(::getpid());
  auto store = OpenS3BlobStore(config);
  ASSERT_FALSE(store.ok());
  EXPECT_TRUE(store.status().IsNotFound()) << store.status().ToString();
  EXPECT_NE(store.status().message().find(config.bucket), std::string::npos);
}

TEST_F(S3BlobStoreTest, RetriesTransientFailuresButNotClientErrors) {
  S3Config config = MotoServer::Get().Config(TestPrefix());
  Mutex mu;
  std::vector<InjectedS3Failure> script;  // answers for the next PUTs, in order
  int puts = 0;
  config.max_attempts = 4;
  config.inject_failure_for_test = [&](std::string_view method, std::string_view) {
    MutexLock lock(mu);
    if (method != "PUT") return std::optional<InjectedS3Failure>();
    ++puts;
    if (script.empty()) return std::optional<InjectedS3Failure>();
    InjectedS3Failure f = script.front();
    script.erase(script.begin());
    return std::optional<InjectedS3Failure>(f);
  };
  auto store = Open(config);
  ASSERT_TRUE(store);

  script = {{503, "SlowDown"}, {0, ""}, {500, "InternalError"}};  // then the real server
  ASSERT_TRUE(store->PutBytes("r/ok.txt", "after retries").ok());
  EXPECT_EQ(puts, 4);
  EXPECT_EQ(*store->GetBytes("r/ok.txt"), "after retries");

  puts = 0;
  script = {{429, "TooManyRequests"}, {503, "SlowDown"}, {503, "SlowDown"}, {503, "SlowDown"}};
  Status s = store->PutBytes("r/gave-up.txt", "x");
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_EQ(puts, 4);
  EXPECT_NE(s.message().find("SlowDown"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("r/gave-up.txt"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("4 attempts"), std::string::npos) << s.message();

  puts = 0;
  script = {{400, "InvalidArgument"}};
  s = store->PutBytes("r/bad.txt", "x");
  EXPECT_EQ(puts, 1);  // a client error is not retried
  EXPECT_EQ(s.code(), StatusCode::kInternal) << s.ToString();
  EXPECT_NE(s.message().find("InvalidArgument"), std::string::npos) << s.message();
  EXPECT_FALSE(*store->Exists("r/bad.txt"));
}

TEST_F(S3BlobStoreTest, PutIfAbsentWritesOnceAndNeverReplaces) {
  auto store = Open();
  ASSERT_TRUE(store);
  const std::string key = "t/_delta_log/00000000000000000000.json";
  ASSERT_TRUE(store->PutIfAbsent(key, "first").ok());
  Status again = store->PutIfAbsent(key, "second");
  EXPECT_TRUE(again.IsAlreadyExists()) << again.ToString();
  EXPECT_NE(again.message().find(key), std::string::npos) << again.message();
  EXPECT_EQ(*store->GetBytes(key), "first");
  ASSERT_TRUE(store->PutBytes("t/plain", "p").ok());
  EXPECT_TRUE(store->PutIfAbsent("t/plain", "q").IsAlreadyExists());
  EXPECT_EQ(*store->GetBytes("t/plain"), "p");
  EXPECT_TRUE(store->PutIfAbsent("../escape", "x").IsInvalidArgument());
  // After a delete the key is free again.
  ASSERT_TRUE(store->Delete("t/plain").ok());
  ASSERT_TRUE(store->PutIfAbsent("t/plain", "r").ok());
  EXPECT_EQ(*store->GetBytes("t/plain"), "r");
}

// Writers race for the next entry of one log, as Delta writers do: each wants to commit
// `kCommits` entries, tries the next free key and, when another writer took it, the one after.
// Every key must be won by exactly one writer and every writer's every commit must land exactly
// once (no lost and no doubled write), in contiguous keys. Each writer has its own store (its
// own connections), as separate processes would.
TEST_F(S3BlobStoreTest, RacingWritersEachKeyWonExactlyOnce) {
  constexpr int kWriters = 6, kCommits = 8;
  std::string prefix = TestPrefix();
  std::vector<std::unique_ptr<BlobStore>> stores;
  for (int w = 0; w < kWriters; ++w) {
    stores.push_back(Open(MotoServer::Get().Config(prefix)));
    ASSERT_TRUE(stores.back());
  }
  auto key = [](int v) {
    std::string n = std::to_string(v);
    return "_delta_log/" + std::string(20 - n.size(), '0') + n + ".json";
  };
  std::vector<std::vector<int>> won(kWriters);  // the versions each writer won
  std::vector<std::string> errors(kWriters);
  std::latch start(kWriters);
  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      start.arrive_and_wait();
      int version = 0;
      for (int c = 0; c < kCommits && errors[w].empty(); ++c) {
        std::string entry = "{\"commitInfo\":{\"txnId\":\"w" + std::to_string(w) + "-c" +
                            std::to_string(c) + "\"}}";
        for (;; ++version) {
          Status s = stores[w]->PutIfAbsent(key(version), entry);
          if (s.ok()) break;
          if (!s.IsAlreadyExists()) {
            errors[w] = s.ToString();
            return;
          }
        }
        won[w].push_back(version++);
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int w = 0; w < kWriters; ++w) ASSERT_EQ(errors[w], "") << "writer " << w;
  std::map<int, std::string> expected;  // version -> the entry of the writer that won it
  for (int w = 0; w < kWriters; ++w) {
    ASSERT_EQ(won[w].size(), static_cast<size_t>(kCommits)) << "writer " << w;
    for (int c = 0; c < kCommits; ++c) {
      bool fresh = expected
                       .emplace(won[w][c], "{\"commitInfo\":{\"txnId\":\"w" + std::to_string(w) +
                                               "-c" + std::to_string(c) + "\"}}")
                       .second;
      EXPECT_TRUE(fresh) << "version " << won[w][c] << " was won twice";
    }
  }
  auto listed = stores[0]->List("_delta_log");
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  ASSERT_EQ(listed->size(), static_cast<size_t>(kWriters * kCommits));
  for (int v = 0; v < kWriters * kCommits; ++v) {
    ASSERT_EQ((*listed)[v].name, key(v).substr(11)) << "versions are not contiguous";
    EXPECT_EQ(*stores[0]->GetBytes(key(v)), expected[v]) << "version " << v;
  }
}

TEST_F(S3BlobStoreTest, PutIfAbsentRetriesConflictsAndResolvesLostAnswers) {
  S3Config config = MotoServer::Get().Config(TestPrefix());
  Mutex mu;
  std::vector<InjectedS3Failure> script;   // answers for the next PUTs, in order
  std::function<void()> before_first_put;  // runs once, at the first scripted PUT
  int puts = 0;
  config.max_attempts = 4;
  config.inject_failure_for_test = [&](std::string_view method, std::string_view) {
    MutexLock lock(mu);
    if (method != "PUT") return std::optional<InjectedS3Failure>();
    ++puts;
    if (before_first_put) std::exchange(before_first_put, nullptr)();
    if (script.empty()) return std::optional<InjectedS3Failure>();
    InjectedS3Failure f = script.front();
    script.erase(script.begin());
    return std::optional<InjectedS3Failure>(f);
  };
  auto store = Open(config);
  ASSERT_TRUE(store);
  auto other = Open(MotoServer::Get().Config(TestPrefix()));  // another writer, no faults
  ASSERT_TRUE(other);

  // 409 ConditionalRequestConflict: another conditional write was in flight; retried.
  script = {{409, "ConditionalRequestConflict"}, {409, "ConditionalRequestConflict"}};
  ASSERT_TRUE(store->PutIfAbsent("c/conflict", "mine").ok());
  EXPECT_EQ(puts, 3);
  EXPECT_EQ(*store->GetBytes("c/conflict"), "mine");

  // Our PUT lands but its answer is lost; the retry gets 412. Reading back finds our bytes: ok.
  puts = 0;
  script = {{0, "", /*after_sending=*/true}};
  EXPECT_TRUE(store->PutIfAbsent("c/lost-answer", "mine").ok());
  EXPECT_EQ(puts, 2);
  EXPECT_EQ(*store->GetBytes("c/lost-answer"), "mine");

  // A 500 that may have applied our write, but another writer won meanwhile: AlreadyExists.
  puts = 0;
  before_first_put = [&] { ASSERT_TRUE(other->PutBytes("c/other-won", "theirs").ok()); };
  script = {{500, "InternalError"}};
  Status s = store->PutIfAbsent("c/other-won", "mine");
  EXPECT_TRUE(s.IsAlreadyExists()) << s.ToString();
  EXPECT_EQ(*store->GetBytes("c/other-won"), "theirs");

  // Sent, answer lost, then the server is unreachable for every retry: reading back finds our
  // bytes, so the write is known to have landed.
  script = {{0, "", true}, {0, ""}, {0, ""}, {0, ""}};
  EXPECT_TRUE(store->PutIfAbsent("c/landed", "mine").ok());
  EXPECT_EQ(*store->GetBytes("c/landed"), "mine");

  // A 500 and then no answer at all: the object is absent, but the write may still land. The
  // caller is told that the outcome is unknown, and what to do.
  script = {{500, "InternalError"}, {0, ""}, {0, ""}, {0, ""}};
  s = store->PutIfAbsent("c/unknown", "mine");
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("unknown"), std::string::npos) << s.message();

  // A refusal that is not about the condition is a plain error, not AlreadyExists.
  puts = 0;
  script = {{403, "AccessDenied"}};
  s = store->PutIfAbsent("c/denied", "mine");
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << s.ToString();
  EXPECT_EQ(puts, 1);
  EXPECT_FALSE(*store->Exists("c/denied"));
}

TEST_F(S3BlobStoreTest, HttpsVerifiesTheServerCertificate) {
  MotoServer& tls = MotoServer::GetTls();
  ASSERT_TRUE(tls.ok()) << tls.error();
  S3Config config = tls.Config(TestPrefix());
  ASSERT_EQ(config.endpoint.rfind("https://", 0), 0u) << config.endpoint;
  auto store = Open(config);
  ASSERT_TRUE(store);
  std::string data = Pattern((9u << 20) + 7, 4);  // multipart, parts on parallel TLS connections
  ASSERT_TRUE(store->PutBytes("tls/big.bin", data).ok());
  ASSERT_TRUE(store->PutBytes("tls/small.txt", "over TLS").ok());
  EXPECT_EQ(*store->GetBytes("tls/small.txt"), "over TLS");
  EXPECT_TRUE(*store->GetBytes("tls/big.bin") == data);

  // Without the self-signed certificate among the trusted ones, the handshake fails...
  config.ca_file.clear();
  config.max_attempts = 1;
  auto refused = OpenS3BlobStore(config);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("TLS handshake"), std::string::npos)
      << refused.status().message();
  config.ca_file = "/nonexistent/ca.pem";
  EXPECT_TRUE(OpenS3BlobStore(config).status().IsInvalidArgument());
  config.ca_file.clear();
  // ...unless verification is switched off.
  config.verify_tls = false;
  auto unverified = OpenS3BlobStore(config);
  ASSERT_TRUE(unverified.ok()) << unverified.status().ToString();
  EXPECT_EQ(*(*unverified)->GetBytes("tls/small.txt"), "over TLS");
}

TEST(S3BlobStoreOfflineTest, UnreachableEndpointIsUnavailableAfterRetries) {
  // A port that nothing listens on: bind one, then close it.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  S3Config config;
  config.endpoint = "http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  config.bucket = "b";
  config.credentials = {"id", "secret", ""};
  config.max_attempts = 3;
  config.retry_base_millis = 1;
  auto store = OpenS3BlobStore(config);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kUnavailable) << store.status().ToString();
  EXPECT_NE(store.status().message().find("cannot connect"), std::string::npos);
  EXPECT_NE(store.status().message().find("3 attempts"), std::string::npos);
}

TEST(S3BlobStoreOfflineTest, ConfigFromUrlAndEnvironment) {
  std::map<std::string, std::string> env = {{"AWS_ACCESS_KEY_ID", "AKID"},
                                            {"AWS_SECRET_ACCESS_KEY", "SECRET"},
                                            {"AWS_DEFAULT_REGION", "eu-west-1"}};
  auto getenv = [&](const char* name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
  auto c = S3ConfigFromUrl("s3://my-bucket/team/artifacts/", getenv);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->bucket, "my-bucket");
  EXPECT_EQ(c->prefix, "team/artifacts");
  EXPECT_EQ(c->region, "eu-west-1");
  EXPECT_EQ(c->endpoint, "https://s3.eu-west-1.amazonaws.com");
  EXPECT_FALSE(c->path_style);
  EXPECT_EQ(c->credentials.access_key_id, "AKID");

  env["AWS_REGION"] = "us-west-2";
  env["AWS_ENDPOINT_URL"] = "http://generic:1";
  env["AWS_ENDPOINT_URL_S3"] = "http://minio:9000";
  env["AWS_SESSION_TOKEN"] = "TOKEN";
  c = S3ConfigFromUrl("s3://b", getenv);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->prefix, "");
  EXPECT_EQ(c->region, "us-west-2");
  EXPECT_EQ(c->endpoint, "http://minio:9000");
  EXPECT_TRUE(c->path_style);
  EXPECT_EQ(c->credentials.session_token, "TOKEN");

  EXPECT_TRUE(S3ConfigFromUrl("s3:///prefix", getenv).status().IsInvalidArgument());
  EXPECT_TRUE(S3ConfigFromUrl("s3://b/../x", getenv).status().IsInvalidArgument());
  env.erase("AWS_SECRET_ACCESS_KEY");
  Status s = S3ConfigFromUrl("s3://b", getenv).status();
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_NE(s.message().find("AWS_SECRET_ACCESS_KEY"), std::string::npos);
}

TEST(S3BlobStoreOfflineTest, OpenBlobStoreChoosesTheBackendByLocation) {
  std::string root = fs::temp_directory_path() / ("ty-open-blob-" + std::to_string(::getpid()));
  auto local = OpenBlobStore(root);
  ASSERT_TRUE(local.ok()) << local.status().ToString();
  ASSERT_TRUE((*local)->PutBytes("a", "b").ok());
  EXPECT_TRUE(fs::exists(root + "/a"));
  fs::remove_all(root);
  EXPECT_TRUE(OpenBlobStore("ftp://host/x").status().IsInvalidArgument());
  S3Config bad;
  bad.bucket = "b";
  bad.endpoint = "minio:9000";  // no scheme
  bad.credentials = {"id", "secret", ""};
  EXPECT_TRUE(OpenS3BlobStore(bad).status().IsInvalidArgument());
}

}  // namespace
}  // namespace trainyard::blob
