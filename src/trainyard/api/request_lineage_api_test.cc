#include "trainyard/api/request_lineage_api.h"

#include <gtest/gtest.h>

#include "trainyard/testing/status_matchers.h"

namespace trainyard::api {
namespace {

TEST(RequestIdFromResponseIdTest, StripsTheOpenAiPrefixes) {
  TY_ASSERT_OK_AND_ASSIGN(std::string a, RequestIdFromResponseId("chatcmpl-0a1b2c"));
  EXPECT_EQ(a, "0a1b2c");
  TY_ASSERT_OK_AND_ASSIGN(std::string b, RequestIdFromResponseId("cmpl-ff00"));
  EXPECT_EQ(b, "ff00");
  TY_ASSERT_OK_AND_ASSIGN(std::string c, RequestIdFromResponseId("5f0c"));
  EXPECT_EQ(c, "5f0c");
}

TEST(RequestIdFromResponseIdTest, RefusesWhatCannotBeAnId) {
  for (std::string_view bad :
       {"", "chatcmpl-", "not-an-id", "5f0c/../x", "chatcmpl-zz", "cmpl-chatcmpl-00"}) {
    auto r = RequestIdFromResponseId(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find("request_id"), std::string::npos);
  }
  EXPECT_FALSE(RequestIdFromResponseId(std::string(65, 'a')).ok());
}

}  // namespace
}  // namespace trainyard::api
