// S3BlobStore: a BlobStore on S3-compatible object storage (AWS S3, MinIO, moto, Ceph RGW...).
//
// Keys map to objects "<prefix>/<key>" in one bucket. Requests are signed with SigV4 and sent
// over plain HTTP or HTTPS (Boost.Beast, synchronous to the caller; kept-alive connections are
// pooled). Failures that may be transient (connection errors, timeouts, 5xx, 429, SlowDown)
// are retried with exponential backoff and jitter; other 4xx answers are not. Errors name the
// bucket, the key and S3's error code; a missing object is NotFound.
//
// PutIfAbsent is a PUT with `If-None-Match: *` (S3's conditional write, docs/decisions/0011):
// 412 PreconditionFailed is AlreadyExists, 409 ConditionalRequestConflict is retried. When an
// earlier attempt may have been applied (its answer was lost), a 412 is resolved by reading the
// object back: our own bytes mean ok. Single PUTs only, so at most 5 GiB.
//
// Objects larger than `part_size` are uploaded with a multipart upload whose parts go up in
// parallel; a failed upload is aborted, so no part is left behind and no object appears.
// Directories are the '/'-separated prefixes of keys: List and IsDirectory mirror the local
// backend (an empty directory does not exist on S3). LocalPathForRead downloads the object to a
// file in `cache_dir`, replaced atomically on each call; the cache is pruned of old files when
// it grows past `cache_max_bytes`.
//
// The store is thread-safe: concurrent calls use separate connections.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "trainyard/blob/blob_store.h"
#include "trainyard/blob/sigv4.h"
#include "trainyard/common/clock.h"

namespace trainyard::blob {

// An answer that the test hook substitutes for sending a request.
struct InjectedS3Failure {
  int http_status = 503;          // 0: a connection error instead of an answer
  std::string code = "SlowDown";  // S3's error <Code>
  // Sends the request for real, then drops its answer as a lost connection would (with
  // http_status 0): the caller cannot know whether it was applied.
  bool after_sending = false;
};

struct S3Config {
  // "http://127.0.0.1:9000" or "https://s3.eu-west-1.amazonaws.com"; "" is AWS's endpoint
  // for `region`.
  std::string endpoint;
  std::string region = "us-east-1";
  std::string bucket;
  std::string prefix;  // "" or e.g. "team/artifacts": objects are "<prefix>/<key>"
  sigv4::Credentials credentials;
  // The bucket in the path (custom endpoints) rather than in the host name (AWS).
  bool path_style = true;
  size_t part_size = size_t{8} << 20;  // larger objects use multipart upload; S3's minimum is 5 MiB
  int upload_threads = 4;              // parts in flight at once, per upload
  int max_attempts = 5;                // per request, first try included
  int retry_base_millis = 100;         // backoff: base * 2^retry, capped, with jitter
  int retry_max_millis = 5000;
  int timeout_seconds = 120;  // per connect, write or read step
  int list_page_size = 1000;  // max-keys of each ListObjectsV2 page
  std::string cache_dir;      // for LocalPathForRead; "" → <tmp>/trainyard-s3-cache-<uid>
  size_t cache_max_bytes = size_t{4} << 30;
  bool verify_tls = true;  // verify the server's certificate and host name (https only)
  std::string ca_file;     // extra CA certificates (PEM) to trust, e.g. AWS_CA_BUNDLE
  Clock* clock = nullptr;  // the time requests are signed at; not owned; nullptr: system clock
  // Test-only: consulted before each attempt of each request ("PUT", "/bucket/key?...");
  // an answer replaces sending it.
  std::function<std::optional<InjectedS3Failure>(std::string_view method, std::string_view target)>
      inject_failure_for_test;
};

// "s3://bucket" or "s3://bucket/some/prefix" plus the standard AWS environment variables:
// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION (else
// AWS_DEFAULT_REGION, else us-east-1), AWS_ENDPOINT_URL_S3 (else AWS_ENDPOINT_URL; a custom
// endpoint means path-style addressing) and AWS_CA_BUNDLE. `getenv` is for tests.
Result<S3Config> S3ConfigFromUrl(
    std::string_view url,
    const std::function<std::optional<std::string>(const char*)>& getenv = nullptr);

// Checks that the bucket is reachable with the credentials (one HEAD request) and returns the
// store.
Result<std::unique_ptr<BlobStore>> OpenS3BlobStore(S3Config config);

}  // namespace trainyard::blob
