// Assertions on Status and Result<T> for tests, one set for every test file:
//
//   TY_ASSERT_OK(expr);                         // expr: a Status or a Result; fatal
//   TY_EXPECT_OK(expr);                         // the same, non-fatal
//   TY_ASSERT_OK_AND_ASSIGN(auto x, expr);      // x = the value of a Result, or a fatal failure
//   TY_EXPECT_ERROR(expr, StatusCode::kNotFound, "no run");  // code, and text in the message
//   EXPECT_THAT(expr, IsOk());
//   EXPECT_THAT(expr, StatusIs(StatusCode::kNotFound));
//   EXPECT_THAT(expr, StatusIs(StatusCode::kNotFound, ::testing::HasSubstr("no run")));
//
// A failure prints the expression and the status ("NOT_FOUND: no run 'x'"). Header-only;
// part of the testing library (trainyard_testing), which only test binaries link.
// Stateless: safe from any thread gtest allows assertions on.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <utility>

#include "trainyard/common/status.h"

namespace trainyard {

// The Status of a Status (itself) or of a Result (ok when it holds a value).
inline const Status& StatusOf(const Status& status) { return status; }
template <typename T>
Status StatusOf(const Result<T>& result) {
  return result.ok() ? Status::Ok() : result.status();
}

// gtest prints these in failure messages (found by argument-dependent lookup).
inline void PrintTo(const Status& status, std::ostream* os) {
  *os << (status.ok() ? std::string("OK") : status.ToString());
}
template <typename T>
void PrintTo(const Result<T>& result, std::ostream* os) {
  *os << (result.ok() ? std::string("OK (a value)") : result.status().ToString());
}

// Matches an ok Status, or a Result that holds a value.
MATCHER(IsOk, negation ? "is an error" : "is OK") {
  const Status status = ::trainyard::StatusOf(arg);
  if (!status.ok()) *result_listener << "which is " << status.ToString();
  return status.ok();
}

// Matches a Status (or a Result's) with this code.
MATCHER_P(StatusIs, code,
          std::string(negation ? "has a code other than " : "has code ") +
              std::string(::trainyard::StatusCodeName(code))) {
  const Status status = ::trainyard::StatusOf(arg);
  *result_listener << "which is " << (status.ok() ? std::string("OK") : status.ToString());
  return status.code() == code;
}

// Matches a Status (or a Result's) with this code and a message that `message` matches.
MATCHER_P2(StatusIs, code, message,
           std::string(negation ? "is not an error with code " : "is an error with code ") +
               std::string(::trainyard::StatusCodeName(code)) + " and a message that " +
               ::testing::DescribeMatcher<std::string>(message)) {
  const Status status = ::trainyard::StatusOf(arg);
  *result_listener << "which is " << (status.ok() ? std::string("OK") : status.ToString());
  return status.code() == code &&
         ::testing::ExplainMatchResult(message, status.message(), result_listener);
}

}  // namespace trainyard

#define TY_TESTING_CHECK_OK_(expr, check)                           \
  do {                                                              \
    const ::trainyard::Status ty_s = ::trainyard::StatusOf((expr)); \
    check(ty_s.ok()) << #expr << ": " << ty_s.ToString();           \
  } while (0)

// Fails the test here (fatal) when `expr`, a Status or a Result, is an error.
#define TY_ASSERT_OK(expr) TY_TESTING_CHECK_OK_(expr, ASSERT_TRUE)
// Records a failure and goes on when `expr`, a Status or a Result, is an error.
#define TY_EXPECT_OK(expr) TY_TESTING_CHECK_OK_(expr, EXPECT_TRUE)

// `TY_ASSERT_OK_AND_ASSIGN(auto x, ComputeX());` declares x from a Result's value, or fails
// the test (fatal) with the error. `lhs` may also be an existing variable.
#define TY_ASSERT_OK_AND_ASSIGN(lhs, expr) \
  TY_ASSERT_OK_AND_ASSIGN_IMPL_(TY_CONCAT(ty_test_result_, __LINE__), lhs, expr)
#define TY_ASSERT_OK_AND_ASSIGN_IMPL_(tmp, lhs, expr)                \
  auto tmp = (expr);                                                 \
  ASSERT_TRUE(tmp.ok()) << #expr << ": " << tmp.status().ToString(); \
  lhs = std::move(tmp).value()

// Expects `expr` (a Status or a Result) to fail with `expected_code` and a message that
// contains `text`.
#define TY_EXPECT_ERROR(expr, expected_code, text)                              \
  do {                                                                          \
    const ::trainyard::Status ty_s = ::trainyard::StatusOf((expr));             \
    EXPECT_EQ(ty_s.code(), expected_code) << #expr << ": " << ty_s.ToString();  \
    EXPECT_NE(ty_s.message().find(text), std::string::npos) << ty_s.ToString(); \
  } while (0)
