// /api/trainyard/v1/jobs: submit, list, describe, cancel, logs and events of jobs,
// and the calls a running workload makes (heartbeat, checkpoint reports).
#pragma once

#include <string>
#include <vector>

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
// Replaces every occurrence of a secret's value in `text` with "***". A value that starts
// in `text` and runs past its end (into `more`, the bytes that follow it in the file) is
// replaced too, and `consumed` grows to the end of it, so a value is never split across two
// reads; a tail that may be the start of a value still being written is held back (`consumed`
// stops before it).
std::string RedactSecrets(const std::string& text, const std::string& more,
                          const std::vector<std::string>& values, int64_t& consumed);

// /api/trainyard/v1/secrets: create (the value is never returned), list (names), delete.
void RegisterSecretRoutes(Api& api, jobs::SecretService& secrets);
// /api/trainyard/v1/projects: list, show (everyone); create, members, ceiling (admins).
void RegisterProjectRoutes(Api& api, jobs::ProjectService& projects);

}  // namespace trainyard::api
