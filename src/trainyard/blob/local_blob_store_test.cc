#include <gtest/gtest.h>

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

}  // namespace
}  // namespace trainyard::blob
