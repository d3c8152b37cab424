#include "trainyard/common/status.h"

#include <gtest/gtest.h>

#include "trainyard/common/json.h"
#include "trainyard/common/strings.h"

namespace trainyard {
namespace {

Result<int> Half(int x) {
  if (x % 2) return Status::InvalidArgument("odd");
  return x / 2;
}

Result<int> Quarter(int x) {
  TY_ASSIGN_OR_RETURN(int h, Half(x));
  return Half(h);
}

TEST(StatusTest, ResultPropagatesErrors) {
  EXPECT_EQ(*Quarter(8), 2);
  EXPECT_TRUE(Quarter(6).status().IsInvalidArgument());
  EXPECT_EQ(Status::NotFound("x").ToString(), "NOT_FOUND: x");
}

TEST(StringsTest, ParseAndDecode) {
  EXPECT_EQ(ParseInt64("42"), 42);
  EXPECT_FALSE(ParseInt64("42x"));
  EXPECT_FALSE(ParseInt64("99999999999999999999"));
  EXPECT_EQ(*UrlDecode("a%20b+c", true), "a b c");
  EXPECT_FALSE(UrlDecode("%4", false));
  EXPECT_FALSE(UrlDecode("%", false));
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(JsonTest, FieldErrorsNameTheField) {
  auto o = ParseJsonObject(R"({"a": 1, "b": "x", "c": "12"})");
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(*RequiredInt64(*o, "c"), 12);
  auto bad = RequiredInt64(*o, "b");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("b must be an integer"), std::string::npos);
  auto missing = RequiredString(*o, "run_id");
  EXPECT_NE(missing.status().message().find("'run_id'"), std::string::npos);
  EXPECT_FALSE(ParseJsonObject("{").ok());
  EXPECT_FALSE(ParseJsonObject("{} x").ok());
  // Doubles are correctly rounded (Boost 1.81's own conversion is off by an ulp here).
  auto exact =
      ParseJsonObject(R"({"v": 990.5011037662389, "w": [1e-320, 0.1, 12345678901234567890]})");
  ASSERT_TRUE(exact.ok());
  EXPECT_EQ(exact->at("v").as_double(), 990.5011037662389);
  EXPECT_EQ(exact->at("w").as_array()[0].as_double(), 1e-320);
  EXPECT_EQ(exact->at("w").as_array()[1].as_double(), 0.1);
  EXPECT_EQ(exact->at("w").as_array()[2].as_uint64(), 12345678901234567890u);
  EXPECT_FALSE(ParseJsonObject("[1]").ok());
}

// The contract of Result: an ok status carries no value, and an error has no value to
// read. Both are bugs, and abort with a message rather than read garbage.
TEST(ResultDeathTest, RefusesOkStatusAndValueOfError) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH({ Result<int> r(Status::Ok()); }, "ok Status");
  Result<std::string> err(Status::NotFound("no such run 'abc'"));
  EXPECT_DEATH({ (void)err.value(); }, "NOT_FOUND: no such run 'abc'");
  EXPECT_DEATH({ (void)err->size(); }, "NOT_FOUND");
  Result<int> fine(7);
  EXPECT_EQ(*fine, 7);
}

}  // namespace
}  // namespace trainyard
