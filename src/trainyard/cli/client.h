// The CLI's client of the server's REST API, and small helpers for reading the
// JSON it returns. Where the server is and which token to use come from flags,
// TRAINYARD_URL / TRAINYARD_TOKEN, or the data directory's admin.token.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "trainyard/common/json.h"
#include "trainyard/common/status.h"
#include "trainyard/http/client.h"

namespace trainyard::cli {

std::string DefaultDataDir();
std::string EnvOr(const char* name, const std::string& fallback);

struct ClientOptions {
  std::string url = EnvOr("TRAINYARD_URL", "http://127.0.0.1:5000");
  std::string token = EnvOr("TRAINYARD_TOKEN", "");
  std::string data_dir = DefaultDataDir();
};

class Client {
 public:
  explicit Client(const ClientOptions& o);

  const std::string& url() const { return options_.url; }
  // The token calls carry: the flag's, TRAINYARD_TOKEN, or the data directory's admin.token.
  const std::string& token() const { return token_; }

  // Returns the parsed JSON body, or the server's error as a Status. For GET, `body`
  // becomes the query string.
  Result<json::value> Call(const std::string& method, const std::string& path,
                           const json::object& body = {});
  // A GET whose body is not JSON (logs); errors as for Call.
  Result<http::ClientResponse> GetRaw(const std::string& path, const json::object& query);
  // A POST of a raw (non-JSON) body, e.g. a file to import; errors as for Call.
  Result<http::ClientResponse> PostRaw(const std::string& path, const json::object& query,
                                       const std::string& payload);

 private:
  std::string Url(const std::string& path, const json::object& query) const;
  Result<http::ClientResponse> Send(const std::string& method, const std::string& url,
                                    const std::string& payload);

  ClientOptions options_;
  std::string token_;
};

// Prints "error: message" to stderr and returns 1.
int Fail(const Status& s);
// Field readers that never fail: "" / 0 / an empty array when absent.
std::string Str(const json::value& o, std::string_view key);
int64_t Int(const json::value& o, std::string_view key);
double Num(const json::value& o, std::string_view key);
const json::array& Arr(const json::value& o, std::string_view key);
std::string FormatNumber(const json::value& v);

}  // namespace trainyard::cli
