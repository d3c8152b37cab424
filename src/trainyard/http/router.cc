#include "trainyard/http/router.h"

#include "trainyard/common/strings.h"

namespace trainyard::http {
namespace {

bool IsCapture(const std::string& seg) { return seg.size() > 2 && seg.front() == '{'; }
bool IsRestCapture(const std::string& seg) { return EndsWith(seg, "...}"); }
std::string CaptureName(const std::string& seg) {
  std::string name = seg.substr(1, seg.size() - 2);
  if (EndsWith(name, "...")) name.resize(name.size() - 3);
  return name;
}

}  // namespace

void Router::Add(Method method, const std::string& pattern, Handler handler) {
  auto route = std::make_unique<Route>();
  route->method = method;
  route->segments = SplitString(pattern, '/');
  route->handler = std::move(handler);
  bool literal = pattern.find('{') == std::string::npos;
  if (literal) literal_[pattern].push_back(route.get());
  routes_.push_back(std::move(route));
}

const Router::Route* Router::Find(Method method, std::string_view path, Request* request,
                                  bool* path_known) const {
  *path_known = false;
  auto lit = literal_.find(std::string(path));
  if (lit != literal_.end()) {
    *path_known = true;
    for (const Route* r : lit->second) {
      if (r->method == method || (method == Method::kHead && r->method == Method::kGet)) return r;
    }
  }
  std::vector<std::string> parts = SplitString(path, '/');
  for (const auto& route : routes_) {
    const auto& segs = route->segments;
    std::unordered_map<std::string, std::string> captures;
    bool match = true;
    size_t i = 0;
    for (; i < segs.size(); ++i) {
      if (IsCapture(segs[i]) && IsRestCapture(segs[i])) {
        if (i >= parts.size()) {
          match = false;
          break;
        }
        std::string rest;
        for (size_t j = i; j < parts.size(); ++j) {
          if (j > i) rest += '/';
          rest += parts[j];
        }
        captures[CaptureName(segs[i])] = rest;
        i = parts.size();
        break;
      }
      if (i >= parts.size()) {
        match = false;
        break;
      }
      if (IsCapture(segs[i])) {
        if (parts[i].empty()) {
          match = false;
          break;
        }
        captures[CaptureName(segs[i])] = parts[i];
      } else if (segs[i] != parts[i]) {
        match = false;
        break;
      }
    }
    if (!match || i != parts.size()) continue;
    *path_known = true;
    if (route->method != method && !(method == Method::kHead && route->method == Method::kGet)) {
      continue;
    }
    if (request) request->path_params = std::move(captures);
    return route.get();
  }
  return nullptr;
}

bool Router::Matches(Method method, std::string_view path) const {
  bool known = false;
  return Find(method, path, nullptr, &known) != nullptr;
}

Response Router::Dispatch(Request& request) const {
  bool known = false;
  const Route* route = Find(request.method, request.path, &request, &known);
  if (!route) {
    int status = known ? 405 : 404;
    std::string message =
        known ? std::string(MethodName(request.method)) + " is not allowed on " + request.path
              : "no API endpoint at " + request.path;
    if (render_error_) return render_error_(status, message);
    return Response::Text(status, message);
  }
  return route->handler(request);
}

}  // namespace trainyard::http
