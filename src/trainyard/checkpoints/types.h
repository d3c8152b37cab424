// The values a checkpoint is made of: tensors and raw files ("blobs") with the bytes
// they carry, the metadata saved beside them, and the manifest that records where every
// blob's chunks are stored.
//
// Ownership: a Blob either owns its bytes (Bytes, moved in) or borrows them from the
// caller (a pointer the caller keeps valid for as long as the Blob is used; SaveAsync
// copies borrowed bytes before it returns). These are plain values: not thread-safe to
// mutate from several threads, safe to read from many.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "trainyard/common/status.h"

namespace trainyard::checkpoints {

// Element types, named as safetensors names them.
enum class DType { kF64, kF32, kF16, kBF16, kF8E4M3, kF8E5M2, kI64, kI32, kI16, kI8, kU8, kBool };

std::string_view DTypeName(DType dtype);  // "F32", "BF16", ...
std::optional<DType> ParseDType(std::string_view name);
size_t DTypeSize(DType dtype);

// A tensor shape as text, "2,3" ("" for a scalar): what the checkpoint API puts in its
// `shape` query parameter and X-Trainyard-Shape header.
std::string FormatShape(const std::vector<int64_t>& shape);
// "2,3", "[2, 3]", "" (a scalar) → dimensions; InvalidArgument for anything else.
Result<std::vector<int64_t>> ParseShape(std::string_view text);

// An owned byte buffer whose allocation is not zero-filled (a snapshot overwrites it at
// once). Large buffers are 2 MiB aligned and ask for transparent huge pages: filling fresh
// memory then takes 512x fewer page faults, which decides how fast a restore or a first
// snapshot goes.
class Bytes {
 public:
  Bytes() = default;
  explicit Bytes(size_t size);
  static Bytes CopyOf(std::string_view data);

  std::byte* data() { return data_.get(); }
  const std::byte* data() const { return data_.get(); }
  size_t size() const { return size_; }
  std::string_view view() const { return {reinterpret_cast<const char*>(data_.get()), size_}; }

 private:
  struct Free {
    void operator()(std::byte* p) const;
  };
  std::unique_ptr<std::byte, Free> data_;
  size_t size_ = 0;
};

enum class BlobKind { kTensor, kFile };

struct Blob {
  std::string name;  // unique within a rank's checkpoint; any UTF-8 text
  BlobKind kind = BlobKind::kFile;
  DType dtype = DType::kU8;    // tensors only
  std::vector<int64_t> shape;  // tensors only; row-major, contiguous bytes

  // Tensors with borrowed bytes (copied by SaveAsync before it returns) or owned bytes.
  static Blob Tensor(std::string name, DType dtype, std::vector<int64_t> shape, const void* data,
                     size_t size);
  static Blob OwnedTensor(std::string name, DType dtype, std::vector<int64_t> shape, Bytes bytes);
  static Blob File(std::string name, const void* data, size_t size);
  static Blob OwnedFile(std::string name, Bytes bytes);

  const std::byte* data() const { return borrowed_ != nullptr ? borrowed_ : owned_.data(); }
  size_t size() const { return borrowed_ != nullptr ? borrowed_size_ : owned_.size(); }
  bool is_borrowed() const { return borrowed_ != nullptr; }
  std::string_view view() const { return {reinterpret_cast<const char*>(data()), size()}; }
  // Replaces borrowed bytes with `owned` (same size); used by the snapshot.
  void AdoptOwned(Bytes owned);
  Bytes ReleaseOwned() { return std::move(owned_); }

 private:
  Bytes owned_;
  const std::byte* borrowed_ = nullptr;
  size_t borrowed_size_ = 0;
};

// What one rank saves and loads.
struct CheckpointData {
  std::vector<Blob> blobs;
  std::map<std::string, double> metrics;  // e.g. {"loss": 1.25}; used by retention
  std::string rng_state;                  // opaque bytes
  std::string user_metadata;              // free-form text, JSON by convention

  const Blob* Find(std::string_view name) const;
};

// Names one rank's part of one checkpoint. A checkpoint (project, job, step) is complete
// when ranks 0..world_size-1 have all committed with the same world_size and attempt.
struct CheckpointRef {
  std::string project;  // the deduplication namespace: chunks are shared by its jobs
  std::string job;
  int64_t step = 0;
  int rank = 0;
  int world_size = 1;
  int64_t attempt = 0;  // the job attempt that saves; ranks of different attempts never mix
};

struct ChunkRef {
  std::string hash;     // 32 lowercase hex digits of XXH3-128 of the raw bytes
  uint64_t size = 0;    // raw bytes
  uint64_t stored = 0;  // bytes of the stored object (smaller when compressed)
  bool compressed = false;
};

struct BlobManifest {
  std::string name;
  BlobKind kind = BlobKind::kFile;
  DType dtype = DType::kU8;
  std::vector<int64_t> shape;
  uint64_t size = 0;
  std::vector<ChunkRef> chunks;  // in order; each chunk_size bytes but the last
};

// One rank's committed part of a checkpoint, as stored in its manifest.
struct Manifest {
  CheckpointRef ref;
  int64_t created_ms = 0;
  uint64_t chunk_size = 0;
  std::vector<BlobManifest> blobs;
  std::map<std::string, double> metrics;
  std::string rng_state;
  std::string user_metadata;

  // What the save that wrote it did (not needed to read it back).
  uint64_t total_bytes = 0;    // raw bytes of all blobs
  uint64_t written_bytes = 0;  // stored bytes of chunks this save wrote (0 when all deduplicated)
  uint64_t written_chunks = 0;
  uint64_t reused_chunks = 0;  // chunks that already existed in the project
};

// A complete checkpoint: every rank's manifest, ordered by rank.
struct CheckpointInfo {
  std::string project;
  std::string job;
  int64_t step = 0;
  int world_size = 1;
  int64_t attempt = 0;
  std::vector<Manifest> ranks;

  uint64_t total_bytes() const;
  // Rank 0's metrics (ranks usually log the same ones).
  const std::map<std::string, double>& metrics() const { return ranks.front().metrics; }
};

}  // namespace trainyard::checkpoints
