// ReplicaLauncher: starts, stops and watches the processes of serving replicas. The serving
// service decides how many replicas run and where they listen; a launcher only runs them.
//
// Today's implementation runs each replica through an executors::Executor of its own (the
// local executor: the rank shim, its own process group, a log file, cgroups where
// available), as a one-rank attempt named by the replica's id. A placement through the job
// scheduler (a replica as a job of a service kind, on the same pool as training, Local or
// Slurm) can replace it behind this interface.
//
// Thread-safe. The exit callback comes once per launched replica that ends, from a launcher
// thread, with no launcher lock held.
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "trainyard/common/status.h"

namespace trainyard::executors {
class Executor;
}  // namespace trainyard::executors

namespace trainyard::serving {

struct ReplicaLaunch {
  std::string id;       // unique among running replicas
  std::string command;  // run with /bin/sh -c
  std::map<std::string, std::string> env;
  std::filesystem::path log_dir;  // the replica writes log_dir/rank-0.log
};

class ReplicaLauncher {
 public:
  virtual ~ReplicaLauncher() = default;
  using ExitCallback = std::function<void(const std::string& id, int exit_code, bool stopped)>;
  // Set before any Launch.
  virtual void SetExitCallback(ExitCallback cb) = 0;
  // Returns the replica's process id (also its process group's).
  virtual Result<int> Launch(const ReplicaLaunch& launch) = 0;
  // SIGTERM now, SIGKILL after `grace`; the exit callback follows. NotFound when not running.
  virtual Status Stop(const std::string& id, std::chrono::milliseconds grace) = 0;
  // Stops every replica and waits (up to `wait`) for them to end; no callback after it.
  virtual void Shutdown(std::chrono::milliseconds wait) = 0;
};

// Replicas as one-rank attempts of `executor` (which must be the launcher's alone: it takes
// the executor's exit callback).
std::unique_ptr<ReplicaLauncher> MakeExecutorReplicaLauncher(
    std::unique_ptr<executors::Executor> executor);

}  // namespace trainyard::serving
