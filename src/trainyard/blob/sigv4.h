// AWS Signature Version 4 for S3 requests (header-based authentication): the canonical
// request, the string to sign, the signing key and the Authorization header, computed with
// OpenSSL's SHA-256 and HMAC-SHA256.
//
// Pure functions of their arguments (the time comes in as an argument), so they are
// thread-safe and tested against AWS's published example signatures.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace trainyard::blob::sigv4 {

struct Credentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // sent as x-amz-security-token when not empty
};

// What the signature covers. Names and values are as sent; the signer lowercases header names,
// trims values and sorts.
struct Request {
  std::string method;         // "GET"
  std::string canonical_uri;  // the URI-encoded path, e.g. "/bucket/test%24file.text"
  // Query parameters, not encoded ("uploadId", "a/b"): the signer encodes them.
  std::vector<std::pair<std::string, std::string>> query;
  // Must include "host", "x-amz-date" and "x-amz-content-sha256" (S3 requires the latter).
  std::vector<std::pair<std::string, std::string>> headers;
  std::string payload_sha256;  // lowercase hex, or "UNSIGNED-PAYLOAD"
};

// URI-encodes per SigV4: every byte except A-Z a-z 0-9 - _ . ~ becomes %XX (uppercase hex);
// '/' is kept when `keep_slash` (object key paths) and encoded otherwise (query parts).
std::string UriEncode(std::string_view s, bool keep_slash);

// "20130524T000000Z" for a time in milliseconds since the Unix epoch (UTC).
std::string AmzDate(int64_t unix_millis);

std::string HexEncode(std::string_view bytes);
std::string HmacSha256(std::string_view key, std::string_view data);  // raw 32 bytes

// "name=value&..." sorted by encoded name, then value.
std::string CanonicalQueryString(const Request& request);
// The six newline-joined parts of the canonical request.
std::string CanonicalRequest(const Request& request);
// "host;range;x-amz-date": the lowercased, sorted header names.
std::string SignedHeaders(const Request& request);
// "20130524/us-east-1/s3/aws4_request"
std::string CredentialScope(std::string_view amz_date, std::string_view region,
                            std::string_view service);
std::string StringToSign(std::string_view amz_date, std::string_view scope,
                         std::string_view canonical_request);
// HMAC chain "AWS4"+secret → date → region → service → "aws4_request" (raw bytes).
std::string SigningKey(std::string_view secret_access_key, std::string_view date,
                       std::string_view region, std::string_view service);
// Lowercase hex signature of `request` at `amz_date` (which must equal its x-amz-date header).
std::string Signature(const Request& request, const Credentials& credentials,
                      std::string_view amz_date, std::string_view region, std::string_view service);
// "AWS4-HMAC-SHA256 Credential=.../aws4_request,SignedHeaders=...,Signature=..."
std::string AuthorizationHeader(const Request& request, const Credentials& credentials,
                                std::string_view amz_date, std::string_view region,
                                std::string_view service);

}  // namespace trainyard::blob::sigv4
