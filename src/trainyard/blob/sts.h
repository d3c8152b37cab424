// Temporary credentials scoped to one S3 location, from AWS STS (docs/decisions/0014).
//
// The catalog hands a client that may read (or write) a table, volume or model stored on S3 a
// credential that works for that location only and expires: the server calls STS AssumeRole
// for a role the operator configures, with an inline session policy that allows just the S3
// actions the operation needs on just that bucket and prefix. The credential's permissions are
// the intersection of the role's policy and the session policy, so the role bounds everything
// the server can ever hand out and the session policy narrows each credential to one location.
//
// The policy builder and the answer parser are pure (tested, and the parser fuzzed); the
// issuer is the only part that does I/O. An issuer is thread-safe: each call uses its own
// connection.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "trainyard/blob/sigv4.h"
#include "trainyard/common/clock.h"
#include "trainyard/common/status.h"

namespace trainyard::blob {

// What a credential allows: reading (list and get) or also writing (put, delete, abort
// multipart uploads).
enum class S3Access { kRead, kReadWrite };

// An S3 location: a bucket and a key prefix without leading or trailing '/' ("" = the whole
// bucket).
struct S3Location {
  std::string bucket;
  std::string prefix;

  // "s3://bucket/prefix" (or "s3://bucket").
  std::string Url() const;
};

// Parses "s3://bucket[/prefix]": empty segments and trailing '/' are dropped; InvalidArgument
// for a missing bucket, a bucket name S3 would refuse, '.' or '..' segments or control
// characters.
Result<S3Location> ParseS3Location(std::string_view url);

// The IAM session policy (JSON, policy language version 2012-10-17) allowing `access` to
// `location` and nothing else: s3:GetObject (plus s3:PutObject, s3:DeleteObject,
// s3:AbortMultipartUpload to write) on arn:<partition>:s3:::bucket/prefix/*, and
// s3:ListBucket on the bucket only for listing prefixes "prefix" and "prefix/*". IAM's
// wildcard characters in the bucket or prefix ('*', '?', and '$' which starts a policy
// variable) are escaped as ${*}, ${?} and ${$}, so they match themselves only.
std::string S3SessionPolicy(const S3Location& location, S3Access access,
                            std::string_view partition = "aws");

// A temporary AWS credential and when it expires (ms since the epoch).
struct TemporaryS3Credentials {
  sigv4::Credentials credentials;
  int64_t expiration_millis = 0;
};

// The credentials in an STS AssumeRole (or GetFederationToken) answer: one <Credentials>
// element with AccessKeyId, SecretAccessKey, SessionToken and an ISO 8601 UTC Expiration.
// InvalidArgument for anything else (missing or repeated fields, control characters, values
// longer than STS issues, a malformed time).
Result<TemporaryS3Credentials> ParseStsCredentials(std::string_view xml);

// STS's limits: AssumeRole's DurationSeconds and its session policy's size.
inline constexpr int kMinStsDurationSeconds = 900;
inline constexpr int kMaxStsDurationSeconds = 43200;
inline constexpr size_t kMaxSessionPolicyBytes = 2048;

// "trainyard-<who>" made a valid RoleSessionName (2-64 of [A-Za-z0-9+=,.@_-]): other
// characters become '-', and it is cut at 64. CloudTrail shows it, so S3's access logs name
// the Trainyard user a credential was issued to.
std::string StsSessionName(std::string_view who);

// Issues credentials for S3 locations.
class S3CredentialIssuer {
 public:
  virtual ~S3CredentialIssuer() = default;
  // A credential for `access` to `location`, for the session named `who` (a Trainyard user).
  // FailedPrecondition when STS refuses (the server's identity may not assume the role, the
  // policy is too large for STS); Unavailable when STS cannot be reached.
  virtual Result<TemporaryS3Credentials> Issue(const S3Location& location, S3Access access,
                                               std::string_view who) = 0;
  // What the issuer assumes, for messages and logs ("role arn:aws:iam::1:role/x, 3600 s").
  virtual std::string Describe() const = 0;
};

struct StsConfig {
  // "https://sts.us-east-1.amazonaws.com" or a compatible server ("http://127.0.0.1:5000");
  // "" is AWS's regional endpoint for `region`.
  std::string endpoint;
  std::string region = "us-east-1";
  std::string role_arn;            // arn:<partition>:iam::<account>:role/<name>
  std::string external_id;         // sent as ExternalId when not empty
  sigv4::Credentials credentials;  // the server's own identity
  int duration_seconds = 3600;
  int timeout_seconds = 30;
  int max_attempts = 3;  // transport errors and 5xx are retried with backoff
  bool verify_tls = true;
  std::string ca_file;     // extra CA certificates (PEM), e.g. AWS_CA_BUNDLE
  Clock* clock = nullptr;  // the time requests are signed at; not owned; nullptr: system clock
};

// `role_arn` and `duration_seconds` plus the standard AWS environment: AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION (else AWS_DEFAULT_REGION, else
// us-east-1), AWS_ENDPOINT_URL_STS (else AWS_ENDPOINT_URL), AWS_CA_BUNDLE. InvalidArgument
// naming the flag or variable for a malformed ARN, a duration outside STS's 900-43200 s, or
// missing credentials. `getenv` is for tests.
Result<StsConfig> StsConfigFromEnv(
    std::string_view role_arn, int duration_seconds,
    const std::function<std::optional<std::string>(const char*)>& getenv = nullptr);

// An issuer calling STS AssumeRole with `config`.
Result<std::unique_ptr<S3CredentialIssuer>> MakeStsCredentialIssuer(StsConfig config);

}  // namespace trainyard::blob
