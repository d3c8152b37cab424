// The environment a job's ranks start with. Nothing of the server's own environment is
// inherited (it holds the server's credentials, e.g. S3 keys): a rank sees the safe basics
// below, then the job's variables (its spec's env and the workload variables), which may
// override any basic.
//
//   PATH    /usr/local/bin:/usr/bin:/bin
//   HOME, USER, LOGNAME   of the account the job runs as
//   LANG    the server's LANG, when set (a locale name, not a secret)
//   TMPDIR  the job's private temporary directory, when it has one
#pragma once

#include <map>
#include <optional>
#include <string>

#include "trainyard/common/os_account.h"
#include "trainyard/common/status.h"

namespace trainyard::executors {

inline constexpr const char* kDefaultJobPath = "/usr/local/bin:/usr/bin:/bin";

struct JobEnvironmentBasics {
  std::string user;     // the account's name
  std::string home;     // the account's home directory
  std::string lang;     // "" = not set
  std::string tmp_dir;  // "" = not set
};

// The basics for a job that runs as `os_user` ("" = the server's own account), with the
// server's LANG and `tmp_dir`. FailedPrecondition when `os_user` is root; `account`, when
// given, receives the looked-up account (left empty for the server's own).
Result<JobEnvironmentBasics> JobEnvironmentBasicsFor(const std::string& os_user,
                                                     const std::string& tmp_dir,
                                                     std::optional<OsAccount>* account = nullptr);

std::map<std::string, std::string> JobEnvironment(
    const JobEnvironmentBasics& basics, const std::map<std::string, std::string>& job_env);

}  // namespace trainyard::executors
