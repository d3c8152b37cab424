// Page tokens: opaque to clients, an offset inside (base64 of {"offset": N}, as MLflow does).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "trainyard/common/status.h"

namespace trainyard {

std::string EncodePageToken(int64_t offset);
// "" decodes to 0. A token that is not ours is InvalidArgument naming `page_token`.
Result<int64_t> DecodePageToken(std::string_view token);

std::string Base64Encode(std::string_view data);
Result<std::string> Base64Decode(std::string_view data);

}  // namespace trainyard
