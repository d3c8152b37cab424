// The recovery policy: what to do with a job when one of its attempts has ended.
//
// A pure function, like Scheduler::Schedule: everything it looks at is in RecoveryInput
// (the job's limits and counters, the attempt, how it ended, whether the server had asked
// it to stop, which failure policy its log tail matched, the pool's nodes), and it returns a
// RecoveryDecision; no clock, no I/O, no executor. JobService gathers the input, calls
// DecideRecovery and applies the decision (records the attempt, finishes or requeues the job).
//
// The rules:
//   - stopped by the server: cancelled → cancel the job; preempted → requeue (not a failure);
//     timed out → fail the job; hung → a failure (below);
//   - preempted by the cluster (cluster state "PREEMPTED ...") → requeue;
//   - every rank exited 0 → succeed;
//   - otherwise a failure: a failed node the cluster names is excluded (while the job still
//     fits on what remains); consecutive failures count up, or restart at 1 when the attempt
//     reported a checkpoint; a matched failure policy may fail the job (kFail), exclude the
//     attempt's nodes (kAvoidNode) or force a retry past the crash-loop limit (kRetry); the job
//     fails after max_restarts restarts or crash_loop_limit consecutive failures, and is
//     otherwise retried after an exponential backoff (restart_backoff_ms doubling per
//     consecutive failure, capped at restart_backoff_max_ms).
//
// Thread-safe (pure functions).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "trainyard/executors/executor.h"
#include "trainyard/jobs/job_info.h"
#include "trainyard/jobs/job_spec.h"
#include "trainyard/jobs/scheduler.h"

namespace trainyard::jobs {

struct RecoveryInput {
  // A service job (a serving replica): never requeued or retried here. Its end is final for
  // the job; serving health-checks its replicas and starts a replacement itself, so the two
  // never both restart it. A failure is kFail, a preemption kCancel, an exit 0 kSucceed.
  bool service = false;
  // The job: its spec's limits and its counters before this attempt's exit.
  int max_restarts = 3;
  int crash_loop_limit = 3;
  int64_t restart_backoff_ms = 1000;
  int64_t restart_backoff_max_ms = 60000;
  ResourceRequest request;  // for whether excluding nodes leaves enough to place the job
  int restarts = 0;
  int consecutive_failures = 0;
  // The attempt that reported the job's latest checkpoint (nullopt: no checkpoint yet).
  std::optional<int> latest_checkpoint_attempt;
  std::vector<std::string> excluded_nodes;
  std::vector<NodeInfo> pool_nodes;

  // The attempt.
  int attempt = 0;
  int ranks = 0;
  std::vector<std::string> nodes;  // where it ran
  // Set when it could not be started ("could not start: ..."): the cause of a lost attempt.
  std::string launch_failure;
  // Set when the server asked it to stop (cancelled, preempted, timed_out or hung), with why.
  std::optional<AttemptState> stop_request;
  std::string stop_cause;

  // How it ended, as the executor reported it.
  executors::AttemptExit exit;
  // The first failure policy (the job's, then the defaults) that the attempt's log tail
  // matches; only looked at for failures (see NeedsFailurePolicy).
  std::optional<FailurePolicy> matched_policy;
};

enum class RecoveryAction { kSucceed, kCancel, kRequeue, kFail, kRetryAfter };
std::string_view RecoveryActionName(RecoveryAction a);

struct RecoveryDecision {
  RecoveryAction action = RecoveryAction::kFail;
  // What to record on the attempt.
  AttemptState attempt_state = AttemptState::kFailed;
  std::string attempt_cause;
  // The job's message, as the user sees it: why it ended, or why it waits.
  std::string message;
  int64_t delay_ms = 0;  // kRetryAfter: how long to wait before the next attempt
  // The job's counters and excluded nodes after this exit.
  int restarts = 0;
  int consecutive_failures = 0;
  std::vector<std::string> excluded_nodes;
};

// Whether the attempt ended in a failure, so that its log tail should be matched against the
// failure policies before deciding (the caller reads the logs; the policy does not).
bool NeedsFailurePolicy(const RecoveryInput& in);

RecoveryDecision DecideRecovery(const RecoveryInput& in);

// "exit code 3 on rank 1 (node n0)", "killed by SIGKILL on rank 0", "lost: ...": how a failed
// attempt ended, in the words the user sees ("" when it did not fail).
std::string DescribeFailure(const RecoveryInput& in);

// The delay before retry number `consecutive_failures` (1-based): the base doubling per
// failure, capped.
int64_t RetryBackoffMs(int64_t base_ms, int64_t max_ms, int consecutive_failures);

// "SIGKILL" for 9, "signal 42" for a signal without a common name.
std::string SignalName(int sig);

}  // namespace trainyard::jobs
