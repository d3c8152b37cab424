#include "trainyard/blob/sigv4.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <ctime>
#include <map>

#include "trainyard/common/strings.h"

namespace trainyard::blob::sigv4 {
namespace {

constexpr char kAlgorithm[] = "AWS4-HMAC-SHA256";

// Lowercased name → values in the order given, joined by ',' (SigV4's rule for repeats).
std::map<std::string, std::string> CanonicalHeaderMap(const Request& request) {
  std::map<std::string, std::string> out;
  for (const auto& [name, value] : request.headers) {
    // Trim and collapse runs of spaces to one.
    std::string v;
    bool space = false;
    for (char c : Trim(value)) {
      if (c == ' ' || c == '\t') {
        space = true;
        continue;
      }
      if (space && !v.empty()) v.push_back(' ');
      space = false;
      v.push_back(c);
    }
    std::string key = ToLower(name);
    auto it = out.find(key);
    if (it == out.end()) {
      out.emplace(std::move(key), std::move(v));
    } else {
      it->second += "," + v;
    }
  }
  return out;
}

}  // namespace

std::string UriEncode(std::string_view s, bool keep_slash) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                      c == '-' || c == '_' || c == '.' || c == '~';
    if (unreserved || (keep_slash && c == '/')) {
      out.push_back(ch);
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0xf]);
    }
  }
  return out;
}

std::string AmzDate(int64_t unix_millis) {
  std::time_t secs = static_cast<std::time_t>(unix_millis / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

std::string HexEncode(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char ch : bytes) {
    auto b = static_cast<unsigned char>(ch);
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 0xf]);
  }
  return out;
}

std::string HmacSha256(std::string_view key, std::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), out, &len);
  return std::string(reinterpret_cast<const char*>(out), len);
}

std::string CanonicalQueryString(const Request& request) {
  std::vector<std::pair<std::string, std::string>> encoded;
  encoded.reserve(request.query.size());
  for (const auto& [name, value] : request.query) {
    encoded.emplace_back(UriEncode(name, false), UriEncode(value, false));
  }
  std::sort(encoded.begin(), encoded.end());
  std::string out;
  for (const auto& [name, value] : encoded) {
    if (!out.empty()) out.push_back('&');
    out += name + "=" + value;
  }
  return out;
}

std::string SignedHeaders(const Request& request) {
  std::string out;
  for (const auto& [name, value] : CanonicalHeaderMap(request)) {
    if (!out.empty()) out.push_back(';');
    out += name;
  }
  return out;
}

std::string CanonicalRequest(const Request& request) {
  std::string headers;
  for (const auto& [name, value] : CanonicalHeaderMap(request)) {
    headers += name + ":" + value + "\n";
  }
  return request.method + "\n" + request.canonical_uri + "\n" + CanonicalQueryString(request) +
         "\n" + headers + "\n" + SignedHeaders(request) + "\n" + request.payload_sha256;
}

std::string CredentialScope(std::string_view amz_date, std::string_view region,
                            std::string_view service) {
  return std::string(amz_date.substr(0, 8)) + "/" + std::string(region) + "/" +
         std::string(service) + "/aws4_request";
}

std::string StringToSign(std::string_view amz_date, std::string_view scope,
                         std::string_view canonical_request) {
  return std::string(kAlgorithm) + "\n" + std::string(amz_date) + "\n" + std::string(scope) + "\n" +
         Sha256Hex(canonical_request);
}

std::string SigningKey(std::string_view secret_access_key, std::string_view date,
                       std::string_view region, std::string_view service) {
  std::string k = HmacSha256("AWS4" + std::string(secret_access_key), date);
  k = HmacSha256(k, region);
  k = HmacSha256(k, service);
  return HmacSha256(k, "aws4_request");
}

std::string Signature(const Request& request, const Credentials& credentials,
                      std::string_view amz_date, std::string_view region,
                      std::string_view service) {
  std::string scope = CredentialScope(amz_date, region, service);
  std::string to_sign = StringToSign(amz_date, scope, CanonicalRequest(request));
  std::string key =
      SigningKey(credentials.secret_access_key, amz_date.substr(0, 8), region, service);
  return HexEncode(HmacSha256(key, to_sign));
}

std::string AuthorizationHeader(const Request& request, const Credentials& credentials,
                                std::string_view amz_date, std::string_view region,
                                std::string_view service) {
  return std::string(kAlgorithm) + " Credential=" + credentials.access_key_id + "/" +
         CredentialScope(amz_date, region, service) + ",SignedHeaders=" + SignedHeaders(request) +
         ",Signature=" + Signature(request, credentials, amz_date, region, service);
}

}  // namespace trainyard::blob::sigv4
