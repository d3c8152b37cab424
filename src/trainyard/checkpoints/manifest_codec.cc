#include "trainyard/checkpoints/manifest_codec.h"

#include <xxhash.h>

#include "trainyard/checkpoints/xxh3_avx2.h"
#include "trainyard/common/checked.h"
#include "trainyard/common/json.h"
#include "trainyard/common/page_token.h"

namespace trainyard::checkpoints {
namespace {

// XXH3-128 as lowercase hex.
constexpr std::string_view kHashName = "xxh3-128";
constexpr size_t kHashBytes = 16;
constexpr size_t kHashHexDigits = 2 * kHashBytes;
// A manifest with a larger world_size is taken as corrupt.
constexpr int64_t kMaxWorldSize = int64_t{1} << 20;

// How a chunk is stored, as its manifest entry's third element says.
enum class ChunkCodec : int64_t { kRaw = 0, kZstd = 1 };

}  // namespace

std::string ChunkHash(const void* data, size_t size) {
  XXH128_hash_t h;
  if (internal::Xxh3Avx2Usable()) {
    internal::Xxh3Avx2(data, size, &h.low64, &h.high64);
  } else {
    h = XXH3_128bits(data, size);
  }
  XXH128_canonical_t canon;
  XXH128_canonicalFromHash(&canon, h);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(kHashHexDigits, '0');
  for (size_t i = 0; i < kHashBytes; ++i) {
    out[2 * i] = kHex[canon.digest[i] >> 4];
    out[2 * i + 1] = kHex[canon.digest[i] & 15];
  }
  return out;
}

bool IsChunkHash(std::string_view s) {
  if (s.size() != kHashHexDigits) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

std::string EncodeManifest(const Manifest& m) {
  json::object o;
  o["format"] = kManifestFormat;
  o["project"] = m.ref.project;
  o["job"] = m.ref.job;
  o["step"] = m.ref.step;
  o["rank"] = m.ref.rank;
  o["world_size"] = m.ref.world_size;
  o["attempt"] = m.ref.attempt;
  o["created_ms"] = m.created_ms;
  o["hash"] = kHashName;
  o["chunk_size"] = m.chunk_size;
  json::object metrics;
  for (const auto& [k, v] : m.metrics) metrics[k] = DoubleToJson(v);
  o["metrics"] = std::move(metrics);
  o["rng_state_base64"] = Base64Encode(m.rng_state);
  o["user_metadata"] = m.user_metadata;
  json::object stats;
  stats["total_bytes"] = m.total_bytes;
  stats["written_bytes"] = m.written_bytes;
  stats["written_chunks"] = m.written_chunks;
  stats["reused_chunks"] = m.reused_chunks;
  o["stats"] = std::move(stats);
  json::array blobs;
  for (const BlobManifest& b : m.blobs) {
    json::object jb;
    jb["name"] = b.name;
    jb["kind"] = b.kind == BlobKind::kTensor ? "tensor" : "file";
    if (b.kind == BlobKind::kTensor) {
      jb["dtype"] = DTypeName(b.dtype);
      json::array shape;
      for (int64_t d : b.shape) shape.push_back(d);
      jb["shape"] = std::move(shape);
    }
    jb["size"] = b.size;
    // Chunks as compact [hash, size, codec] triples (ChunkCodec).
    json::array chunks;
    chunks.reserve(b.chunks.size());
    for (const ChunkRef& c : b.chunks) {
      ChunkCodec codec = c.compressed ? ChunkCodec::kZstd : ChunkCodec::kRaw;
      chunks.push_back(json::array{json::value(c.hash), json::value(c.size),
                                   json::value(static_cast<int64_t>(codec))});
    }
    jb["chunks"] = std::move(chunks);
    blobs.push_back(std::move(jb));
  }
  o["blobs"] = std::move(blobs);
  return json::serialize(o);
}

namespace {

Result<uint64_t> NonNegative(const json::object& o, std::string_view field) {
  TY_ASSIGN_OR_RETURN(int64_t v, RequiredInt64(o, field));
  if (v < 0) return Status::InvalidArgument(std::string(field) + " must not be negative");
  return static_cast<uint64_t>(v);
}

// The manifest's fields but its blobs.
Result<Manifest> DecodeHeader(const json::object& o) {
  TY_ASSIGN_OR_RETURN(std::string format, RequiredString(o, "format"));
  if (format != kManifestFormat) {
    return Status::InvalidArgument("unknown manifest format '" + format + "' (this build reads '" +
                                   std::string(kManifestFormat) + "')");
  }
  TY_ASSIGN_OR_RETURN(std::string hash, RequiredString(o, "hash"));
  if (hash != kHashName) return Status::InvalidArgument("unknown chunk hash '" + hash + "'");
  Manifest m;
  TY_ASSIGN_OR_RETURN(m.ref.project, RequiredString(o, "project"));
  TY_ASSIGN_OR_RETURN(m.ref.job, RequiredString(o, "job"));
  TY_ASSIGN_OR_RETURN(m.ref.step, RequiredInt64(o, "step"));
  TY_ASSIGN_OR_RETURN(int64_t rank, RequiredInt64(o, "rank"));
  TY_ASSIGN_OR_RETURN(int64_t world, RequiredInt64(o, "world_size"));
  if (world < 1 || rank < 0 || rank >= world || world > kMaxWorldSize) {
    return Status::InvalidArgument("rank " + std::to_string(rank) + " of world_size " +
                                   std::to_string(world) + " is out of range");
  }
  m.ref.rank = static_cast<int>(rank);
  m.ref.world_size = static_cast<int>(world);
  TY_ASSIGN_OR_RETURN(m.ref.attempt, RequiredInt64(o, "attempt"));
  TY_ASSIGN_OR_RETURN(m.created_ms, RequiredInt64(o, "created_ms"));
  TY_ASSIGN_OR_RETURN(m.chunk_size, NonNegative(o, "chunk_size"));
  TY_ASSIGN_OR_RETURN(const json::object* metrics, OptionalObject(o, "metrics"));
  if (metrics != nullptr) {
    for (const auto& kv : *metrics) {
      TY_ASSIGN_OR_RETURN(double v, AsDouble(kv.value(), "metric " + std::string(kv.key())));
      m.metrics[std::string(kv.key())] = v;
    }
  }
  TY_ASSIGN_OR_RETURN(std::optional<std::string> rng, OptionalString(o, "rng_state_base64"));
  if (rng) {
    TY_ASSIGN_OR_RETURN(m.rng_state, Base64Decode(*rng));
  }
  TY_ASSIGN_OR_RETURN(std::optional<std::string> user, OptionalString(o, "user_metadata"));
  m.user_metadata = user.value_or("");
  TY_ASSIGN_OR_RETURN(const json::object* stats, OptionalObject(o, "stats"));
  if (stats != nullptr) {
    TY_ASSIGN_OR_RETURN(m.total_bytes, NonNegative(*stats, "total_bytes"));
    TY_ASSIGN_OR_RETURN(m.written_bytes, NonNegative(*stats, "written_bytes"));
    TY_ASSIGN_OR_RETURN(m.written_chunks, NonNegative(*stats, "written_chunks"));
    TY_ASSIGN_OR_RETURN(m.reused_chunks, NonNegative(*stats, "reused_chunks"));
  }
  return m;
}

// One [hash, size, codec] entry of blob `b`.
Result<ChunkRef> DecodeChunk(const BlobManifest& b, const json::value& c) {
  const json::array* triple = c.if_array();
  if (triple == nullptr || triple->size() != 3 || !(*triple)[0].is_string()) {
    return Status::InvalidArgument("blob '" + b.name + "' has a malformed chunk entry");
  }
  ChunkRef ref;
  ref.hash = std::string((*triple)[0].get_string());
  if (!IsChunkHash(ref.hash)) {
    return Status::InvalidArgument("blob '" + b.name + "' has a malformed chunk hash");
  }
  TY_ASSIGN_OR_RETURN(int64_t size, AsInt64((*triple)[1], "chunk size"));
  TY_ASSIGN_OR_RETURN(int64_t codec, AsInt64((*triple)[2], "chunk codec"));
  if (size < 0 || (codec != static_cast<int64_t>(ChunkCodec::kRaw) &&
                   codec != static_cast<int64_t>(ChunkCodec::kZstd))) {
    return Status::InvalidArgument("blob '" + b.name + "' has a malformed chunk entry");
  }
  ref.size = static_cast<uint64_t>(size);
  ref.compressed = codec == static_cast<int64_t>(ChunkCodec::kZstd);
  return ref;
}

// A tensor's dtype and shape (no-op for a file).
Status DecodeKind(const json::object& jb, BlobManifest& b) {
  TY_ASSIGN_OR_RETURN(std::string kind, RequiredString(jb, "kind"));
  if (kind == "file") {
    b.kind = BlobKind::kFile;
    return Status::Ok();
  }
  if (kind != "tensor") {
    return Status::InvalidArgument("blob '" + b.name + "' has unknown kind " + kind);
  }
  b.kind = BlobKind::kTensor;
  TY_ASSIGN_OR_RETURN(std::string dtype, RequiredString(jb, "dtype"));
  std::optional<DType> dt = ParseDType(dtype);
  if (!dt) return Status::InvalidArgument("blob '" + b.name + "' has unknown dtype " + dtype);
  b.dtype = *dt;
  TY_ASSIGN_OR_RETURN(const json::array* shape, OptionalArray(jb, "shape"));
  if (shape != nullptr) {
    for (const json::value& d : *shape) {
      TY_ASSIGN_OR_RETURN(int64_t dim, AsInt64(d, "shape[]"));
      b.shape.push_back(dim);
    }
  }
  return Status::Ok();
}

Result<BlobManifest> DecodeBlob(const json::value& jv) {
  if (!jv.is_object()) return Status::InvalidArgument("blobs[] must be objects");
  const json::object& jb = jv.get_object();
  BlobManifest b;
  TY_ASSIGN_OR_RETURN(b.name, RequiredString(jb, "name"));
  TY_RETURN_IF_ERROR(DecodeKind(jb, b));
  TY_ASSIGN_OR_RETURN(b.size, NonNegative(jb, "size"));
  TY_ASSIGN_OR_RETURN(const json::array* chunks, OptionalArray(jb, "chunks"));
  uint64_t total = 0;
  if (chunks != nullptr) {
    b.chunks.reserve(chunks->size());
    for (const json::value& c : *chunks) {
      TY_ASSIGN_OR_RETURN(ChunkRef ref, DecodeChunk(b, c));
      auto sum = CheckedAdd(total, ref.size);
      if (!sum) {
        return Status::InvalidArgument("blob '" + b.name + "' chunk sizes overflow 64 bits");
      }
      total = *sum;
      b.chunks.push_back(std::move(ref));
    }
  }
  if (total != b.size) {
    return Status::InvalidArgument("blob '" + b.name + "' chunks add up to " +
                                   std::to_string(total) + " bytes, not its size " +
                                   std::to_string(b.size));
  }
  if (b.kind == BlobKind::kTensor) {
    // A tensor's dtype and shape must account for its bytes exactly: a shape whose product
    // overflows would otherwise pass for any size.
    TY_ASSIGN_OR_RETURN(uint64_t need,
                        ShapeBytes(DTypeSize(b.dtype), b.shape, "shape of blob '" + b.name + "'"));
    if (need != b.size) {
      return Status::InvalidArgument("blob '" + b.name + "' has " + std::to_string(b.size) +
                                     " bytes, but its shape and dtype need " +
                                     std::to_string(need));
    }
  }
  return b;
}

Result<Manifest> Decode(std::string_view text) {
  TY_ASSIGN_OR_RETURN(json::object o, ParseJsonObject(text));
  TY_ASSIGN_OR_RETURN(Manifest m, DecodeHeader(o));
  TY_ASSIGN_OR_RETURN(const json::array* blobs, OptionalArray(o, "blobs"));
  if (blobs == nullptr) return Status::InvalidArgument("blobs is missing");
  for (const json::value& jv : *blobs) {
    TY_ASSIGN_OR_RETURN(BlobManifest b, DecodeBlob(jv));
    m.blobs.push_back(std::move(b));
  }
  return m;
}

}  // namespace

Result<Manifest> DecodeManifest(std::string_view text, std::string_view where) {
  Result<Manifest> m = Decode(text);
  if (!m.ok()) {
    return Status::Internal("checkpoint manifest " + std::string(where) +
                            " is corrupt: " + m.status().message() +
                            "; delete that checkpoint or restore the file from a backup");
  }
  return m;
}

}  // namespace trainyard::checkpoints
