#include "trainyard/prep/doc_id.h"

#include <gtest/gtest.h>

namespace trainyard::prep {
namespace {

TEST(DocIdTest, IsSixteenHexDigitsAndStable) {
  std::string id = DocIdForOrdinal("main.support.tickets@3", 0);
  ASSERT_EQ(id.size(), 16u);
  EXPECT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_EQ(id, DocId("main.support.tickets@3", "0"));
  // The value is part of the contract (the Spark engine computes the same): sha256 of
  // "trainyard-prep-v1\0main.support.tickets@3\0" "0", first 16 hex digits.
  EXPECT_EQ(id, "59b9e2a151a8d55f");
}

TEST(DocIdTest, DiffersBySourceAndKey) {
  EXPECT_NE(DocId("a", "1"), DocId("a", "2"));
  EXPECT_NE(DocId("a", "1"), DocId("b", "1"));
  // The separator keeps ("ab", "c") and ("a", "bc") apart.
  EXPECT_NE(DocId("ab", "c"), DocId("a", "bc"));
}

}  // namespace
}  // namespace trainyard::prep
