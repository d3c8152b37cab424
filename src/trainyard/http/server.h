// HttpServer: HTTP/1.1 with keep-alive on Boost.Beast + Asio.
//
// I/O runs on `io_threads`; each complete request is handed to a worker pool of
// `worker_threads` so blocking store work never stalls the I/O threads, unless
// `answer_inline` answers it on the I/O thread first (from memory, without blocking), which
// saves the two thread hand-offs. Bodies up
// to `max_body_bytes` are read into memory; a request for which
// `stream_body_to_file` returns true may carry up to `max_upload_bytes`, streamed
// to a file under `upload_dir`. Stop() stops accepting, lets in-flight requests
// finish (up to the drain timeout), then closes every connection.
//
// Before any byte of a body is read, `check_header` judges the request's header (the API
// checks the credentials there) and the declared length is held against the route's limit;
// a refused request is answered at once and its connection closed, its body never read.
// Connections are capped in total and per client address, and so are the bytes of the
// in-memory bodies a client has in flight; a connection over a cap is answered 503 and
// closed. `idle_timeout` bounds the wait for each read (a slow upload that keeps sending
// succeeds; a stalled one is dropped).
//
// Thread-safe: Start/Stop may be called from any thread, once each.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "trainyard/common/status.h"
#include "trainyard/http/message.h"

namespace trainyard::http {

// What ServerOptions::check_header decides about a request from its header alone.
struct HeaderVerdict {
  enum class Kind { kAccept, kRefuse, kRetryOnWorker };
  Kind kind = Kind::kAccept;
  Response response;  // kRefuse: the answer; the body is not read and the connection closes

  static HeaderVerdict Accept() { return {}; }
  static HeaderVerdict Refuse(Response r) { return {Kind::kRefuse, std::move(r)}; }
  // The check needs to block (e.g. a store lookup): call it again on a worker thread.
  static HeaderVerdict RetryOnWorker() { return {Kind::kRetryOnWorker, {}}; }
};

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
  // Called with each request's header (no body yet), first on an I/O thread with
  // `may_block` false, where it must not block; it may answer RetryOnWorker to be called
  // again on a worker thread with `may_block` true. Unset: every request is accepted.
  std::function<HeaderVerdict(const Request&, bool may_block)> check_header;
  // Called on an I/O thread with each complete request whose body is in memory, before it
  // goes to a worker. It must not block (no store, no file, no lock held for long): it
  // answers what it can answer from memory and returns nullopt for the rest, which go to
  // the workers and `handler` as usual. Unset: every request goes to the workers.
  std::function<std::optional<Response>(Request&)> answer_inline;
  // The longest wait for the next bytes of a request (and for a kept-alive connection's
  // next request); a request that keeps sending may take as long as it needs.
  std::chrono::milliseconds idle_timeout{std::chrono::seconds(120)};
  // Open connections, in total and from one client address.
  int max_connections = 4096;
  int max_connections_per_client = 512;
  // Bytes of in-memory request bodies (declared, or the limit for chunked ones) that one
  // client address may have being read or handled at once.
  size_t max_inflight_bytes_per_client = size_t{256} << 20;
  // After answering a request whose body was not read, how long the unread rest is
  // drained before closing (closing at once would reset the connection, and a client
  // still sending could lose the answer). Nothing drained is kept.
  std::chrono::milliseconds linger_timeout{std::chrono::seconds(2)};
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
