// /api/trainyard/v1/checkpoints: the upload path the SDKs use (begin an upload for one
// rank, PUT each blob as raw bytes, commit with metadata), and listing, inspecting,
// verifying, downloading, deleting, retention and garbage collection of checkpoints.
// Thin: decode → CheckpointService (which authorizes) → encode. Routes in docs/openapi.yaml.
#pragma once

#include <string_view>

#include "trainyard/api/api.h"
#include "trainyard/checkpoints/checkpoint_service.h"

namespace trainyard::api {

void RegisterCheckpointRoutes(Api& api, checkpoints::CheckpointService& checkpoints);

// Whether a request's body should be streamed to a file (checkpoint blob uploads, which
// may be far larger than the in-memory body limit).
bool IsCheckpointBlobUpload(http::Method method, std::string_view path);

}  // namespace trainyard::api
