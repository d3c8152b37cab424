// The rank shim: a small supervisor that runs one rank of an attempt and records how it
// ended, so the result survives a restart of the server that launched it.
//
//   trainyard __rank-shim [--cgroup DIR]... [--user ACCOUNT] LOG_FILE EXIT_FILE WORKING_DIR COMMAND
//
// The shim
// - leads its own session and process group (the executor spawns it that way; the shim
//   calls setsid() itself when started otherwise), so the executor can signal the rank's
//   whole process tree with killpg(shim pid);
// - closes inherited descriptors, sends its stdout/stderr to LOG_FILE (appended, 0600), joins
//   each cgroup DIR (before it forks anything, so no process of the rank is outside them),
//   and runs `/bin/sh -c COMMAND` in WORKING_DIR in the same process group, stdin from
//   /dev/null; with --user, the workload drops to ACCOUNT (groups, gid, uid; never root)
//   before it changes to WORKING_DIR and execs, while the shim itself stays as it was (to
//   write the log and the exit file where the job cannot);
// - ignores SIGTERM, SIGINT and SIGHUP itself (the workload gets default dispositions), so
//   it outlives the workload's grace period and can record the result;
// - writes EXIT_FILE atomically (tmp + fsync + rename) as {"exit_code":N,"signal":S} and
//   exits with N. N is 128+S when signal S ended the workload, and 127 when the shim could
//   not start it (the reason is in the log).
//
// Only a SIGKILL of the group (the executor's last resort) leaves no exit file.
#pragma once

#include <filesystem>
#include <optional>

#include "trainyard/common/status.h"

namespace trainyard::executors {

// The hidden CLI subcommand. argv[0] is the subcommand name; the rest as above.
int RunRankShim(int argc, char** argv);

struct ShimExit {
  int exit_code = -1;
  int signal = 0;
};

// Reads an exit file written by the shim. NotFound when it does not exist.
Result<ShimExit> ReadShimExitFile(const std::filesystem::path& path);

}  // namespace trainyard::executors
