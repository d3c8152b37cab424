#include "trainyard/http/client.h"

#include <array>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "trainyard/common/strings.h"

namespace trainyard::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;

Result<ClientResponse> Fetch(const std::string& method, const std::string& url,
                             const std::map<std::string, std::string>& headers,
                             const std::string& body, std::chrono::seconds timeout) {
  if (!StartsWith(url, "http://")) {
    return Status::InvalidArgument("URL must start with http:// (got '" + Abbreviate(url) + "')");
  }
  std::string rest = url.substr(7);
  size_t slash = rest.find('/');
  std::string hostport = rest.substr(0, slash);
  std::string target = slash == std::string::npos ? "/" : rest.substr(slash);
  std::string host = hostport, port = "80";
  size_t colon = hostport.rfind(':');
  if (colon != std::string::npos) {
    host = hostport.substr(0, colon);
    port = hostport.substr(colon + 1);
  }
  try {
    // Async operations driven by run_for(), so that the timeout bounds every step
    // (Beast's synchronous calls ignore the stream's expiry).
    asio::io_context io;
    asio::ip::tcp::resolver resolver(io);
    beast::tcp_stream stream(io);
    bhttp::request<bhttp::string_body> req;
    req.method_string(method);
    req.target(target);
    req.version(11);
    req.set(bhttp::field::host, hostport);
    req.set(bhttp::field::user_agent, "trainyard-cli");
    for (const auto& [k, v] : headers) req.set(k, v);
    if (!body.empty() && headers.find("Content-Type") == headers.end()) {
      req.set(bhttp::field::content_type, "application/json");
    }
    req.body() = body;
    req.prepare_payload();
    beast::flat_buffer buffer;
    bhttp::response_parser<bhttp::string_body> parser;
    parser.body_limit(size_t{1} << 32);
    Status status = Status::Unavailable("request to " + hostport + " timed out");
    bool done = false;
    auto fail = [&](const std::string& what, const boost::system::error_code& ec) {
      status = Status::Unavailable(what + ": " + ec.message());
      done = true;
    };
    stream.expires_after(timeout);
    resolver.async_resolve(host, port, [&](boost::system::error_code ec, auto endpoints) {
      if (ec) return fail("cannot resolve " + hostport, ec);
      stream.async_connect(endpoints, [&](boost::system::error_code connect_ec, auto) {
        if (connect_ec) {
          return fail("cannot connect to " + hostport +
                          " (is the server running? start it with 'trainyard server')",
                      connect_ec);
        }
        bhttp::async_write(stream, req, [&](boost::system::error_code write_ec, size_t) {
          if (write_ec) return fail("request to " + hostport + " failed", write_ec);
          bhttp::async_read(stream, buffer, parser, [&](boost::system::error_code read_ec, size_t) {
            if (read_ec) return fail("reading the response from " + hostport, read_ec);
            status = Status::Ok();
            done = true;
          });
        });
      });
    });
    io.run_for(timeout + std::chrono::seconds(1));
    if (!done || !status.ok()) return status;
    auto& res = parser.get();
    ClientResponse out;
    out.status = static_cast<int>(res.result_int());
    out.body = std::move(res.body());
    for (const auto& f : res) {
      out.headers[ToLower(std::string_view(f.name_string()))] = std::string(f.value());
    }
    boost::system::error_code ec;
    stream.socket().shutdown(asio::ip::tcp::socket::shutdown_both, ec);
    return out;
  } catch (const std::exception& e) {
    return Status::Unavailable(std::string("HTTP request failed: ") + e.what());
  }
}

struct ClientStream::Impl {
  asio::io_context io;
  beast::tcp_stream stream{io};
  beast::flat_buffer buffer;
  bhttp::response_parser<bhttp::buffer_body> parser;
  std::string hostport;
  std::chrono::seconds timeout{60};
  int status = 0;
  std::map<std::string, std::string> headers;
  std::array<char, 16 << 10> piece{};

  // Runs the io_context until `done` or the timeout; Unavailable naming `what` on failure.
  Status RunUntil(const bool& done, const Status& result, const std::string& what) {
    io.restart();
    io.run_for(timeout + std::chrono::seconds(1));
    if (!done) return Status::Unavailable(what + " at " + hostport + " timed out");
    return result;
  }
};

ClientStream::ClientStream(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ClientStream::~ClientStream() {
  if (!impl_) return;
  boost::system::error_code ec;
  impl_->stream.socket().shutdown(asio::ip::tcp::socket::shutdown_both, ec);
}

int ClientStream::status() const { return impl_->status; }
const std::map<std::string, std::string>& ClientStream::headers() const { return impl_->headers; }

Result<std::unique_ptr<ClientStream>> ClientStream::Open(
    const std::string& method, const std::string& url,
    const std::map<std::string, std::string>& headers, const std::string& body,
    std::chrono::seconds timeout) {
  if (!StartsWith(url, "http://")) {
    return Status::InvalidArgument("URL must start with http:// (got '" + Abbreviate(url) + "')");
  }
  auto impl = std::make_unique<Impl>();
  impl->timeout = timeout;
  std::string rest = url.substr(7);
  size_t slash = rest.find('/');
  impl->hostport = rest.substr(0, slash);
  std::string target = slash == std::string::npos ? "/" : rest.substr(slash);
  std::string host = impl->hostport, port = "80";
  size_t colon = impl->hostport.rfind(':');
  if (colon != std::string::npos) {
    host = impl->hostport.substr(0, colon);
    port = impl->hostport.substr(colon + 1);
  }
  try {
    bhttp::request<bhttp::string_body> req;
    req.method_string(method);
    req.target(target);
    req.version(11);
    req.set(bhttp::field::host, impl->hostport);
    req.set(bhttp::field::user_agent, "trainyard");
    for (const auto& [k, v] : headers) req.set(k, v);
    req.body() = body;
    req.prepare_payload();
    impl->parser.body_limit(boost::none);
    Impl* p = impl.get();
    asio::ip::tcp::resolver resolver(p->io);
    Status status = Status::Ok();
    bool done = false;
    auto fail = [&](const std::string& what, const boost::system::error_code& ec) {
      status = Status::Unavailable(what + " " + p->hostport + ": " + ec.message());
      done = true;
    };
    p->stream.expires_after(timeout);
    resolver.async_resolve(host, port, [&](boost::system::error_code ec, auto endpoints) {
      if (ec) return fail("cannot resolve", ec);
      p->stream.async_connect(endpoints, [&](boost::system::error_code connect_ec, auto) {
        if (connect_ec) return fail("cannot connect to", connect_ec);
        bhttp::async_write(p->stream, req, [&](boost::system::error_code write_ec, size_t) {
          if (write_ec) return fail("sending the request to", write_ec);
          bhttp::async_read_header(p->stream, p->buffer, p->parser,
                                   [&](boost::system::error_code read_ec, size_t) {
                                     if (read_ec) return fail("reading the answer of", read_ec);
                                     done = true;
                                   });
        });
      });
    });
    TY_RETURN_IF_ERROR(p->RunUntil(done, status, "the request"));
    const auto& res = p->parser.get();
    p->status = static_cast<int>(res.result_int());
    for (const auto& f : res) {
      p->headers[ToLower(std::string_view(f.name_string()))] = std::string(f.value());
    }
    return std::unique_ptr<ClientStream>(new ClientStream(std::move(impl)));
  } catch (const std::exception& e) {
    return Status::Unavailable(std::string("HTTP request failed: ") + e.what());
  }
}

Result<bool> ClientStream::Next(std::string& out) {
  Impl* p = impl_.get();
  if (p->parser.is_done()) return false;
  try {
    auto& body = p->parser.get().body();
    body.data = p->piece.data();
    body.size = p->piece.size();
    Status status = Status::Ok();
    bool done = false;
    p->stream.expires_after(p->timeout);
    bhttp::async_read_some(
        p->stream, p->buffer, p->parser, [&](boost::system::error_code ec, size_t) {
          if (ec && ec != bhttp::error::need_buffer) {
            status =
                Status::Unavailable("reading the answer of " + p->hostport + ": " + ec.message());
          }
          done = true;
        });
    TY_RETURN_IF_ERROR(p->RunUntil(done, status, "reading the answer"));
    out.append(p->piece.data(), p->piece.size() - body.size);
    return true;
  } catch (const std::exception& e) {
    return Status::Unavailable(std::string("HTTP read failed: ") + e.what());
  }
}

}  // namespace trainyard::http
