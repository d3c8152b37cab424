// JobService: the job queue, the scheduling loop and the recovery policy.
//
// Submitted jobs are stored (durably, before Submit returns) and handed to one
// loop thread, the only writer of job state. Each pass of the loop:
//   1. applies what happened since the last pass — attempts that exited (from the
//      executor), cancellations, heartbeats and reported checkpoints;
//   2. stops attempts that are hung (no heartbeat or metric for hang_timeout) or
//      over their time limit;
//   3. asks the Scheduler (pure policy: priorities, fair share, gang placement,
//      backfill, preemption) what to start and what to preempt, and does it.
//
// Recovery: an attempt that fails (exit code, signal, hang, lost) is retried after
// an exponential backoff, up to max_restarts, with TRAINYARD_RESUME_FROM set to the
// latest checkpoint the job reported; log-pattern policies may stop retries or
// exclude the node; a crash loop (crash_loop_limit consecutive failures without a
// new checkpoint) ends the job. A preempted attempt is requeued without counting
// as a failure. Every attempt is recorded with its cause, cost and productive time.
//
// Server restarts: running attempts are re-adopted (their ranks keep running
// under their shims); attempts whose processes ended while the server was down
// are resolved from their exit files, and lost ones are recovered like failures.
//
// Thread-safe; the public methods may be called from any thread.
#pragma once

#include <sys/types.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "trainyard/common/clock.h"
#include "trainyard/common/status.h"
#include "trainyard/cost/price_catalog.h"
#include "trainyard/executors/executor.h"
#include "trainyard/identity/identity_service.h"
#include "trainyard/jobs/fair_share.h"
#include "trainyard/jobs/job_spec.h"
#include "trainyard/jobs/scheduler.h"
#include "trainyard/store/database.h"
#include "trainyard/tracking/tracking_service.h"

namespace trainyard::jobs {

enum class JobState { kPending, kRunning, kSucceeded, kFailed, kCancelled };
std::string_view JobStateName(JobState s);
bool IsTerminal(JobState s);

struct CheckpointInfo {
  int64_t step = 0;
  std::string path;
  int attempt = 0;
  int64_t created_at = 0;
};

struct AttemptInfo {
  int attempt = 0;
  // running | succeeded | failed | preempted | cancelled | lost | hung | timed_out
  std::string state = "running";
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

// The compute this service schedules onto.
struct PoolConfig {
  std::string name = "local";
  std::vector<NodeInfo> nodes;
  std::string master_addr = "127.0.0.1";
};

struct JobServiceOptions {
  std::string data_dir;  // logs go to <data_dir>/jobs/<job>/attempt-<n>/
  // Multi-user mode: every job runs as its owner's mapped OS account (users without one
  // cannot submit). Single-user mode: jobs run as the server's account; only admins submit.
  bool multi_user = false;
  // Where each job's private directory <job_dir_root>/<job> (0700, owned by the job's account:
  // work/ = the default working dir, tmp/ = TMPDIR, checkpoints/ = TRAINYARD_CHECKPOINT_DIR)
  // lives; "" = <data_dir>/jobs. In multi-user mode it must be outside the (0700) data dir.
  std::string job_dir_root;
  // Rank logs go to the job's private directory instead of the data directory: for
  // executors whose ranks write their logs themselves, as the job's account (Slurm).
  bool logs_in_job_dir = false;
  int64_t fair_share_half_life_ms = int64_t{24} * 3600 * 1000;
  int64_t max_wait_ms = 1000;     // the loop wakes at least this often
  bool start_loop_thread = true;  // false: tests drive passes with RunPassForTest()
};

struct ListJobsRequest {
  std::optional<JobState> state;
  std::string project;
  bool active_only = false;  // pending and running
  int64_t max_results = 200;
};

class JobService {
 public:
  JobService(store::Database& db, Clock& clock, Random& random, identity::IdentityService& identity,
             tracking::TrackingService& tracking, executors::Executor& executor,
             cost::PriceCatalog prices, PoolConfig pool, JobServiceOptions options);
  ~JobService();
  JobService(const JobService&) = delete;
  JobService& operator=(const JobService&) = delete;

  static std::vector<store::Migration> Migrations();

  // Resolves a job's secret references at launch: (job owner, secret name) → value. Before
  // Start; without one, jobs that reference secrets fail to launch.
  using SecretResolver =
      std::function<Result<std::string>(const std::string& owner, const std::string& name)>;
  void SetSecretResolver(SecretResolver resolver) { secret_resolver_ = std::move(resolver); }

  // What workloads use to reach the API (MLFLOW_TRACKING_URI, TRAINYARD_URL). Before Start.
  void SetServerUrl(std::string url) { server_url_ = std::move(url); }
  // Loads unfinished jobs, re-adopts running attempts and starts the loop.
  Status Start();
  // Stops the loop; running jobs keep running (a later Start re-adopts them).
  void Stop();

  // Validates, stores and queues a job. A request larger than the pool is
  // rejected here (InvalidArgument), never left pending.
  Result<JobInfo> Submit(const identity::Principal& who, JobSpec spec);
  Result<JobInfo> GetJob(const std::string& job_id);
  Result<std::vector<JobInfo>> ListJobs(const ListJobsRequest& request);
  Status Cancel(const identity::Principal& who, const std::string& job_id);
  // A workload's sign of life (also implied by metrics logged to the job's run).
  Status Heartbeat(const identity::Principal& who, const std::string& job_id);
  // Records a complete checkpoint; it becomes TRAINYARD_RESUME_FROM of the next attempt.
  Status ReportCheckpoint(const identity::Principal& who, const std::string& job_id, int64_t step,
                          const std::string& path);
  Result<std::vector<CheckpointInfo>> ListCheckpoints(const std::string& job_id);
  // Events after `after_seq` (state changes, attempts), oldest first.
  Result<std::vector<JobEvent>> Events(const std::string& job_id, int64_t after_seq);
  // The log file of one rank of one attempt (attempt 0 = the latest).
  Result<std::string> LogPath(const std::string& job_id, int attempt, int rank);

  struct NodeUsage {
    NodeInfo node;
    int gpus_used = 0;
    int cpus_used = 0;
    std::vector<std::string> jobs;
  };
  std::vector<NodeUsage> Cluster();
  const PoolConfig& pool() const { return pool_; }
  bool multi_user() const { return options_.multi_user; }
  // How the executor contains each attempt's processes (cgroups), for people.
  std::string Containment() const { return executor_.Containment(); }

  // Runs one loop pass now (tests drive the loop without its thread).
  void RunPassForTest();

 private:
  struct Running;
  struct Record;

  void Loop();
  void Post(std::function<void()> fn);
  void Pass();
  void OnAttemptExit(const executors::AttemptExit& exit);
  // OnAttemptExit, with a fault (an exception) while handling the exit failing that job, never
  // the server; the attempt is recorded as failed, so a restart does not handle it again.
  void OnAttemptExitGuarded(const executors::AttemptExit& exit);
  void FailAfterFault(const std::string& job_id, const std::string& what);
  void CheckHealth(int64_t now);
  void ScheduleAndLaunch(int64_t now);
  Status Launch(Record& r, const Placement& placement, int64_t now);
  void StopAttempt(Record& r, const std::string& state, const std::string& cause, int64_t grace_ms);
  void FinishJob(Record& r, JobState state, const std::string& message, int64_t now);
  void Requeue(Record& r, int64_t delay_ms, const std::string& message, int64_t now);
  // Adds `nodes` to the job's excluded nodes unless that would leave too few to place it;
  // returns whether it did.
  bool ExcludeNodes(Record& r, const std::vector<std::string>& nodes);
  std::optional<FailurePolicy> MatchFailurePolicy(const Record& r, const AttemptInfo& a);
  void Event(Record& r, const std::string& message, int64_t now);
  void RecordUsage(const Record& r, const AttemptInfo& a);
  void PriceAttempt(const Record& r, AttemptInfo& a, int64_t now) const;
  void Derive(const Record& r, JobInfo& out, int64_t now) const;
  Status Persist(const Record& r);
  Status PersistAttempt(const Record& r, const AttemptInfo& a, const std::string& processes);
  Status Authorize(const identity::Principal& who, const Record& r, identity::Action action);
  // The OS account a job runs as ("" in single-user mode) and the uid/gid owning its private
  // directory. FailedPrecondition when the owner has no (usable) mapping.
  struct JobAccount {
    std::string os_user;
    uid_t uid = 0;
    gid_t gid = 0;
  };
  Result<JobAccount> ResolveAccount(const JobInfo& j);
  static Status NoOsAccount(const std::string& user);
  Result<std::string> StoredState(const std::string& job_id);
  Status AuthorizeWorkload(const identity::Principal& who, const std::string& job_id);
  Result<std::vector<AttemptInfo>> LoadAttempts(const std::string& job_id);
  void OnRunActivity(const std::string& run_id);
  bool ScopeMayWrite(const std::string& scope, const identity::Securable& what);

  store::Database& db_;
  Clock& clock_;
  Random& random_;
  identity::IdentityService& identity_;
  tracking::TrackingService& tracking_;
  executors::Executor& executor_;
  const cost::PriceCatalog prices_;
  const PoolConfig pool_;
  const JobServiceOptions options_;
  Scheduler scheduler_;
  std::string server_url_;
  SecretResolver secret_resolver_;

  std::mutex inbox_mu_;
  std::condition_variable inbox_cv_;
  std::deque<std::function<void()>> inbox_;  // guarded by inbox_mu_
  bool stop_ = false;                        // guarded by inbox_mu_
  bool wake_ = false;                        // guarded by inbox_mu_
  std::thread loop_;

  std::mutex mu_;  // the loop holds it while it changes state; readers copy under it
  std::map<std::string, std::unique_ptr<Record>> active_;    // pending and running, guarded
  std::unordered_map<std::string, std::string> run_to_job_;  // guarded
  FairShareUsage usage_;                                     // guarded
  int64_t next_seq_ = 1;                                     // guarded

  std::mutex scope_mu_;
  std::unordered_map<std::string, std::string> run_of_job_;  // guarded by scope_mu_

  std::mutex progress_mu_;
  std::unordered_map<std::string, int64_t> progress_by_run_;  // guarded by progress_mu_
};

}  // namespace trainyard::jobs
