#include "trainyard/api/uc_json.h"

#include <gtest/gtest.h>

#include "trainyard/api/api.h"
#include "trainyard/testing/status_matchers.h"

namespace trainyard::api {
namespace {

TEST(UcJsonTest, ErrorTableIsUnityCatalogs) {
  EXPECT_EQ(UcErrorCode(StatusCode::kNotFound), "NOT_FOUND");
  EXPECT_EQ(UcHttpStatus(StatusCode::kNotFound), 404);
  EXPECT_EQ(UcErrorCode(StatusCode::kAlreadyExists), "ALREADY_EXISTS");
  EXPECT_EQ(UcHttpStatus(StatusCode::kAlreadyExists), 409);
  EXPECT_EQ(UcErrorCode(StatusCode::kPermissionDenied), "PERMISSION_DENIED");
  EXPECT_EQ(UcHttpStatus(StatusCode::kPermissionDenied), 403);
  EXPECT_EQ(UcErrorCode(StatusCode::kUnauthenticated), "UNAUTHENTICATED");
  EXPECT_EQ(UcHttpStatus(StatusCode::kUnauthenticated), 401);
  EXPECT_EQ(UcErrorCode(StatusCode::kInvalidArgument), "INVALID_ARGUMENT");
  EXPECT_EQ(UcHttpStatus(StatusCode::kInvalidArgument), 400);
  // The MLflow table is unchanged.
  EXPECT_EQ(HttpStatusFor(StatusCode::kAlreadyExists), 400);
}

TEST(UcJsonTest, ErrorBodyHasCodeAndMessage) {
  http::Response r = UcErrorResponse(Status::AlreadyExists("catalog 'main' already exists"));
  EXPECT_EQ(r.status, 409);
  TY_ASSERT_OK_AND_ASSIGN(json::object body, ParseJsonObject(r.body));
  EXPECT_EQ(body.at("error_code").as_string(), "ALREADY_EXISTS");
  EXPECT_EQ(body.at("message").as_string(), "catalog 'main' already exists");
}

TEST(UcJsonTest, PagingDefaultsClampsAndRefusesNegatives) {
  TY_ASSERT_OK_AND_ASSIGN(UcPage none, ReadUcPage(json::object{}));
  EXPECT_EQ(none.max_results, kUcMaxResults);
  EXPECT_EQ(none.page_token, "");
  TY_ASSERT_OK_AND_ASSIGN(UcPage small,
                          ReadUcPage(json::object{{"max_results", "7"}, {"page_token", "abc"}}));
  EXPECT_EQ(small.max_results, 7);
  EXPECT_EQ(small.page_token, "abc");
  TY_ASSERT_OK_AND_ASSIGN(UcPage big, ReadUcPage(json::object{{"max_results", 5000}}));
  EXPECT_EQ(big.max_results, kUcMaxResults);
  EXPECT_THAT(ReadUcPage(json::object{{"max_results", -1}}),
              StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(ReadUcPage(json::object{{"max_results", "ten"}}),
              StatusIs(StatusCode::kInvalidArgument));
}

TEST(UcJsonTest, StringMapsNameTheBadField) {
  TY_ASSERT_OK_AND_ASSIGN(
      auto map,
      ReadStringMap(json::object{{"properties", json::object{{"a", "1"}}}}, "properties"));
  ASSERT_EQ(map.size(), 1u);
  EXPECT_EQ(map[0].second, "1");
  auto bad = ReadStringMap(json::object{{"properties", json::object{{"a", 1}}}}, "properties");
  EXPECT_THAT(bad, StatusIs(StatusCode::kInvalidArgument));
  EXPECT_NE(bad.status().message().find("properties.a"), std::string::npos);
}

}  // namespace
}  // namespace trainyard::api
