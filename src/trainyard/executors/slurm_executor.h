// SlurmExecutor: runs an attempt as one Slurm batch job whose ranks are the tasks of one
// `srun` step, so Slurm gang-allocates every node of the attempt or none.
//
// Design:
// - Launch writes log_dir/batch.sh and submits it with `sbatch --parsable` and --nodes,
//   --ntasks-per-node, --gres=gpu:N (N = local_world_size * GPUs per rank, when GPUs),
//   --cpus-per-task, --mem, --time, --signal=TERM@grace, --nodelist (the nodes the job
//   scheduler planned, from the ranks' node names), --exclude, --no-requeue (recovery
//   is Trainyard's: a new attempt, with failed nodes excluded), and the pool's partition,
//   account, QoS and extra arguments. The job is named "ty-<job id>-a<attempt>".
// - The batch script sets MASTER_ADDR to the first node of the allocation and MASTER_PORT
//   (given, or derived from the Slurm job id), then runs
//   `srun --kill-on-bad-exit=1 --output=<log_dir>/rank-%t.log` with a small rank wrapper.
//   The wrapper exports the torchrun-compatible environment (RANK=SLURM_PROCID,
//   LOCAL_RANK=SLURM_LOCALID, NODE_RANK=GROUP_RANK=SLURM_NODEID, WORLD_SIZE=SLURM_NTASKS,
//   LOCAL_WORLD_SIZE, GROUP_WORLD_SIZE, ROLE_*, TORCHELASTIC_RUN_ID, TRAINYARD_RANK/JOB_ID/
//   ATTEMPT, AttemptLaunch::env), records its node in rank-R.node, runs `/bin/sh -c command`,
//   forwards SIGTERM/SIGINT to it, and writes rank-R.exit ({"exit_code","signal"}, as the
//   rank shim does) atomically. log_dir must therefore be on a filesystem the nodes share.
//   A workload that exits with 128+S is reported as signal S (the wrapper cannot tell).
// - State: one watcher thread polls `squeue --states=all` for every watched job each
//   poll_interval, and `scontrol show job -o` / `scontrol show node -o` once a job has
//   ended. The CLI rather than libslurm: libslurm's API and ABI change with every Slurm
//   release (the server would have to be built against the cluster's exact version), and
//   it would pull Slurm into the server's process; the CLIs are stable, and a poll costs
//   a few milliseconds. sacct is not used: it needs slurmdbd, which many clusters lack.
// - How an attempt ended: when the job ended NODE_FAIL, every rank on a node that is now
//   DOWN/DRAINED/FAILing is `lost` (even one that recorded the SIGTERM its slurmd sent it),
//   and failed_node names that node. Otherwise the exit files decide; a rank without one
//   is `lost` when its node failed or the controller has forgotten the job (MinJobAge
//   passed while nobody watched), and otherwise reads as SIGKILLed (exit 137): Slurm
//   killed it (time limit, scancel, srun stopping the gang). srun --kill-on-bad-exit sends
//   SIGTERM first, so the other ranks of a crashed gang usually report signal 15.
//   cluster_state is Slurm's "STATE Reason".
// - Stop: `scancel --signal=TERM` to the ranks now (a pending job is just cancelled), then
//   `scancel` after `grace` from the watcher thread; Slurm then sends TERM and, after its
//   KillWait, KILL.
// - Identity: with AttemptLaunch::os_user (multi-user mode) sbatch and scancel run as that
//   account (fork, drop privileges, exec), so Slurm runs the job as its uid; batch.sh is
//   given to it. sbatch gets only the basics of the job's environment (JobEnvironment), never
//   the server's: Slurm hands sbatch's environment to the job.
// - Launch returns one RankProcess per rank whose pid is the Slurm job id (start_time 0);
//   the id is also written to log_dir/slurm-job-id. Adopt takes either.
//
// Thread-safe. The exit callback runs on the watcher thread; it may call Launch/Stop/Adopt
// but not Shutdown or the destructor.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainyard/common/clock.h"
#include "trainyard/executors/executor.h"

namespace trainyard::executors {

// One compute pool backed by a Slurm cluster.
struct SlurmPoolConfig {
  std::string partition;  // "" = the cluster's default partition
  std::string account;
  std::string qos;
  std::vector<std::string> extra_sbatch_args;  // appended as given, e.g. "--constraint=a100"
  // Added to the environment of every Slurm command (e.g. SLURM_CONF), and so to the jobs.
  std::map<std::string, std::string> client_env;
  std::string bin_dir;  // where sbatch/squeue/scontrol/scancel are; "" = PATH
};

struct SlurmExecutorOptions {
  SlurmPoolConfig pool;
  // How often squeue is asked about the watched jobs (sooner after a Launch, Stop or Adopt).
  std::chrono::milliseconds poll_interval{2000};
};

// `clock` (which must outlive the executor) times the polls, the hard scancel after a Stop's
// grace and the Slurm commands' timeouts, on its monotonic time; the server passes the system
// clock.
std::unique_ptr<Executor> MakeSlurmExecutor(SlurmExecutorOptions options, Clock& clock);

// A node of the pool's partition as Slurm describes it (what the job scheduler plans with).
struct SlurmNode {
  std::string name;
  int cpus = 0;
  int64_t memory_bytes = 0;
  int gpus = 0;  // from its gres, e.g. "gpu:a100:4" or "gpu:4"
  // Its NodeAddr: where other machines reach it (the name when Slurm has no other; "" when
  // sinfo gave none). Node names need not resolve outside the cluster.
  std::string address;
};
// Asks `sinfo` for the nodes of the pool's partition (its timeout on `clock`). An error names
// the command and what it printed (e.g. munge or slurmctld unreachable).
Result<std::vector<SlurmNode>> DiscoverSlurmNodes(const SlurmPoolConfig& pool, Clock& clock);
// Parses `sinfo -N -h -o "%N|%c|%m|%G|%o"` output (exposed for tests); duplicates are merged.
std::vector<SlurmNode> ParseSinfoNodes(const std::string& text);

// --- Exposed for tests.

// `sbatch` arguments (without the program name) that submit `launch` with `script`.
// InvalidArgument, naming the field, for requests Slurm cannot express.
Result<std::vector<std::string>> SbatchArguments(const SlurmPoolConfig& pool,
                                                 const AttemptLaunch& launch,
                                                 const std::string& script_path);

// The batch script for `launch` (a POSIX sh script).
std::string BatchScript(const AttemptLaunch& launch);

// One `scontrol show ... -o` line as Key -> Value. A value runs to the next " Key=",
// so values with spaces survive (a value containing " Word=" would be cut there).
std::map<std::string, std::string> ParseScontrolLine(const std::string& line);

struct SlurmJobState {
  std::string state;   // PENDING, RUNNING, COMPLETED, FAILED, NODE_FAIL, CANCELLED, ...
  std::string reason;  // e.g. Resources, PartitionConfig, NodeDown, NonZeroExitCode
  int exit_code = 0;   // of the batch script
  int exit_signal = 0;
  std::string node_list;  // hostlist expression, e.g. node[1-2]
  // When Slurm preempted the job (scontrol's PreemptTime), "" if never. A job preempted with a
  // GraceTime may still end COMPLETED or FAILED: its ranks exited on the SIGTERM.
  std::string preempt_time;
  bool ended() const;  // a final state: the job will not run (again) under this id
};
Result<SlurmJobState> ParseSlurmJob(const std::string& scontrol_line);

// How an attempt whose Slurm job `slurm_id` squeue lists with `state` and `reason` is seen:
// PENDING is kPending, a final state (SlurmJobState::ended) kDone, any other listed state
// kRunning (it holds its nodes), "" kUnknown. A reason of "None" is no reason. `raw` reads
// "Slurm job 12 PENDING (Resources)".
ClusterJobStatus SlurmClusterStatus(int64_t slurm_id, const std::string& state,
                                    const std::string& reason);

// Combines the per-rank exit files (nullopt = none) with how Slurm says the job ended.
struct RankEvidence {
  std::optional<RankExit> exit;  // from rank-R.exit
  std::string node;              // from rank-R.node, "" if the rank never started
  int64_t exit_time_ns = 0;      // mtime of rank-R.exit, to find the first failure
};
AttemptExit ResolveAttemptExit(const std::string& job_id, int attempt, const SlurmJobState& job,
                               const std::vector<RankEvidence>& ranks,
                               const std::vector<std::string>& failed_nodes, bool stopped);

}  // namespace trainyard::executors
