// The recovery policy without processes: each rule of recovery_policy.h, from an input built
// by hand to the decision and the words the user sees.
#include "trainyard/jobs/recovery_policy.h"

#include <gtest/gtest.h>

namespace trainyard::jobs {
namespace {

// A one-rank attempt 1 on node n0 of a two-node pool, job limits from the spec defaults.
RecoveryInput Base() {
  RecoveryInput in;
  in.max_restarts = 3;
  in.crash_loop_limit = 3;
  in.restart_backoff_ms = 1000;
  in.restart_backoff_max_ms = 60000;
  in.request.nodes = 1;
  in.request.cpus_per_node = 1;
  in.pool_nodes = {{"n0", 0, 4, 0}, {"n1", 0, 4, 0}};
  in.attempt = 1;
  in.ranks = 1;
  in.nodes = {"n0"};
  in.exit.attempt = 1;
  return in;
}

RecoveryInput Succeeded() {
  RecoveryInput in = Base();
  in.exit.success = true;
  in.exit.exit_code = 0;
  return in;
}

RecoveryInput ExitedWith(int code) {
  RecoveryInput in = Base();
  in.exit.failed_rank = 0;
  in.exit.exit_code = code;
  return in;
}

RecoveryInput Stopped(AttemptState as, const std::string& cause) {
  RecoveryInput in = Base();
  in.stop_request = as;
  in.stop_cause = cause;
  in.exit.stopped = true;
  in.exit.failed_rank = 0;
  in.exit.signal = 15;
  return in;
}

TEST(RecoveryPolicyTest, AllRanksExitingZeroSucceeds) {
  RecoveryInput in = Succeeded();
  in.ranks = 2;
  RecoveryDecision d = DecideRecovery(in);
  EXPECT_EQ(d.action, RecoveryAction::kSucceed);
  EXPECT_EQ(d.attempt_state, AttemptState::kSucceeded);
  EXPECT_EQ(d.attempt_cause, "all 2 rank(s) exited 0");
  EXPECT_EQ(d.message, "all 2 rank(s) exited 0");
  EXPECT_FALSE(NeedsFailurePolicy(in));
}

TEST(RecoveryPolicyTest, ACancelledAttemptCancelsTheJobEvenIfItExitedZero) {
  RecoveryInput in = Stopped(AttemptState::kCancelled, "cancelled by alice");
  in.exit.success = true;
  RecoveryDecision d = DecideRecovery(in);
  EXPECT_EQ(d.action, RecoveryAction::kCancel);
  EXPECT_EQ(d.attempt_state, AttemptState::kCancelled);
  EXPECT_EQ(d.message, "cancelled by alice");
  EXPECT_FALSE(NeedsFailurePolicy(in));
}

TEST(RecoveryPolicyTest, APreemptedAttemptIsRequeuedWithoutCountingAFailure) {
  RecoveryInput in = Stopped(AttemptState::kPreempted, "preempted by higher-priority job j-2");
  in.consecutive_failures = 2;
  in.restarts = 1;
  RecoveryDecision d = DecideRecovery(in);
  EXPECT_EQ(d.action, RecoveryAction::kRequeue);
  EXPECT_EQ(d.attempt_state, AttemptState::kPreempted);
  EXPECT_EQ(d.message, "preempted by higher-priority job j-2");
  EXPECT_EQ(d.consecutive_failures, 2);
  EXPECT_EQ(d.restarts, 1);
  EXPECT_EQ(d.delay_ms, 0);
}

TEST(RecoveryPolicyTest, AFailedServiceReplicaEndsItsJobInsteadOfRetrying) {
  RecoveryInput in = ExitedWith(3);
  in.service = true;
  in.restarts = 0;
  RecoveryDecision d = DecideRecovery(in);
  EXPECT_EQ(d.action, RecoveryAction::kFail);
  EXPECT_EQ(d.attempt_state, AttemptState::kFailed);
  EXPECT_EQ(d.delay_ms, 0);
  EXPECT_EQ(d.restarts, 0);
  EXPECT_EQ(d.message,
            "replica failed: exit code 3 on rank 0 (node n0); serving starts its replacement");
}

TEST(RecoveryPolicyTest, APreemptedOrLostServiceReplicaIsNotRequeued) {
  RecoveryInput preempted =
      Stopped(AttemptState::kPreempted, "preempted by higher-priority job j-2");
  preempted.service = true;
  RecoveryDecision d = DecideRecovery(preempted);
  EXPECT_EQ(d.action, RecoveryAction::kCancel);
  EXPECT_EQ(d.attempt_state, AttemptState::kPreempted);

  RecoveryInput lost = Base();
  lost.exit.lost = true;
  lost.service = true;
  d = DecideRecovery(lost);
  EXPECT_EQ(d.action, RecoveryAction::kFail);
  EXPECT_EQ(d.attempt_state, AttemptState::kLost);

  RecoveryInput stopped = Stopped(AttemptState::kCancelled, "cancelled by admin");
  stopped.service = true;
  EXPECT_EQ(DecideRecovery(stopped).action, RecoveryAction::kCancel);
}

TEST(RecoveryPolicyTest, TheClusterPreemptingAnAttemptRequeuesIt) {
  RecoveryInput in = ExitedWith(-1);
  in.exit.cluster_state = "PREEMPTED";
  RecoveryDecision d = DecideRecovery(in);
  EXPECT_EQ(d.action, RecoveryAction::kRequeue);
  EXPECT_EQ(d.attempt_state, AttemptState::kPreempted);
  EXPECT_EQ(d.attempt_cause, "preempted by the cluster (PREEMPTED)");
}

TEST(RecoveryPolicyTest, ServerStopsWinOverTheClustersPreemption) {
  RecoveryInput in = Stopped(AttemptState::kHung, "hung: no heartbeat");
  in.exit.cluster_state = "PREEMPTED";
  EXPECT_EQ(DecideRecovery(in).attempt_state, AttemptState::kHung);
}

TEST(RecoveryPolicyTest, ATimedOutAttemptFailsTheJobWithoutRetry) {
  RecoveryInput in = Stopped(AttemptState::kTimedOut, "time limit of 1m reached");
  RecoveryDecision d = DecideRecovery(in);
  EXPECT_EQ(d.action, RecoveryAction::kFail);
  EXPECT_EQ(d.attempt_state, AttemptState::kTimedOut);
  EXPECT_EQ(d.message, "time limit of 1m reached");
  EXPECT_EQ(d.restarts, 0);
}

TEST(RecoveryPolicyTest, AHungAttemptIsAFailureThatIsRetried) {
  RecoveryInput in = Stopped(AttemptState::kHung, "hung: no heartbeat or metric for 5.0s");
  EXPECT_TRUE(NeedsFailurePolicy(in));
  RecoveryDecision d = DecideRecovery(in);
  EXPECT_EQ(d.action, RecoveryAction::kRetryAfter);
  EXPECT_EQ(d.attempt_state, AttemptState::kHung);
  EXPECT_EQ(d.attempt_cause, "hung: no heartbeat or metric for 5.0s");
  EXPECT_EQ(d.message, "attempt 1 hung: hung: no heartbeat or metric for 5.0s");
  EXPECT_EQ(d.delay_ms, 1000);
  EXPECT_EQ(d.restarts, 1);
  EXPECT_EQ(d.consecutive_failures, 1);
}

TEST(RecoveryPolicyTest, AStoppedAttemptThatSucceedsIsStillAFailure) {
  // Stopped for a hang, yet every rank exited 0: the hang is what counts.
  RecoveryInput in = Stopped(AttemptState::kHung, "hung");
  in.exit.success = true;
  in.exit.failed_rank = -1;
  EXPECT_EQ(DecideRecovery(in).action, RecoveryAction::kRetryAfter);
}

TEST(RecoveryPolicyTest, AFailedExitIsDescribedWithItsRankAndNode) {
  RecoveryInput in = ExitedWith(3);
  RecoveryDecision d = DecideRecovery(in);
  EXPECT_EQ(d.action, RecoveryAction::kRetryAfter);
  EXPECT_EQ(d.attempt_state, AttemptState::kFailed);
  EXPECT_EQ(d.attempt_cause, "exit code 3 on rank 0 (node n0)");
  EXPECT_EQ(d.message, "attempt 1 failed: exit code 3 on rank 0 (node n0)");
}

TEST(RecoveryPolicyTest, ASignalIsNamed) {
  RecoveryInput in = ExitedWith(-1);
  in.exit.signal = 9;
  EXPECT_EQ(DescribeFailure(in), "killed by SIGKILL on rank 0 (node n0)");
  in.exit.signal = 42;
  EXPECT_EQ(DescribeFailure(in), "killed by signal 42 on rank 0 (node n0)");
}

TEST(RecoveryPolicyTest, TheFailedRanksNodeComesFromTheExitOrTheLayout) {
  RecoveryInput in = ExitedWith(1);
  in.ranks = 4;
  in.nodes = {"n0", "n1"};
  in.exit.failed_rank = 3;
  EXPECT_EQ(DescribeFailure(in), "exit code 1 on rank 3 (node n1)");  // 2 ranks per node
  executors::RankExit reported;
  reported.rank = 3;
  reported.node = "c7";
  in.exit.ranks = {reported};
  EXPECT_EQ(DescribeFailure(in), "exit code 1 on rank 3 (node c7)");
  in.exit.ranks.clear();
  in.nodes.clear();
  EXPECT_EQ(DescribeFailure(in), "exit code 1 on rank 3");
}

TEST(RecoveryPolicyTest, TheClustersWordsAreAddedWhenNoNodeFailed) {
  RecoveryInput in = ExitedWith(1);
  in.exit.cluster_state = "FAILED";
  EXPECT_EQ(DescribeFailure(in), "exit code 1 on rank 0 (node n0); cluster: FAILED");
}

TEST(RecoveryPolicyTest, ALostAttemptSaysSoOrWhyItCouldNotStart) {
  RecoveryInput in = Base();
  in.exit.lost = true;
  RecoveryDecision d = DecideRecovery(in);
  EXPECT_EQ(d.attempt_state, AttemptState::kLost);
  EXPECT_EQ(d.attempt_cause, "lost: the attempt's processes disappeared without an exit status");
  in.launch_failure = "could not start: no such user";
  EXPECT_EQ(DecideRecovery(in).attempt_cause, "could not start: no such user");
}

TEST(RecoveryPolicyTest, AFailureWithoutDetailsSaysFailed) {
  RecoveryInput in = Base();  // not successful, no failed rank, not lost
  EXPECT_EQ(DecideRecovery(in).attempt_cause, "failed");
}

TEST(RecoveryPolicyTest, BackoffDoublesPerConsecutiveFailureUpToTheCap) {
  EXPECT_EQ(RetryBackoffMs(1000, 60000, 1), 1000);
  EXPECT_EQ(RetryBackoffMs(1000, 60000, 2), 2000);
  EXPECT_EQ(RetryBackoffMs(1000, 60000, 3), 4000);
  EXPECT_EQ(RetryBackoffMs(1000, 60000, 7), 60000);
  EXPECT_EQ(RetryBackoffMs(1000, 60000, 1000), 60000);  // no overflow
  EXPECT_EQ(RetryBackoffMs(0, 60000, 5), 0);
  EXPECT_EQ(RetryBackoffMs(5000, 3000, 1), 3000);
}

TEST(RecoveryPolicyTest, RetriesWaitLongerAfterEachConsecutiveFailure) {
  RecoveryInput in = ExitedWith(1);
  in.crash_loop_limit = 10;
  in.max_restarts = 10;
  in.consecutive_failures = 2;
  in.restarts = 2;
  RecoveryDecision d = DecideRecovery(in);
  EXPECT_EQ(d.action, RecoveryAction::kRetryAfter);
  EXPECT_EQ(d.consecutive_failures, 3);
  EXPECT_EQ(d.delay_ms, 4000);
  EXPECT_EQ(d.restarts, 3);
}

TEST(RecoveryPolicyTest, ANewCheckpointResetsTheConsecutiveFailures) {
  RecoveryInput in = ExitedWith(1);
  in.attempt = 3;
  in.restarts = 2;
  in.consecutive_failures = 2;
  in.latest_checkpoint_attempt = 3;
  RecoveryDecision d = DecideRecovery(in);
  EXPECT_EQ(d.action, RecoveryAction::kRetryAfter);
  EXPECT_EQ(d.consecutive_failures, 1);
  EXPECT_EQ(d.delay_ms, 1000);
  in.latest_checkpoint_attempt = 2;  // an older attempt's checkpoint does not count
  EXPECT_EQ(DecideRecovery(in).consecutive_failures, 3);
}

TEST(RecoveryPolicyTest, GivesUpAfterMaxRestarts) {
  RecoveryInput in = ExitedWith(3);
  in.attempt = 4;
  in.restarts = 3;
  in.latest_checkpoint_attempt = 4;
  RecoveryDecision d = DecideRecovery(in);
  EXPECT_EQ(d.action, RecoveryAction::kFail);
  EXPECT_EQ(d.message,
            "gave up after 4 attempt(s) (max_restarts 3): exit code 3 on rank 0 (node n0)");
  EXPECT_EQ(d.restarts, 3);
  EXPECT_EQ(d.consecutive_failures, 1);
}

TEST(RecoveryPolicyTest, ACrashLoopEndsTheJob) {
  RecoveryInput in = ExitedWith(3);
  in.attempt = 3;
  in.restarts = 2;
  in.max_restarts = 10;
  in.consecutive_failures = 2;
  RecoveryDecision d = DecideRecovery(in);
  EXPECT_EQ(d.action, RecoveryAction::kFail);
  EXPECT_EQ(d.message,
            "crash loop: 3 consecutive failures without a new checkpoint; last: exit code 3 on "
            "rank 0 (node n0)");
}

TEST(RecoveryPolicyTest, ARetryPolicyOverridesTheCrashLoopButNotMaxRestarts) {
  RecoveryInput in = ExitedWith(3);
  in.max_restarts = 10;
  in.consecutive_failures = 5;
  in.restarts = 5;
  in.matched_policy = FailurePolicy{"transient", FailureAction::kRetry};
  EXPECT_EQ(DecideRecovery(in).action, RecoveryAction::kRetryAfter);
  in.restarts = 10;
  EXPECT_EQ(DecideRecovery(in).action, RecoveryAction::kFail);
}

TEST(RecoveryPolicyTest, AFailPolicyStopsRetries) {
  RecoveryInput in = ExitedWith(1);
  in.matched_policy = FailurePolicy{"CUDA out of memory", FailureAction::kFail};
  RecoveryDecision d = DecideRecovery(in);
  EXPECT_EQ(d.action, RecoveryAction::kFail);
  EXPECT_EQ(d.message,
            "exit code 1 on rank 0 (node n0); the logs match failure policy 'CUDA out of "
            "memory' (action fail), so it is not retried");
  EXPECT_EQ(d.consecutive_failures, 1);
}

TEST(RecoveryPolicyTest, AnAvoidNodePolicyExcludesTheAttemptsNodesWhileTheJobStillFits) {
  RecoveryInput in = ExitedWith(1);
  in.matched_policy = FailurePolicy{"Xid [0-9]+", FailureAction::kAvoidNode};
  RecoveryDecision d = DecideRecovery(in);
  EXPECT_EQ(d.action, RecoveryAction::kRetryAfter);
  EXPECT_EQ(d.excluded_nodes, std::vector<std::string>{"n0"});
  EXPECT_EQ(d.attempt_cause,
            "exit code 1 on rank 0 (node n0); the logs match 'Xid [0-9]+': "
            "node(s) excluded");

  in.request.nodes = 2;  // needs both nodes: excluding one would leave too few
  in.nodes = {"n0", "n1"};
  d = DecideRecovery(in);
  EXPECT_TRUE(d.excluded_nodes.empty());
  EXPECT_NE(d.attempt_cause.find("but excluding the node would leave too few nodes"),
            std::string::npos)
      << d.attempt_cause;
}

TEST(RecoveryPolicyTest, ANodeTheClusterReportsFailedIsExcluded) {
  RecoveryInput in = ExitedWith(-1);
  in.exit.failed_node = "n1";
  in.exit.cluster_state = "NODE_FAIL";
  in.nodes = {"n1"};
  RecoveryDecision d = DecideRecovery(in);
  EXPECT_EQ(d.action, RecoveryAction::kRetryAfter);
  EXPECT_EQ(d.excluded_nodes, std::vector<std::string>{"n1"});
  EXPECT_EQ(d.attempt_cause,
            "exit code -1 on rank 0 (node n1) (node n1: NODE_FAIL); node n1 excluded");

  in.excluded_nodes = {"n0"};  // the last node left: not excluded
  d = DecideRecovery(in);
  EXPECT_EQ(d.excluded_nodes, std::vector<std::string>{"n0"});
  EXPECT_EQ(d.attempt_cause, "exit code -1 on rank 0 (node n1) (node n1: NODE_FAIL)");
}

TEST(RecoveryPolicyTest, ExcludedNodesAreKeptWhenNothingNewIsExcluded) {
  RecoveryInput in = Succeeded();
  in.excluded_nodes = {"n1"};
  EXPECT_EQ(DecideRecovery(in).excluded_nodes, std::vector<std::string>{"n1"});
}

TEST(RecoveryPolicyTest, ActionNames) {
  EXPECT_EQ(RecoveryActionName(RecoveryAction::kSucceed), "succeed");
  EXPECT_EQ(RecoveryActionName(RecoveryAction::kCancel), "cancel");
  EXPECT_EQ(RecoveryActionName(RecoveryAction::kRequeue), "requeue");
  EXPECT_EQ(RecoveryActionName(RecoveryAction::kFail), "fail");
  EXPECT_EQ(RecoveryActionName(RecoveryAction::kRetryAfter), "retry");
}

TEST(AttemptStateTest, NamesRoundTripAndUnknownNamesFail) {
  for (AttemptState s : {AttemptState::kRunning, AttemptState::kSucceeded, AttemptState::kFailed,
                         AttemptState::kPreempted, AttemptState::kCancelled, AttemptState::kLost,
                         AttemptState::kHung, AttemptState::kTimedOut}) {
    auto parsed = ParseAttemptState(AttemptStateName(s));
    ASSERT_TRUE(parsed.ok()) << AttemptStateName(s);
    EXPECT_EQ(*parsed, s);
  }
  EXPECT_EQ(AttemptStateName(AttemptState::kTimedOut), "timed_out");
  EXPECT_FALSE(ParseAttemptState("Running").ok());
  EXPECT_FALSE(ParseAttemptState("").ok());
}

TEST(JobStateTest, NamesRoundTripAndUnknownNamesFail) {
  for (JobState s : {JobState::kPending, JobState::kRunning, JobState::kSucceeded,
                     JobState::kFailed, JobState::kCancelled}) {
    auto parsed = ParseJobState(JobStateName(s));
    ASSERT_TRUE(parsed.ok()) << JobStateName(s);
    EXPECT_EQ(*parsed, s);
  }
  EXPECT_FALSE(ParseJobState("pending").ok());
}

}  // namespace
}  // namespace trainyard::jobs
