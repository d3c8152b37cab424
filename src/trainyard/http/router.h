// Router: maps (method, path) to a Handler. Patterns are literal paths, paths with
// `{name}` segments, or end in `{name...}` to capture the rest of the path.
// Routes are added before serving starts; Dispatch is then thread-safe.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "trainyard/http/message.h"

namespace trainyard::http {

class Router {
 public:
  void Add(Method method, const std::string& pattern, Handler handler);
  // Finds the route and calls it; 404 for an unknown path, 405 for a known path
  // with another method. `not_found` renders those errors.
  Response Dispatch(Request& request) const;
  // Whether a route with a capture matches; used to decide how to read a body.
  bool Matches(Method method, std::string_view path) const;

  void SetErrorRenderer(std::function<Response(int status, const std::string& message)> r) {
    render_error_ = std::move(r);
  }

 private:
  struct Route {
    Method method;
    std::vector<std::string> segments;  // "{x}" captures one, "{x...}" the rest
    Handler handler;
  };
  const Route* Find(Method method, std::string_view path, Request* request, bool* path_known) const;

  std::unordered_map<std::string, std::vector<const Route*>> literal_;  // by path
  std::vector<std::unique_ptr<Route>> routes_;
  std::function<Response(int, const std::string&)> render_error_;
};

}  // namespace trainyard::http
