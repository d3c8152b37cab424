#include "trainyard/http/server.h"

#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <thread>

#include "trainyard/common/mutex.h"
#include "trainyard/common/strings.h"
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

// The matching is the same for every shape of route, with and without captures and rest
// captures, whichever was added first.
TEST(RouterTest, MatchesWholePathsOnlyAndKeepsTheFirstMatch) {
  Router router;
  router.Add(Method::kGet, "/m/{id}/x",
             [](Request& r) { return Response::Text(200, "x of " + r.path_params["id"]); });
  router.Add(Method::kGet, "/m/{id}/{what}",
             [](Request& r) { return Response::Text(200, r.path_params["what"]); });
  router.Add(Method::kGet, "/m/a/{rest...}",
             [](Request& r) { return Response::Text(200, "rest " + r.path_params["rest"]); });
  Request r;
  r.path = "/m/7/x";
  EXPECT_EQ(router.Dispatch(r).body, "x of 7");
  EXPECT_EQ(r.path_params.size(), 1u);
  r.path = "/m/7/y";
  EXPECT_EQ(router.Dispatch(r).body, "y");
  r.path = "/m/a/b/c";
  EXPECT_EQ(router.Dispatch(r).body, "rest b/c");
  r.path = "/m//x";  // an empty capture matches nothing
  EXPECT_EQ(router.Dispatch(r).status, 404);
  r.path = "/m/7";
  EXPECT_EQ(router.Dispatch(r).status, 404);
  r.path = "/m/7/x/extra";
  EXPECT_EQ(router.Dispatch(r).status, 404);
  r.path = "/m/a";  // a rest capture needs at least one segment
  EXPECT_EQ(router.Dispatch(r).status, 404);
  EXPECT_TRUE(router.Matches(Method::kHead, "/m/7/x"));
  EXPECT_FALSE(router.Matches(Method::kPost, "/m/7/x"));
}

TEST(RouterTest, TryInlineCallsOnlyARoutesInlineHandler) {
  Router router;
  router.Add(
      Method::kGet, "/t/{name}", [](Request&) { return Response::Text(200, "worker"); },
      [](Request& r) -> std::optional<Response> {
        if (r.path_params["name"] == "hot") return Response::Text(200, "inline");
        return std::nullopt;
      });
  router.Add(Method::kGet, "/plain", [](Request&) { return Response::Text(200, "worker"); });
  Request r;
  r.path = "/t/hot";
  ASSERT_TRUE(router.TryInline(r).has_value());
  EXPECT_EQ(router.TryInline(r)->body, "inline");
  r.path = "/t/cold";
  EXPECT_FALSE(router.TryInline(r).has_value());
  EXPECT_EQ(router.Dispatch(r).body, "worker");
  r.path = "/plain";
  EXPECT_FALSE(router.TryInline(r).has_value());
  r.path = "/nope";
  EXPECT_FALSE(router.TryInline(r).has_value());
}

// answer_inline answers on the I/O thread; what it declines goes to the workers; an
// exception is a 500 and the connection's next request is served.
TEST(HttpServerTest, AnswersInlineWhatItCanAndHandsTheRestToWorkers) {
  ServerOptions options;
  options.port = 0;
  options.io_threads = 1;
  options.worker_threads = 1;
  std::atomic<int> worker_calls{0};
  Mutex mu;
  std::thread::id inline_thread, worker_thread;
  options.answer_inline = [&](Request& r) -> std::optional<Response> {
    {
      MutexLock lock(mu);
      inline_thread = std::this_thread::get_id();
    }
    if (r.path == "/throw") throw std::runtime_error("boom");
    if (r.path == "/fast") return Response::Text(200, "inline");
    return std::nullopt;
  };
  HttpServer server(options, [&](Request&) {
    ++worker_calls;
    MutexLock lock(mu);
    worker_thread = std::this_thread::get_id();
    return Response::Text(200, "worker");
  });
  ASSERT_TRUE(server.Start().ok());
  auto fast = Fetch("GET", Url(server, "/fast"));
  ASSERT_TRUE(fast.ok()) << fast.status().ToString();
  EXPECT_EQ(fast->body, "inline");
  EXPECT_EQ(worker_calls.load(), 0);
  auto slow = Fetch("GET", Url(server, "/slow"));
  ASSERT_TRUE(slow.ok());
  EXPECT_EQ(slow->body, "worker");
  EXPECT_EQ(worker_calls.load(), 1);
  {
    MutexLock lock(mu);
    EXPECT_NE(inline_thread, worker_thread);
  }
  auto thrown = Fetch("GET", Url(server, "/throw"));
  ASSERT_TRUE(thrown.ok());
  EXPECT_EQ(thrown->status, 500);
  auto again = Fetch("GET", Url(server, "/fast"));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->body, "inline");
  server.Stop();
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

// A BodyStream's chunks go out in order as chunked transfer encoding (empty ones skipped), and
// the connection is kept alive for the next request.
TEST(HttpServerTest, WritesABodyStreamInChunks) {
  class Counter : public BodyStream {
   public:
    bool Next(std::string* chunk) override {
      if (n_ == 4) return false;
      *chunk = n_ == 2 ? "" : "data: " + std::to_string(n_) + "\n\n";
      ++n_;
      return true;
    }
    void Cancel() override {}

   private:
    int n_ = 0;
  };
  ServerOptions options;
  options.port = 0;
  HttpServer server(options, [&](Request& req) {
    if (req.path == "/plain") return Response::Text(200, "plain");
    Response r;
    r.content_type = "text/event-stream";
    r.stream = std::make_shared<Counter>();
    return r;
  });
  ASSERT_TRUE(server.Start().ok());
  auto r = Fetch("GET", Url(server, "/events"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->body, "data: 0\n\ndata: 1\n\ndata: 3\n\n");
  EXPECT_EQ(r->headers["transfer-encoding"], "chunked");
  auto again = Fetch("GET", Url(server, "/plain"));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->body, "plain");
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
  Mutex mu;
  CondVar cv;
  bool entered = false, release = false;  // under mu
  HttpServer server(options, [&](Request&) {
    MutexLock lock(mu);
    entered = true;
    cv.NotifyAll();
    while (!release) cv.Wait(mu);
    return Response::Json(200, "{\"done\":true}");
  });
  ASSERT_TRUE(server.Start().ok());
  Result<ClientResponse> result = Status::Internal("not run");
  std::thread client([&] { result = Fetch("GET", Url(server, "/slow")); });
  {
    MutexLock lock(mu);
    while (!entered) cv.Wait(mu);
  }
  std::thread stopper([&] { server.Stop(std::chrono::seconds(10)); });
  {
    MutexLock lock(mu);
    release = true;
  }
  cv.NotifyAll();
  client.join();
  stopper.join();
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(result->status, 200);
  EXPECT_EQ(result->body, "{\"done\":true}");
  EXPECT_FALSE(Fetch("GET", Url(server, "/slow")).ok());  // no longer listening
}

// A raw connection, for what Fetch cannot do: send part of a request, then wait.
class RawConnection {
 public:
  explicit RawConnection(int port) : socket_(io_) {
    socket_.connect({boost::asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port)});
  }
  void Send(const std::string& data) { boost::asio::write(socket_, boost::asio::buffer(data)); }
  // Everything until the peer closes (or `limit` bytes).
  std::string ReadAll(size_t limit = 1 << 20) {
    std::string out;
    char buf[4096];
    boost::system::error_code ec;
    while (out.size() < limit) {
      size_t n = socket_.read_some(boost::asio::buffer(buf), ec);
      if (ec) break;
      out.append(buf, n);
    }
    return out;
  }
  // Reads until `needle` arrives (or the peer closes).
  std::string ReadUntil(const std::string& needle) {
    std::string out;
    char buf[4096];
    boost::system::error_code ec;
    while (out.find(needle) == std::string::npos) {
      size_t n = socket_.read_some(boost::asio::buffer(buf), ec);
      if (ec) break;
      out.append(buf, n);
    }
    return out;
  }

 private:
  boost::asio::io_context io_;
  boost::asio::ip::tcp::socket socket_;
};

std::string RequestHead(const std::string& method, const std::string& path, size_t length,
                        const std::string& extra = "") {
  return method + " " + path + " HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(length) +
         "\r\n" + extra + "\r\n";
}

TEST(HttpServerTest, HeaderCheckRefusesBeforeTheBodyIsRead) {
  ServerOptions options;
  options.port = 0;
  options.linger_timeout = std::chrono::milliseconds(200);
  std::atomic<int> handled{0}, checked_on_worker{0};
  options.check_header = [&](const Request& r, bool may_block) {
    if (r.Header("x-slow") == "1" && !may_block) return HeaderVerdict::RetryOnWorker();
    if (may_block) ++checked_on_worker;
    if (r.Header("x-key") != "open") return HeaderVerdict::Refuse(Response::Text(401, "no key"));
    return HeaderVerdict::Accept();
  };
  HttpServer server(options, [&](Request& r) {
    ++handled;
    return Response::Text(200, "got " + std::to_string(r.body.size()));
  });
  ASSERT_TRUE(server.Start().ok());
  // A declared 10 MB body, none of it sent: the answer comes anyway, and the connection closes.
  for (const std::string slow : {"0", "1"}) {
    RawConnection c(server.port());
    c.Send(RequestHead("POST", "/x", 10 << 20, "x-slow: " + slow + "\r\n"));
    std::string answer = c.ReadAll();
    EXPECT_EQ(answer.rfind("HTTP/1.1 401", 0), 0u) << answer;
    EXPECT_NE(answer.find("no key"), std::string::npos);
    EXPECT_NE(ToLower(answer).find("connection: close"), std::string::npos) << answer;
  }
  EXPECT_EQ(checked_on_worker.load(), 1);
  // A small refused body is read and dropped: the connection serves the next request.
  {
    RawConnection c(server.port());
    c.Send(RequestHead("POST", "/x", 2) + "{}" + RequestHead("POST", "/x", 2, "x-key: open\r\n") +
           "{}");
    std::string answers = c.ReadUntil("got 2");
    EXPECT_EQ(answers.rfind("HTTP/1.1 401", 0), 0u) << answers;
    EXPECT_NE(answers.find("HTTP/1.1 200"), std::string::npos) << answers;
  }
  EXPECT_EQ(handled.load(), 1);
  auto ok = Fetch("POST", Url(server, "/x"), {{"x-key", "open"}, {"x-slow", "1"}}, "abc");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->body, "got 3");
  server.Stop();
}

TEST(HttpServerTest, IdleTimeoutIsBetweenReadsNotForTheWholeRequest) {
  ServerOptions options;
  options.port = 0;
  options.idle_timeout = std::chrono::milliseconds(400);
  HttpServer server(options, [&](Request& r) {
    return Response::Text(200, "got " + std::to_string(r.body.size()));
  });
  ASSERT_TRUE(server.Start().ok());
  // Ten pieces 100 ms apart: a second in all, more than twice the idle timeout.
  {
    RawConnection c(server.port());
    c.Send(RequestHead("POST", "/x", 10, "Connection: close\r\n"));
    auto started = std::chrono::steady_clock::now();
    for (int i = 0; i < 10; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // pacing, not waiting
      c.Send("x");
    }
    std::string answer = c.ReadAll();
    EXPECT_GE(std::chrono::steady_clock::now() - started, std::chrono::milliseconds(900));
    EXPECT_NE(answer.find("got 10"), std::string::npos) << answer;
  }
  // A client that stops sending is dropped without an answer.
  {
    RawConnection c(server.port());
    c.Send(RequestHead("POST", "/x", 10) + "xyz");
    auto started = std::chrono::steady_clock::now();
    EXPECT_EQ(c.ReadAll(), "");
    EXPECT_GE(std::chrono::steady_clock::now() - started, std::chrono::milliseconds(300));
  }
  server.Stop();
}

TEST(HttpServerTest, CapsConnectionsPerClientAndInflightBytes) {
  ServerOptions options;
  options.port = 0;
  options.max_connections_per_client = 2;
  options.max_inflight_bytes_per_client = 1000;
  HttpServer server(options, [&](Request& r) {
    return Response::Text(200, "got " + std::to_string(r.body.size()));
  });
  ASSERT_TRUE(server.Start().ok());
  {
    RawConnection a(server.port());
    // Half a request of 800 bytes: admitted once the server asks for its body.
    a.Send(RequestHead("POST", "/x", 800, "Expect: 100-continue\r\n"));
    EXPECT_NE(a.ReadUntil("\r\n\r\n").find("100 Continue"), std::string::npos);
    RawConnection b(server.port());
    b.Send(RequestHead("POST", "/x", 400));
    std::string refused = b.ReadAll();
    EXPECT_EQ(refused.rfind("HTTP/1.1 503", 0), 0u) << refused;
    EXPECT_NE(refused.find("in flight"), std::string::npos) << refused;
    RawConnection c(server.port());  // a third connection from 127.0.0.1
    std::string over = c.ReadAll();
    EXPECT_EQ(over.rfind("HTTP/1.1 503", 0), 0u) << over;
    EXPECT_NE(over.find("too many connections from 127.0.0.1"), std::string::npos) << over;
    a.Send(std::string(800, 'x'));
    EXPECT_NE(a.ReadUntil("got 800").find("got 800"), std::string::npos);
  }
  // Once those are closed, new connections are admitted again.
  bool served = false;
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
       !served && std::chrono::steady_clock::now() < deadline;) {
    auto r = Fetch("POST", Url(server, "/x"), {}, std::string(900, 'y'));
    served = r.ok() && r->status == 200 && r->body == "got 900";
  }
  EXPECT_TRUE(served);
  server.Stop();
}

}  // namespace
}  // namespace trainyard::http
