// libFuzzer target for what the STS client reads and builds: ParseStsCredentials (an STS
// answer) must never crash and must return only non-empty printable fields and a positive
// expiry; ParseS3Location must return a valid bucket and a prefix without empty, '.' or '..'
// segments; and S3SessionPolicy of what it accepts must be JSON whose resources stay on that
// bucket.
#include <boost/json.hpp>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "trainyard/blob/sts.h"

namespace {

bool Printable(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u >= 0x7f) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace trainyard::blob;
  std::string_view text(reinterpret_cast<const char*>(data), size);

  auto credentials = ParseStsCredentials(text);
  if (credentials.ok()) {
    if (!Printable(credentials->credentials.access_key_id) ||
        !Printable(credentials->credentials.secret_access_key) ||
        !Printable(credentials->credentials.session_token) || credentials->expiration_millis <= 0) {
      std::abort();
    }
  } else if (credentials.status().code() != trainyard::StatusCode::kInvalidArgument) {
    std::abort();
  }

  auto location = ParseS3Location(text);
  if (!location.ok()) {
    if (location.status().code() != trainyard::StatusCode::kInvalidArgument) std::abort();
    return 0;
  }
  const std::string& prefix = location->prefix;
  if (!prefix.empty() &&
      (prefix.front() == '/' || prefix.back() == '/' || prefix.find("//") != std::string::npos)) {
    std::abort();
  }
  auto again = ParseS3Location(location->Url());
  if (!again.ok() || again->bucket != location->bucket || again->prefix != prefix) std::abort();
  for (S3Access access : {S3Access::kRead, S3Access::kReadWrite}) {
    boost::system::error_code ec;
    boost::json::value policy = boost::json::parse(S3SessionPolicy(*location, access), ec);
    if (ec || !policy.is_object()) std::abort();
    const std::string bucket_arn = "arn:aws:s3:::" + location->bucket;
    for (const auto& statement : policy.at("Statement").as_array()) {
      if (statement.at("Effect").as_string() != "Allow") std::abort();
      std::string resource(statement.at("Resource").as_string());
      if (resource != bucket_arn && resource.rfind(bucket_arn + "/", 0) != 0) std::abort();
      // No unescaped wildcard but the one trailing "/*" of the objects' resource.
      std::string body = resource.substr(
          0, resource.size() - (resource.size() > 2 && resource.ends_with("/*") ? 2 : 0));
      for (size_t i = 0; i < body.size(); ++i) {
        if ((body[i] == '*' || body[i] == '?') && (i < 2 || body.compare(i - 2, 2, "${") != 0)) {
          std::abort();
        }
      }
    }
  }
  return 0;
}
