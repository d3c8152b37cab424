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
  Add(method, pattern, std::move(handler), nullptr);
}

void Router::Add(Method method, const std::string& pattern, Handler handler,
                 InlineHandler inline_handler) {
  auto route = std::make_unique<Route>();
  route->inline_handler = std::move(inline_handler);
  route->method = method;
  route->segments = SplitString(pattern, '/');
  for (size_t i = 0; i < route->segments.size(); ++i) {
    if (IsCapture(route->segments[i]) && IsRestCapture(route->segments[i])) {
      route->rest_capture = static_cast<int>(i);
      break;
    }
  }
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
  // Every request goes through here (twice: the header check and the dispatch), so the
  // routes are compared without allocating; captures are built for the one that matches.
  std::vector<std::string_view> parts;
  for (size_t start = 0;;) {
    size_t pos = path.find('/', start);
    parts.push_back(path.substr(start, pos == std::string_view::npos ? pos : pos - start));
    if (pos == std::string_view::npos) break;
    start = pos + 1;
  }
  for (const auto& route : routes_) {
    if (!PathFits(*route, parts)) continue;
    *path_known = true;
    if (route->method != method && !(method == Method::kHead && route->method == Method::kGet)) {
      continue;
    }
    if (request) {
      request->path_params.clear();
      const auto& segs = route->segments;
      for (size_t i = 0; i < segs.size(); ++i) {
        if (!IsCapture(segs[i])) continue;
        if (IsRestCapture(segs[i])) {
          std::string rest;
          for (size_t j = i; j < parts.size(); ++j) {
            if (j > i) rest += '/';
            rest += parts[j];
          }
          request->path_params[CaptureName(segs[i])] = std::move(rest);
          break;
        }
        request->path_params[CaptureName(segs[i])] = std::string(parts[i]);
      }
    }
    return route.get();
  }
  return nullptr;
}

bool Router::PathFits(const Route& route, const std::vector<std::string_view>& parts) {
  const auto& segs = route.segments;
  if (route.rest_capture < 0 ? segs.size() != parts.size()
                             : parts.size() <= static_cast<size_t>(route.rest_capture)) {
    return false;
  }
  const size_t fixed = route.rest_capture < 0 ? segs.size() : route.rest_capture;
  for (size_t i = 0; i < fixed; ++i) {
    if (IsCapture(segs[i])) {
      if (parts[i].empty()) return false;
    } else if (segs[i] != parts[i]) {
      return false;
    }
  }
  return true;
}

bool Router::Matches(Method method, std::string_view path) const {
  bool known = false;
  return Find(method, path, nullptr, &known) != nullptr;
}

std::optional<Response> Router::TryInline(Request& request) const {
  bool known = false;
  const Route* route = Find(request.method, request.path, &request, &known);
  if (!route || !route->inline_handler) return std::nullopt;
  return route->inline_handler(request);
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
