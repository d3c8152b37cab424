#include "trainyard/http/static_files.h"

#include <utility>

#include "trainyard/common/paths.h"
#include "trainyard/common/strings.h"

namespace trainyard::http {
namespace {

// The UI's largest file is a few hundred KB; this bounds what one request reads.
constexpr size_t kMaxStaticFileBytes = size_t{32} << 20;

void AddSecurityHeaders(Response& r) {
  r.headers.emplace_back("Content-Security-Policy", kStaticContentSecurityPolicy);
  r.headers.emplace_back("X-Content-Type-Options", "nosniff");
  r.headers.emplace_back("Referrer-Policy", "no-referrer");
  r.headers.emplace_back("X-Frame-Options", "DENY");
}

Response NotFound(std::string message) {
  Response r = Response::Text(404, std::move(message));
  AddSecurityHeaders(r);
  r.headers.emplace_back("Cache-Control", "no-cache");
  return r;
}

}  // namespace

const char kStaticContentSecurityPolicy[] =
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'";

StaticFiles::StaticFiles(std::string root) : root_(std::move(root)) {
  while (root_.size() > 1 && root_.back() == '/') root_.pop_back();
}

std::string_view ContentTypeForFile(std::string_view name) {
  static const std::pair<std::string_view, std::string_view> kTypes[] = {
      {".html", "text/html; charset=utf-8"},
      {".js", "text/javascript; charset=utf-8"},
      {".mjs", "text/javascript; charset=utf-8"},
      {".css", "text/css; charset=utf-8"},
      {".json", "application/json"},
      {".map", "application/json"},
      {".svg", "image/svg+xml"},
      {".png", "image/png"},
      {".ico", "image/x-icon"},
      {".woff2", "font/woff2"},
      {".txt", "text/plain; charset=utf-8"},
  };
  for (const auto& [ext, type] : kTypes) {
    if (EndsWith(name, ext)) return type;
  }
  return "application/octet-stream";
}

Response StaticFiles::Serve(std::string_view rel) const {
  if (!ValidateRelativePath(rel, "path").ok()) return NotFound("no such file");
  auto file = ReadFileRangeSafely(root_ + "/" + std::string(rel), 0, kMaxStaticFileBytes);
  if (!file.ok()) {
    if (rel == "index.html") {
      return NotFound("the web UI is not built (no " + root_ +
                      "/index.html): run scripts/build with node and npm installed, or point "
                      "--ui-dir at a built UI");
    }
    return NotFound("no such file");
  }
  Response r;
  r.status = 200;
  r.content_type = std::string(ContentTypeForFile(rel));
  r.body = std::move(file->data);
  AddSecurityHeaders(r);
  // Vite names what it emits under assets/ by content hash: a changed file is a new name.
  r.headers.emplace_back("Cache-Control", StartsWith(rel, "assets/")
                                              ? "public, max-age=31536000, immutable"
                                              : "no-cache");
  return r;
}

}  // namespace trainyard::http
