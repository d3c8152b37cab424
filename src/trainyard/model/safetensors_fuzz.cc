// Fuzzes the safetensors header parser: any bytes must give a header or InvalidArgument,
// never a crash, and every accepted tensor must lie inside the input.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "trainyard/model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  auto header = trainyard::model::ParseSafetensors(bytes);
  if (!header.ok()) {
    if (!header.status().IsInvalidArgument()) std::abort();
    return 0;
  }
  for (const auto& t : header->tensors) {
    if (t.begin > t.end || header->data_offset + t.end > size) std::abort();
  }
  return 0;
}
