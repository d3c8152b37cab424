// /api/trainyard/v1/jobs: submit, list, describe, cancel, logs and events of jobs,
// and the calls a running workload makes (heartbeat, checkpoint reports).
#pragma once

#include "trainyard/api/api.h"
#include "trainyard/jobs/job_service.h"

namespace trainyard::api {

void RegisterJobRoutes(Api& api, jobs::JobService& jobs);

}  // namespace trainyard::api
