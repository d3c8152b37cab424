// What blob/'s AWS clients share (S3BlobStore, the STS client in sts.h): an HTTP/1.1
// connection driven synchronously with a timeout per step, the endpoint it connects to, where
// an answer's body goes, and the few XML helpers AWS's flat answers need.
//
// Internal to blob/: nothing outside this folder includes it. A Connection is used by one
// thread at a time; the free functions are pure.
#pragma once

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <chrono>
#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "trainyard/common/status.h"

namespace trainyard::blob::aws {

using Headers = std::vector<std::pair<std::string, std::string>>;

// ---- XML: AWS's answers are flat enough that finding elements by tag suffices.

std::string XmlUnescape(std::string_view s);
std::string XmlEscape(std::string_view s);
// The raw inner text of every <tag>...</tag> (not nested in itself).
std::vector<std::string_view> XmlElements(std::string_view xml, std::string_view tag);
// The unescaped text of the first <tag>...</tag>; "" when there is none.
std::string XmlText(std::string_view xml, std::string_view tag);

// ---- HTTP

struct Endpoint {
  bool tls = false;
  std::string host;         // to connect to and, for TLS, to verify
  std::string port;         // "80"
  std::string host_header;  // "host" or "host:port"
};

// "http://host[:port]" or "https://host[:port]"; errors name `service` ("S3", "STS").
Result<Endpoint> ParseEndpoint(std::string_view url, std::string_view service = "S3");

// Sets up `ctx` for HTTPS: the system's CA certificates, plus those in `ca_file` when given
// (AWS_CA_BUNDLE), and peer verification unless `verify` is false. Returns the error of a CA
// file that cannot be loaded (the caller reports it on first use).
Status ConfigureTls(boost::asio::ssl::context& ctx, const std::string& ca_file, bool verify);

// Where a response body goes.
struct BodySink {
  enum class Kind { kString, kBuffer, kFile };
  Kind kind = Kind::kString;
  std::string* str = nullptr;
  char* buf = nullptr;
  size_t cap = 0;
  int fd = -1;
  std::string file_name;  // for messages
  size_t written = 0;

  // Empties the sink for another attempt.
  void Reset();
};

struct Response {
  int status = 0;
  std::map<std::string, std::string> headers;  // lowercased names
  std::string body;                            // error answers (and string sinks' bodies)
};

// One kept-alive connection. `tls` (not owned) must outlive it.
class Connection {
 public:
  Connection(boost::asio::ssl::context* tls, std::chrono::seconds timeout)
      : tls_ctx_(tls), timeout_(timeout) {}
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Connects to `host` (the endpoint's, or bucket.endpoint for virtual-hosted style).
  Status Open(const Endpoint& ep, const std::string& host);

  void set_verify(bool verify) { verify_ = verify; }
  bool reusable() const { return reusable_; }

  // Sends one request and reads its answer; 2xx bodies go to `sink`. Unavailable means the
  // connection failed (retryable); the connection is then not reusable.
  Result<Response> Exchange(const std::string& method, const std::string& target,
                            const Headers& headers, std::string_view body, BodySink& sink);

 private:
  boost::beast::tcp_stream& Lowest() {
    return tls_ ? boost::beast::get_lowest_layer(*tls_) : *tcp_;
  }

  template <class F>
  boost::system::error_code WithStream(F&& f) {
    if (tls_) return f(*tls_);
    return f(*tcp_);
  }

  // Starts one asynchronous operation and runs it to completion or to the timeout (Beast's
  // synchronous calls cannot time out; tcp_stream's expiry bounds asynchronous ones).
  template <class Start>
  boost::system::error_code Run(Start&& start) {
    boost::system::error_code result = boost::asio::error::would_block;
    Lowest().expires_after(timeout_);
    start([&result](boost::system::error_code ec, auto&&...) { result = ec; });
    io_.restart();
    io_.run();
    return result;
  }

  boost::asio::ssl::context* tls_ctx_;
  std::chrono::seconds timeout_;
  bool verify_ = true;
  bool reusable_ = false;
  boost::asio::io_context io_;
  std::optional<boost::beast::tcp_stream> tcp_;
  std::optional<boost::beast::ssl_stream<boost::beast::tcp_stream>> tls_;
  boost::beast::flat_buffer buffer_;
};

}  // namespace trainyard::blob::aws
