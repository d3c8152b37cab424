// CLI commands for jobs: submit (with --follow), jobs, describe, logs, cancel.
#pragma once

#include <string>

#include "trainyard/cli/client.h"

namespace trainyard::cli {

int SubmitJob(Client& client, const std::string& file, bool follow);
int ListJobs(Client& client, bool active_only, const std::string& project, int max_results);
int DescribeJob(Client& client, const std::string& job_id);
int JobLogs(Client& client, const std::string& job_id, bool follow, int attempt, int rank);
int CancelJob(Client& client, const std::string& job_id);
int ShowCluster(Client& client);

}  // namespace trainyard::cli
