#include "trainyard/common/page_token.h"

#include <openssl/evp.h>

#include "trainyard/common/json.h"

namespace trainyard {

std::string Base64Encode(std::string_view data) {
  std::string out(4 * ((data.size() + 2) / 3), '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(data.data()),
                          static_cast<int>(data.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

Result<std::string> Base64Decode(std::string_view data) {
  if (data.size() % 4 != 0 || data.size() > (1 << 20)) {
    return Status::InvalidArgument("not base64");
  }
  std::string out(3 * data.size() / 4, '\0');
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(data.data()),
                          static_cast<int>(data.size()));
  if (n < 0) return Status::InvalidArgument("not base64");
  size_t pad = 0;
  if (!data.empty() && data.back() == '=') ++pad;
  if (data.size() > 1 && data[data.size() - 2] == '=') ++pad;
  out.resize(static_cast<size_t>(n) - pad);
  return out;
}

std::string EncodePageToken(int64_t offset) {
  return Base64Encode("{\"offset\": " + std::to_string(offset) + "}");
}

Result<int64_t> DecodePageToken(std::string_view token) {
  if (token.empty()) return int64_t{0};
  Status bad = Status::InvalidArgument(
      "page_token is not a token this server issued; pass the next_page_token of a previous "
      "response, or omit it");
  auto decoded = Base64Decode(token);
  if (!decoded.ok()) return bad;
  auto obj = ParseJsonObject(*decoded);
  if (!obj.ok()) return bad;
  auto offset = OptionalInt64(*obj, "offset");
  if (!offset.ok() || !*offset || **offset < 0) return bad;
  return **offset;
}

}  // namespace trainyard
