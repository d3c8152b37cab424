// The Status → HTTP/MLflow error table (api.h) and the error bodies built from it.
#include "trainyard/api/api.h"

#include <gtest/gtest.h>

namespace trainyard::api {
namespace {

TEST(HttpStatusForTest, EachCodeMapsAsStatusHDocumentsIt) {
  EXPECT_EQ(HttpStatusFor(StatusCode::kOk), 200);
  EXPECT_EQ(HttpStatusFor(StatusCode::kInvalidArgument), 400);
  EXPECT_EQ(HttpStatusFor(StatusCode::kNotFound), 404);
  EXPECT_EQ(HttpStatusFor(StatusCode::kAlreadyExists), 400);
  EXPECT_EQ(HttpStatusFor(StatusCode::kPermissionDenied), 403);
  EXPECT_EQ(HttpStatusFor(StatusCode::kUnauthenticated), 401);
  EXPECT_EQ(HttpStatusFor(StatusCode::kFailedPrecondition), 400);
  EXPECT_EQ(HttpStatusFor(StatusCode::kNotImplemented), 501);
  EXPECT_EQ(HttpStatusFor(StatusCode::kUnavailable), 503);
  EXPECT_EQ(HttpStatusFor(StatusCode::kInternal), 500);
  EXPECT_EQ(HttpStatusFor(StatusCode::kIOError), 500);
}

// The server running out of disk or memory is 507 Insufficient Storage (a server-side
// condition the client may retry later), not a 4xx blaming the request.
TEST(HttpStatusForTest, ResourceExhaustedIsInsufficientStorage) {
  EXPECT_EQ(HttpStatusFor(StatusCode::kResourceExhausted), 507);
  EXPECT_EQ(MlflowErrorCode(StatusCode::kResourceExhausted), "RESOURCE_EXHAUSTED");
  http::Response r = ErrorResponse(Status::ResourceExhausted("disk full: /data"));
  EXPECT_EQ(r.status, 507);
  json::value body = json::parse(r.body);
  EXPECT_EQ(body.at("error_code").as_string(), "RESOURCE_EXHAUSTED");
  EXPECT_EQ(body.at("message").as_string(), "disk full: /data");
}

TEST(ErrorResponseTest, UnauthenticatedAsksForABearerToken) {
  http::Response r = ErrorResponse(Status::Unauthenticated("invalid token"));
  EXPECT_EQ(r.status, 401);
  ASSERT_EQ(r.headers.size(), 1u);
  EXPECT_EQ(r.headers[0].first, "WWW-Authenticate");
  EXPECT_EQ(r.headers[0].second, "Bearer");
  EXPECT_EQ(json::parse(r.body).at("error_code").as_string(), "UNAUTHENTICATED");
}

}  // namespace
}  // namespace trainyard::api
