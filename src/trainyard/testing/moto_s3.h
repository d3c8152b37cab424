// moto's S3 server for tests: tests/moto_s3.py (moto[server] from PyPI, installed into .venv by
// scripts/install-deps) started once per process, with SigV4 verification on and write requests
// serialized (docs/decisions/0005, 0011). The server stops when the process exits (its standard
// input closes). TRAINYARD_TEST_PYTHON overrides the Python that runs it.
//
// Thread-safe (the servers start once, under a function-local static). Lives in the testing
// library; it knows nothing of blob/, so suites build their S3Config from its fields.
#pragma once

#include <sys/types.h>

#include <string>

namespace trainyard::testing {

class MotoS3 {
 public:
  // One plain-HTTP server per process; ok() is false (and error() says why) when it could not
  // be started.
  static const MotoS3& Get();
  // One serving HTTPS with a self-signed certificate (`ca_file()`).
  static const MotoS3& GetTls();

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  const std::string& endpoint() const { return endpoint_; }  // "http://127.0.0.1:PORT"
  const std::string& region() const { return region_; }
  const std::string& bucket() const { return bucket_; }
  const std::string& access_key_id() const { return access_key_; }
  const std::string& secret_access_key() const { return secret_key_; }
  const std::string& ca_file() const { return ca_file_; }  // HTTPS only
  // A role the access key may assume, allowed s3:* on the bucket; moto enforces the session
  // policies given to AssumeRole (Action and Resource; not conditions).
  const std::string& role_arn() const { return role_arn_; }
  // A per-process scratch directory (e.g. "cache" for S3 downloads), removed at exit.
  static std::string TempDir(const std::string& what);

 private:
  explicit MotoS3(bool tls);
  std::string Start(bool tls);

  pid_t pid_ = -1;
  int stdin_fd_ = -1;
  std::string error_, endpoint_, region_, bucket_, access_key_, secret_key_, ca_file_, role_arn_;
};

}  // namespace trainyard::testing
