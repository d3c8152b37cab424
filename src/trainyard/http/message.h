// Request and Response: the HTTP layer's plain value types. Handlers receive a
// Request and return a Response; they never see Beast or Asio.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace trainyard::http {

enum class Method { kGet, kPost, kPut, kPatch, kDelete, kHead, kOptions, kOther };

std::string_view MethodName(Method m);
Method ParseMethod(std::string_view name);

struct Request {
  Method method = Method::kGet;
  std::string target;  // as received: path and query
  std::string path;    // percent-decoded, without the query
  std::unordered_map<std::string, std::vector<std::string>> query;  // decoded
  std::map<std::string, std::string> headers;                       // lower-case names
  std::string body;
  // Set instead of `body` when the body was streamed to a file (large uploads).
  // The handler may move the file; otherwise it is deleted after the response.
  std::string body_file;
  std::unordered_map<std::string, std::string> path_params;  // filled by the Router
  std::string remote_address;

  // First value of a query parameter, if present.
  std::optional<std::string> Query(std::string_view name) const;
  std::string Header(std::string_view lower_name) const;
};

// A body produced while it is sent, in chunks (server-sent events): the server calls Next on
// one of its worker threads, where it may block until the next chunk is ready, and writes each
// chunk as it comes (chunked transfer encoding). When the client is gone (a write fails) it
// calls Cancel, and Next is not called again. Next and Cancel may run on different threads.
//
// A stream that waits for long (a log followed until its job ends) should not block in Next,
// which holds a worker thread: it returns an empty chunk with true when it has nothing yet,
// and gives a PollInterval, after which the server calls Next again from a timer, holding no
// thread meanwhile.
class BodyStream {
 public:
  virtual ~BodyStream() = default;
  // The next chunk in `chunk`; false at the end of the body (a chunk given with the false is
  // still sent, before the end).
  virtual bool Next(std::string* chunk) = 0;
  virtual void Cancel() = 0;
  // How long to wait before calling Next again after it gave an empty chunk (0: at once).
  virtual std::chrono::milliseconds PollInterval() const { return std::chrono::milliseconds(0); }
};

struct Response {
  // A piece of a body kept alive by its owner (zero-copy bodies built in chunks).
  struct BodyPiece {
    std::shared_ptr<const void> owner;
    std::string_view data;
  };

  int status = 200;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  // When not empty, the body is these pieces in order (and `body` is ignored).
  std::vector<BodyPiece> body_pieces;
  // When set, the file's contents are the body (streamed, not loaded).
  std::string file_path;
  // When set, the body is this stream's chunks (`body` is ignored).
  std::shared_ptr<BodyStream> stream;

  static Response Json(int status, std::string body);
  static Response Text(int status, std::string body);
};

using Handler = std::function<Response(Request&)>;

// Splits "a=1&b=x%20y" into decoded name/value pairs. Malformed escapes are kept verbatim.
std::unordered_map<std::string, std::vector<std::string>> ParseQueryString(std::string_view q);

}  // namespace trainyard::http
