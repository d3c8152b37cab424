// StaticFiles: serves the files of one directory (the built web UI) with the headers a
// single-page app needs: a strict Content-Security-Policy (no inline scripts, no eval, only
// this origin), nosniff, and caching by kind of file — `index.html` is revalidated on every
// load (no-cache), while files under `assets/` carry a content hash in their names and are
// cached for a year (immutable).
//
// A request names a file by a path relative to the root; only safe relative paths
// (common/paths.h: no '..', no empty or '.' segment, no control characters) are looked at,
// and the file is opened without following a link, so nothing outside the root is served.
// A missing file, a directory or a refused path is a 404.
//
// Thread-safe: holds only the root; every request opens its file anew (a rebuilt UI is
// served without a restart).
#pragma once

#include <string>
#include <string_view>

#include "trainyard/http/message.h"

namespace trainyard::http {

// The Content-Security-Policy sent with every file.
extern const char kStaticContentSecurityPolicy[];

class StaticFiles {
 public:
  // `root`: the directory served (need not exist yet: then every request is a 404 that
  // says how to build it).
  explicit StaticFiles(std::string root);

  // The file at `rel` beneath the root ("index.html", "assets/index-3f2a.js").
  Response Serve(std::string_view rel) const;
  // index.html: what `/` shows.
  Response ServeIndex() const { return Serve("index.html"); }

  const std::string& root() const { return root_; }

 private:
  std::string root_;
};

// The Content-Type for a file name, by its extension ("application/octet-stream" if unknown).
std::string_view ContentTypeForFile(std::string_view name);

}  // namespace trainyard::http
