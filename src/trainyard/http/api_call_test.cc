#include "trainyard/http/api_call.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>

#include "trainyard/http/server.h"
#include "trainyard/testing/status_matchers.h"

namespace trainyard::http {
namespace {

// A server whose answers depend on the path: /flaky fails with 503 twice and then answers;
// /down always 503; /denied 403 with the server's error JSON; /missing 404; /bad 400 with a
// plain-text body; /notjson 200 with a body that is not JSON; /echo the request's
// Authorization and Content-Type headers and body as JSON.
class ApiCallTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions options;
    options.port = 0;
    server_ = std::make_unique<HttpServer>(options, [this](Request& r) {
      ++calls_;
      if (r.path == "/flaky") {
        if (++flaky_calls_ <= 2) return Response::Text(503, "restarting");
        return Response::Json(200, R"({"ok": true})");
      }
      if (r.path == "/down") return Response::Text(503, "still restarting");
      if (r.path == "/denied") {
        return Response::Json(
            403, R"({"error_code": "PERMISSION_DENIED", "message": "needs MODIFY on t"})");
      }
      if (r.path == "/missing") return Response::Json(404, R"({"message": "no table t"})");
      if (r.path == "/bad") return Response::Text(400, "plain words");
      if (r.path == "/notjson") return Response::Text(200, "<html>");
      json::object echo{{"authorization", r.headers["authorization"]},
                        {"content_type", r.headers["content-type"]},
                        {"body", r.body}};
      return Response::Json(200, json::serialize(echo));
    });
    ASSERT_THAT(server_->Start(), IsOk());
  }
  void TearDown() override { server_->Stop(); }

  std::string Url(const std::string& path) {
    return "http://127.0.0.1:" + std::to_string(server_->port()) + path;
  }

  std::unique_ptr<HttpServer> server_;
  std::atomic<int> calls_{0};
  std::atomic<int> flaky_calls_{0};
};

TEST_F(ApiCallTest, SendsTheTokenAndTheJsonBody) {
  TY_ASSERT_OK_AND_ASSIGN(
      auto echo, CallApiJson("POST", Url("/echo"), "tok", json::object{{"a", 1}}, "echoing"));
  EXPECT_EQ(echo.at("authorization").as_string(), "Bearer tok");
  EXPECT_EQ(echo.at("content_type").as_string(), "application/json");
  EXPECT_EQ(echo.at("body").as_string(), R"({"a":1})");
  // No token, a GET: neither header nor body.
  TY_ASSERT_OK_AND_ASSIGN(echo, CallApiJson("GET", Url("/echo"), "", {}, "echoing"));
  EXPECT_EQ(echo.at("authorization").as_string(), "");
  EXPECT_EQ(echo.at("content_type").as_string(), "");
  EXPECT_EQ(echo.at("body").as_string(), "");
}

TEST_F(ApiCallTest, Retries5xxUntilTheServerAnswers) {
  TY_ASSERT_OK_AND_ASSIGN(auto r, CallApi("GET", Url("/flaky"), "", "", "", "reading"));
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(flaky_calls_.load(), 3);
}

TEST_F(ApiCallTest, GivesUpOn5xxAfterTheLastTry) {
  EXPECT_THAT(CallApi("GET", Url("/down"), "", "", "", "reading t"),
              StatusIs(StatusCode::kUnavailable,
                       ::testing::StrEq("reading t: HTTP 503: still restarting")));
  EXPECT_EQ(calls_.load(), kApiCallAttempts);
}

TEST_F(ApiCallTest, Maps4xxWithoutRetrying) {
  EXPECT_THAT(CallApi("POST", Url("/denied"), "", "x", "text/plain", "writing t"),
              StatusIs(StatusCode::kPermissionDenied,
                       ::testing::StrEq("writing t: HTTP 403: needs MODIFY on t")));
  EXPECT_THAT(CallApi("GET", Url("/missing"), "", "", "", "reading t"),
              StatusIs(StatusCode::kNotFound, ::testing::HasSubstr("HTTP 404: no table t")));
  EXPECT_THAT(
      CallApi("GET", Url("/bad"), "", "", "", "reading t"),
      StatusIs(StatusCode::kInvalidArgument, ::testing::HasSubstr("HTTP 400: plain words")));
  EXPECT_EQ(calls_.load(), 3);
}

TEST_F(ApiCallTest, AnswerThatIsNotJsonIsUnavailable) {
  EXPECT_THAT(CallApiJson("GET", Url("/notjson"), "", {}, "reading t"),
              StatusIs(StatusCode::kUnavailable, ::testing::HasSubstr("invalid JSON")));
}

}  // namespace
}  // namespace trainyard::http
