// MLflow tracking endpoints (/api/2.0/mlflow/{experiments,runs,metrics,logged-models}/...),
// wire-compatible with the mlflow 3.x client.
#pragma once

#include "trainyard/api/api.h"
#include "trainyard/tracking/tracking_service.h"

namespace trainyard::api {

void RegisterTrackingRoutes(Api& api, tracking::TrackingService& tracking);

}  // namespace trainyard::api
