#include "trainyard/http/static_files.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace trainyard::http {
namespace {

namespace fs = std::filesystem;

std::string HeaderOf(const Response& r, const std::string& name) {
  for (const auto& [k, v] : r.headers) {
    if (k == name) return v;
  }
  return "";
}

class StaticFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = fs::temp_directory_path() / ("ty-static-" + std::to_string(::getpid()));
    fs::remove_all(base_);
    fs::create_directories(base_ / "ui" / "assets");
    Write(base_ / "ui" / "index.html", "<!doctype html><div id=root></div>");
    Write(base_ / "ui" / "assets" / "index-abc123.js", "console.log(1)");
    Write(base_ / "ui" / "assets" / "index-abc123.css", "body{}");
    Write(base_ / "secret.txt", "outside the root");
    fs::create_symlink(base_ / "secret.txt", base_ / "ui" / "assets" / "link.js");
  }
  void TearDown() override { fs::remove_all(base_); }
  static void Write(const fs::path& p, const std::string& data) { std::ofstream(p) << data; }

  fs::path base_;
};

TEST_F(StaticFilesTest, IndexIsRevalidatedAndCarriesTheSecurityHeaders) {
  StaticFiles files((base_ / "ui").string());
  Response r = files.ServeIndex();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "<!doctype html><div id=root></div>");
  EXPECT_EQ(r.content_type, "text/html; charset=utf-8");
  EXPECT_EQ(HeaderOf(r, "Cache-Control"), "no-cache");
  EXPECT_EQ(HeaderOf(r, "X-Content-Type-Options"), "nosniff");
  const std::string csp = HeaderOf(r, "Content-Security-Policy");
  for (const char* directive : {"default-src 'self'", "script-src 'self';", "style-src 'self';",
                                "connect-src 'self'", "object-src 'none'", "base-uri 'none'",
                                "frame-ancestors 'none'", "img-src 'self' data: blob:"}) {
    EXPECT_NE(csp.find(directive), std::string::npos) << directive << " missing in " << csp;
  }
  EXPECT_EQ(csp.find("unsafe-inline"), std::string::npos);
  EXPECT_EQ(csp.find("unsafe-eval"), std::string::npos);
}

TEST_F(StaticFilesTest, HashedAssetsAreImmutable) {
  StaticFiles files((base_ / "ui").string() + "/");
  Response js = files.Serve("assets/index-abc123.js");
  EXPECT_EQ(js.status, 200);
  EXPECT_EQ(js.body, "console.log(1)");
  EXPECT_EQ(js.content_type, "text/javascript; charset=utf-8");
  EXPECT_EQ(HeaderOf(js, "Cache-Control"), "public, max-age=31536000, immutable");
  EXPECT_EQ(HeaderOf(js, "X-Content-Type-Options"), "nosniff");
  Response css = files.Serve("assets/index-abc123.css");
  EXPECT_EQ(css.content_type, "text/css; charset=utf-8");
}

TEST_F(StaticFilesTest, MissingFilesAre404) {
  StaticFiles files((base_ / "ui").string());
  Response r = files.Serve("assets/nope.js");
  EXPECT_EQ(r.status, 404);
  EXPECT_NE(HeaderOf(r, "Cache-Control"), "public, max-age=31536000, immutable");
  EXPECT_EQ(files.Serve("assets").status, 404);  // a directory
}

TEST_F(StaticFilesTest, NothingOutsideTheRootIsServed) {
  StaticFiles files((base_ / "ui").string());
  for (const char* bad : {"../secret.txt", "assets/../../secret.txt", "/etc/passwd",
                          "assets//index-abc123.js", "./index.html", "assets/link.js", "",
                          "assets/%2e%2e/secret.txt", "assets\\..\\..\\secret.txt"}) {
    Response r = files.Serve(bad);
    EXPECT_EQ(r.status, 404) << bad;
    EXPECT_EQ(r.body.find("outside the root"), std::string::npos) << bad;
  }
}

TEST_F(StaticFilesTest, AnUnbuiltUiSaysHowToBuildIt) {
  StaticFiles files((base_ / "missing").string());
  Response r = files.ServeIndex();
  EXPECT_EQ(r.status, 404);
  EXPECT_NE(r.body.find("scripts/build"), std::string::npos) << r.body;
}

TEST(ContentTypeForFileTest, KnownAndUnknownExtensions) {
  EXPECT_EQ(ContentTypeForFile("a.svg"), "image/svg+xml");
  EXPECT_EQ(ContentTypeForFile("a.json"), "application/json");
  EXPECT_EQ(ContentTypeForFile("a.bin"), "application/octet-stream");
}

}  // namespace
}  // namespace trainyard::http
