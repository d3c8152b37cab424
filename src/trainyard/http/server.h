// HttpServer: HTTP/1.1 with keep-alive on Boost.Beast + Asio.
//
// I/O runs on `io_threads`; each complete request is handed to a worker pool of
// `worker_threads` so blocking store work never stalls the I/O threads. Bodies up
// to `max_body_bytes` are read into memory; a request for which
// `stream_body_to_file` returns true may carry up to `max_upload_bytes`, streamed
// to a file under `upload_dir`. Stop() stops accepting, lets in-flight requests
// finish (up to the drain timeout), then closes every connection.
//
// Thread-safe: Start/Stop may be called from any thread, once each.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "trainyard/common/status.h"
#include "trainyard/http/message.h"

namespace trainyard::http {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 5000;  // 0 picks a free port; see HttpServer::port()
  int io_threads = 2;
  int worker_threads = 8;
  size_t max_body_bytes = 16 << 20;
  size_t max_upload_bytes = size_t{64} << 30;
  size_t max_header_bytes = 64 << 10;
  std::string upload_dir;  // required when stream_body_to_file can return true
  std::function<bool(Method, std::string_view path)> stream_body_to_file;
  // Renders transport-level errors (body too large, bad request) in the API's format.
  std::function<Response(int status, const std::string& message)> render_error;
  std::chrono::seconds idle_timeout{120};
};

class HttpServer {
 public:
  HttpServer(ServerOptions options, Handler handler);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and starts serving on background threads.
  Status Start();
  // The bound port (useful with port 0).
  int port() const;
  // Graceful shutdown; blocks until connections are closed and threads joined.
  void Stop(std::chrono::milliseconds drain = std::chrono::seconds(10));

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainyard::http
