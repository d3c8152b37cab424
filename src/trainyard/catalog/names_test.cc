#include "trainyard/catalog/names.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "trainyard/testing/status_matchers.h"

namespace trainyard::catalog {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(NamesTest, OneLevelFollowsUnityCatalogsRule) {
  TY_EXPECT_OK(ValidateName("name", "main"));
  TY_EXPECT_OK(ValidateName("name", "a-b_c@d9"));
  TY_EXPECT_OK(ValidateName("name", std::string(255, 'x')));
  EXPECT_THAT(ValidateName("name", ""), StatusIs(StatusCode::kInvalidArgument, HasSubstr("name")));
  EXPECT_THAT(ValidateName("name", std::string(256, 'x')),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("255")));
  for (const char* bad : {"a.b", "a b", "a/b", "a\tb", "é", "a`b", "a;b"}) {
    EXPECT_THAT(ValidateName("schema_name", bad),
                StatusIs(StatusCode::kInvalidArgument, HasSubstr("schema_name")))
        << bad;
  }
}

TEST(NamesTest, NamesAreStoredLowerCase) {
  TY_ASSERT_OK_AND_ASSIGN(auto n, NormalizeName("name", "Main_Catalog"));
  EXPECT_EQ(n, "main_catalog");
}

TEST(NamesTest, FullNamesHaveTheirLevelsAndMayQuoteThem) {
  TY_ASSERT_OK_AND_ASSIGN(auto t, ParseFullName("full_name", "Main.Support.Tickets", 3));
  EXPECT_THAT(t.parts, ElementsAre("main", "support", "tickets"));
  EXPECT_EQ(t.ToString(), "main.support.tickets");
  EXPECT_EQ(t.schema(), "support");
  TY_ASSERT_OK_AND_ASSIGN(auto q, ParseFullName("full_name", "`main`.`my-schema`", 2));
  EXPECT_THAT(q.parts, ElementsAre("main", "my-schema"));
  EXPECT_THAT(ParseFullName("full_name", "main.support", 3),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("3 levels")));
  EXPECT_THAT(ParseFullName("full_name", "main..t", 3),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("empty")));
  EXPECT_THAT(ParseFullName("full_name", "`main.s", 2),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("unterminated")));
  EXPECT_THAT(ParseFullName("full_name", "`a`b.c", 2),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("quoted")));
  // A quoted level still follows the character rule: no dots smuggled inside.
  EXPECT_THAT(ParseFullName("full_name", "`a.b`.c", 2), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseFullName("full_name", "", 1), StatusIs(StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace trainyard::catalog
