#include "trainyard/http/server.h"

#include <spdlog/spdlog.h>

#include <array>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

#include "trainyard/common/strings.h"

namespace trainyard::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;

namespace {

std::atomic<uint64_t> g_upload_counter{0};

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

  void Register(Session* s) {
    std::lock_guard<std::mutex> lock(mu_);
    sessions_.insert(s);
  }
  void Unregister(Session* s) {
    std::lock_guard<std::mutex> lock(mu_);
    sessions_.erase(s);
    drained_cv_.notify_all();
  }
  void BeginRequest() {
    std::lock_guard<std::mutex> lock(mu_);
    ++in_flight_;
  }
  void EndRequest() {
    std::lock_guard<std::mutex> lock(mu_);
    --in_flight_;
    drained_cv_.notify_all();
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
  std::mutex mu_;
  std::condition_variable drained_cv_;
  std::set<Session*> sessions_;  // guarded by mu_
  int in_flight_ = 0;            // guarded by mu_
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
    server_->Register(this);
  }
  ~Session() { server_->Unregister(this); }

  void Start() { ReadHeader(); }

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
      bhttp::async_read(stream_, buffer_, *file_parser_,
                        [self = shared_from_this()](beast::error_code ec, size_t) {
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
      bhttp::async_read(stream_, buffer_, *string_parser_,
                        [self = shared_from_this()](beast::error_code ec, size_t) {
                          if (!ec)
                            self->request_.body = std::move(self->string_parser_->get().body());
                          self->OnBody(ec);
                        });
    }
  }

  void OnBody(beast::error_code ec) {
    if (ec == bhttp::error::body_limit) {
      keep_alive_ = false;
      size_t limit = request_.body_file.empty() ? server_->options().max_body_bytes
                                                : server_->options().max_upload_bytes;
      RemoveUpload();
      return Respond(server_->RenderError(
          413, "request body is larger than the limit of " + std::to_string(limit) + " bytes"));
    }
    if (ec) {
      RemoveUpload();
      return;
    }
    if (server_->stopping()) keep_alive_ = false;
    server_->BeginRequest();
    asio::post(server_->workers(), [self = shared_from_this()] {
      Response response = self->server_->Handle(self->request_);
      asio::post(self->stream_.get_executor(), [self, response = std::move(response)]() mutable {
        self->RemoveUpload();
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

  template <class Message>
  void Write(std::shared_ptr<Message> msg) {
    bool close = !msg->keep_alive();
    bhttp::async_write(stream_, *msg,
                       [self = shared_from_this(), msg, close](beast::error_code ec, size_t) {
                         if (ec || close) {
                           boost::system::error_code ignored;
                           self->stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
                           if (!ec) self->Linger(std::make_shared<std::array<char, 16384>>(), 0);
                           return;
                         }
                         self->ReadHeader();
                       });
  }

  // After an early answer (413, 431) the client may still be sending: closing with unread data
  // would reset the connection and could destroy the answer before the client reads it. So read
  // and discard, for a bounded time and amount, until the client closes.
  void Linger(std::shared_ptr<std::array<char, 16384>> scratch, size_t discarded) {
    if (discarded > (size_t{4} << 20)) return;
    stream_.expires_after(std::chrono::seconds(5));
    stream_.async_read_some(asio::buffer(*scratch), [self = shared_from_this(), scratch, discarded](
                                                        beast::error_code ec, size_t n) {
      if (!ec) self->Linger(scratch, discarded + n);
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
};

void HttpServer::Impl::Stop(std::chrono::milliseconds drain) {
  if (stopped_.exchange(true)) return;
  asio::post(acceptor_.get_executor(), [this] {
    boost::system::error_code ec;
    acceptor_.close(ec);
  });
  {
    std::unique_lock<std::mutex> lock(mu_);
    drained_cv_.wait_for(lock, drain, [this] { return in_flight_ == 0; });
    for (auto* s : sessions_) s->Close();
  }
  {
    std::unique_lock<std::mutex> lock(mu_);
    drained_cv_.wait_for(lock, std::chrono::seconds(2), [this] { return sessions_.empty(); });
  }
  work_.reset();
  io_.stop();
  for (auto& t : threads_) t.join();
  threads_.clear();
  workers_.join();
  // No handler runs any more: close what is still open, so no client waits on a
  // connection that nothing will answer.
  std::lock_guard<std::mutex> lock(mu_);
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
