#include "trainyard/prep/doc_id.h"

#include "trainyard/common/strings.h"

namespace trainyard::prep {

std::string DocId(std::string_view source, std::string_view key) {
  std::string data = "trainyard-prep-v1";
  data.push_back('\0');
  data.append(source);
  data.push_back('\0');
  data.append(key);
  return Sha256Hex(data).substr(0, 16);
}

std::string DocIdForOrdinal(std::string_view source, int64_t ordinal) {
  return DocId(source, std::to_string(ordinal));
}

}  // namespace trainyard::prep
