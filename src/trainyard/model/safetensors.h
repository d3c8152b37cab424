// Safetensors: the Hugging Face tensor file format (8-byte little-endian header length,
// JSON header {name: {dtype, shape, data_offsets}, "__metadata__": {str: str}}, then the
// data), and sharded checkpoints (model.safetensors.index.json's weight_map).
//
// The header parser validates everything before any byte is used: offsets in bounds and
// non-overlapping, sizes equal to dtype size × shape, no duplicate names, header at most
// 100 MB. A violation is InvalidArgument naming the tensor. Torch-free (the trainer's
// libtorch side wraps these bytes as tensors without copying).
//
// A SafetensorsFile maps its file read-only; its views stay valid while it lives.
// Thread-compatible.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "trainyard/common/status.h"

namespace trainyard::model {

// dtype names as in the format: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL F8_E4M3 F8_E5M2.
size_t SafetensorsDtypeSize(std::string_view dtype);  // 0 when unknown

struct SafetensorsEntry {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // offsets into the data section
  uint64_t end = 0;
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> tensors;  // in data-offset order
  std::map<std::string, std::string> metadata;
  uint64_t data_offset = 0;  // where the data section starts in the file
};

// Parses a whole file's bytes (header and data), checking offsets against its size.
Result<SafetensorsHeader> ParseSafetensors(std::span<const std::byte> file_bytes);

class SafetensorsFile {
 public:
  static Result<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const SafetensorsHeader& header() const { return header_; }
  std::span<const std::byte> Data(const SafetensorsEntry& e) const;
  const std::string& path() const { return path_; }

 private:
  SafetensorsFile() = default;
  std::string path_;
  const std::byte* map_ = nullptr;
  size_t size_ = 0;
  SafetensorsHeader header_;
};

struct TensorToWrite {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::span<const std::byte> data;  // little-endian, row-major, size = dtype size × shape
};

// Writes one file atomically (temp file, fsync, rename). Tensors are written sorted by name.
Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                        const std::map<std::string, std::string>& metadata = {});

// The files of a model directory: model.safetensors, or the shards named by
// model.safetensors.index.json (each tensor → its file). NotFound when neither exists.
Result<std::map<std::string, std::string>> ResolveSafetensorsWeightMap(const std::string& dir);

}  // namespace trainyard::model
