#include "trainyard/common/checked.h"

#include <string>

namespace trainyard {

Result<uint64_t> ShapeBytes(uint64_t element_size, const std::vector<int64_t>& shape,
                            std::string_view field) {
  bool zero = element_size == 0;
  for (int64_t d : shape) {
    if (d < 0) {
      return Status::InvalidArgument(std::string(field) +
                                     " must hold non-negative dimensions (got " +
                                     std::to_string(d) + ")");
    }
    zero = zero || d == 0;
  }
  if (zero) return uint64_t{0};
  uint64_t bytes = element_size;
  for (int64_t d : shape) {
    auto next = CheckedMul(bytes, static_cast<uint64_t>(d));
    if (!next) {
      return Status::InvalidArgument(std::string(field) +
                                     " is too large: its size in bytes overflows 64 bits");
    }
    bytes = *next;
  }
  return bytes;
}

}  // namespace trainyard
