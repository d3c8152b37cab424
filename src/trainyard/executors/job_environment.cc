#include "trainyard/executors/job_environment.h"

namespace trainyard::executors {

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
