#include "trainyard/http/server.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <thread>

#include "trainyard/http/client.h"
#include "trainyard/http/router.h"

namespace trainyard::http {
namespace {

std::string Url(const HttpServer& s, const std::string& path) {
  return "http://127.0.0.1:" + std::to_string(s.port()) + path;
}

TEST(RouterTest, LiteralCaptureAndRest) {
  Router router;
  router.Add(Method::kGet, "/a/b", [](Request&) { return Response::Text(200, "lit"); });
  router.Add(Method::kGet, "/m/{id}",
             [](Request& r) { return Response::Text(200, "id=" + r.path_params["id"]); });
  router.Add(Method::kGet, "/files/{path...}",
             [](Request& r) { return Response::Text(200, "path=" + r.path_params["path"]); });
  Request r;
  r.path = "/a/b";
  EXPECT_EQ(router.Dispatch(r).body, "lit");
  r.path = "/m/42";
  EXPECT_EQ(router.Dispatch(r).body, "id=42");
  r.path = "/files/x/y/z.txt";
  EXPECT_EQ(router.Dispatch(r).body, "path=x/y/z.txt");
  r.path = "/nope";
  EXPECT_EQ(router.Dispatch(r).status, 404);
  r.method = Method::kPost;
  r.path = "/a/b";
  EXPECT_EQ(router.Dispatch(r).status, 405);
}

TEST(HttpServerTest, ServesKeepsAliveAndLimitsBodies) {
  ServerOptions options;
  options.port = 0;
  options.max_body_bytes = 1024;
  std::atomic<int> calls{0};
  HttpServer server(options, [&](Request& r) {
    ++calls;
    return Response::Json(
        200, "{\"echo\":\"" + r.body + "\",\"q\":\"" + r.Query("q").value_or("") + "\"}");
  });
  ASSERT_TRUE(server.Start().ok());
  auto r = Fetch("POST", Url(server, "/x?q=a%20b"), {}, "hi");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, R"({"echo":"hi","q":"a b"})");
  auto big = Fetch("POST", Url(server, "/x"), {}, std::string(2000, 'a'));
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->status, 413);
  EXPECT_EQ(calls.load(), 1);  // the oversized body never reached the handler
  server.Stop();
}

// Issue 13: a 200 KB header gets 431, and the server goes on serving.
TEST(HttpServerTest, OversizedHeadersGet431AndTheServerKeepsServing) {
  ServerOptions options;
  options.port = 0;
  std::atomic<int> calls{0};
  HttpServer server(options, [&](Request&) {
    ++calls;
    return Response::Text(200, "ok");
  });
  ASSERT_TRUE(server.Start().ok());
  std::map<std::string, std::string> headers;  // Beast caps one field's value at 64 KiB
  for (int i = 0; i < 4; ++i) headers["X-Big-" + std::to_string(i)] = std::string(50 << 10, 'h');
  auto big = Fetch("GET", Url(server, "/x"), headers);
  ASSERT_TRUE(big.ok()) << big.status().ToString();
  EXPECT_EQ(big->status, 431);
  EXPECT_NE(big->body.find("header"), std::string::npos);
  EXPECT_EQ(calls.load(), 0);
  auto r = Fetch("GET", Url(server, "/x"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 200);
  server.Stop();
}

TEST(HttpServerTest, WritesBodyPiecesInOrderWithoutCopying) {
  ServerOptions options;
  options.port = 0;
  auto owner = std::make_shared<std::string>(std::string(1 << 20, 'x') + "tail");
  HttpServer server(options, [&](Request&) {
    Response r = Response::Text(200, "ignored");
    r.body_pieces.push_back({nullptr, "head-"});
    r.body_pieces.push_back({nullptr, ""});
    r.body_pieces.push_back({owner, *owner});
    return r;
  });
  ASSERT_TRUE(server.Start().ok());
  auto r = Fetch("GET", Url(server, "/p"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->body, "head-" + *owner);
  EXPECT_EQ(r->headers["content-length"], std::to_string(5 + owner->size()));
  server.Stop();
}

TEST(HttpServerTest, StreamsLargeUploadsToFilesAndServesFiles) {
  std::string dir = std::filesystem::temp_directory_path() / "ty-http-test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  ServerOptions options;
  options.port = 0;
  options.upload_dir = dir + "/uploads";
  options.stream_body_to_file = [](Method m, std::string_view) { return m == Method::kPut; };
  HttpServer server(options, [&](Request& r) {
    if (r.method == Method::kPut) {
      std::filesystem::rename(r.body_file, dir + "/kept");
      return Response::Json(200, "{}");
    }
    Response resp;
    resp.file_path = dir + "/kept";
    resp.content_type = "application/octet-stream";
    return resp;
  });
  ASSERT_TRUE(server.Start().ok());
  std::string payload(3 << 20, '\0');
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<char>(i * 31 % 251);
  auto put =
      Fetch("PUT", Url(server, "/f"), {{"Content-Type", "application/octet-stream"}}, payload);
  ASSERT_TRUE(put.ok());
  EXPECT_EQ(put->status, 200);
  auto get = Fetch("GET", Url(server, "/f"));
  ASSERT_TRUE(get.ok());
  EXPECT_EQ(get->body, payload);
  server.Stop();
}

TEST(HttpServerTest, StopDrainsInFlightRequests) {
  ServerOptions options;
  options.port = 0;
  std::mutex mu;
  std::condition_variable cv;
  bool entered = false, release = false;
  HttpServer server(options, [&](Request&) {
    std::unique_lock<std::mutex> lock(mu);
    entered = true;
    cv.notify_all();
    cv.wait(lock, [&] { return release; });
    return Response::Json(200, "{\"done\":true}");
  });
  ASSERT_TRUE(server.Start().ok());
  Result<ClientResponse> result = Status::Internal("not run");
  std::thread client([&] { result = Fetch("GET", Url(server, "/slow")); });
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return entered; });
  }
  std::thread stopper([&] { server.Stop(std::chrono::seconds(10)); });
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  client.join();
  stopper.join();
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(result->status, 200);
  EXPECT_EQ(result->body, "{\"done\":true}");
  EXPECT_FALSE(Fetch("GET", Url(server, "/slow")).ok());  // no longer listening
}

}  // namespace
}  // namespace trainyard::http
