#include "trainyard/executors/job_environment.h"

#include <cstdlib>

namespace trainyard::executors {

Result<JobEnvironmentBasics> JobEnvironmentBasicsFor(const std::string& os_user,
                                                     const std::string& tmp_dir,
                                                     std::optional<OsAccount>* account) {
  JobEnvironmentBasics basics;
  if (!os_user.empty()) {
    TY_ASSIGN_OR_RETURN(OsAccount found, LookupOsAccount(os_user));
    if (found.uid == 0) {
      return Status::FailedPrecondition("OS account '" + os_user +
                                        "' is root; jobs never run as root");
    }
    basics.user = found.name;
    basics.home = found.home;
    if (account != nullptr) *account = std::move(found);
  } else if (auto self = CurrentOsAccount(); self.ok()) {
    basics.user = self->name;
    basics.home = self->home;
  }
  if (const char* lang = std::getenv("LANG")) basics.lang = lang;
  basics.tmp_dir = tmp_dir;
  return basics;
}

std::map<std::string, std::string> JobEnvironment(
    const JobEnvironmentBasics& basics, const std::map<std::string, std::string>& job_env) {
  std::map<std::string, std::string> env;
  env["PATH"] = kDefaultJobPath;
  if (!basics.user.empty()) {
    env["USER"] = basics.user;
    env["LOGNAME"] = basics.user;
  }
  if (!basics.home.empty()) env["HOME"] = basics.home;
  if (!basics.lang.empty()) env["LANG"] = basics.lang;
  if (!basics.tmp_dir.empty()) env["TMPDIR"] = basics.tmp_dir;
  for (const auto& [name, value] : job_env) env[name] = value;
  return env;
}

}  // namespace trainyard::executors
