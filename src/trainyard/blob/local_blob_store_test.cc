#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>

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

}  // namespace
}  // namespace trainyard::blob
