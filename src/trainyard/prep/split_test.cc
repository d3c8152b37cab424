#include "trainyard/prep/split.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <string>
#include <vector>

#include "trainyard/testing/status_matchers.h"

namespace trainyard::prep {
namespace {

SplitSpec Spec() { return SplitSpec{{{"train", 0.9}, {"val", 0.05}, {"test", 0.05}}, 42}; }

TEST(SplitTest, ValidateNamesTheField) {
  TY_EXPECT_OK(ValidateSplit(Spec(), "steps[5].split"));
  TY_EXPECT_ERROR(ValidateSplit(SplitSpec{{}, 1}, "s"), StatusCode::kInvalidArgument, "s.ratios");
  TY_EXPECT_ERROR(ValidateSplit(SplitSpec{{{"train", 0.9}, {"val", 0.2}}, 1}, "s"),
                  StatusCode::kInvalidArgument, "sum to 1");
  TY_EXPECT_ERROR(ValidateSplit(SplitSpec{{{"train", 1.0}, {"val", 0.0}}, 1}, "s"),
                  StatusCode::kInvalidArgument, "s.ratios.val");
  TY_EXPECT_ERROR(ValidateSplit(SplitSpec{{{"train", 0.5}, {"train", 0.5}}, 1}, "s"),
                  StatusCode::kInvalidArgument, "named twice");
  TY_EXPECT_ERROR(ValidateSplit(SplitSpec{{{"Train", 1.0}}, 1}, "s"), StatusCode::kInvalidArgument,
                  "\"Train\"");
  // Within 1e-9 of 1 is fine (0.7 + 0.2 + 0.1 is not exactly 1 in double).
  TY_EXPECT_OK(ValidateSplit(SplitSpec{{{"a", 0.7}, {"b", 0.2}, {"c", 0.1}}, 1}, "s"));
}

TEST(SplitTest, AssignmentFollowsTheDocumentedFormula) {
  SplitSpec spec = Spec();
  for (int i = 0; i < 1000; ++i) {
    std::string key = "customer-" + std::to_string(i);
    uint64_t h = XXH3_64bits_withSeed(key.data(), key.size(), spec.seed);
    double u = static_cast<double>(h >> 11) / 9007199254740992.0;
    int expected = u < 0.9 ? 0 : u < 0.95 ? 1 : 2;
    ASSERT_EQ(AssignSplit(spec, key), expected) << key;
  }
}

TEST(SplitTest, RatiosAreRespectedAndGroupsStayTogether) {
  SplitSpec spec = Spec();
  std::vector<int> counts(3, 0);
  const int n = 100000;
  for (int i = 0; i < n; ++i) ++counts[AssignSplit(spec, std::to_string(i))];
  EXPECT_NEAR(counts[0], 0.9 * n, 0.01 * n);
  EXPECT_NEAR(counts[1], 0.05 * n, 0.005 * n);
  EXPECT_NEAR(counts[2], 0.05 * n, 0.005 * n);
  // A group key always gets the same split; another seed reshuffles.
  EXPECT_EQ(AssignSplit(spec, "cust-7"), AssignSplit(spec, "cust-7"));
  SplitSpec other = spec;
  other.seed = 43;
  int moved = 0;
  for (int i = 0; i < 1000; ++i) {
    moved += AssignSplit(spec, std::to_string(i)) != AssignSplit(other, std::to_string(i));
  }
  EXPECT_GT(moved, 100);
}

TEST(SplitTest, OneSplitTakesEverything) {
  SplitSpec spec{{{"all", 1.0}}, 0};
  TY_ASSERT_OK(ValidateSplit(spec, "s"));
  for (int i = 0; i < 100; ++i) EXPECT_EQ(AssignSplit(spec, std::to_string(i)), 0);
}

}  // namespace
}  // namespace trainyard::prep
