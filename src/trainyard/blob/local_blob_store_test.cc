#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <latch>
#include <string>
#include <thread>
#include <vector>

#include "trainyard/blob/blob_store.h"

namespace trainyard::blob {
namespace {

TEST(BlobKeyTest, RejectsEscapes) {
  EXPECT_TRUE(ValidateKey("1/abc/artifacts/model/MLmodel").ok());
  for (const char* bad : {"../x", "a/../b", "/etc/passwd", "a\\b", "a/./b", ".."}) {
    EXPECT_TRUE(ValidateKey(bad).IsInvalidArgument()) << bad;
  }
  EXPECT_TRUE(ValidateKey("").IsInvalidArgument());
  EXPECT_TRUE(ValidateKey("", true).ok());
  EXPECT_TRUE(ValidateKey(std::string("a\0b", 3)).IsInvalidArgument());
}

TEST(LocalBlobStoreTest, PutListGetDelete) {
  std::string root = std::filesystem::temp_directory_path() / "ty-blob-test";
  std::filesystem::remove_all(root);
  auto store = std::move(OpenLocalBlobStore(root)).value();
  ASSERT_TRUE(store->PutBytes("e/r/a.txt", "hello").ok());
  ASSERT_TRUE(store->PutBytes("e/r/sub/b.bin", std::string("\0\1\2", 3)).ok());
  auto list = store->List("e/r");
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].name, "a.txt");
  EXPECT_EQ((*list)[0].size, 5);
  struct stat st {};
  ASSERT_EQ(::stat((root + "/e/r/a.txt").c_str(), &st), 0);
  EXPECT_EQ((*list)[0].modified_ms, st.st_mtim.tv_sec * 1000 + st.st_mtim.tv_nsec / 1'000'000);
  EXPECT_GT((*list)[0].modified_ms, 0);
  EXPECT_TRUE((*list)[1].is_dir);
  EXPECT_EQ(*store->GetBytes("e/r/sub/b.bin"), std::string("\0\1\2", 3));
  EXPECT_TRUE(store->List("missing")->empty());
  EXPECT_TRUE(store->GetBytes("e/r/none").status().IsNotFound());
  EXPECT_TRUE(store->PutBytes("e/r/sub", "x").IsInvalidArgument());  // a directory
  ASSERT_TRUE(store->Delete("e/r/sub").ok());
  EXPECT_EQ(store->List("e/r")->size(), 1u);
  EXPECT_TRUE(store->Delete("e/r/sub").IsNotFound());
  EXPECT_TRUE(store->PutBytes("../escape", "x").IsInvalidArgument());
  std::filesystem::remove_all(root);
}

TEST(LocalBlobStoreTest, ExistsReadIntoAndSyncDirectory) {
  std::string root = std::filesystem::temp_directory_path() / "ty-blob-test-readinto";
  std::filesystem::remove_all(root);
  auto store = std::move(OpenLocalBlobStore(root)).value();
  // Large and 4 KiB-aligned: written and read with O_DIRECT, the unaligned tail buffered.
  size_t size = (3u << 20) + 123;
  char* src = static_cast<char*>(std::aligned_alloc(4096, 4u << 20));
  char* dst = static_cast<char*>(std::aligned_alloc(4096, 4u << 20));
  for (size_t i = 0; i < size; ++i) src[i] = static_cast<char>(i * 31 + 7);
  ASSERT_TRUE(store->PutBytes("c/big", std::string_view(src, size)).ok());
  EXPECT_TRUE(*store->Exists("c/big"));
  EXPECT_FALSE(*store->Exists("c/none"));
  EXPECT_FALSE(*store->Exists("c"));  // a directory is not an object
  Result<size_t> n = store->ReadInto("c/big", dst, 4u << 20);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, size);
  EXPECT_EQ(std::memcmp(src, dst, size), 0);
  EXPECT_EQ(store->ReadInto("c/big", dst, size - 1).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_TRUE(store->ReadInto("c/none", dst, 10).status().IsNotFound());
  // Unaligned destination: the buffered path.
  n = store->ReadInto("c/big", dst + 1, (4u << 20) - 1);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(std::memcmp(src, dst + 1, size), 0);
  EXPECT_EQ(*store->GetBytes("c/big"), std::string(src, size));
  EXPECT_TRUE(store->SyncDirectory("c").ok());
  EXPECT_TRUE(store->SyncDirectory("absent").ok());
  std::free(src);
  std::free(dst);
  std::filesystem::remove_all(root);
}

// Every file under `root`, recursively: to see that no temporary file is left behind.
std::vector<std::string> AllFiles(const std::string& root) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::recursive_directory_iterator(root)) {
    if (e.is_regular_file()) out.push_back(e.path().lexically_relative(root).string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(LocalBlobStoreTest, PutIfAbsentWritesOnceAndNeverReplaces) {
  std::string root = std::filesystem::temp_directory_path() / "ty-blob-test-ifabsent";
  std::filesystem::remove_all(root);
  auto store = std::move(OpenLocalBlobStore(root)).value();
  ASSERT_TRUE(store->PutIfAbsent("t/_delta_log/00000000000000000000.json", "first").ok());
  Status again = store->PutIfAbsent("t/_delta_log/00000000000000000000.json", "second");
  EXPECT_TRUE(again.IsAlreadyExists()) << again.ToString();
  EXPECT_NE(again.message().find("00000000000000000000.json"), std::string::npos);
  EXPECT_EQ(again.message().find(root), std::string::npos) << again.message();
  EXPECT_EQ(*store->GetBytes("t/_delta_log/00000000000000000000.json"), "first");
  // An object PutBytes wrote counts as present too; an empty object is an object.
  ASSERT_TRUE(store->PutBytes("t/plain", "p").ok());
  EXPECT_TRUE(store->PutIfAbsent("t/plain", "q").IsAlreadyExists());
  ASSERT_TRUE(store->PutIfAbsent("t/empty", "").ok());
  EXPECT_TRUE(store->PutIfAbsent("t/empty", "").IsAlreadyExists());
  EXPECT_EQ(*store->GetBytes("t/plain"), "p");
  // Bad keys: a directory, a path beneath a file, escapes.
  EXPECT_TRUE(store->PutIfAbsent("t/_delta_log", "x").IsInvalidArgument());
  EXPECT_TRUE(store->PutIfAbsent("t/plain/sub", "x").IsInvalidArgument());
  EXPECT_TRUE(store->PutIfAbsent("../escape", "x").IsInvalidArgument());
  EXPECT_TRUE(store->PutIfAbsent("t/.tmp-x", "x").IsInvalidArgument());
  // Nothing but the objects: no temporary file of a refused or failed write is left.
  EXPECT_EQ(AllFiles(root), (std::vector<std::string>{"t/_delta_log/00000000000000000000.json",
                                                      "t/empty", "t/plain"}));
  std::filesystem::remove_all(root);
}

TEST(LocalBlobStoreTest, PutIfAbsentRaceHasExactlyOneWinnerPerKey) {
  std::string root = std::filesystem::temp_directory_path() / "ty-blob-test-ifabsent-race";
  std::filesystem::remove_all(root);
  auto store = std::move(OpenLocalBlobStore(root)).value();
  constexpr int kThreads = 8, kKeys = 40;
  // wins[k][t]: whether thread t won key k; each thread writes its own bytes.
  std::vector<std::vector<int>> wins(kKeys, std::vector<int>(kThreads, 0));
  std::vector<std::string> errors(kThreads);
  std::latch start(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      for (int k = 0; k < kKeys; ++k) {
        Status s = store->PutIfAbsent("log/" + std::to_string(k), "writer " + std::to_string(t));
        if (s.ok()) {
          wins[k][t] = 1;
        } else if (!s.IsAlreadyExists()) {
          errors[t] = s.ToString();
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(errors[t], "") << "thread " << t;
  for (int k = 0; k < kKeys; ++k) {
    int winners = 0, winner = -1;
    for (int t = 0; t < kThreads; ++t) {
      winners += wins[k][t];
      if (wins[k][t]) winner = t;
    }
    ASSERT_EQ(winners, 1) << "key " << k;
    EXPECT_EQ(*store->GetBytes("log/" + std::to_string(k)), "writer " + std::to_string(winner));
  }
  EXPECT_EQ(AllFiles(root).size(), static_cast<size_t>(kKeys));
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace trainyard::blob
