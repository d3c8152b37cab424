// Artifact endpoints: the mlflow-artifacts proxy (/api/2.0/mlflow-artifacts/artifacts/...:
// PUT, GET, DELETE, and listing), the legacy /api/2.0/mlflow/artifacts/list, and the
// logged-model directory listing. Bytes go through the BlobStore; the artifact path's
// first segment is the experiment id, whose permissions govern access.
#pragma once

#include "trainyard/api/api.h"
#include "trainyard/blob/blob_store.h"
#include "trainyard/tracking/tracking_service.h"

namespace trainyard::api {

void RegisterArtifactRoutes(Api& api, blob::BlobStore& blobs, tracking::TrackingService& tracking);

// Whether a request's body should be streamed to a file (artifact uploads).
bool IsArtifactUpload(http::Method method, std::string_view path);

}  // namespace trainyard::api
