#include "trainyard/identity/group_closure.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace trainyard::identity {
namespace {

using ::testing::ElementsAre;

TEST(GroupClosureTest, TransitiveGroupsFollowNesting) {
  MembershipGraph g{{"carol", {"ds"}}, {"ds", {"analysts", "ml"}}, {"analysts", {"all"}}};
  EXPECT_THAT(TransitiveGroups(g, "carol"), ElementsAre("all", "analysts", "ds", "ml"));
  EXPECT_THAT(TransitiveGroups(g, "nobody"), ElementsAre());
  // A cycle in stored data does not loop forever.
  g["all"] = {"carol"};
  EXPECT_THAT(TransitiveGroups(g, "ds"), ElementsAre("all", "analysts", "carol", "ml"));
}

TEST(GroupClosureTest, CycleIfAddedNamesThePath) {
  MembershipGraph g{{"b", {"a"}}, {"c", {"b"}}};  // c in b in a
  EXPECT_FALSE(CycleIfAdded(g, "c", "x"));
  EXPECT_FALSE(CycleIfAdded(g, "b", "c"));  // already so: no new cycle
  auto cycle = CycleIfAdded(g, "c", "a");   // a into c: c in b in a in c
  ASSERT_TRUE(cycle);
  EXPECT_THAT(*cycle, ElementsAre("c", "b", "a", "c"));
  EXPECT_THAT(*CycleIfAdded(g, "a", "a"), ElementsAre("a", "a"));
}

}  // namespace
}  // namespace trainyard::identity
