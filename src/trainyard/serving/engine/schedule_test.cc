#include "trainyard/serving/engine/schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace trainyard::serving {
namespace {

using Groups = std::vector<std::vector<size_t>>;

PrefillBudget Budget(int64_t tokens, int64_t heads = 1, int64_t scores = int64_t{1} << 40) {
  PrefillBudget b;
  b.tokens = tokens;
  b.heads = heads;
  b.scores = scores;
  return b;
}

TEST(AdmitCountTest, TakesWaitingRequestsInOrderUntilOneDoesNotFit) {
  EXPECT_EQ(AdmitCount(0, {1, 1, 1}, 4), 3u);
  EXPECT_EQ(AdmitCount(2, {1, 1, 1}, 4), 2u);
  // The third needs 3 sequences beside 3: it waits, and so does the one behind it (no
  // overtaking, so a large request is not starved by small ones).
  EXPECT_EQ(AdmitCount(1, {1, 1, 3, 1}, 5), 2u);
  EXPECT_EQ(AdmitCount(4, {1}, 4), 0u);
  EXPECT_EQ(AdmitCount(0, {}, 4), 0u);
}

TEST(AdmitCountTest, AnOversizedRequestRunsAloneInAnEmptyBatch) {
  EXPECT_EQ(AdmitCount(0, {6, 1}, 4), 1u);
  EXPECT_EQ(AdmitCount(1, {6}, 4), 0u);
}

TEST(PlanPrefillTest, ShortestPromptsFirstTiesInArrivalOrder) {
  // A budget of one prompt per forward: the order alone.
  Groups groups = PlanPrefill({30, 10, 20, 10}, Budget(30));
  EXPECT_EQ(groups, (Groups{{1, 3}, {2}, {0}}));
  groups = PlanPrefill({30, 10, 20, 10}, Budget(10));
  EXPECT_EQ(groups, (Groups{{1}, {3}, {2}, {0}}));
}

TEST(PlanPrefillTest, ForwardsStayWithinTheTokenBudgetPaddingIncluded) {
  // Five prompts of 100 tokens, 256 tokens a forward: 2 + 2 + 1.
  EXPECT_EQ(PlanPrefill({100, 100, 100, 100, 100}, Budget(256)), (Groups{{0, 1}, {2, 3}, {4}}));
  // Padded to the longest: 90 and 100 take 200 tokens, a third (100) would make 300.
  EXPECT_EQ(PlanPrefill({100, 90, 100}, Budget(256)), (Groups{{1, 0}, {2}}));
  // A prompt longer than the budget runs alone.
  EXPECT_EQ(PlanPrefill({300, 10}, Budget(256)), (Groups{{1}, {0}}));
}

TEST(PlanPrefillTest, PaddingAtMostDoublesAForwardsTokens) {
  // 10 + 10 + 10 then 50: padded to 50 that is 200 tokens for 80 real ones.
  EXPECT_EQ(PlanPrefill({10, 50, 10, 10}, Budget(4096)), (Groups{{0, 2, 3}, {1}}));
  // 10 and 15: 30 padded tokens for 25 real ones.
  EXPECT_EQ(PlanPrefill({15, 10}, Budget(4096)), (Groups{{1, 0}}));
}

TEST(PlanPrefillTest, AttentionScoresStayWithinTheirBudget) {
  // Two heads, prompts of 8: 2 × 8 × 8 = 128 score floats each.
  EXPECT_EQ(PlanPrefill({8, 8, 8}, Budget(4096, 2, 256)), (Groups{{0, 1}, {2}}));
  EXPECT_EQ(PlanPrefill({8, 8, 8}, Budget(4096, 2, 384)), (Groups{{0, 1, 2}}));
}

// bench/serving's burst at C = 32: 32 prompts of 64-115 tokens arriving together.
TEST(PlanPrefillTest, ABurstOfPromptsRunsEveryPromptOnceShortestForwardsFirst) {
  const std::vector<int64_t> lengths = {95, 72, 81, 100, 96,  93,  110, 90,  64,  70, 70,
                                        76, 78, 79, 79,  83,  84,  89,  94,  95,  95, 95,
                                        97, 97, 98, 100, 101, 101, 102, 109, 115, 115};
  PrefillBudget budget = DefaultPrefillBudget(/*cpu=*/true, /*heads=*/8);
  Groups groups = PlanPrefill(lengths, budget);
  std::vector<size_t> seen;
  int64_t previous_longest = 0;
  for (const auto& g : groups) {
    ASSERT_FALSE(g.empty());
    int64_t longest = 0, shortest = lengths[g.front()];
    for (size_t i : g) {
      longest = std::max(longest, lengths[i]);
      shortest = std::min(shortest, lengths[i]);
      seen.push_back(i);
    }
    EXPECT_LE(longest * static_cast<int64_t>(g.size()), budget.tokens);
    EXPECT_GE(shortest, previous_longest);  // no prompt waits behind a longer one
    previous_longest = longest;
  }
  std::sort(seen.begin(), seen.end());
  std::vector<size_t> all(lengths.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  EXPECT_EQ(seen, all);
  // 3 forwards of 3 prompts (up to 81 tokens), then 12 of 2 and the longest alone; half of
  // the requests have their first token after 7 of the 15.
  std::vector<size_t> sizes;
  for (const auto& g : groups) sizes.push_back(g.size());
  EXPECT_EQ(sizes, (std::vector<size_t>{3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1}));
  size_t done = 0, forwards = 0;
  while (done < lengths.size() / 2) done += groups[forwards++].size();
  EXPECT_EQ(forwards, 7u);
}

TEST(PlanPrefillTest, NoPromptsNoForwards) { EXPECT_TRUE(PlanPrefill({}, Budget(256)).empty()); }

TEST(DefaultPrefillBudgetTest, ACpuTakesFewerTokensAForwardThanAGpu) {
  EXPECT_EQ(DefaultPrefillBudget(true, 8).tokens, 256);
  EXPECT_EQ(DefaultPrefillBudget(false, 8).tokens, 4096);
  EXPECT_EQ(DefaultPrefillBudget(true, 8).heads, 8);
}

}  // namespace
}  // namespace trainyard::serving
