// Fuzzes StaticFiles::Serve with any requested path: it serves the files under its root or
// answers 404, and never the file beside the root (reached only by escaping it); never a crash.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "trainyard/http/static_files.h"

namespace {

const std::string kSecret = "the secret beside the UI root";

const trainyard::http::StaticFiles& Files() {
  static const trainyard::http::StaticFiles* files = [] {
    namespace fs = std::filesystem;
    fs::path base = fs::temp_directory_path() / ("ty-static-fuzz-" + std::to_string(::getpid()));
    fs::create_directories(base / "ui" / "assets");
    std::ofstream(base / "ui" / "index.html") << "<!doctype html>";
    std::ofstream(base / "ui" / "assets" / "a.js") << "1";
    std::ofstream(base / "secret") << kSecret;
    return new trainyard::http::StaticFiles((base / "ui").string());
  }();
  return *files;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view rel(reinterpret_cast<const char*>(data), size);
  trainyard::http::Response r = Files().Serve(rel);
  if (r.status != 200 && r.status != 404) std::abort();
  if (r.body.find(kSecret) != std::string::npos) std::abort();
  return 0;
}
