// A small synchronous HTTP/1.1 client (Boost.Beast) for the CLI and workloads.
// One connection per call; plain http:// only. Thread-safe (no shared state).
#pragma once

#include <chrono>
#include <map>
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

}  // namespace trainyard::http
