// /api/trainyard/v1/jobs: submit, list, describe, cancel, logs and events of jobs,
// and the calls a running workload makes (heartbeat, checkpoint reports).
#pragma once

#include "trainyard/api/api.h"
#include "trainyard/jobs/job_service.h"
#include "trainyard/jobs/projects.h"
#include "trainyard/jobs/secrets.h"

namespace trainyard::api {

// Submitting needs the project's membership and a priority within its ceiling; a job's
// env and logs are shown to its owner, the project's members and admins only (others see
// env values as "***" and get 403 on logs). A spec's secret references must be usable by the
// submitter; a secret's value printed by the workload is shown as "***" in its logs.
void RegisterJobRoutes(Api& api, jobs::JobService& jobs, jobs::ProjectService& projects,
                       jobs::SecretService& secrets);
// /api/trainyard/v1/secrets: create (the value is never returned), list (names), delete.
void RegisterSecretRoutes(Api& api, jobs::SecretService& secrets);
// /api/trainyard/v1/projects: list, show (everyone); create, members, ceiling (admins).
void RegisterProjectRoutes(Api& api, jobs::ProjectService& projects);

}  // namespace trainyard::api
