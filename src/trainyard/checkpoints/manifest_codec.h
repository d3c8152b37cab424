// The manifest's JSON form (one object per rank and checkpoint) and the chunk hash.
// Internal to checkpoints/; the format is described in docs/decisions/0003.
// Stateless functions; thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "trainyard/checkpoints/types.h"
#include "trainyard/common/status.h"

namespace trainyard::checkpoints {

inline constexpr std::string_view kManifestFormat = "trainyard-checkpoint-manifest/1";

std::string EncodeManifest(const Manifest& m);
// `where` names the manifest in errors ("checkpoints/p/jobs/j/steps/.../rank-00000.json").
Result<Manifest> DecodeManifest(std::string_view text, std::string_view where);

// 32 lowercase hex digits: the canonical (big-endian) XXH3-128 of `data`.
std::string ChunkHash(const void* data, size_t size);
bool IsChunkHash(std::string_view s);

}  // namespace trainyard::checkpoints
