// Executor: runs the ranks of one job attempt as processes, watches them, and reports
// how the attempt ended. The scheduler owns the decision of what to run; an executor
// only starts, stops and observes processes.
//
// Contract:
// - An attempt is named by (job_id, attempt). Launch starts all its ranks or none.
// - The exit callback is called exactly once per attempt that ends while the executor is
//   watching it (launched or adopted), from an executor thread, with no executor lock
//   held: it may call Launch/Stop (e.g. to start the next attempt).
// - Gang semantics: the first rank that fails (nonzero exit, a signal, or lost) stops the
//   rest of its attempt; the callback comes once every rank has exited, naming that
//   first failure. An attempt succeeds only when every rank exits 0.
// - Shutdown() stops watching but leaves processes running, so a later executor (after a
//   server restart) can Adopt them from the RankProcess records the caller persisted.
//
// Implementations are thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "trainyard/common/status.h"

namespace trainyard::executors {

// One rank of an attempt, as the scheduler placed it.
struct RankLaunch {
  int rank = 0;
  int local_rank = 0;
  int node_rank = 0;
  std::string node_name;
  std::vector<int> gpu_ids;  // becomes CUDA_VISIBLE_DEVICES
};

// What a cluster executor (Slurm) asks its scheduler for, beyond the ranks; the local
// executor ignores it. Zero/empty = no request (the cluster's defaults).
struct ClusterRequest {
  int cpus_per_rank = 0;
  int64_t memory_mb_per_node = 0;
  std::chrono::seconds time_limit{0};
  // How long before the end of the time limit (or a preemption, where the cluster sends
  // it) the ranks get SIGTERM to checkpoint.
  std::chrono::seconds term_grace{0};
  std::vector<std::string> exclude_nodes;  // e.g. nodes that failed an earlier attempt
};

struct AttemptLaunch {
  std::string job_id;
  int attempt = 0;
  std::string command;      // run with /bin/sh -c
  std::string working_dir;  // "" = the server's cwd; must exist
  // The job's environment: the spec's env and the workload variables. Nothing of the server's
  // environment is inherited; the executor adds only safe basics (see JobEnvironment).
  std::map<std::string, std::string> env;
  // The OS account the workload runs as; "" = the server's own (single-user mode). Never
  // root: executors refuse uid 0.
  std::string os_user;
  // The job's private temporary directory (TMPDIR); "" = /tmp.
  std::string tmp_dir;
  std::vector<RankLaunch> ranks;  // ranks 0..nnodes*local_world_size-1, each once
  int nnodes = 1;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0 = pick a free port
  // Created if absent. Rank R writes stdout+stderr to log_dir/"rank-R.log" (appended) and
  // its result to log_dir/"rank-R.exit".
  std::filesystem::path log_dir;
  ClusterRequest cluster;
};

// What the caller persists to Adopt a running attempt later.
struct RankProcess {
  int rank = 0;
  int pid = 0;             // the rank's shim; also its process group id (Slurm: the job id)
  int64_t start_time = 0;  // /proc/<pid>/stat field 22; guards against pid reuse
};

struct RankExit {
  int rank = 0;
  // The workload's exit status; 128+signal when a signal ended it (as a shell reports).
  int exit_code = -1;
  int signal = 0;     // the signal that ended the workload, 0 if it exited
  bool lost = false;  // the process vanished without leaving a result (only after Adopt)
  std::string node;   // where the rank ran, when the executor knows (cluster executors)
};

// How a cluster executor's scheduler (Slurm) sees a running attempt right now.
struct ClusterJobStatus {
  enum class State {
    kUnknown,  // the executor has nothing to say (a local executor; not polled yet)
    kPending,  // queued by the cluster: nothing of the attempt runs yet
    kRunning,  // the cluster has given it its nodes (running, configuring, completing, ...)
    kDone,     // the cluster says it ended; the exit callback follows
  };
  State state = State::kUnknown;
  std::string reason;  // the cluster's reason, e.g. "Resources"; "" when it gives none
  std::string raw;     // for people, e.g. "Slurm job 12 PENDING (Resources)"; "" when kUnknown

  bool pending() const { return state == State::kPending; }
};

struct AttemptExit {
  std::string job_id;
  int attempt = 0;
  bool success = false;
  int failed_rank = -1;         // the first rank that failed (earliest seen), -1 if none
  int exit_code = -1;           // of failed_rank (0 on success)
  int signal = 0;               // of failed_rank
  bool lost = false;            // of failed_rank
  bool stopped = false;         // Stop() was called for this attempt before it ended
  std::vector<RankExit> ranks;  // ordered by rank
  // Cluster executors: the node whose failure ended the attempt ("" if none or unknown),
  // and the cluster's own words for how it ended (e.g. "NODE_FAIL NodeDown").
  std::string failed_node;
  std::string cluster_state;
};

class Executor {
 public:
  virtual ~Executor() = default;

  using ExitCallback = std::function<void(const AttemptExit&)>;
  // Set before any Launch/Adopt.
  virtual void SetExitCallback(ExitCallback cb) = 0;

  // Starts every rank; returns their processes (persist them for Adopt). On error no rank
  // is left running and no callback follows. AlreadyExists when the attempt is running.
  virtual Result<std::vector<RankProcess>> Launch(const AttemptLaunch& launch) = 0;

  // SIGTERM to every running rank's process group now, SIGKILL to those still alive after
  // `grace` (from a timer; this call does not block). The callback follows as usual, with
  // `stopped` set. NotFound when the attempt is not running here (it may have just ended).
  virtual Status Stop(const std::string& job_id, int attempt, std::chrono::milliseconds grace) = 0;

  // Re-attaches to an attempt launched by an earlier executor (e.g. before a server
  // restart). Each pid's start time is checked; ranks already gone resolve from their
  // exit files in `log_dir` (or as lost). The callback follows as for a launched attempt.
  virtual Status Adopt(const std::string& job_id, int attempt, const std::filesystem::path& log_dir,
                       const std::vector<RankProcess>& ranks) = 0;

  // Stops watching: no callback after it returns, pending SIGKILL timers are dropped, and
  // the processes keep running (they can be adopted later). Idempotent; the destructor
  // calls it.
  virtual void Shutdown() = 0;

  // How the cluster sees a running attempt right now (e.g. pending, reason "Resources", while
  // Slurm has not started it); state kUnknown when the executor has nothing to add.
  virtual ClusterJobStatus ClusterStatus(const std::string& job_id, int attempt) { return {}; }

  // How this executor contains an attempt's processes, for people (e.g. "cgroup v2 at ...;
  // memory limits via cgroup v1"), or why it cannot ("cgroups not writable: ...").
  virtual std::string Containment() const { return ""; }
};

}  // namespace trainyard::executors
