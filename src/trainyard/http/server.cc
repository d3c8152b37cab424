#include "trainyard/http/server.h"

#include <spdlog/spdlog.h>

#include <array>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <filesystem>
#include <set>
#include <thread>
#include <unordered_map>
#include <utility>

#include "trainyard/common/mutex.h"
#include "trainyard/common/strings.h"

namespace trainyard::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;

namespace {

std::atomic<uint64_t> g_upload_counter{0};

// How long Stop() waits, after closing the sessions, for them to go.
constexpr auto kSessionCloseWait = std::chrono::seconds(2);

// Logs at most one line per interval (with how many were skipped), so that a flood of
// refused or dropped connections cannot fill the log.
class LogLimiter {
 public:
  // Returns how many lines were skipped since the last one (>= 0) when one may be logged now,
  // or -1.
  int64_t Allow() TY_EXCLUDES(mu_) {
    auto now = std::chrono::steady_clock::now();
    MutexLock lock(mu_);
    if (now - last_ < kLogInterval) {
      ++skipped_;
      return -1;
    }
    last_ = now;
    return std::exchange(skipped_, 0);
  }

 private:
  static constexpr auto kLogInterval = std::chrono::seconds(10);

  Mutex mu_;
  std::chrono::steady_clock::time_point last_ TY_GUARDED_BY(mu_){};
  int64_t skipped_ TY_GUARDED_BY(mu_) = 0;
};

LogLimiter g_refusal_log;
LogLimiter g_idle_log;

// A Beast body made of Response::BodyPiece views, written without copying them.
struct PiecesBody {
  using value_type = std::vector<Response::BodyPiece>;

  static std::uint64_t size(const value_type& pieces) {
    std::uint64_t n = 0;
    for (const auto& p : pieces) n += p.data.size();
    return n;
  }

  class writer {
   public:
    using const_buffers_type = asio::const_buffer;

    template <bool isRequest, class Fields>
    writer(const bhttp::header<isRequest, Fields>&, const value_type& pieces) : pieces_(pieces) {}

    void init(beast::error_code& ec) { ec = {}; }

    boost::optional<std::pair<const_buffers_type, bool>> get(beast::error_code& ec) {
      ec = {};
      while (next_ < pieces_.size() && pieces_[next_].data.empty()) ++next_;
      if (next_ >= pieces_.size()) return boost::none;
      const auto& piece = pieces_[next_++];
      return std::make_pair(asio::const_buffer(piece.data.data(), piece.data.size()),
                            next_ < pieces_.size());
    }

   private:
    const value_type& pieces_;
    size_t next_ = 0;
  };
};

}  // namespace

class HttpServer::Impl {
 public:
  Impl(ServerOptions options, Handler handler)
      : options_(std::move(options)),
        handler_(std::move(handler)),
        io_(options_.io_threads),
        work_(asio::make_work_guard(io_)),
        acceptor_(io_),
        workers_(options_.worker_threads) {}

  Status Start() {
    boost::system::error_code ec;
    auto address = asio::ip::make_address(options_.host, ec);
    if (ec) return Status::InvalidArgument("--host: not an IP address: " + options_.host);
    tcp::endpoint endpoint(address, static_cast<uint16_t>(options_.port));
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      return Status::Unavailable("cannot listen on " + options_.host + ":" +
                                 std::to_string(options_.port) + ": " + ec.message());
    }
    port_ = acceptor_.local_endpoint().port();
    DoAccept();
    for (int i = 0; i < options_.io_threads; ++i) {
      threads_.emplace_back([this] { io_.run(); });
    }
    return Status::Ok();
  }

  int port() const { return port_; }

  void Stop(std::chrono::milliseconds drain);

  class Session;

  bool stopping() const { return stopped_.load(); }
  const ServerOptions& options() const { return options_; }

  // Registers a new connection; returns why it is refused (over a connection cap), or "".
  std::string Register(Session* s, const std::string& remote) {
    MutexLock lock(mu_);
    sessions_.insert(s);
    if (open_connections_ >= options_.max_connections) {
      return "the server has " + std::to_string(open_connections_) +
             " connections open, its limit (--max-connections); retry later";
    }
    ClientUsage& c = clients_[remote];
    if (c.connections >= options_.max_connections_per_client) {
      return "too many connections from " + remote + " (" + std::to_string(c.connections) +
             " open, the limit is " + std::to_string(options_.max_connections_per_client) +
             ", --max-connections-per-client); reuse or close idle connections";
    }
    ++c.connections;
    ++open_connections_;
    return "";
  }
  void Unregister(Session* s, const std::string& remote, bool counted) {
    MutexLock lock(mu_);
    sessions_.erase(s);
    if (counted) {
      --open_connections_;
      auto it = clients_.find(remote);
      if (it != clients_.end() && --it->second.connections <= 0 && it->second.inflight_bytes == 0) {
        clients_.erase(it);
      }
    }
    drained_cv_.NotifyAll();
  }
  // Holds `bytes` of in-memory body against the client's cap; false when over it. A client
  // with nothing in flight may always send one request (up to the body limit).
  bool ReserveBytes(const std::string& remote, size_t bytes) {
    MutexLock lock(mu_);
    ClientUsage& c = clients_[remote];
    if (c.inflight_bytes > 0 && c.inflight_bytes + bytes > options_.max_inflight_bytes_per_client) {
      return false;
    }
    c.inflight_bytes += bytes;
    return true;
  }
  void ReleaseBytes(const std::string& remote, size_t bytes) {
    MutexLock lock(mu_);
    auto it = clients_.find(remote);
    if (it == clients_.end()) return;
    it->second.inflight_bytes -= std::min(bytes, it->second.inflight_bytes);
  }
  void BeginRequest() {
    MutexLock lock(mu_);
    ++in_flight_;
  }
  void EndRequest() {
    MutexLock lock(mu_);
    --in_flight_;
    drained_cv_.NotifyAll();
  }

  Response Handle(Request& request) {
    try {
      return handler_(request);
    } catch (const std::exception& e) {
      spdlog::error("handler threw for {}: {}", request.path, e.what());
      return RenderError(500, std::string("internal error: ") + e.what());
    } catch (...) {
      spdlog::error("handler threw a non-standard exception for {}", request.path);
      return RenderError(500, "internal error");
    }
  }

  std::optional<Response> AnswerInline(Request& request) {
    try {
      return options_.answer_inline(request);
    } catch (const std::exception& e) {
      spdlog::error("inline handler threw for {}: {}", request.path, e.what());
      return RenderError(500, std::string("internal error: ") + e.what());
    } catch (...) {
      spdlog::error("inline handler threw a non-standard exception for {}", request.path);
      return RenderError(500, "internal error");
    }
  }

  HeaderVerdict CheckHeader(const Request& request, bool may_block) {
    try {
      HeaderVerdict v = options_.check_header(request, may_block);
      if (may_block && v.kind == HeaderVerdict::Kind::kRetryOnWorker) {
        return HeaderVerdict::Refuse(
            RenderError(500, "internal error: the header check did not decide"));
      }
      return v;
    } catch (const std::exception& e) {
      spdlog::error("header check threw for {}: {}", request.path, e.what());
      return HeaderVerdict::Refuse(RenderError(500, std::string("internal error: ") + e.what()));
    }
  }

  Response RenderError(int status, const std::string& message) {
    if (options_.render_error) return options_.render_error(status, message);
    return Response::Text(status, message);
  }

  asio::thread_pool& workers() { return workers_; }

 private:
  void DoAccept() {
    acceptor_.async_accept(asio::make_strand(io_),
                           [self = this](boost::system::error_code ec, tcp::socket socket) {
                             if (ec) {
                               if (!self->stopping() && ec != asio::error::operation_aborted)
                                 self->DoAccept();
                               return;
                             }
                             self->StartSession(std::move(socket));
                             if (!self->stopping()) self->DoAccept();
                           });
  }

  void StartSession(tcp::socket socket);

  // Declared before io_ so that sessions destroyed with the io_context can still
  // unregister themselves.
  ServerOptions options_;
  Handler handler_;
  Mutex mu_;
  CondVar drained_cv_;
  struct ClientUsage {
    int connections = 0;
    size_t inflight_bytes = 0;
  };
  std::set<Session*> sessions_ TY_GUARDED_BY(mu_);
  int in_flight_ TY_GUARDED_BY(mu_) = 0;
  int open_connections_ TY_GUARDED_BY(mu_) = 0;  // those admitted under the caps
  std::unordered_map<std::string, ClientUsage> clients_ TY_GUARDED_BY(mu_);  // by address
  std::atomic<bool> stopped_{false};
  int port_ = 0;
  asio::io_context io_;
  // Keeps the I/O threads running while every request is on the worker pool (no
  // pending I/O), e.g. while Stop() drains; released by Stop().
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  tcp::acceptor acceptor_;
  asio::thread_pool workers_;
  std::vector<std::thread> threads_;
};

// One connection: read a request, hand it to a worker, write the response, repeat.
class HttpServer::Impl::Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, Impl* server) : stream_(std::move(socket)), server_(server) {
    boost::system::error_code ec;
    auto ep = stream_.socket().remote_endpoint(ec);
    if (!ec) remote_ = ep.address().to_string();
    refusal_ = server_->Register(this, remote_);
  }
  ~Session() {
    ReleaseBytes();
    server_->Unregister(this, remote_, refusal_.empty());
  }

  void Start() {
    if (refusal_.empty()) return ReadHeader();
    if (int64_t skipped = g_refusal_log.Allow(); skipped >= 0) {
      spdlog::warn("refused a connection from {}: {} ({} more refusals not logged)", remote_,
                   refusal_, skipped);
    }
    keep_alive_ = false;
    Respond(server_->RenderError(503, refusal_));
  }

  // Only when no I/O thread runs (after the io_context stopped).
  void CloseNow() {
    boost::system::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.socket().close(ec);
  }

  // Called under the server's lock from another thread.
  // A session whose last reference is gone may still be registered, its destructor
  // waiting for the lock the caller holds: it closes its own socket, so skip it.
  void Close() {
    auto self = weak_from_this().lock();
    if (!self) return;
    asio::post(stream_.get_executor(), [self = std::move(self)] {
      boost::system::error_code ec;
      self->stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
      self->stream_.socket().close(ec);
    });
  }

 private:
  void ReadHeader() {
    header_parser_.emplace();
    header_parser_->header_limit(static_cast<uint32_t>(server_->options().max_header_bytes));
    header_parser_->body_limit(boost::none);
    stream_.expires_after(server_->options().idle_timeout);
    bhttp::async_read_header(
        stream_, buffer_, *header_parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
  }

  void OnHeader(beast::error_code ec) {
    if (ec == bhttp::error::header_limit) {
      keep_alive_ = false;
      body_unread_ = true;  // the rest of the header is still coming: drain it after the 431
      request_ = Request();
      return Respond(
          server_->RenderError(431, "request header fields are larger than the limit of " +
                                        std::to_string(server_->options().max_header_bytes) +
                                        " bytes; send fewer or shorter headers"));
    }
    if (ec) return;  // closed, timed out, or garbage: drop the connection
    auto& header = header_parser_->get();
    request_ = Request();
    request_.method = ParseMethod(std::string_view(header.method_string()));
    request_.target = std::string(header.target());
    request_.remote_address = remote_;
    body_unread_ = !header_parser_->is_done();
    for (const auto& field : header) {
      request_.headers[ToLower(std::string_view(field.name_string()))] = std::string(field.value());
    }
    std::string_view target = request_.target;
    size_t q = target.find('?');
    std::string_view raw_path = target.substr(0, q);
    auto decoded = UrlDecode(raw_path, false);
    if (!decoded) {
      keep_alive_ = false;
      return Respond(server_->RenderError(400, "malformed percent-encoding in the URL path"));
    }
    request_.path = std::move(*decoded);
    if (q != std::string_view::npos) request_.query = ParseQueryString(target.substr(q + 1));
    keep_alive_ = header.keep_alive();

    if (!server_->options().check_header) return OnVerdict(HeaderVerdict::Accept());
    HeaderVerdict verdict = server_->CheckHeader(request_, /*may_block=*/false);
    if (verdict.kind != HeaderVerdict::Kind::kRetryOnWorker) return OnVerdict(std::move(verdict));
    asio::post(server_->workers(), [self = shared_from_this()] {
      HeaderVerdict v = self->server_->CheckHeader(self->request_, /*may_block=*/true);
      asio::post(self->stream_.get_executor(),
                 [self, v = std::move(v)]() mutable { self->OnVerdict(std::move(v)); });
    });
  }

  // Goes on with a request whose header was judged: refuses it (its body unread), or checks
  // its declared size and reads its body.
  void OnVerdict(HeaderVerdict verdict) {
    if (verdict.kind == HeaderVerdict::Kind::kRefuse) {
      auto declared = header_parser_->content_length();
      bool expects_continue = ToLower(request_.Header("expect")) == "100-continue";
      if (body_unread_ && declared && *declared <= kSmallBodyBytes && !expects_continue) {
        // A small body is read and dropped, so that the connection stays usable.
        string_parser_.emplace(std::move(*header_parser_));
        string_parser_->body_limit(kSmallBodyBytes);
        refused_response_ = std::move(verdict.response);
        return ReadBodySome(*string_parser_, [self = shared_from_this()](beast::error_code ec) {
          if (ec) return;
          self->body_unread_ = false;
          self->string_parser_->get().body().clear();
          self->Respond(std::move(self->refused_response_));
        });
      }
      if (body_unread_) keep_alive_ = false;
      return Respond(std::move(verdict.response));
    }
    const auto& opts = server_->options();
    bool to_file = opts.stream_body_to_file &&
                   opts.stream_body_to_file(request_.method, request_.path) &&
                   !opts.upload_dir.empty();
    // The declared length is checked here: the header parser already read it without a limit.
    size_t limit = to_file ? opts.max_upload_bytes : opts.max_body_bytes;
    if (auto declared = header_parser_->content_length(); declared && *declared > limit) {
      keep_alive_ = false;
      return Respond(server_->RenderError(413, "request body of " + std::to_string(*declared) +
                                                   " bytes is larger than the limit of " +
                                                   std::to_string(limit) + " bytes"));
    }
    if (!to_file && body_unread_) {
      size_t expected = static_cast<size_t>(
          std::min<uint64_t>(header_parser_->content_length().value_or(limit), limit));
      if (!server_->ReserveBytes(remote_, expected)) {
        keep_alive_ = false;
        return Respond(server_->RenderError(
            503, "too many request bytes in flight from " + remote_ + " (the limit is " +
                     std::to_string(opts.max_inflight_bytes_per_client) +
                     " bytes, --max-inflight-bytes-per-client); wait for answers before sending "
                     "more"));
      }
      reserved_bytes_ = expected;
    }
    if (body_unread_ && ToLower(request_.Header("expect")) == "100-continue") {
      // The client waits for this before sending its body.
      stream_.expires_after(opts.idle_timeout);
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      return asio::async_write(stream_, asio::buffer(kContinue.data(), kContinue.size()),
                               [self = shared_from_this(), to_file](beast::error_code ec, size_t) {
                                 if (ec) return self->ReleaseBytes();
                                 self->ReadBody(to_file);
                               });
    }
    ReadBody(to_file);
  }

  void ReadBody(bool to_file) {
    const auto& opts = server_->options();
    if (to_file) {
      file_parser_.emplace(std::move(*header_parser_));
      file_parser_->body_limit(opts.max_upload_bytes);
      std::error_code fec;
      std::filesystem::create_directories(opts.upload_dir, fec);
      request_.body_file = opts.upload_dir + "/upload-" + std::to_string(getpid()) + "-" +
                           std::to_string(g_upload_counter.fetch_add(1));
      beast::error_code bec;
      file_parser_->get().body().open(request_.body_file.c_str(), beast::file_mode::write, bec);
      if (bec) {
        keep_alive_ = false;
        return Respond(server_->RenderError(500, "cannot open upload file: " + bec.message()));
      }
      // Beast reads at most the buffer's free capacity (at least 512 bytes) per call; after a
      // header that is a few hundred bytes, so a large body would arrive in 512-byte reads
      // and 512-byte file writes (65 MB/s measured). 64 KiB is Beast's largest read.
      buffer_.reserve(64 << 10);
      ReadBodySome(*file_parser_, [self = shared_from_this()](beast::error_code ec) {
        self->file_parser_->get().body().close();
        self->OnBody(ec);
      });
    } else {
      // As above: room for the declared body (up to Beast's largest read), so that a metric
      // batch of tens of KB arrives in a few reads, not in 512-byte ones.
      if (auto declared = header_parser_->content_length(); declared && *declared > 4096) {
        buffer_.reserve(
            static_cast<size_t>(std::min<uint64_t>(*declared + buffer_.size(), 64 << 10)));
      }
      string_parser_.emplace(std::move(*header_parser_));
      string_parser_->body_limit(opts.max_body_bytes);
      ReadBodySome(*string_parser_, [self = shared_from_this()](beast::error_code ec) {
        if (!ec) self->request_.body = std::move(self->string_parser_->get().body());
        self->OnBody(ec);
      });
    }
  }

  // Reads the body in steps, each given the idle timeout anew: a request may take as long
  // as it needs while it keeps sending.
  template <class Parser, class Done>
  void ReadBodySome(Parser& parser, Done done) {
    if (parser.is_done()) return done(beast::error_code());
    stream_.expires_after(server_->options().idle_timeout);
    bhttp::async_read_some(stream_, buffer_, parser,
                           [self = shared_from_this(), &parser, done = std::move(done)](
                               beast::error_code ec, size_t) mutable {
                             if (ec) return done(ec);
                             self->ReadBodySome(parser, std::move(done));
                           });
  }

  void ReleaseBytes() {
    if (reserved_bytes_ == 0) return;
    server_->ReleaseBytes(remote_, reserved_bytes_);
    reserved_bytes_ = 0;
  }

  void OnBody(beast::error_code ec) {
    if (!ec) body_unread_ = false;
    if (ec == bhttp::error::body_limit) {
      keep_alive_ = false;
      size_t limit = request_.body_file.empty() ? server_->options().max_body_bytes
                                                : server_->options().max_upload_bytes;
      RemoveUpload();
      return Respond(server_->RenderError(
          413, "request body is larger than the limit of " + std::to_string(limit) + " bytes"));
    }
    if (ec) {
      // Closed, or idle for longer than the idle timeout: drop the connection.
      if (ec == beast::error::timeout) {
        if (int64_t skipped = g_idle_log.Allow(); skipped >= 0) {
          spdlog::info("dropped a request from {} ({} {}): no bytes for {} ms ({} more not logged)",
                       remote_, MethodName(request_.method), request_.path,
                       server_->options().idle_timeout.count(), skipped);
        }
      }
      RemoveUpload();
      ReleaseBytes();
      return;
    }
    if (server_->stopping()) keep_alive_ = false;
    if (server_->options().answer_inline && request_.body_file.empty()) {
      if (std::optional<Response> response = server_->AnswerInline(request_)) {
        ReleaseBytes();
        return Respond(std::move(*response));
      }
    }
    server_->BeginRequest();
    asio::post(server_->workers(), [self = shared_from_this()] {
      Response response = self->server_->Handle(self->request_);
      asio::post(self->stream_.get_executor(), [self, response = std::move(response)]() mutable {
        self->RemoveUpload();
        self->ReleaseBytes();
        self->Respond(std::move(response));
        self->server_->EndRequest();
      });
    });
  }

  void RemoveUpload() {
    if (!request_.body_file.empty()) {
      std::error_code ec;
      std::filesystem::remove(request_.body_file, ec);
      request_.body_file.clear();
    }
  }

  template <class Message>
  void Finish(Message& msg, const Response& response) {
    msg.version(11);
    msg.result(static_cast<unsigned>(response.status));
    msg.set(bhttp::field::server, "trainyard");
    msg.set(bhttp::field::content_type, response.content_type);
    for (const auto& [name, value] : response.headers) msg.set(name, value);
    msg.keep_alive(keep_alive_ && !server_->stopping());
  }

  void Respond(Response response) {
    stream_.expires_after(std::chrono::seconds(300));
    if (response.stream) return RespondStream(std::move(response));
    if (!response.file_path.empty()) {
      auto msg = std::make_shared<bhttp::response<bhttp::file_body>>();
      beast::error_code ec;
      msg->body().open(response.file_path.c_str(), beast::file_mode::scan, ec);
      if (ec) {
        return Respond(server_->RenderError(404, "cannot open file: " + ec.message()));
      }
      Finish(*msg, response);
      msg->prepare_payload();
      bool head = request_.method == Method::kHead;
      if (head) {
        auto empty = std::make_shared<bhttp::response<bhttp::empty_body>>();
        Finish(*empty, response);
        empty->content_length(msg->body().size());
        return Write(empty);
      }
      return Write(msg);
    }
    if (!response.body_pieces.empty()) {
      auto msg = std::make_shared<bhttp::response<PiecesBody>>();
      Finish(*msg, response);
      msg->body() = std::move(response.body_pieces);
      msg->prepare_payload();
      return Write(msg);
    }
    auto msg = std::make_shared<bhttp::response<bhttp::string_body>>();
    Finish(*msg, response);
    msg->body() = std::move(response.body);
    msg->prepare_payload();
    Write(msg);
  }

  // A chunked body from a BodyStream: the header now, then each chunk as a worker thread gets
  // it from the stream (Next may block), then the last chunk.
  void RespondStream(Response response) {
    auto msg = std::make_shared<bhttp::response<bhttp::empty_body>>();
    Finish(*msg, response);
    msg->chunked(true);
    auto serializer = std::make_shared<bhttp::response_serializer<bhttp::empty_body>>(*msg);
    bhttp::async_write_header(stream_, *serializer,
                              [self = shared_from_this(), msg, serializer, body = response.stream,
                               close = !msg->keep_alive()](beast::error_code ec, size_t) {
                                if (ec) {
                                  body->Cancel();
                                  return self->ShutdownSend();
                                }
                                self->PumpStream(body, close);
                              });
  }

  void PumpStream(std::shared_ptr<BodyStream> body, bool close) {
    asio::post(server_->workers(), [self = shared_from_this(), body, close] {
      auto chunk = std::make_shared<std::string>();
      bool more = body->Next(chunk.get());
      asio::post(self->stream_.get_executor(), [self, body, close, chunk, more] {
        self->stream_.expires_after(std::chrono::seconds(300));
        if (!more) {
          auto end = [self, close](beast::error_code ec, size_t) {
            if (ec || close) return self->ShutdownSend();
            self->ReadHeader();
          };
          if (chunk->empty())
            return asio::async_write(self->stream_, bhttp::make_chunk_last(), end);
          // A last piece that came with the end (an error event, say): it, then the end.
          return asio::async_write(self->stream_, bhttp::make_chunk(asio::buffer(*chunk)),
                                   [self, chunk, end](beast::error_code ec, size_t n) {
                                     if (ec) return end(ec, n);
                                     asio::async_write(self->stream_, bhttp::make_chunk_last(),
                                                       end);
                                   });
        }
        if (chunk->empty()) {
          auto wait = body->PollInterval();
          if (wait.count() <= 0) return self->PumpStream(body, close);
          // Nothing yet: ask again after the interval, holding no worker thread meanwhile.
          auto timer = std::make_shared<asio::steady_timer>(self->stream_.get_executor(), wait);
          return timer->async_wait([self, body, close, timer](beast::error_code ec) {
            if (ec) {
              body->Cancel();
              return self->ShutdownSend();
            }
            self->PumpStream(body, close);
          });
        }
        asio::async_write(self->stream_, bhttp::make_chunk(asio::buffer(*chunk)),
                          [self, body, close, chunk](beast::error_code ec, size_t) {
                            if (ec) {
                              body->Cancel();
                              return self->ShutdownSend();
                            }
                            self->PumpStream(body, close);
                          });
      });
    });
  }

  void ShutdownSend() {
    boost::system::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
  }

  template <class Message>
  void Write(std::shared_ptr<Message> msg) {
    bool close = !msg->keep_alive();
    bhttp::async_write(stream_, *msg,
                       [self = shared_from_this(), msg, close](beast::error_code ec, size_t) {
                         if (ec || close) {
                           boost::system::error_code ignored;
                           self->stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
                           if (!ec && self->body_unread_ && self->refusal_.empty()) {
                             self->Linger();
                           }
                           return;
                         }
                         self->ReadHeader();
                       });
  }

  // Drains (and drops) what the client still sends of a body we did not read, until it
  // closes or the linger timeout passes, so that closing does not reset the connection
  // before the client has read our answer.
  void Linger() {
    if (!linger_buffer_) {
      linger_buffer_ = std::make_unique<char[]>(kLingerBufferBytes);
      linger_deadline_ = std::chrono::steady_clock::now() + server_->options().linger_timeout;
    }
    stream_.expires_at(linger_deadline_);
    stream_.async_read_some(asio::buffer(linger_buffer_.get(), kLingerBufferBytes),
                            [self = shared_from_this()](beast::error_code ec, size_t) {
                              if (!ec) self->Linger();
                            });
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  Impl* server_;
  std::string remote_;
  std::optional<bhttp::request_parser<bhttp::empty_body>> header_parser_;
  std::optional<bhttp::request_parser<bhttp::string_body>> string_parser_;
  std::optional<bhttp::request_parser<bhttp::file_body>> file_parser_;
  Request request_;
  bool keep_alive_ = true;
  bool body_unread_ = false;   // the current request has a body not (fully) read
  std::string refusal_;        // not empty: the connection is over a cap, refused with this
  size_t reserved_bytes_ = 0;  // held against the client's in-flight cap
  Response refused_response_;  // sent once the small body of a refused request is read
  static constexpr size_t kSmallBodyBytes = 64 << 10;
  static constexpr size_t kLingerBufferBytes = 64 << 10;
  std::unique_ptr<char[]> linger_buffer_;
  std::chrono::steady_clock::time_point linger_deadline_;
};

void HttpServer::Impl::Stop(std::chrono::milliseconds drain) {
  if (stopped_.exchange(true)) return;
  asio::post(acceptor_.get_executor(), [this] {
    boost::system::error_code ec;
    acceptor_.close(ec);
  });
  {
    MutexLock lock(mu_);
    const auto drained = std::chrono::steady_clock::now() + drain;
    while (in_flight_ != 0) {
      if (!drained_cv_.WaitUntil(mu_, drained)) break;
    }
    for (auto* s : sessions_) s->Close();
  }
  {
    MutexLock lock(mu_);
    const auto closed = std::chrono::steady_clock::now() + kSessionCloseWait;
    while (!sessions_.empty()) {
      if (!drained_cv_.WaitUntil(mu_, closed)) break;
    }
  }
  work_.reset();
  io_.stop();
  for (auto& t : threads_) t.join();
  threads_.clear();
  workers_.join();
  // No handler runs any more: close what is still open, so no client waits on a
  // connection that nothing will answer.
  MutexLock lock(mu_);
  for (auto* s : sessions_) s->CloseNow();
}

void HttpServer::Impl::StartSession(tcp::socket socket) {
  std::make_shared<Session>(std::move(socket), this)->Start();
}

HttpServer::HttpServer(ServerOptions options, Handler handler)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(handler))) {}

HttpServer::~HttpServer() { Stop(std::chrono::milliseconds(0)); }

Status HttpServer::Start() { return impl_->Start(); }
int HttpServer::port() const { return impl_->port(); }
void HttpServer::Stop(std::chrono::milliseconds drain) { impl_->Stop(drain); }

}  // namespace trainyard::http
