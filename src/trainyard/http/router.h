// Router: maps (method, path) to a Handler. Patterns are literal paths, paths with
// `{name}` segments, or end in `{name...}` to capture the rest of the path.
// Routes are added before serving starts; Dispatch is then thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "trainyard/http/message.h"

namespace trainyard::http {

// Answers a request on an I/O thread without blocking, or returns nullopt to have it go to
// the route's Handler on a worker (see ServerOptions::answer_inline).
using InlineHandler = std::function<std::optional<Response>(Request&)>;

class Router {
 public:
  void Add(Method method, const std::string& pattern, Handler handler);
  // The same, with a handler tried first on the I/O thread (TryInline).
  void Add(Method method, const std::string& pattern, Handler handler,
           InlineHandler inline_handler);
  // Finds the route and calls it; 404 for an unknown path, 405 for a known path
  // with another method. `not_found` renders those errors.
  Response Dispatch(Request& request) const;
  // Calls the matching route's InlineHandler; nullopt when there is none or it declines.
  std::optional<Response> TryInline(Request& request) const;
  // Whether a route with a capture matches; used to decide how to read a body.
  bool Matches(Method method, std::string_view path) const;

  void SetErrorRenderer(std::function<Response(int status, const std::string& message)> r) {
    render_error_ = std::move(r);
  }

 private:
  struct Route {
    Method method;
    std::vector<std::string> segments;  // "{x}" captures one, "{x...}" the rest
    int rest_capture = -1;              // the index of the "{x...}" segment, if any
    Handler handler;
    InlineHandler inline_handler;  // may be empty
  };
  // Whether the path's segments fit the route's pattern.
  static bool PathFits(const Route& route, const std::vector<std::string_view>& parts);
  const Route* Find(Method method, std::string_view path, Request* request, bool* path_known) const;

  std::unordered_map<std::string, std::vector<const Route*>> literal_;  // by path
  std::vector<std::unique_ptr<Route>> routes_;
  std::function<Response(int, const std::string&)> render_error_;
};

}  // namespace trainyard::http
