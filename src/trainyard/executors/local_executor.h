// LocalExecutor: runs an attempt's ranks as processes on this machine.
//
// Design:
// - Each rank runs under a rank shim (`trainyard __rank-shim`, see rank_shim.h), spawned
//   with posix_spawn as the leader of a new session and process group, with a default
//   signal mask and dispositions (the server blocks/ignores some signals; workloads must
//   not inherit that). The shim runs `/bin/sh -c command` in its group, logs to
//   log_dir/rank-R.log and records the result in log_dir/rank-R.exit.
// - Identity: with AttemptLaunch::os_user the shim (which stays as the server's account, to
//   write the log and exit file) starts the workload as that account; never as root.
// - Containment: every attempt gets a cgroup (cgroups.h) that each shim joins before it
//   forks; when the attempt ends (or its SIGKILL deadline passes) everything left in it is
//   killed, `setsid` escapees included, and the cgroup is removed. resources.memory
//   (cluster.memory_mb_per_node x nnodes) becomes its memory limit. Without writable cgroups
//   attempts run without (Containment() says so).
// - Environment per rank: never the server's; JobEnvironment's basics (PATH, HOME, USER,
//   LOGNAME, LANG, TMPDIR = AttemptLaunch::tmp_dir), then AttemptLaunch::env, then RANK,
//   LOCAL_RANK, NODE_RANK, GROUP_RANK, ROLE_RANK, WORLD_SIZE (= nnodes*local_world_size),
//   LOCAL_WORLD_SIZE, GROUP_WORLD_SIZE, ROLE_WORLD_SIZE, MASTER_ADDR, MASTER_PORT (a free
//   port when 0), TORCHELASTIC_RUN_ID (= job id), CUDA_VISIBLE_DEVICES (gpu_ids, "" when
//   none), TRAINYARD_RANK, TRAINYARD_JOB_ID, TRAINYARD_ATTEMPT — torchrun-compatible.
// - One watcher thread waits with epoll on a pidfd per shim, which works for children and
//   for adopted processes alike, so exits are seen within milliseconds. waitid(P_PIDFD)
//   reaps children; the exit file (written by the shim) is the source of the workload's
//   status; without one, a child's wait status is used, and a non-child is `lost` (unless
//   we SIGKILLed it, which reads as signal 9).
// - When a shim that is our child exits, remaining members of its process group (a
//   workload's orphaned background processes) are SIGKILLed before it is reaped, while
//   its pid still pins the group id. Adopted non-children are not swept (their pid could
//   be reused once their new parent reaps them).
// - Gang: the first failing rank makes the watcher Stop the rest (gang_stop_grace); the
//   callback comes when every rank has exited. Stop() sends SIGTERM to each process group
//   (the shim ignores it and records the result) and arms a SIGKILL timer that the watcher
//   thread fires. Timers run on the injected Clock's monotonic time: the watcher checks them
//   whenever it wakes (an exit, a Launch/Stop/Adopt, or the nearest deadline by that clock).
//
// Thread-safe. The exit callback runs on the watcher thread; it may call Launch/Stop/Adopt
// but not Shutdown or the destructor.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "trainyard/common/clock.h"
#include "trainyard/executors/executor.h"

namespace trainyard::executors {

struct LocalExecutorOptions {
  std::string shim_path;  // the trainyard binary; "" = /proc/self/exe
  // Per-attempt cgroups (cgroups.h) where this machine lets us create them.
  bool cgroups = true;
  // How long the other ranks of a gang whose rank failed get between SIGTERM and SIGKILL
  // (time to save a checkpoint).
  std::chrono::milliseconds gang_stop_grace{10000};
};

// `clock` (which must outlive the executor) times the SIGKILL that follows a Stop's or the
// gang's grace, on its monotonic time; the server passes the system clock.
std::unique_ptr<Executor> MakeLocalExecutor(LocalExecutorOptions options, Clock& clock);

// /proc/<pid>/stat field 22 (start time in clock ticks since boot): with the pid, it names
// one process. NotFound when the process does not exist.
Result<int64_t> ProcessStartTime(int pid);

}  // namespace trainyard::executors
