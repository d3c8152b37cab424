#include "trainyard/jobs/recovery_policy.h"

#include <algorithm>

namespace trainyard::jobs {
namespace {

// How the attempt ended, before the failure rules: its state, its cause and the action
// (kRetryAfter standing for "a failure, to be decided by the failure rules").
struct Classification {
  AttemptState state = AttemptState::kFailed;
  std::string cause;
  RecoveryAction action = RecoveryAction::kRetryAfter;
  std::string message;  // set for the outcomes that need no failure rules
};

bool StoppedAs(const RecoveryInput& in, AttemptState s) {
  return in.stop_request && *in.stop_request == s;
}

Classification Classify(const RecoveryInput& in) {
  const executors::AttemptExit& exit = in.exit;
  const bool stopping = in.stop_request.has_value();
  if (StoppedAs(in, AttemptState::kCancelled)) {
    return {AttemptState::kCancelled, in.stop_cause, RecoveryAction::kCancel, in.stop_cause};
  }
  if (StoppedAs(in, AttemptState::kPreempted)) {
    return {AttemptState::kPreempted, in.stop_cause, RecoveryAction::kRequeue, in.stop_cause};
  }
  if (StoppedAs(in, AttemptState::kTimedOut)) {
    return {AttemptState::kTimedOut, in.stop_cause, RecoveryAction::kFail, in.stop_cause};
  }
  if (!stopping && exit.cluster_state.rfind("PREEMPTED", 0) == 0) {
    // The cluster preempted it (e.g. Slurm's partition priorities): requeue, not a failure.
    std::string cause = "preempted by the cluster (" + exit.cluster_state + ")";
    return {AttemptState::kPreempted, cause, RecoveryAction::kRequeue, cause};
  }
  if (exit.success && !stopping) {
    std::string cause = "all " + std::to_string(in.ranks) + " rank(s) exited 0";
    return {AttemptState::kSucceeded, cause, RecoveryAction::kSucceed, cause};
  }
  if (StoppedAs(in, AttemptState::kHung)) {
    return {AttemptState::kHung, in.stop_cause, RecoveryAction::kRetryAfter, ""};
  }
  std::string failure = DescribeFailure(in);
  return {exit.lost ? AttemptState::kLost : AttemptState::kFailed,
          failure.empty() ? "failed" : failure, RecoveryAction::kRetryAfter, ""};
}

// Adds `nodes` to `excluded` unless the job would then no longer fit on the pool's remaining
// nodes; returns whether it did.
bool ExcludeNodes(const RecoveryInput& in, const std::vector<std::string>& nodes,
                  std::vector<std::string>& excluded) {
  std::vector<std::string> more = excluded;
  for (const auto& n : nodes) {
    if (std::find(more.begin(), more.end(), n) == more.end()) more.push_back(n);
  }
  std::vector<NodeInfo> remaining;
  for (const auto& n : in.pool_nodes) {
    if (std::find(more.begin(), more.end(), n.name) == more.end()) remaining.push_back(n);
  }
  if (!CheckFeasible(remaining, in.request).ok()) return false;
  excluded = std::move(more);
  return true;
}

// The failure rules (see the header) for an attempt that failed; `d` holds its state and cause.
void DecideFailure(const RecoveryInput& in, RecoveryDecision& d) {
  const executors::AttemptExit& exit = in.exit;
  if (!exit.failed_node.empty()) {
    // The cluster says a node failed under the attempt: run the next one elsewhere.
    d.attempt_cause += " (node " + exit.failed_node +
                       (exit.cluster_state.empty() ? "" : ": " + exit.cluster_state) + ")";
    if (ExcludeNodes(in, {exit.failed_node}, d.excluded_nodes)) {
      d.attempt_cause += "; node " + exit.failed_node + " excluded";
    }
  }
  bool new_checkpoint = in.latest_checkpoint_attempt == in.attempt;
  d.consecutive_failures = new_checkpoint ? 1 : in.consecutive_failures + 1;
  const std::optional<FailurePolicy>& policy = in.matched_policy;
  if (policy && policy->action == FailureAction::kFail) {
    d.action = RecoveryAction::kFail;
    d.message = d.attempt_cause + "; the logs match failure policy '" + policy->pattern +
                "' (action fail), so it is not retried";
    return;
  }
  if (policy && policy->action == FailureAction::kAvoidNode) {
    if (ExcludeNodes(in, in.nodes, d.excluded_nodes)) {
      d.attempt_cause += "; the logs match '" + policy->pattern + "': node(s) excluded";
    } else {
      d.attempt_cause += "; the logs match '" + policy->pattern +
                         "' but excluding the node would leave too few nodes";
    }
  }
  bool forced_retry = policy && policy->action == FailureAction::kRetry;
  if (in.restarts >= in.max_restarts) {
    d.action = RecoveryAction::kFail;
    d.message = "gave up after " + std::to_string(in.attempt) + " attempt(s) (max_restarts " +
                std::to_string(in.max_restarts) + "): " + d.attempt_cause;
  } else if (!forced_retry && d.consecutive_failures >= in.crash_loop_limit) {
    d.action = RecoveryAction::kFail;
    d.message = "crash loop: " + std::to_string(d.consecutive_failures) +
                " consecutive failures without a new checkpoint; last: " + d.attempt_cause;
  } else {
    d.action = RecoveryAction::kRetryAfter;
    d.delay_ms =
        RetryBackoffMs(in.restart_backoff_ms, in.restart_backoff_max_ms, d.consecutive_failures);
    d.restarts = in.restarts + 1;
    d.message = "attempt " + std::to_string(in.attempt) + " " +
                std::string(AttemptStateName(d.attempt_state)) + ": " + d.attempt_cause;
  }
}

}  // namespace

std::string_view RecoveryActionName(RecoveryAction a) {
  switch (a) {
    case RecoveryAction::kSucceed:
      return "succeed";
    case RecoveryAction::kCancel:
      return "cancel";
    case RecoveryAction::kRequeue:
      return "requeue";
    case RecoveryAction::kFail:
      return "fail";
    case RecoveryAction::kRetryAfter:
      return "retry";
  }
  return "fail";
}

std::string SignalName(int sig) {
  switch (sig) {
    case 1:
      return "SIGHUP";
    case 2:
      return "SIGINT";
    case 6:
      return "SIGABRT";
    case 9:
      return "SIGKILL";
    case 11:
      return "SIGSEGV";
    case 15:
      return "SIGTERM";
    default:
      return "signal " + std::to_string(sig);
  }
}

int64_t RetryBackoffMs(int64_t base_ms, int64_t max_ms, int consecutive_failures) {
  int64_t delay = base_ms;
  for (int i = 1; i < consecutive_failures && delay < max_ms; ++i) delay *= 2;
  return std::min(delay, max_ms);
}

std::string DescribeFailure(const RecoveryInput& in) {
  const executors::AttemptExit& exit = in.exit;
  if (exit.lost) {
    return in.launch_failure.empty()
               ? "lost: the attempt's processes disappeared without an exit status"
               : in.launch_failure;
  }
  if (exit.failed_rank < 0) return "";
  std::string node;
  for (const auto& rank : exit.ranks) {
    if (rank.rank == exit.failed_rank) node = rank.node;
  }
  if (node.empty() && exit.failed_rank < in.ranks && !in.nodes.empty()) {
    // Ranks are laid out node by node, the same number on each.
    node = in.nodes[static_cast<size_t>(exit.failed_rank) * in.nodes.size() /
                    static_cast<size_t>(std::max(in.ranks, 1))];
  }
  std::string out = (exit.signal > 0 ? "killed by " + SignalName(exit.signal)
                                     : "exit code " + std::to_string(exit.exit_code)) +
                    " on rank " + std::to_string(exit.failed_rank) +
                    (node.empty() ? "" : " (node " + node + ")");
  if (!exit.cluster_state.empty() && exit.failed_node.empty()) {
    out += "; cluster: " + exit.cluster_state;
  }
  return out;
}

bool NeedsFailurePolicy(const RecoveryInput& in) {
  return Classify(in).action == RecoveryAction::kRetryAfter;
}

RecoveryDecision DecideRecovery(const RecoveryInput& in) {
  Classification c = Classify(in);
  RecoveryDecision d;
  d.action = c.action;
  d.attempt_state = c.state;
  d.attempt_cause = std::move(c.cause);
  d.message = std::move(c.message);
  d.restarts = in.restarts;
  d.consecutive_failures = in.consecutive_failures;
  d.excluded_nodes = in.excluded_nodes;
  if (in.service) {
    if (d.action == RecoveryAction::kRetryAfter) {
      d.action = RecoveryAction::kFail;
      d.consecutive_failures = in.consecutive_failures + 1;
      d.message = "replica " + std::string(AttemptStateName(d.attempt_state)) + ": " +
                  d.attempt_cause + "; serving starts its replacement";
    } else if (d.action == RecoveryAction::kRequeue) {
      d.action = RecoveryAction::kCancel;
      d.message = d.attempt_cause + "; serving starts its replacement";
    }
    return d;
  }
  if (d.action == RecoveryAction::kRetryAfter) DecideFailure(in, d);
  return d;
}

}  // namespace trainyard::jobs
