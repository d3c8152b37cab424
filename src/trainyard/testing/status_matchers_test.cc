// The shared status assertions: each passes on what it should and fails, saying why, on
// what it should not.
#include "trainyard/testing/status_matchers.h"

#include <gtest/gtest-spi.h>

#include <string>

namespace trainyard {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

Status NotFound() { return Status::NotFound("no run 'r1'"); }
Result<int> Seven() { return 7; }
Result<int> Missing() { return Status::NotFound("no run 'r2'"); }

TEST(StatusMatchersTest, IsOkMatchesOkStatusesAndValues) {
  EXPECT_THAT(Status::Ok(), IsOk());
  EXPECT_THAT(Seven(), IsOk());
  EXPECT_THAT(NotFound(), Not(IsOk()));
  EXPECT_THAT(Missing(), Not(IsOk()));
}

TEST(StatusMatchersTest, IsOkExplainsTheError) {
  ::testing::StringMatchResultListener listener;
  EXPECT_FALSE(::testing::ExplainMatchResult(IsOk(), NotFound(), &listener));
  EXPECT_THAT(listener.str(), HasSubstr("NOT_FOUND: no run 'r1'"));
}

TEST(StatusMatchersTest, StatusIsComparesTheCodeAndTheMessage) {
  EXPECT_THAT(NotFound(), StatusIs(StatusCode::kNotFound));
  EXPECT_THAT(Missing(), StatusIs(StatusCode::kNotFound, HasSubstr("r2")));
  EXPECT_THAT(Status::Ok(), StatusIs(StatusCode::kOk));
  EXPECT_THAT(NotFound(), Not(StatusIs(StatusCode::kInvalidArgument)));
  EXPECT_THAT(Missing(), Not(StatusIs(StatusCode::kNotFound, HasSubstr("r1"))));
  EXPECT_THAT(Seven(), Not(StatusIs(StatusCode::kNotFound)));
}

TEST(StatusMatchersTest, AssertOkFailsFatallyOnAnError) {
  EXPECT_FATAL_FAILURE(TY_ASSERT_OK(NotFound()), "NOT_FOUND: no run 'r1'");
  EXPECT_FATAL_FAILURE(TY_ASSERT_OK(Missing()), "Missing(): NOT_FOUND");
  TY_ASSERT_OK(Status::Ok());
  TY_ASSERT_OK(Seven());
}

TEST(StatusMatchersTest, ExpectOkFailsWithoutStopping) {
  EXPECT_NONFATAL_FAILURE(TY_EXPECT_OK(NotFound()), "NotFound(): NOT_FOUND: no run 'r1'");
  TY_EXPECT_OK(Status::Ok());
}

TEST(StatusMatchersTest, AssertOkAndAssignYieldsTheValue) {
  TY_ASSERT_OK_AND_ASSIGN(int seven, Seven());
  EXPECT_EQ(seven, 7);
  std::string text;
  TY_ASSERT_OK_AND_ASSIGN(text, Result<std::string>(std::string("x")));
  EXPECT_EQ(text, "x");
}

void AssignMissing() {
  TY_ASSERT_OK_AND_ASSIGN(int value, Missing());
  (void)value;
}

TEST(StatusMatchersTest, AssertOkAndAssignFailsFatallyOnAnError) {
  EXPECT_FATAL_FAILURE(AssignMissing(), "Missing(): NOT_FOUND: no run 'r2'");
}

TEST(StatusMatchersTest, ExpectErrorChecksCodeAndText) {
  TY_EXPECT_ERROR(NotFound(), StatusCode::kNotFound, "no run");
  TY_EXPECT_ERROR(Missing(), StatusCode::kNotFound, "r2");
  EXPECT_NONFATAL_FAILURE(TY_EXPECT_ERROR(NotFound(), StatusCode::kInvalidArgument, "no run"),
                          "NOT_FOUND");
  EXPECT_NONFATAL_FAILURE(TY_EXPECT_ERROR(NotFound(), StatusCode::kNotFound, "elsewhere"),
                          "no run 'r1'");
  EXPECT_NONFATAL_FAILURE(TY_EXPECT_ERROR(Seven(), StatusCode::kNotFound, ""), "OK");
}

}  // namespace
}  // namespace trainyard
