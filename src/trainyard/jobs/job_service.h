// JobService: the job queue, the scheduling loop and the attempts' lifecycle. It
// orchestrates: JobStore keeps the rows, Scheduler decides what runs where, and
// DecideRecovery (recovery_policy.h) decides what follows an attempt's exit; this
// class gathers their inputs, applies their decisions, talks to the executor and
// keeps the live state (running attempts, queue positions, costs) in memory.
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
// Recovery (the rules are in recovery_policy.h): an attempt that fails (exit code,
// signal, hang, lost) is retried after an exponential backoff, up to max_restarts,
// with TRAINYARD_RESUME_FROM set to the latest checkpoint the job reported;
// log-pattern policies may stop retries or exclude the node; a crash loop (crash_loop_limit
// consecutive failures without a new checkpoint) ends the job. A preempted attempt is requeued
// without counting as a failure. Every attempt is recorded with its cause, cost and productive
// time.
//
// Server restarts: running attempts are re-adopted (their ranks keep running
// under their shims); attempts whose processes ended while the server was down
// are resolved from their exit files, and lost ones are recovered like failures.
//
// Thread-safe; the public methods may be called from any thread. The loop's state is
// guarded by mu_, which the loop holds for a whole pass.
#pragma once

#include <sys/types.h>

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "trainyard/common/clock.h"
#include "trainyard/common/mutex.h"
#include "trainyard/common/status.h"
#include "trainyard/cost/price_catalog.h"
#include "trainyard/executors/executor.h"
#include "trainyard/identity/identity_service.h"
#include "trainyard/jobs/fair_share.h"
#include "trainyard/jobs/job_info.h"
#include "trainyard/jobs/job_spec.h"
#include "trainyard/jobs/job_store.h"
#include "trainyard/jobs/recovery_policy.h"
#include "trainyard/jobs/scheduler.h"
#include "trainyard/store/database.h"
#include "trainyard/tracking/tracking_service.h"

namespace trainyard::jobs {

// The compute this service schedules onto.
struct PoolConfig {
  std::string name = "local";
  std::vector<NodeInfo> nodes;
  std::string master_addr = "127.0.0.1";
  // Where other machines reach a node, by its name (Slurm's NodeAddr); a node not here is
  // reached by its name.
  std::map<std::string, std::string> node_addresses;
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

class JobService {
 public:
  JobService(store::Database& db, Clock& clock, Random& random, identity::IdentityService& identity,
             tracking::TrackingService& tracking, executors::Executor& executor,
             cost::PriceCatalog prices, PoolConfig pool, JobServiceOptions options);
  ~JobService();
  JobService(const JobService&) = delete;
  JobService& operator=(const JobService&) = delete;

  // The jobs tables (JobStore's).
  static std::vector<store::Migration> Migrations() { return JobStore::Migrations(); }

  // Resolves a job's secret references at launch: (job owner, secret name) → value. Before
  // Start; without one, jobs that reference secrets fail to launch.
  using SecretResolver =
      std::function<Result<std::string>(const std::string& owner, const std::string& name)>;
  void SetSecretResolver(SecretResolver resolver) { secret_resolver_ = std::move(resolver); }
  // Called after every successful Submit with the caller and the new job (its run_id is the
  // run its attempts log to; the server records lineage from it). Set once, before Start;
  // it runs with the jobs lock held, so it must be cheap and must not call into JobService.
  using SubmitListener = std::function<void(const identity::Principal& who, const JobInfo& job)>;
  void SetSubmitListener(SubmitListener listener) { submit_listener_ = std::move(listener); }

  // Called when a job ends (succeeded, failed, cancelled), with its final state. Set once,
  // before Start; it runs with the jobs lock held, so it must be cheap and must not call into
  // JobService (serving's replica launcher queues it for a thread of its own).
  using FinishListener = std::function<void(const JobInfo& job)>;
  void SetFinishListener(FinishListener listener) { finish_listener_ = std::move(listener); }

  // What workloads use to reach the API (MLFLOW_TRACKING_URI, TRAINYARD_URL). Before Start.
  void SetServerUrl(std::string url) { server_url_ = std::move(url); }
  // Loads unfinished jobs, re-adopts running attempts and starts the loop.
  Status Start() TY_EXCLUDES(mu_, inbox_mu_);
  // Stops the loop; running jobs keep running (a later Start re-adopts them).
  void Stop() TY_EXCLUDES(inbox_mu_);

  // Validates, stores and queues a job. A request larger than the pool is
  // rejected here (InvalidArgument), never left pending.
  Result<JobInfo> Submit(const identity::Principal& who, JobSpec spec) TY_EXCLUDES(mu_);
  // Queues a service job (a serving replica, spec.kind kService naming its endpoint) as
  // `owner`: the caller (the server's replica launcher) has authorized it. It takes its
  // resources from the pool like any job (capacity, quotas, fair share, cost) and runs as the
  // owner's OS account in multi-user mode; it is never restarted by the recovery policy and
  // never preempted. InvalidArgument when it can never fit the pool.
  Result<JobInfo> SubmitService(const std::string& owner, JobSpec spec) TY_EXCLUDES(mu_);
  // Ok when a job asking for `resources` can ever be placed on the pool; InvalidArgument
  // saying what the pool has otherwise (what Submit refuses).
  Status CheckFits(const JobResources& resources) const;
  Result<JobInfo> GetJob(const std::string& job_id) TY_EXCLUDES(mu_);
  // The process ids of a running job's ranks (the local executor: each rank's process group;
  // Slurm: the cluster's job id). FailedPrecondition when it has no running attempt.
  Result<std::vector<int>> RunningProcessIds(const std::string& job_id) TY_EXCLUDES(mu_);
  Result<std::vector<JobInfo>> ListJobs(const ListJobsRequest& request) TY_EXCLUDES(mu_);
  Status Cancel(const identity::Principal& who, const std::string& job_id) TY_EXCLUDES(mu_);
  // Ok when Cancel would be allowed for `who` now (the same checks, nothing changes):
  // PermissionDenied naming what is missing, FailedPrecondition for a finished job.
  Status AuthorizeCancel(const identity::Principal& who, const std::string& job_id)
      TY_EXCLUDES(mu_);
  // A workload's sign of life (also implied by metrics logged to the job's run).
  Status Heartbeat(const identity::Principal& who, const std::string& job_id) TY_EXCLUDES(mu_);
  // Records a complete checkpoint; it becomes TRAINYARD_RESUME_FROM of the next attempt.
  Status ReportCheckpoint(const identity::Principal& who, const std::string& job_id, int64_t step,
                          const std::string& path) TY_EXCLUDES(mu_);
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
  std::vector<NodeUsage> Cluster() TY_EXCLUDES(mu_);
  const PoolConfig& pool() const { return pool_; }
  bool multi_user() const { return options_.multi_user; }
  // How the executor contains each attempt's processes (cgroups), for people.
  std::string Containment() const { return executor_.Containment(); }

  // Runs one loop pass now (tests drive the loop without its thread).
  void RunPassForTest() TY_EXCLUDES(mu_, inbox_mu_);

 private:
  struct Running;
  struct Record;
  struct AttemptPaths;

  void Loop() TY_EXCLUDES(mu_, inbox_mu_);
  // Queues `fn` for the loop, which runs it holding mu_ (fn may assert so: mu_.AssertHeld()).
  void Post(std::function<void()> fn) TY_EXCLUDES(inbox_mu_);
  // Runs the queued work, then a pass.
  void RunWork(std::deque<std::function<void()>>& work) TY_REQUIRES(mu_);
  void Pass() TY_REQUIRES(mu_);
  // How long the loop may sleep: until the earliest backoff ends, at most max_wait_ms.
  int64_t LoopWaitMs() TY_REQUIRES(mu_);
  void Wake() TY_EXCLUDES(inbox_mu_);

  // Start's phases: load unfinished jobs (returning the running attempts to re-adopt, as
  // job id → processes JSON), fair-share usage, and re-adoption.
  Result<std::vector<std::pair<std::string, std::string>>> LoadActiveJobs(int64_t now)
      TY_REQUIRES(mu_);
  Status LoadUsage(int64_t now) TY_REQUIRES(mu_);
  void AdoptRunning(const std::vector<std::pair<std::string, std::string>>& adopt) TY_REQUIRES(mu_);

  // Stores and queues a checked spec (Submit's and SubmitService's common part).
  Result<JobInfo> Enqueue(const identity::Principal& who, JobSpec spec) TY_EXCLUDES(mu_);
  // Submit's checks that need no state: scope, mode, OS account, feasibility, working dir.
  Status CheckSubmit(const identity::Principal& who, const JobSpec& spec);
  // The id of the experiment a job's run goes into, created when missing.
  Result<std::string> JobExperiment(const identity::Principal& who, const JobSpec& spec);

  void OnAttemptExit(const executors::AttemptExit& exit) TY_REQUIRES(mu_);
  // OnAttemptExit, with a fault (an exception) while handling the exit failing that job, never
  // the server; the attempt is recorded as failed, so a restart does not handle it again.
  void OnAttemptExitGuarded(const executors::AttemptExit& exit) TY_REQUIRES(mu_);
  // Copies what the executor says about the exit onto the attempt (codes, where it ran).
  static void RecordExit(const executors::AttemptExit& exit, AttemptInfo& a);
  RecoveryInput GatherRecoveryInput(const Record& r, const Running& run,
                                    const executors::AttemptExit& exit) TY_REQUIRES(mu_);
  // Applies a recovery decision to the job (the attempt has been recorded).
  void ApplyRecovery(Record& r, const RecoveryDecision& d, int64_t now) TY_REQUIRES(mu_);
  void FailAfterFault(const std::string& job_id, const std::string& what) TY_REQUIRES(mu_);
  void CheckHealth(int64_t now) TY_REQUIRES(mu_);
  // The latest sign of life of a running job: heartbeat, checkpoint or logged metric.
  int64_t LastProgress(const Record& r) TY_REQUIRES(mu_) TY_EXCLUDES(progress_mu_);
  void ScheduleAndLaunch(int64_t now) TY_REQUIRES(mu_);
  SchedulerInput BuildSchedulerInput(int64_t now) TY_REQUIRES(mu_);
  void StartScheduled(const StartDecision& start, int64_t now) TY_REQUIRES(mu_);
  Status Launch(Record& r, const Placement& placement, int64_t now) TY_REQUIRES(mu_);
  AttemptPaths PathsOf(const JobInfo& j, int attempt) const;
  // The launch request of an attempt, without the account and token (see Launch).
  Result<executors::AttemptLaunch> BuildLaunch(const JobInfo& j, const AttemptInfo& a,
                                               const Placement& placement,
                                               const AttemptPaths& paths);
  std::vector<executors::RankLaunch> RankLaunches(const Placement& placement, int ppn) const;
  void StopAttempt(Record& r, AttemptState state, const std::string& cause, int64_t grace_ms)
      TY_REQUIRES(mu_);
  void FinishJob(Record& r, JobState state, const std::string& message, int64_t now)
      TY_REQUIRES(mu_) TY_EXCLUDES(progress_mu_);
  void Requeue(Record& r, int64_t delay_ms, const std::string& message, int64_t now)
      TY_REQUIRES(mu_);
  std::optional<FailurePolicy> MatchFailurePolicy(const Record& r, const AttemptInfo& a)
      TY_REQUIRES(mu_);
  void Event(Record& r, const std::string& message, int64_t now) TY_REQUIRES(mu_);
  void RecordUsage(const Record& r, const AttemptInfo& a) TY_REQUIRES(mu_);
  void PriceAttempt(const Record& r, AttemptInfo& a, int64_t now) const TY_REQUIRES(mu_);
  void Derive(const Record& r, JobInfo& out, int64_t now) const TY_REQUIRES(mu_);
  Status Persist(const Record& r) TY_REQUIRES(mu_);
  Status PersistAttempt(const Record& r, const AttemptInfo& a, const std::string& processes)
      TY_REQUIRES(mu_);
  Status Authorize(const identity::Principal& who, const Record& r, identity::Action action)
      TY_REQUIRES(mu_);
  // The OS account a job runs as ("" in single-user mode) and the uid/gid owning its private
  // directory. FailedPrecondition when the owner has no (usable) mapping.
  struct JobAccount {
    std::string os_user;
    uid_t uid = 0;
    gid_t gid = 0;
  };
  Result<JobAccount> ResolveAccount(const JobInfo& j);
  // Whom the workload's scoped token acts as: the service principal of run_as (the owner
  // still allowed to use it, and not disabled), else the owner.
  Result<std::string> WorkloadPrincipal(const JobInfo& j);
  static Status NoOsAccount(const std::string& user);
  Status AuthorizeWorkload(const identity::Principal& who, const std::string& job_id)
      TY_REQUIRES(mu_);
  void OnRunActivity(const std::string& run_id) TY_EXCLUDES(progress_mu_);
  bool ScopeMayWrite(const std::string& scope, const identity::Securable& what)
      TY_EXCLUDES(scope_mu_);
  bool ScopeRunsAs(const std::string& scope, const std::string& user) TY_EXCLUDES(scope_mu_);

  JobStore store_;
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
  SubmitListener submit_listener_;
  FinishListener finish_listener_;

  Mutex inbox_mu_;
  CondVar inbox_cv_;
  std::deque<std::function<void()>> inbox_ TY_GUARDED_BY(inbox_mu_);
  bool stop_ TY_GUARDED_BY(inbox_mu_) = false;
  bool wake_ TY_GUARDED_BY(inbox_mu_) = false;
  std::thread loop_;

  // The loop holds it while it changes state; readers copy under it. Taken before inbox_mu_
  // and progress_mu_.
  Mutex mu_;
  std::map<std::string, std::unique_ptr<Record>> active_ TY_GUARDED_BY(mu_);  // pending, running
  std::unordered_map<std::string, std::string> run_to_job_ TY_GUARDED_BY(mu_);
  FairShareUsage usage_ TY_GUARDED_BY(mu_);
  int64_t next_seq_ TY_GUARDED_BY(mu_) = 1;

  Mutex scope_mu_;
  std::unordered_map<std::string, std::string> run_of_job_ TY_GUARDED_BY(scope_mu_);
  std::unordered_map<std::string, std::string> run_as_of_job_ TY_GUARDED_BY(scope_mu_);

  Mutex progress_mu_;
  std::unordered_map<std::string, int64_t> progress_by_run_ TY_GUARDED_BY(progress_mu_);
};

}  // namespace trainyard::jobs
