#include "trainyard/common/paths.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "trainyard/common/checked.h"

namespace trainyard {
namespace {

namespace fs = std::filesystem;

TEST(PathsTest, ValidateRelativePath) {
  EXPECT_TRUE(ValidateRelativePath("model/weights.bin", "name").ok());
  EXPECT_TRUE(ValidateRelativePath("a.b/c-d_e", "name").ok());
  for (const std::string& bad :
       std::vector<std::string>{"", "/abs", "/etc/passwd", "a/../../x", "..", "./a", "a/./b",
                                "a//b", "a/", "a\\b", std::string("a\0b", 3), "a\nb", "a\x7f"}) {
    Status s = ValidateRelativePath(bad, "name");
    EXPECT_TRUE(s.IsInvalidArgument()) << "accepted: " << bad;
    EXPECT_EQ(s.message().rfind("name ", 0), 0u) << s.message();
  }
  EXPECT_FALSE(ValidateRelativePath(std::string(300, 'a'), "name").ok());  // one long segment
  EXPECT_FALSE(ValidateRelativePath(std::string(5000, 'a'), "name").ok());
  Status s = ValidateRelativePath("x/" + std::string(10, 'a'), "name", 8);
  EXPECT_NE(s.message().find("at most 8 bytes"), std::string::npos);
}

class BeneathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("ty-beneath-" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_ / "dir");
    fs::create_directories(root_ / "outside");
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_;
};

TEST_F(BeneathTest, WritesAndRenamesBeneathTheRoot) {
  std::string dir = (root_ / "dir").string();
  ASSERT_TRUE(WriteFileBeneath(dir, "a/b/c.txt", "hello").ok());
  std::ifstream in(root_ / "dir/a/b/c.txt");
  std::string text;
  std::getline(in, text);
  EXPECT_EQ(text, "hello");
  ASSERT_TRUE(RenameBeneath(dir, "a/b/c.txt", dir, "x/y.txt").ok());
  EXPECT_TRUE(fs::exists(root_ / "dir/x/y.txt"));
  EXPECT_TRUE(WriteFileBeneath(dir, "../escape", "x").IsInvalidArgument());
  EXPECT_TRUE(WriteFileBeneath(dir, "/abs", "x").IsInvalidArgument());
  EXPECT_FALSE(fs::exists(root_ / "escape"));
}

TEST_F(BeneathTest, RefusesSymlinksOutOfTheRoot) {
  std::string dir = (root_ / "dir").string();
  fs::create_directory_symlink(root_ / "outside", root_ / "dir" / "link");
  Status s = WriteFileBeneath(dir, "link/pwned", "x");
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  EXPECT_NE(s.message().find("symbolic link"), std::string::npos);
  EXPECT_FALSE(fs::exists(root_ / "outside" / "pwned"));

  // A link at the final name is replaced, not written through.
  fs::create_symlink(root_ / "outside" / "target", root_ / "dir" / "file");
  ASSERT_TRUE(WriteFileBeneath(dir, "file", "x").ok());
  EXPECT_FALSE(fs::exists(root_ / "outside" / "target"));
  EXPECT_FALSE(fs::is_symlink(root_ / "dir" / "file"));

  ASSERT_TRUE(WriteFileBeneath(dir, "src.txt", "y").ok());
  EXPECT_TRUE(RenameBeneath(dir, "src.txt", dir, "link/moved").IsInvalidArgument());
  EXPECT_FALSE(fs::exists(root_ / "outside" / "moved"));
}

TEST_F(BeneathTest, ReadsRangesAndTailsOfRegularFilesOnly) {
  std::string file = (root_ / "dir" / "log").string();
  ASSERT_TRUE(WriteFileBeneath((root_ / "dir").string(), "log", "0123456789").ok());
  auto range = ReadFileRangeSafely(file, 3, 4);
  ASSERT_TRUE(range.ok()) << range.status().ToString();
  EXPECT_EQ(range->data, "3456");
  EXPECT_EQ(range->offset, 3);
  EXPECT_EQ(range->file_size, 10);
  range = ReadFileRangeSafely(file, 50, 4);  // past the end: clamped, nothing read
  ASSERT_TRUE(range.ok());
  EXPECT_EQ(range->offset, 10);
  EXPECT_EQ(range->data, "");
  EXPECT_EQ(ReadFileTailSafely(file, 3), "789");

  EXPECT_TRUE(
      ReadFileRangeSafely((root_ / "dir" / "missing").string(), 0, 4).status().IsNotFound());
  // A link (to the server's own files, say) and a FIFO (which would block) are refused.
  ASSERT_TRUE(WriteFileBeneath((root_ / "outside").string(), "secret", "token").ok());
  fs::create_symlink(root_ / "outside" / "secret", root_ / "dir" / "link");
  std::string link = (root_ / "dir" / "link").string();
  EXPECT_EQ(ReadFileRangeSafely(link, 0, 100).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(ReadFileTailSafely(link, 100), "");
  std::string fifo = (root_ / "dir" / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(ReadFileRangeSafely(fifo, 0, 100).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(ReadFileTailSafely(fifo, 100), "");
}

TEST_F(BeneathTest, RemovesATreeWithoutFollowingItsLinks) {
  // What a link inside points at, outside the tree: it must survive.
  std::ofstream(root_ / "outside/keep.txt") << "keep";
  fs::path tree = root_ / "dir/replica";
  fs::create_directories(tree / "a/b");
  std::ofstream(tree / "a/b/file") << "x";
  std::ofstream(tree / "top") << "y";
  fs::create_directory_symlink(root_ / "outside", tree / "a/to-outside");
  fs::create_symlink(root_ / "outside/keep.txt", tree / "file-link");
  auto removed = RemoveTreeSafely(tree.string());
  ASSERT_TRUE(removed.ok()) << removed.status().ToString();
  // replica, a, b, file, top, to-outside, file-link
  EXPECT_EQ(*removed, 7);
  EXPECT_FALSE(fs::exists(fs::symlink_status(tree)));
  EXPECT_TRUE(fs::exists(root_ / "outside/keep.txt"));
  EXPECT_TRUE(fs::exists(root_ / "outside"));

  // A link in the tree's place is removed as a link; its target stays.
  fs::create_directory_symlink(root_ / "outside", root_ / "dir/link");
  ASSERT_TRUE(RemoveTreeSafely((root_ / "dir/link/").string()).ok());
  EXPECT_FALSE(fs::exists(fs::symlink_status(root_ / "dir/link")));
  EXPECT_TRUE(fs::exists(root_ / "outside/keep.txt"));

  // Nothing there: nothing removed.
  auto none = RemoveTreeSafely((root_ / "dir/missing").string());
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, 0);
  EXPECT_TRUE(RemoveTreeSafely((root_ / "dir/..").string()).status().IsInvalidArgument());
}

TEST(CheckedTest, ShapeBytes) {
  EXPECT_EQ(*ShapeBytes(4, {2, 3}, "shape"), 24u);
  EXPECT_EQ(*ShapeBytes(2, {}, "shape"), 2u);  // a scalar
  EXPECT_EQ(*ShapeBytes(4, {int64_t{1} << 62, 0}, "shape"), 0u);
  // dtype x shape that wraps to a small number: once accepted as a 0-byte tensor.
  auto wrapped = ShapeBytes(4, {int64_t{1} << 62, 4}, "shape");
  ASSERT_FALSE(wrapped.ok());
  EXPECT_TRUE(wrapped.status().IsInvalidArgument());
  EXPECT_NE(wrapped.status().message().find("shape is too large"), std::string::npos);
  EXPECT_TRUE(ShapeBytes(4, {-1}, "shape").status().IsInvalidArgument());
  EXPECT_FALSE(CheckedAdd(UINT64_MAX, 1).has_value());
  EXPECT_EQ(CheckedMul(3, 5), 15u);
}

}  // namespace
}  // namespace trainyard
