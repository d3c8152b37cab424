// The values the job service stores and serves: a job, its attempts, checkpoints and events,
// and the closed sets of states they are in. Plain values (copyable, no behaviour beyond
// naming and parsing states); thread-compatible. Shared by JobService, JobStore and the
// recovery policy, so that none of them needs the others' headers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "trainyard/common/status.h"
#include "trainyard/jobs/job_spec.h"

namespace trainyard::jobs {

enum class JobState { kPending, kRunning, kSucceeded, kFailed, kCancelled };
// "PENDING", "RUNNING", ...: how a state is stored and served.
std::string_view JobStateName(JobState s);
// The inverse of JobStateName; Internal for anything else (a damaged row).
Result<JobState> ParseJobState(std::string_view name);
bool IsTerminal(JobState s);

// What happened to one attempt. Stored and served as AttemptStateName's strings.
enum class AttemptState {
  kRunning,
  kSucceeded,
  kFailed,
  kPreempted,
  kCancelled,
  kLost,
  kHung,
  kTimedOut,
};
// "running", "succeeded", "failed", "preempted", "cancelled", "lost", "hung", "timed_out".
std::string_view AttemptStateName(AttemptState s);
// The inverse of AttemptStateName; Internal for anything else (a damaged row).
Result<AttemptState> ParseAttemptState(std::string_view name);

struct CheckpointInfo {
  int64_t step = 0;
  std::string path;
  int attempt = 0;
  int64_t created_at = 0;
};

struct AttemptInfo {
  int attempt = 0;
  AttemptState state = AttemptState::kRunning;
  std::string cause;  // human-readable: "exit code 3 on rank 1 (node local-0)"
  std::vector<std::string> nodes;
  int gpus = 0;  // in total
  int cpus = 0;  // in total
  int ranks = 0;
  int64_t started_at = 0;
  int64_t ended_at = 0;  // 0 while running
  std::optional<int> exit_code;
  std::optional<int> signal;
  std::optional<int> failed_rank;
  std::string resumed_from;
  int64_t last_checkpoint_at = 0;  // when this attempt last reported a checkpoint
  std::string log_dir;
  double cost_usd = 0;
  double paid_seconds = 0;        // wall time × (GPUs, or CPUs without GPUs)
  double productive_seconds = 0;  // the part that ended in checkpointed progress
};

struct JobInfo {
  std::string job_id;
  std::string owner;
  JobSpec spec;
  JobState state = JobState::kPending;
  std::string experiment_id;
  std::string run_id;
  int64_t submitted_at = 0;
  int64_t finished_at = 0;
  int attempts = 0;  // attempts started so far
  int restarts = 0;  // retries after failures (preemptions not counted)
  int consecutive_failures = 0;
  int64_t not_before = 0;  // backoff: not started before this time
  std::string message;     // why it ended, or what it waits for
  std::optional<CheckpointInfo> latest_checkpoint;
  std::vector<std::string> excluded_nodes;
  // Derived when read:
  int queue_position = 0;  // 1-based among pending jobs; 0 otherwise
  double cost_usd = 0;
  double goodput = 0;                     // productive ÷ paid, 0..1 (1 when nothing was paid yet)
  std::vector<AttemptInfo> attempt_list;  // filled by GetJob
};

struct JobEvent {
  int64_t seq = 0;
  int64_t time = 0;
  std::string message;
};

struct ListJobsRequest {
  std::optional<JobState> state;
  std::string project;
  bool active_only = false;  // pending and running
  int64_t max_results = 200;
};

}  // namespace trainyard::jobs
