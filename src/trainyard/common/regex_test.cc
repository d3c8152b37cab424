#include "trainyard/common/regex.h"

#include <gtest/gtest.h>

#include <string>

namespace trainyard {
namespace {

TEST(BoundedRegexTest, SearchesAndMatchesWhole) {
  auto re = BoundedRegex::Compile("NCCL (error|timeout)", "p");
  ASSERT_TRUE(re.ok()) << re.status().message();
  EXPECT_EQ((*re)->Search("rank 0: NCCL timeout after 30s"), BoundedRegex::Outcome::kMatch);
  EXPECT_EQ((*re)->Search("all good"), BoundedRegex::Outcome::kNoMatch);
  auto whole = BoundedRegex::Compile("cuda:[0-9]{1,3}", "p");
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ((*whole)->FullMatch("cuda:12"), BoundedRegex::Outcome::kMatch);
  EXPECT_EQ((*whole)->FullMatch("cuda:1234"), BoundedRegex::Outcome::kNoMatch);
  EXPECT_EQ((*whole)->FullMatch("xcuda:1"), BoundedRegex::Outcome::kNoMatch);
}

TEST(BoundedRegexTest, CompileErrorsNameTheFieldAndOffset) {
  auto re = BoundedRegex::Compile("NCCL (error", "failure_policies[2].pattern");
  ASSERT_FALSE(re.ok());
  EXPECT_TRUE(re.status().IsInvalidArgument());
  EXPECT_NE(re.status().message().find("failure_policies[2].pattern"), std::string::npos);
  EXPECT_NE(re.status().message().find("offset"), std::string::npos);

  auto long_pattern = BoundedRegex::Compile(std::string(5000, 'a'), "failure_policies[0].pattern");
  ASSERT_FALSE(long_pattern.ok());
  EXPECT_NE(long_pattern.status().message().find("at most 1024 bytes"), std::string::npos);
}

// The pattern and tail of issue 13: std::regex_search overflowed the stack here.
TEST(BoundedRegexTest, NcclTailDoesNotOverflow) {
  auto re =
      BoundedRegex::Compile("NCCL error.*unhandled system error|uncorrectable ECC error", "p");
  ASSERT_TRUE(re.ok());
  std::string tail = "NCCL error: remote process exited";
  for (int i = 0; i < 800; ++i)
    tail += "step " + std::to_string(i) + " loss 1.234 lr 3e-4 ......\n";
  std::string one_line = "NCCL error " + std::string(200000, 'x');
  EXPECT_EQ((*re)->Search(tail), BoundedRegex::Outcome::kNoMatch);
  EXPECT_EQ((*re)->Search(one_line), BoundedRegex::Outcome::kNoMatch);
  EXPECT_EQ((*re)->Search(one_line + " unhandled system error"), BoundedRegex::Outcome::kMatch);
}

TEST(BoundedRegexTest, CatastrophicBacktrackingStopsAtTheLimit) {
  auto re = BoundedRegex::Compile("(a+)+$", "p");
  ASSERT_TRUE(re.ok());
  std::string text(40, 'a');
  text += "!";
  EXPECT_EQ((*re)->Search(text), BoundedRegex::Outcome::kLimit);
  EXPECT_FALSE((*re)->Matches(text));
}

TEST(BoundedRegexTest, BinaryTextIsMatchedBytewise) {
  auto re = BoundedRegex::Compile("Xid [0-9]+", "p");
  ASSERT_TRUE(re.ok());
  std::string junk;
  for (int i = 0; i < 100000; ++i) junk += static_cast<char>((i * 131) & 0xff);
  EXPECT_NE((*re)->Search(junk), BoundedRegex::Outcome::kMatch);
  EXPECT_EQ((*re)->Search(junk + "Xid 79" + junk), BoundedRegex::Outcome::kMatch);
  // A pattern cannot switch UTF mode on, where invalid UTF-8 would be an error.
  EXPECT_FALSE(BoundedRegex::Compile("(*UTF)a", "p").ok());
}

TEST(BoundedRegexTest, ForEachMatchGivesGroups) {
  auto re = BoundedRegex::Compile(R"(Node failure on ([A-Za-z0-9]+))", "p");
  ASSERT_TRUE(re.ok());
  std::vector<std::string> nodes;
  bool complete = (*re)->ForEachMatch(
      "srun: error: Node failure on n1\nsrun: error: Node failure on n2\n",
      [&](const std::vector<std::string_view>& g) { nodes.emplace_back(g[1]); });
  EXPECT_TRUE(complete);
  EXPECT_EQ(nodes, (std::vector<std::string>{"n1", "n2"}));
}

}  // namespace
}  // namespace trainyard
