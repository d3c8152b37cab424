#include "trainyard/http/client.h"

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

}  // namespace trainyard::http
