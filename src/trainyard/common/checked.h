// Checked arithmetic for sizes that come from outside (tensor shapes, manifest sizes, lengths):
// an overflow is an error naming the field, never a wrapped value that passes a check.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "trainyard/common/status.h"

namespace trainyard {

inline std::optional<uint64_t> CheckedMul(uint64_t a, uint64_t b) {
  uint64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out)) return std::nullopt;
  return out;
}

inline std::optional<uint64_t> CheckedAdd(uint64_t a, uint64_t b) {
  uint64_t out = 0;
  if (__builtin_add_overflow(a, b, &out)) return std::nullopt;
  return out;
}

// The bytes of a tensor of `element_size`-byte elements and shape `shape`: InvalidArgument naming
// `field` when a dimension is negative or the product does not fit in 64 bits. A zero dimension
// makes it 0, whatever the others are.
Result<uint64_t> ShapeBytes(uint64_t element_size, const std::vector<int64_t>& shape,
                            std::string_view field);

}  // namespace trainyard
