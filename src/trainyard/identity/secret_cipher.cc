#include "trainyard/identity/secret_cipher.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

namespace trainyard::identity {
namespace {

constexpr int kNonceBytes = 12;
constexpr int kTagBytes = 16;

using CipherCtx = std::unique_ptr<EVP_CIPHER_CTX, decltype(&EVP_CIPHER_CTX_free)>;

const unsigned char* Bytes(std::string_view s) {
  return reinterpret_cast<const unsigned char*>(s.data());
}

Result<std::string> ReadKey(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW);
  if (fd < 0) return Status::NotFound(path);
  std::string key(SecretCipher::kKeyBytes + 1, '\0');
  ssize_t n = ::read(fd, key.data(), key.size());
  ::close(fd);
  if (n != static_cast<ssize_t>(SecretCipher::kKeyBytes)) {
    return Status::Internal("the secrets key " + path +
                            " must hold exactly 32 bytes; restore it "
                            "from a backup (without it stored secrets cannot be read)");
  }
  key.resize(SecretCipher::kKeyBytes);
  return key;
}

}  // namespace

Result<SecretCipher> SecretCipher::LoadOrCreate(const std::string& path) {
  auto existing = ReadKey(path);
  if (existing.ok()) return SecretCipher(std::move(*existing));
  if (!existing.status().IsNotFound()) return existing.status();
  std::string key(kKeyBytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(key.data()), static_cast<int>(kKeyBytes)) != 1) {
    return Status::Internal("cannot generate the secrets key: no randomness from OpenSSL");
  }
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0600);
  if (fd < 0) {
    if (errno == EEXIST) {  // another process created it first
      TY_ASSIGN_OR_RETURN(key, ReadKey(path));
      return SecretCipher(std::move(key));
    }
    return Status::IOError("cannot create the secrets key " + path + ": " + std::strerror(errno));
  }
  bool ok = ::write(fd, key.data(), key.size()) == static_cast<ssize_t>(key.size()) &&
            ::fchmod(fd, 0600) == 0 && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok) {
    ::unlink(path.c_str());
    return Status::IOError("cannot write the secrets key " + path + ": " + std::strerror(errno));
  }
  return SecretCipher(std::move(key));
}

Result<std::string> SecretCipher::Seal(std::string_view plaintext,
                                       std::string_view associated) const {
  if (key_.size() != kKeyBytes) return Status::Internal("the secrets key must be 32 bytes");
  std::string out(kNonceBytes + plaintext.size() + kTagBytes, '\0');
  auto* nonce = reinterpret_cast<unsigned char*>(out.data());
  if (RAND_bytes(nonce, kNonceBytes) != 1) return Status::Internal("no randomness for a nonce");
  CipherCtx ctx(EVP_CIPHER_CTX_new(), EVP_CIPHER_CTX_free);
  int len = 0;
  auto* body = nonce + kNonceBytes;
  if (!ctx || EVP_EncryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, Bytes(key_), nonce) != 1 ||
      EVP_EncryptUpdate(ctx.get(), nullptr, &len, Bytes(associated),
                        static_cast<int>(associated.size())) != 1 ||
      EVP_EncryptUpdate(ctx.get(), body, &len, Bytes(plaintext),
                        static_cast<int>(plaintext.size())) != 1 ||
      EVP_EncryptFinal_ex(ctx.get(), body + len, &len) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_GET_TAG, kTagBytes, body + plaintext.size()) !=
          1) {
    return Status::Internal("AES-256-GCM encryption failed");
  }
  return out;
}

Result<std::string> SecretCipher::Open(std::string_view sealed, std::string_view associated) const {
  if (key_.size() != kKeyBytes) return Status::Internal("the secrets key must be 32 bytes");
  if (sealed.size() < static_cast<size_t>(kNonceBytes + kTagBytes)) {
    return Status::Internal("a stored secret is truncated");
  }
  size_t n = sealed.size() - kNonceBytes - kTagBytes;
  std::string out(n, '\0');
  std::string tag(sealed.substr(kNonceBytes + n));
  CipherCtx ctx(EVP_CIPHER_CTX_new(), EVP_CIPHER_CTX_free);
  int len = 0;
  auto* plain = reinterpret_cast<unsigned char*>(out.data());
  if (!ctx ||
      EVP_DecryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, Bytes(key_), Bytes(sealed)) != 1 ||
      EVP_DecryptUpdate(ctx.get(), nullptr, &len, Bytes(associated),
                        static_cast<int>(associated.size())) != 1 ||
      EVP_DecryptUpdate(ctx.get(), plain, &len, Bytes(sealed) + kNonceBytes, static_cast<int>(n)) !=
          1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_TAG, kTagBytes, tag.data()) != 1 ||
      EVP_DecryptFinal_ex(ctx.get(), plain + len, &len) != 1) {
    return Status::Internal(
        "a stored secret failed its integrity check (a different secrets.key, or the database "
        "row was altered); recreate the secret with 'trainyard secrets create'");
  }
  return out;
}

}  // namespace trainyard::identity
