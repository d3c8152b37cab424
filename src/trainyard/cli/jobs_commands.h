// CLI commands for jobs: submit (with --follow), jobs, describe, logs, cancel.
#pragma once

#include <string>
#include <vector>

namespace trainyard::cli {

class Client;

// `env` ("NAME=VALUE" each) is added to the spec's env: a job sees nothing of the
// submitter's or the server's environment otherwise.
int SubmitJob(Client& client, const std::string& file, bool follow,
              const std::vector<std::string>& env = {});
int ListJobs(Client& client, bool active_only, const std::string& project, int max_results);
int DescribeJob(Client& client, const std::string& job_id);
int JobLogs(Client& client, const std::string& job_id, bool follow, int attempt, int rank);
int CancelJob(Client& client, const std::string& job_id);
int ShowCluster(Client& client);

}  // namespace trainyard::cli
