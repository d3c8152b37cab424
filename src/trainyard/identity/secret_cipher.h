// SecretCipher: authenticated encryption of secret values at rest (AES-256-GCM,
// OpenSSL). A sealed value is nonce (12 bytes) || ciphertext || tag (16 bytes); the
// associated data binds it to its row (the secret's name), so a sealed value copied
// onto another secret fails to open. See docs/decisions/0008-secrets-at-rest.md.
//
// Thread-safe (const after construction).
#pragma once

#include <string>
#include <string_view>

#include "trainyard/common/status.h"

namespace trainyard::identity {

class SecretCipher {
 public:
  static constexpr size_t kKeyBytes = 32;

  // `key` must be kKeyBytes long.
  explicit SecretCipher(std::string key) : key_(std::move(key)) {}

  // Reads the key at `path`, or creates it (random, mode 0600) when there is none.
  static Result<SecretCipher> LoadOrCreate(const std::string& path);

  Result<std::string> Seal(std::string_view plaintext, std::string_view associated) const;
  // DataLoss-like failures (wrong key, tampered bytes, other row) are InvalidArgument-free:
  // they return Internal, as they are never the caller's fault.
  Result<std::string> Open(std::string_view sealed, std::string_view associated) const;

 private:
  std::string key_;
};

}  // namespace trainyard::identity
