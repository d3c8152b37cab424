// A small synchronous HTTP/1.1 client (Boost.Beast) for the CLI and workloads.
// One connection per call; plain http:// only. Thread-safe (no shared state).
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "trainyard/common/status.h"

namespace trainyard::http {

struct ClientResponse {
  int status = 0;
  std::string body;
  std::map<std::string, std::string> headers;  // lower-case names
};

// `url` is http://host:port/path?query. Connection failures are Unavailable with
// a message that says which address was tried.
Result<ClientResponse> Fetch(const std::string& method, const std::string& url,
                             const std::map<std::string, std::string>& headers = {},
                             const std::string& body = "",
                             std::chrono::seconds timeout = std::chrono::seconds(60));

// A response read as it arrives (server-sent events passed through): Open sends the request
// and reads the status and headers; Next returns the body's next bytes as they come. Each
// step is bounded by `timeout`. Not thread-safe; one stream per object.
class ClientStream {
 public:
  static Result<std::unique_ptr<ClientStream>> Open(
      const std::string& method, const std::string& url,
      const std::map<std::string, std::string>& headers, const std::string& body,
      std::chrono::seconds timeout);
  ~ClientStream();
  ClientStream(const ClientStream&) = delete;
  ClientStream& operator=(const ClientStream&) = delete;

  int status() const;
  const std::map<std::string, std::string>& headers() const;  // lower-case names
  // Appends the next bytes of the body to `out`; false once the body has ended. Unavailable
  // when the connection fails or stalls for longer than the timeout.
  Result<bool> Next(std::string& out);

 private:
  struct Impl;
  explicit ClientStream(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainyard::http
