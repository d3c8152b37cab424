#include "trainyard/jobs/job_service.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "trainyard/common/json.h"
#include "trainyard/common/os_account.h"
#include "trainyard/common/paths.h"
#include "trainyard/common/regex.h"
#include "trainyard/common/strings.h"

namespace trainyard::jobs {
namespace {

namespace fs = std::filesystem;

// How much of the end of each rank's log the failure policies are matched against.
constexpr size_t kLogTailBytes = 64 * 1024;
// Compiled failure-policy patterns kept; the cache starts over beyond this, since users may
// submit many distinct patterns.
constexpr size_t kMaxCompiledPolicies = 1024;
// Jobs whose run id ScopeMayWrite remembers; it starts over beyond this.
constexpr size_t kMaxCachedJobRuns = 10000;
// Bounds of ListJobsRequest::max_results.
constexpr int64_t kMaxListResults = 10000;
// The longest checkpoint path a workload may report.
constexpr size_t kMaxCheckpointPathBytes = 4096;
// Random bytes in a job id ("j-" and twice as many hex digits).
constexpr size_t kJobIdRandomBytes = 5;
// How much of an internal error's text a failed job's message quotes.
constexpr size_t kMaxFaultQuoteBytes = 200;

// Patterns that are always checked after a failure (after the job's own policies).
const std::vector<FailurePolicy>& DefaultFailurePolicies() {
  static const std::vector<FailurePolicy> kDefaults = {
      {"CUDA out of memory|CUDA error: out of memory", FailureAction::kFail},
      {"NCCL error.*unhandled system error|uncorrectable ECC error|Xid [0-9]+",
       FailureAction::kAvoidNode},
  };
  return kDefaults;
}

// The compiled failure-policy patterns, shared by every job (see PolicyMatches).
class CompiledPolicies {
 public:
  std::shared_ptr<const BoundedRegex> Find(const std::string& pattern) TY_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    auto it = compiled_.find(pattern);
    return it == compiled_.end() ? nullptr : it->second;
  }
  void Add(const std::string& pattern, std::shared_ptr<const BoundedRegex> re) TY_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    if (compiled_.size() >= kMaxCompiledPolicies) compiled_.clear();
    compiled_.emplace(pattern, std::move(re));
  }

 private:
  Mutex mu_;
  std::map<std::string, std::shared_ptr<const BoundedRegex>> compiled_ TY_GUARDED_BY(mu_);
};

// Whether a failure policy's pattern matches the log tail. A pattern that fails to compile (stored
// before patterns were validated at submit) or stops at a match limit counts as no match.
bool PolicyMatches(const FailurePolicy& p, std::string_view tail) {
  static CompiledPolicies compiled;
  std::shared_ptr<const BoundedRegex> re = compiled.Find(p.pattern);
  if (!re) {
    auto c = BoundedRegex::Compile(p.pattern, "failure policy pattern");
    if (!c.ok()) {
      spdlog::warn("{}", c.status().message());
      return false;
    }
    re = *c;
    compiled.Add(p.pattern, re);
  }
  return re->Search(tail) == BoundedRegex::Outcome::kMatch;
}

ResourceRequest ToRequest(const JobSpec& spec) {
  ResourceRequest r;
  r.nodes = spec.resources.nodes;
  r.gpus_per_node = spec.resources.gpus_per_node;
  r.cpus_per_node = spec.resources.cpus_per_node;
  r.memory_per_node_bytes = spec.resources.memory_bytes;
  return r;
}

// The tracking run status of a job in `s`.
std::string_view RunStatusFor(JobState s) {
  switch (s) {
    case JobState::kSucceeded:
      return "FINISHED";
    case JobState::kFailed:
      return "FAILED";
    case JobState::kCancelled:
      return "KILLED";
    default:
      return "RUNNING";
  }
}

// What an ended attempt adds to its project's fair-share usage.
double UsageAmount(int gpus, int cpus, int64_t started_at, int64_t ended_at) {
  double secs = static_cast<double>(ended_at - started_at) / 1000.0;
  return gpus > 0 ? secs * static_cast<double>(gpus)
                  : secs * static_cast<double>(cpus) / kCpusPerGpuShare;
}

std::string JoinNodes(const std::vector<std::string>& nodes) {
  std::string out;
  for (const auto& n : nodes) out += (out.empty() ? "" : ",") + n;
  return out;
}

std::string Seconds(int64_t ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1fs", static_cast<double>(ms) / 1000.0);
  return buf;
}

}  // namespace

struct JobService::Running {
  AttemptInfo attempt;
  Placement placement;
  std::string token_id;
  std::string processes;  // JSON, for re-adoption
  bool stopping = false;
  // The attempt's state once it exits: cancelled, preempted, timed_out or hung.
  AttemptState stop_state = AttemptState::kRunning;
  std::string stop_cause;
  int64_t last_progress = 0;
};

struct JobService::Record {
  JobInfo job;
  int64_t seq = 0;
  int64_t event_seq = 0;
  std::optional<Running> running;
  std::string pending_reason;
  int queue_position = 0;
  // Totals of the attempts that have ended.
  double past_cost = 0;
  double past_paid = 0;
  double past_productive = 0;
};

// Where an attempt's files go.
struct JobService::AttemptPaths {
  fs::path private_dir;  // the job's private directory (work/, tmp/, checkpoints/)
  fs::path log_dir;
  fs::path checkpoint_dir;
};

JobService::JobService(store::Database& db, Clock& clock, Random& random,
                       identity::IdentityService& identity, tracking::TrackingService& tracking,
                       executors::Executor& executor, cost::PriceCatalog prices, PoolConfig pool,
                       JobServiceOptions options)
    : store_(db),
      clock_(clock),
      random_(random),
      identity_(identity),
      tracking_(tracking),
      executor_(executor),
      prices_(std::move(prices)),
      pool_(std::move(pool)),
      options_(std::move(options)),
      usage_(options_.fair_share_half_life_ms) {
  identity_.SetScopeWritePolicy([this](const std::string& scope, const identity::Securable& what) {
    return ScopeMayWrite(scope, what);
  });
  identity_.SetScopeRunsAs([this](const std::string& scope, const std::string& user) {
    return ScopeRunsAs(scope, user);
  });
}

// Whether the job of `scope` runs as `user` (its spec's run_as, which never changes).
bool JobService::ScopeRunsAs(const std::string& scope, const std::string& user) {
  identity::Principal scoped;
  scoped.scope = scope;
  std::string job_id(identity::ScopedJob(scoped));
  if (job_id.empty() || user.empty()) return false;
  {
    MutexLock lock(scope_mu_);
    auto it = run_as_of_job_.find(job_id);
    if (it != run_as_of_job_.end()) return it->second == user;
  }
  auto job = store_.GetJob(job_id);
  if (!job.ok() || !*job) return false;
  MutexLock lock(scope_mu_);
  if (run_as_of_job_.size() > kMaxCachedJobRuns) run_as_of_job_.clear();
  run_as_of_job_[job_id] = (*job)->spec.run_as;
  return (*job)->spec.run_as == user;
}

// A job's token may write its own job (heartbeats, checkpoints) and its own run.
bool JobService::ScopeMayWrite(const std::string& scope, const identity::Securable& what) {
  identity::Principal scoped;
  scoped.scope = scope;
  std::string job_id(identity::ScopedJob(scoped));
  if (job_id.empty()) return false;
  if (what.type == "job") return what.id == job_id;
  if (what.type != "run" || what.id.empty()) return false;
  {
    MutexLock lock(scope_mu_);
    auto it = run_of_job_.find(job_id);
    if (it != run_of_job_.end()) return it->second == what.id;
  }
  auto run_id = store_.RunIdOf(job_id);
  if (!run_id.ok() || run_id->empty()) return false;
  MutexLock lock(scope_mu_);
  if (run_of_job_.size() > kMaxCachedJobRuns) run_of_job_.clear();
  run_of_job_[job_id] = *run_id;  // a job's run never changes
  return *run_id == what.id;
}

JobService::~JobService() {
  Stop();
  identity_.SetScopeWritePolicy(nullptr);
  identity_.SetScopeRunsAs(nullptr);
}

// --- persistence

Status JobService::Persist(const Record& r) { return store_.PutJob(r.job, r.seq); }

Status JobService::PersistAttempt(const Record& r, const AttemptInfo& a,
                                  const std::string& processes) {
  StoredAttempt stored;
  stored.info = a;
  if (r.running) {
    stored.placement = r.running->placement;
    stored.token_id = r.running->token_id;
  }
  stored.processes = processes;
  return store_.PutAttempt(r.job.job_id, stored);
}

void JobService::Event(Record& r, const std::string& message, int64_t now) {
  int64_t seq = ++r.event_seq;
  Status s = store_.AddEvent(r.job.job_id, {seq, now, message});
  if (!s.ok()) spdlog::warn("job {}: cannot record event: {}", r.job.job_id, s.message());
  spdlog::info("job {}: {}", r.job.job_id, message);
}

// --- start and stop

Status JobService::Start() {
  executor_.SetExitCallback([this](const executors::AttemptExit& exit) {
    executors::AttemptExit copy = exit;
    Post([this, copy] {
      mu_.AssertHeld();  // posted work runs on the loop, under mu_
      OnAttemptExitGuarded(copy);
    });
  });
  tracking_.SetRunActivityListener([this](const std::string& run_id) { OnRunActivity(run_id); });

  int64_t now = clock_.NowMillis();
  {
    MutexLock lock(mu_);
    TY_ASSIGN_OR_RETURN(auto adopt, LoadActiveJobs(now));
    TY_RETURN_IF_ERROR(LoadUsage(now));
    AdoptRunning(adopt);
  }
  {
    MutexLock lock(inbox_mu_);
    stop_ = false;
  }
  if (options_.start_loop_thread) loop_ = std::thread([this] { Loop(); });
  return Status::Ok();
}

Result<std::vector<std::pair<std::string, std::string>>> JobService::LoadActiveJobs(int64_t now) {
  std::vector<std::pair<std::string, std::string>> adopt;  // job id → processes
  TY_ASSIGN_OR_RETURN(int64_t max_seq, store_.MaxSeq());
  next_seq_ = max_seq + 1;
  TY_ASSIGN_OR_RETURN(std::vector<StoredActiveJob> stored, store_.LoadActive());
  for (auto& job : stored) {
    auto rec = std::make_unique<Record>();
    rec->job = std::move(job.job);
    rec->seq = job.seq;
    rec->event_seq = job.last_event_seq;
    for (auto& attempt : job.attempts) {
      const AttemptInfo& a = attempt.info;
      if (a.state == AttemptState::kRunning && rec->job.state == JobState::kRunning) {
        Running run;
        run.attempt = a;
        run.placement = std::move(attempt.placement);
        run.processes = attempt.processes;
        run.token_id = std::move(attempt.token_id);
        run.last_progress = now;
        rec->running = std::move(run);
        adopt.emplace_back(rec->job.job_id, std::move(attempt.processes));
      } else {
        rec->past_cost += a.cost_usd;
        rec->past_paid += a.paid_seconds;
        rec->past_productive += a.productive_seconds;
      }
    }
    if (rec->job.state == JobState::kRunning && !rec->running) {
      // Stored as running without a running attempt: treat as lost.
      rec->job.state = JobState::kPending;
    }
    run_to_job_[rec->job.run_id] = rec->job.job_id;
    active_[rec->job.job_id] = std::move(rec);
  }
  return adopt;
}

Status JobService::LoadUsage(int64_t now) {
  // Fair share remembers a week of usage.
  TY_ASSIGN_OR_RETURN(std::vector<AttemptUsage> usage, store_.UsageSince(now - kFairShareWindowMs));
  for (const auto& u : usage) {
    usage_.Add(u.project, UsageAmount(u.gpus, u.cpus, u.started_at, u.ended_at), u.ended_at);
  }
  return Status::Ok();
}

void JobService::AdoptRunning(const std::vector<std::pair<std::string, std::string>>& adopt) {
  for (const auto& [job_id, processes] : adopt) {
    Record* r = active_[job_id].get();
    const AttemptInfo& a = r->running->attempt;
    Status s = executor_.Adopt(job_id, a.attempt, a.log_dir, ProcessesFromJson(processes));
    if (s.ok()) {
      spdlog::info("job {}: re-adopted attempt {} after a restart", job_id, a.attempt);
      continue;
    }
    spdlog::warn("job {}: cannot re-adopt attempt {}: {}", job_id, a.attempt, s.message());
    executors::AttemptExit lost;
    lost.job_id = job_id;
    lost.attempt = a.attempt;
    lost.lost = true;
    Post([this, lost] {
      mu_.AssertHeld();  // posted work runs on the loop, under mu_
      OnAttemptExitGuarded(lost);
    });
  }
}

void JobService::Stop() {
  {
    MutexLock lock(inbox_mu_);
    stop_ = true;
  }
  inbox_cv_.NotifyAll();
  if (loop_.joinable()) loop_.join();
}

void JobService::Post(std::function<void()> fn) {
  {
    MutexLock lock(inbox_mu_);
    inbox_.push_back(std::move(fn));
  }
  inbox_cv_.NotifyAll();
}

void JobService::Wake() {
  {
    MutexLock lock(inbox_mu_);
    wake_ = true;
  }
  inbox_cv_.NotifyAll();
}

void JobService::Loop() {
  int64_t wait_ms = 0;
  while (true) {
    std::deque<std::function<void()>> work;
    {
      MutexLock lock(inbox_mu_);
      // The wait is for real time (a condition variable cannot wait on an injected clock);
      // the pass itself reads the injected clock.
      const auto deadline = std::chrono::steady_clock::now() +
                            std::chrono::milliseconds(std::max<int64_t>(wait_ms, 1));
      while (!stop_ && !wake_ && inbox_.empty()) {
        if (!inbox_cv_.WaitUntil(inbox_mu_, deadline)) break;
      }
      if (stop_) return;
      work.swap(inbox_);
      wake_ = false;
    }
    MutexLock lock(mu_);
    RunWork(work);
    wait_ms = LoopWaitMs();
  }
}

void JobService::RunWork(std::deque<std::function<void()>>& work) {
  // A fault in one piece of work is logged and the loop goes on: the scheduler must outlive it.
  for (auto& fn : work) {
    try {
      fn();
    } catch (const std::exception& e) {
      spdlog::error("job service: internal error in queued work: {}", e.what());
    }
  }
  try {
    Pass();
  } catch (const std::exception& e) {
    spdlog::error("job service: internal error in a scheduling pass: {}", e.what());
  }
}

int64_t JobService::LoopWaitMs() {
  int64_t now = clock_.NowMillis();
  int64_t wait_ms = options_.max_wait_ms;
  for (const auto& [id, r] : active_) {
    if (r->job.state == JobState::kPending && r->job.not_before > now) {
      wait_ms = std::min(wait_ms, r->job.not_before - now);
    }
  }
  return wait_ms;
}

void JobService::RunPassForTest() {
  std::deque<std::function<void()>> work;
  {
    MutexLock lock(inbox_mu_);
    work.swap(inbox_);
  }
  MutexLock lock(mu_);
  for (auto& fn : work) fn();
  Pass();
}

void JobService::Pass() {
  int64_t now = clock_.NowMillis();
  CheckHealth(now);
  ScheduleAndLaunch(now);
}

// --- submit, cancel, workload calls

Status JobService::CheckSubmit(const identity::Principal& who, const JobSpec& spec) {
  if (!who.scope.empty()) {
    return Status::PermissionDenied("a token scoped to " + who.scope + " may not submit jobs");
  }
  if (!spec.run_as.empty()) TY_RETURN_IF_ERROR(identity_.AuthorizeRunAs(who, spec.run_as));
  if (!options_.multi_user && !who.is_admin) {
    return Status::PermissionDenied(
        "this server runs in single-user mode (every job would run as the server's own OS "
        "account), so only admins may submit jobs; ask an admin, or run the server as root "
        "without --single-user and map users to OS accounts");
  }
  if (options_.multi_user) {
    TY_ASSIGN_OR_RETURN(identity::User user, identity_.GetUser(who.user));
    if (user.os_user.empty()) return NoOsAccount(who.user);
  }
  if (Status s = CheckFeasible(pool_.nodes, ToRequest(spec)); !s.ok()) {
    return Status::InvalidArgument("resources: " + s.message());
  }
  int ppn = spec.EffectiveProcessesPerNode();
  if (spec.resources.gpus_per_node > 0 && spec.processes_per_node > 0 &&
      spec.resources.gpus_per_node % ppn != 0) {
    return Status::InvalidArgument(
        "processes_per_node (" + std::to_string(ppn) + ") must divide resources.gpus_per_node (" +
        std::to_string(spec.resources.gpus_per_node) + ") so that every rank gets whole GPUs");
  }
  if (!spec.working_dir.empty()) {
    std::error_code ec;
    if (!fs::is_directory(spec.working_dir, ec)) {
      return Status::InvalidArgument("working_dir " + spec.working_dir +
                                     " is not a directory on the server's machine");
    }
  }
  return Status::Ok();
}

Result<std::string> JobService::JobExperiment(const identity::Principal& who, const JobSpec& spec) {
  std::string experiment_name = spec.experiment.empty() ? spec.name : spec.experiment;
  auto experiment = tracking_.GetExperimentByName(experiment_name);
  if (experiment.ok()) {
    TY_RETURN_IF_ERROR(
        identity_.Authorize(who, identity::Action::kEdit,
                            {"experiment", experiment->experiment_id, experiment->owner}));
    return experiment->experiment_id;
  }
  if (experiment.status().IsNotFound()) {
    return tracking_.CreateExperiment(who, experiment_name, "", {});
  }
  return experiment.status();
}

Result<JobInfo> JobService::Submit(const identity::Principal& who, JobSpec spec) {
  if (spec.kind == JobKind::kService) {
    return Status::InvalidArgument(
        "kind: service jobs are the replicas of serving endpoints, started by the server; "
        "create an endpoint with 'trainyard endpoints create' instead");
  }
  TY_RETURN_IF_ERROR(CheckSubmit(who, spec));
  return Enqueue(who, std::move(spec));
}

Result<JobInfo> JobService::SubmitService(const std::string& owner, JobSpec spec) {
  if (spec.kind != JobKind::kService || spec.endpoint.empty()) {
    return Status::InvalidArgument(
        "SubmitService needs a spec of kind service naming its endpoint");
  }
  spec.max_restarts = 0;
  spec.preemptible = false;
  spec.hang_timeout_ms = 0;
  spec.time_limit_ms = 0;
  spec.run_as.clear();
  // Serving authorized the endpoint; the owner need not be an admin in single-user mode (the
  // replica ran as the server's account before it was a job, too).
  TY_ASSIGN_OR_RETURN(identity::User user, identity_.GetUser(owner));
  if (user.disabled) {
    return Status::FailedPrecondition("the endpoint's owner '" + owner + "' is disabled");
  }
  if (options_.multi_user && user.os_user.empty()) return NoOsAccount(owner);
  if (Status s = CheckFeasible(pool_.nodes, ToRequest(spec)); !s.ok()) {
    return Status::InvalidArgument("resources: " + s.message());
  }
  return Enqueue(identity::Principal{user.name, user.is_admin, "", ""}, std::move(spec));
}

Status JobService::CheckFits(const JobResources& resources) const {
  JobSpec spec;
  spec.resources = resources;
  spec.processes_per_node = 1;
  return CheckFeasible(pool_.nodes, ToRequest(spec));
}

Result<JobInfo> JobService::Enqueue(const identity::Principal& who, JobSpec spec) {
  int64_t now = clock_.NowMillis();
  TY_ASSIGN_OR_RETURN(std::string experiment_id, JobExperiment(who, spec));
  auto rec = std::make_unique<Record>();
  JobInfo& j = rec->job;
  j.job_id = "j-" + random_.Hex(kJobIdRandomBytes);
  j.owner = who.user;
  j.spec = std::move(spec);
  j.state = JobState::kPending;
  j.experiment_id = experiment_id;
  j.submitted_at = now;
  std::vector<tracking::KeyValue> tags = {{"trainyard.job_id", j.job_id},
                                          {"trainyard.project", j.spec.project}};
  if (!j.spec.run_as.empty()) tags.push_back({"trainyard.run_as", j.spec.run_as});
  TY_ASSIGN_OR_RETURN(tracking::Run run,
                      tracking_.CreateRun(who, experiment_id, who.user, j.spec.name, now, tags));
  j.run_id = run.info.run_id;
  TY_RETURN_IF_ERROR(
      tracking_.UpdateRun(who, j.run_id, "SCHEDULED", std::nullopt, std::nullopt).status());
  MutexLock lock(mu_);
  rec->seq = next_seq_++;
  TY_RETURN_IF_ERROR(Persist(*rec));
  Event(*rec,
        "submitted by " + who.user +
            (j.spec.run_as.empty() ? "" : " to run as service principal " + j.spec.run_as),
        now);
  run_to_job_[j.run_id] = j.job_id;
  JobInfo out = j;
  if (submit_listener_) submit_listener_(who, out);
  active_[j.job_id] = std::move(rec);
  Wake();
  return out;
}

Result<std::string> JobService::WorkloadPrincipal(const JobInfo& j) {
  if (j.spec.run_as.empty()) return j.owner;
  // The submitter's right to use the service principal is checked again at each launch: a
  // revoked grant, or a disabled principal, stops the job's next attempt.
  TY_ASSIGN_OR_RETURN(identity::User owner, identity_.GetUser(j.owner));
  if (owner.disabled) {
    // As for a job without run_as, whose token the disabled owner cannot get.
    return Status::FailedPrecondition("user '" + j.owner +
                                      "' is disabled; an admin enables it with 'trainyard users "
                                      "enable " +
                                      j.owner + "'");
  }
  TY_RETURN_IF_ERROR(identity_.AuthorizeRunAs(
      identity::Principal{owner.name, owner.is_admin, "", ""}, j.spec.run_as));
  return j.spec.run_as;
}

Status JobService::NoOsAccount(const std::string& user) {
  return Status::FailedPrecondition("user " + user +
                                    " has no OS account; an admin maps one with `trainyard users "
                                    "update " +
                                    user + " --os-user ACCT`");
}

Result<JobService::JobAccount> JobService::ResolveAccount(const JobInfo& j) {
  JobAccount out;
  if (!options_.multi_user) {
    TY_ASSIGN_OR_RETURN(OsAccount self, CurrentOsAccount());
    out.uid = self.uid;
    out.gid = self.gid;
    return out;
  }
  TY_ASSIGN_OR_RETURN(identity::User user, identity_.GetUser(j.owner));
  if (user.os_user.empty()) return NoOsAccount(j.owner);
  auto account = ValidateJobAccount(user.os_user);
  if (!account.ok()) {
    return Status::FailedPrecondition("OS account '" + user.os_user + "' of user " + j.owner +
                                      " is no longer usable: " + account.status().message());
  }
  out.os_user = account->name;
  out.uid = account->uid;
  out.gid = account->gid;
  return out;
}

Status JobService::Authorize(const identity::Principal& who, const Record& r,
                             identity::Action action) {
  if (!who.scope.empty() && who.scope != "job:" + r.job.job_id) {
    return Status::PermissionDenied("a token scoped to " + who.scope + " may not act on job " +
                                    r.job.job_id);
  }
  return identity_.Authorize(who, action, {"job", r.job.job_id, r.job.owner});
}

Status JobService::Cancel(const identity::Principal& who, const std::string& job_id) {
  if (!who.scope.empty()) {
    return Status::PermissionDenied("a token scoped to " + who.scope + " may not cancel jobs");
  }
  MutexLock lock(mu_);
  auto it = active_.find(job_id);
  if (it == active_.end()) {
    TY_ASSIGN_OR_RETURN(std::string state, store_.StateName(job_id));
    return Status::FailedPrecondition("job " + job_id + " has already finished (" + state + ")");
  }
  Record& r = *it->second;
  TY_RETURN_IF_ERROR(Authorize(who, r, identity::Action::kEdit));
  int64_t now = clock_.NowMillis();
  if (!r.running) {
    FinishJob(r, JobState::kCancelled, "cancelled by " + who.user, now);
    active_.erase(it);
    return Status::Ok();
  }
  if (r.running->stopping && r.running->stop_state == AttemptState::kCancelled) {
    return Status::Ok();
  }
  StopAttempt(r, AttemptState::kCancelled, "cancelled by " + who.user,
              r.job.spec.preemption_grace_ms);
  return Status::Ok();
}

Status JobService::AuthorizeCancel(const identity::Principal& who, const std::string& job_id) {
  if (!who.scope.empty()) {
    return Status::PermissionDenied("a token scoped to " + who.scope + " may not cancel jobs");
  }
  MutexLock lock(mu_);
  auto it = active_.find(job_id);
  if (it == active_.end()) {
    TY_ASSIGN_OR_RETURN(std::string state, store_.StateName(job_id));
    return Status::FailedPrecondition("job " + job_id + " has already finished (" + state + ")");
  }
  return Authorize(who, *it->second, identity::Action::kEdit);
}

Status JobService::AuthorizeWorkload(const identity::Principal& who, const std::string& job_id) {
  auto it = active_.find(job_id);
  if (it == active_.end()) {
    TY_ASSIGN_OR_RETURN(std::string state, store_.StateName(job_id));
    return Status::FailedPrecondition("job " + job_id + " is not running (" + state + ")");
  }
  return Authorize(who, *it->second, identity::Action::kEdit);
}

Status JobService::Heartbeat(const identity::Principal& who, const std::string& job_id) {
  MutexLock lock(mu_);
  TY_RETURN_IF_ERROR(AuthorizeWorkload(who, job_id));
  Record& r = *active_[job_id];
  if (r.running) r.running->last_progress = clock_.NowMillis();
  return Status::Ok();
}

Status JobService::ReportCheckpoint(const identity::Principal& who, const std::string& job_id,
                                    int64_t step, const std::string& path) {
  if (step < 0) return Status::InvalidArgument("step must be a non-negative integer");
  if (path.empty() || path.size() > kMaxCheckpointPathBytes ||
      path.find('\0') != std::string::npos) {
    return Status::InvalidArgument("path must be a non-empty string of at most " +
                                   std::to_string(kMaxCheckpointPathBytes) + " bytes");
  }
  MutexLock lock(mu_);
  TY_RETURN_IF_ERROR(AuthorizeWorkload(who, job_id));
  Record& r = *active_[job_id];
  int64_t now = clock_.NowMillis();
  CheckpointInfo ck{step, path, r.running ? r.running->attempt.attempt : r.job.attempts, now};
  TY_RETURN_IF_ERROR(store_.PutCheckpoint(job_id, ck));
  r.job.latest_checkpoint = ck;
  if (r.running) {
    r.running->last_progress = now;
    r.running->attempt.last_checkpoint_at = now;
    TY_RETURN_IF_ERROR(PersistAttempt(r, r.running->attempt, r.running->processes));
  }
  return Status::Ok();
}

void JobService::OnRunActivity(const std::string& run_id) {
  MutexLock lock(progress_mu_);
  progress_by_run_[run_id] = clock_.NowMillis();
}

// --- the loop's work

void JobService::CheckHealth(int64_t now) {
  for (auto& [id, rec] : active_) {
    Record& r = *rec;
    if (!r.running || r.running->stopping) continue;
    const JobSpec& spec = r.job.spec;
    AttemptInfo& a = r.running->attempt;
    if (executor_.ClusterStatus(r.job.job_id, a.attempt).pending()) {
      // Still queued by the cluster (Slurm): nothing runs, nothing is paid, nothing can hang.
      a.started_at = now;
      r.running->last_progress = now;
      continue;
    }
    if (spec.time_limit_ms > 0 && now - a.started_at >= spec.time_limit_ms) {
      StopAttempt(r, AttemptState::kTimedOut,
                  "time limit of " + FormatDuration(spec.time_limit_ms) + " reached",
                  spec.preemption_grace_ms);
      continue;
    }
    if (spec.hang_timeout_ms > 0) {
      int64_t last = LastProgress(r);
      if (now - last > spec.hang_timeout_ms) {
        StopAttempt(r, AttemptState::kHung,
                    "hung: no heartbeat or metric for " + Seconds(now - last) + " (hang_timeout " +
                        FormatDuration(spec.hang_timeout_ms) + ")",
                    std::min<int64_t>(spec.preemption_grace_ms, kHangStopGraceCapMs));
      }
    }
  }
}

int64_t JobService::LastProgress(const Record& r) {
  int64_t last = r.running ? r.running->last_progress : 0;
  MutexLock lock(progress_mu_);
  auto it = progress_by_run_.find(r.job.run_id);
  if (it != progress_by_run_.end()) last = std::max(last, it->second);
  return last;
}

SchedulerInput JobService::BuildSchedulerInput(int64_t now) {
  SchedulerInput in;
  in.nodes = pool_.nodes;
  in.now_ms = now;
  for (const auto& [id, rec] : active_) {
    const Record& r = *rec;
    const JobSpec& spec = r.job.spec;
    if (r.running) {
      RunningJob rj;
      rj.id = id;
      rj.project = spec.project;
      rj.priority = spec.priority;
      rj.preemptible = spec.preemptible;
      rj.placement = r.running->placement;
      rj.started_at_ms = r.running->attempt.started_at;
      rj.end_by_ms = spec.time_limit_ms > 0 ? rj.started_at_ms + spec.time_limit_ms : 0;
      rj.stopping = r.running->stopping;
      in.running.push_back(std::move(rj));
    } else if (r.job.not_before <= now) {
      QueuedJob q;
      q.id = id;
      q.project = spec.project;
      q.priority = spec.priority;
      q.submit_seq = r.seq;
      q.request = ToRequest(spec);
      q.time_limit_ms = spec.time_limit_ms;
      q.excluded_nodes = r.job.excluded_nodes;
      in.queued.push_back(std::move(q));
    }
  }
  in.project_usage = usage_.Snapshot(now);
  return in;
}

void JobService::ScheduleAndLaunch(int64_t now) {
  SchedulingResult result = scheduler_.Schedule(BuildSchedulerInput(now));
  for (const auto& p : result.preemptions) {
    auto it = active_.find(p.victim_id);
    if (it == active_.end() || !it->second->running) continue;
    StopAttempt(*it->second, AttemptState::kPreempted,
                "preempted by higher-priority job " + p.for_job_id,
                it->second->job.spec.preemption_grace_ms);
  }
  for (const auto& start : result.starts) StartScheduled(start, now);
  for (const auto& p : result.pending) {
    auto it = active_.find(p.job_id);
    if (it == active_.end()) continue;
    it->second->pending_reason = p.reason;
    it->second->queue_position = p.position;
  }
  for (auto& [id, rec] : active_) {
    if (!rec->running && rec->job.not_before > now) {
      rec->queue_position = 0;
      rec->pending_reason =
          "restarting in " + Seconds(rec->job.not_before - now) + " (" + rec->job.message + ")";
    }
  }
}

void JobService::StartScheduled(const StartDecision& start, int64_t now) {
  auto it = active_.find(start.job_id);
  if (it == active_.end()) return;
  Record& r = *it->second;
  r.pending_reason.clear();
  r.queue_position = 0;
  Status s = Launch(r, start.placement, now);
  if (s.ok()) return;
  // The attempt could not start at all (e.g. the executor refused): count it as a failed
  // attempt so that the retry limit applies.
  spdlog::warn("job {}: launch failed: {}", r.job.job_id, s.message());
  executors::AttemptExit failed;
  failed.job_id = r.job.job_id;
  failed.attempt = r.job.attempts;
  failed.lost = true;
  if (r.running) {
    r.running->attempt.cause = "could not start: " + s.message();
    OnAttemptExitGuarded(failed);
  }
}

JobService::AttemptPaths JobService::PathsOf(const JobInfo& j, int attempt) const {
  AttemptPaths out;
  fs::path job_dir = fs::path(options_.data_dir) / "jobs" / j.job_id;
  out.private_dir = (options_.job_dir_root.empty() ? fs::path(options_.data_dir) / "jobs"
                                                   : fs::path(options_.job_dir_root)) /
                    j.job_id;
  out.log_dir = (options_.logs_in_job_dir ? out.private_dir : job_dir) /
                ("attempt-" + std::to_string(attempt));
  out.checkpoint_dir = out.private_dir / "checkpoints";
  return out;
}

std::vector<executors::RankLaunch> JobService::RankLaunches(const Placement& placement,
                                                            int ppn) const {
  std::vector<executors::RankLaunch> out;
  for (size_t n = 0; n < placement.size(); ++n) {
    const NodeAllocation& alloc = placement[n];
    for (int l = 0; l < ppn; ++l) {
      executors::RankLaunch rank;
      rank.rank = static_cast<int>(n) * ppn + l;
      rank.local_rank = l;
      rank.node_rank = static_cast<int>(n);
      rank.node_name = pool_.nodes[alloc.node].name;
      size_t g = alloc.gpu_ids.size();
      if (g > 0 && g % static_cast<size_t>(ppn) == 0) {
        size_t per = g / static_cast<size_t>(ppn);
        rank.gpu_ids.assign(alloc.gpu_ids.begin() + static_cast<std::ptrdiff_t>(per * l),
                            alloc.gpu_ids.begin() + static_cast<std::ptrdiff_t>(per * (l + 1)));
      } else {
        rank.gpu_ids = alloc.gpu_ids;
      }
      out.push_back(std::move(rank));
    }
  }
  return out;
}

Result<executors::AttemptLaunch> JobService::BuildLaunch(const JobInfo& j, const AttemptInfo& a,
                                                         const Placement& placement,
                                                         const AttemptPaths& paths) {
  const JobSpec& spec = j.spec;
  int ppn = spec.EffectiveProcessesPerNode();
  executors::AttemptLaunch launch;
  launch.job_id = j.job_id;
  launch.attempt = a.attempt;
  launch.command = spec.command;
  launch.working_dir =
      spec.working_dir.empty() ? (paths.private_dir / "work").string() : spec.working_dir;
  launch.tmp_dir = (paths.private_dir / "tmp").string();
  launch.env = spec.env;
  for (const auto& [var, name] : spec.secrets) {
    if (!secret_resolver_) {
      return Status::FailedPrecondition("secrets." + var + ": this server has no secret store");
    }
    auto value = secret_resolver_(j.owner, name);
    if (!value.ok()) return value.status().WithContext("secrets." + var);
    launch.env[var] = std::move(*value);
  }
  launch.env["TRAINYARD_URL"] = server_url_;
  launch.env["TRAINYARD_JOB_ID"] = j.job_id;
  launch.env["TRAINYARD_ATTEMPT"] = std::to_string(a.attempt);
  launch.env["TRAINYARD_PROJECT"] = spec.project;
  launch.env["TRAINYARD_CHECKPOINT_DIR"] = paths.checkpoint_dir.string();
  launch.env["TRAINYARD_RESUME_FROM"] = a.resumed_from;
  launch.env["MLFLOW_TRACKING_URI"] = server_url_;
  launch.env["MLFLOW_RUN_ID"] = j.run_id;
  launch.env["MLFLOW_EXPERIMENT_ID"] = j.experiment_id;
  launch.nnodes = static_cast<int>(placement.size());
  launch.local_world_size = ppn;
  launch.master_addr = pool_.master_addr;
  launch.master_port = 0;
  launch.log_dir = paths.log_dir;
  // For cluster executors (Slurm): what to ask the cluster's scheduler for.
  launch.cluster.cpus_per_rank = std::max(1, spec.resources.cpus_per_node / ppn);
  launch.cluster.memory_mb_per_node = spec.resources.memory_bytes / (1024 * 1024);
  launch.cluster.time_limit = std::chrono::seconds((spec.time_limit_ms + 999) / 1000);
  launch.cluster.term_grace = std::chrono::seconds((spec.preemption_grace_ms + 999) / 1000);
  launch.cluster.exclude_nodes = j.excluded_nodes;
  launch.ranks = RankLaunches(placement, ppn);
  return launch;
}

Status JobService::Launch(Record& r, const Placement& placement, int64_t now) {
  JobInfo& j = r.job;
  int attempt = ++j.attempts;
  AttemptPaths paths = PathsOf(j, attempt);
  std::error_code ec;
  if (!options_.logs_in_job_dir) fs::create_directories(paths.log_dir, ec);
  fs::create_directories(paths.private_dir.parent_path(), ec);

  Running run;
  run.placement = placement;
  run.last_progress = now;
  AttemptInfo& a = run.attempt;
  a.attempt = attempt;
  a.state = AttemptState::kRunning;
  a.started_at = now;
  a.log_dir = paths.log_dir.string();
  for (const auto& alloc : placement) {
    a.nodes.push_back(pool_.nodes[alloc.node].name);
    a.gpus += static_cast<int>(alloc.gpu_ids.size());
    a.cpus += alloc.cpus;
  }
  a.ranks = j.spec.EffectiveProcessesPerNode() * static_cast<int>(placement.size());
  if (j.latest_checkpoint) a.resumed_from = j.latest_checkpoint->path;

  TY_ASSIGN_OR_RETURN(executors::AttemptLaunch launch, BuildLaunch(j, a, placement, paths));
  r.running = std::move(run);
  j.state = JobState::kRunning;
  j.message.clear();
  // The job's account and its private directory; a failure here fails this attempt.
  TY_ASSIGN_OR_RETURN(JobAccount account, ResolveAccount(j));
  launch.os_user = account.os_user;
  std::vector<std::string> subdirs = {"work", "tmp", "checkpoints"};
  if (options_.logs_in_job_dir) subdirs.push_back(paths.log_dir.filename().string());
  TY_RETURN_IF_ERROR(
      EnsurePrivateDirectory(paths.private_dir.string(), account.uid, account.gid, subdirs));
  TY_ASSIGN_OR_RETURN(std::string acting_as, WorkloadPrincipal(j));
  auto token = identity_.CreateToken(
      identity::Principal::System(),
      {.user = acting_as,
       .description = "job " + j.job_id + " attempt " + std::to_string(attempt),
       .scope = "job:" + j.job_id});
  if (!token.ok()) return token.status();
  r.running->token_id = token->second.token_id;
  launch.env["TRAINYARD_TOKEN"] = token->first;
  launch.env["MLFLOW_TRACKING_TOKEN"] = token->first;
  auto processes = executor_.Launch(launch);
  if (!processes.ok()) return processes.status();
  r.running->processes = ProcessesToJson(*processes);
  auto updated = tracking_.UpdateRun(identity::Principal::System(), j.run_id, "RUNNING",
                                     std::nullopt, std::nullopt);
  if (!updated.ok()) spdlog::warn("job {}: {}", j.job_id, updated.status().message());
  Status s = Persist(r);
  if (s.ok()) s = PersistAttempt(r, r.running->attempt, r.running->processes);
  if (!s.ok())
    spdlog::error("job {}: cannot record attempt {}: {}", j.job_id, attempt, s.message());
  const AttemptInfo& started = r.running->attempt;
  Event(r,
        "attempt " + std::to_string(attempt) + " started on " + JoinNodes(started.nodes) + " (" +
            std::to_string(started.ranks) + " rank" + (started.ranks == 1 ? "" : "s") +
            (started.resumed_from.empty() ? "" : ", resuming from " + started.resumed_from) + ")",
        now);
  return Status::Ok();
}

void JobService::StopAttempt(Record& r, AttemptState state, const std::string& cause,
                             int64_t grace_ms) {
  if (!r.running) return;
  r.running->stopping = true;
  r.running->stop_state = state;
  r.running->stop_cause = cause;
  Event(r, "stopping attempt " + std::to_string(r.running->attempt.attempt) + ": " + cause,
        clock_.NowMillis());
  Status s =
      executor_.Stop(r.job.job_id, r.running->attempt.attempt, std::chrono::milliseconds(grace_ms));
  if (!s.ok()) spdlog::warn("job {}: stop: {}", r.job.job_id, s.message());
}

std::optional<FailurePolicy> JobService::MatchFailurePolicy(const Record& r, const AttemptInfo& a) {
  std::string tail;
  for (int rank = 0; rank < a.ranks; ++rank) {
    tail += ReadFileTailSafely(a.log_dir + "/rank-" + std::to_string(rank) + ".log", kLogTailBytes);
    tail += "\n";
  }
  std::vector<FailurePolicy> policies = r.job.spec.failure_policies;
  for (const auto& p : DefaultFailurePolicies()) policies.push_back(p);
  for (const auto& p : policies) {
    if (PolicyMatches(p, tail)) return p;
  }
  return std::nullopt;
}

void JobService::PriceAttempt(const Record& r, AttemptInfo& a, int64_t now) const {
  int64_t end = a.ended_at > 0 ? a.ended_at : now;
  double secs = static_cast<double>(std::max<int64_t>(end - a.started_at, 0)) / 1000.0;
  double weight = a.gpus > 0 ? a.gpus : std::max(a.cpus, 1);
  a.paid_seconds = secs * weight;
  if (a.state == AttemptState::kSucceeded || r.job.spec.kind == JobKind::kService) {
    // A service (a serving replica) does its work while it runs: all its time is productive.
    a.productive_seconds = a.paid_seconds;
  } else if (a.last_checkpoint_at > a.started_at) {
    a.productive_seconds =
        static_cast<double>(a.last_checkpoint_at - a.started_at) / 1000.0 * weight;
  } else {
    a.productive_seconds = 0;
  }
  a.cost_usd = prices_.Cost(pool_.name, a.gpus, a.cpus, secs, r.job.spec.preemptible);
}

void JobService::RecordUsage(const Record& r, const AttemptInfo& a) {
  usage_.Add(r.job.spec.project, UsageAmount(a.gpus, a.cpus, a.started_at, a.ended_at), a.ended_at);
}

void JobService::OnAttemptExitGuarded(const executors::AttemptExit& exit) {
  // OnAttemptExit moves the running attempt out first; keep a copy to record it as failed.
  std::optional<Running> before;
  if (auto it = active_.find(exit.job_id); it != active_.end()) before = it->second->running;
  try {
    OnAttemptExit(exit);
  } catch (const std::exception& e) {
    spdlog::error("job {}: internal error while handling the exit of attempt {}: {}", exit.job_id,
                  exit.attempt, e.what());
    auto it = active_.find(exit.job_id);
    if (it != active_.end() && before && before->attempt.attempt == exit.attempt) {
      it->second->running = std::move(before);
    }
    FailAfterFault(exit.job_id, e.what());
  }
}

void JobService::FailAfterFault(const std::string& job_id, const std::string& what) {
  auto it = active_.find(job_id);
  if (it == active_.end()) return;
  Record& r = *it->second;
  int64_t now = clock_.NowMillis();
  std::string cause = "internal error while handling the attempt's exit (" +
                      Abbreviate(what, kMaxFaultQuoteBytes) +
                      "); the job is failed instead of retried; resubmit it";
  try {
    if (r.running) {
      AttemptInfo a = r.running->attempt;
      std::string processes = r.running->processes;
      r.running.reset();
      a.state = AttemptState::kFailed;
      if (a.ended_at == 0) a.ended_at = now;
      a.cause = cause;
      Status s = PersistAttempt(r, a, processes);
      if (!s.ok()) spdlog::error("job {}: cannot record attempt: {}", job_id, s.message());
    }
    FinishJob(r, JobState::kFailed, cause, now);
  } catch (const std::exception& e) {
    spdlog::error("job {}: cannot record the failure: {}", job_id, e.what());
  }
  active_.erase(job_id);
}

void JobService::RecordExit(const executors::AttemptExit& exit, AttemptInfo& a) {
  if (exit.failed_rank >= 0) {
    a.failed_rank = exit.failed_rank;
    if (exit.exit_code >= 0) a.exit_code = exit.exit_code;
    if (exit.signal > 0) a.signal = exit.signal;
  } else if (exit.success) {
    a.exit_code = 0;
  }
  // A cluster executor knows where the ranks really ran (Slurm picks the nodes).
  std::vector<std::string> ran_on;
  for (const auto& rank : exit.ranks) {
    if (!rank.node.empty() && std::find(ran_on.begin(), ran_on.end(), rank.node) == ran_on.end()) {
      ran_on.push_back(rank.node);
    }
  }
  if (!ran_on.empty()) a.nodes = ran_on;
}

RecoveryInput JobService::GatherRecoveryInput(const Record& r, const Running& run,
                                              const executors::AttemptExit& exit) {
  const JobSpec& spec = r.job.spec;
  const AttemptInfo& a = run.attempt;
  RecoveryInput in;
  in.max_restarts = spec.max_restarts;
  in.crash_loop_limit = spec.crash_loop_limit;
  in.restart_backoff_ms = spec.restart_backoff_ms;
  in.restart_backoff_max_ms = spec.restart_backoff_max_ms;
  in.request = ToRequest(spec);
  in.restarts = r.job.restarts;
  in.consecutive_failures = r.job.consecutive_failures;
  if (r.job.latest_checkpoint) in.latest_checkpoint_attempt = r.job.latest_checkpoint->attempt;
  in.excluded_nodes = r.job.excluded_nodes;
  in.pool_nodes = pool_.nodes;
  in.attempt = a.attempt;
  in.ranks = a.ranks;
  in.nodes = a.nodes;
  in.launch_failure = a.cause;
  if (run.stopping) in.stop_request = run.stop_state;
  in.stop_cause = run.stop_cause;
  in.exit = exit;
  in.service = spec.kind == JobKind::kService;
  if (NeedsFailurePolicy(in)) in.matched_policy = MatchFailurePolicy(r, a);
  return in;
}

void JobService::OnAttemptExit(const executors::AttemptExit& exit) {
  auto it = active_.find(exit.job_id);
  if (it == active_.end() || !it->second->running ||
      it->second->running->attempt.attempt != exit.attempt) {
    spdlog::warn("job {}: exit of unknown attempt {} ignored", exit.job_id, exit.attempt);
    return;
  }
  Record& r = *it->second;
  int64_t now = clock_.NowMillis();
  Running run = std::move(*r.running);
  AttemptInfo& a = run.attempt;
  a.ended_at = now;
  RecordExit(exit, a);
  const identity::Principal system = identity::Principal::System();
  if (!run.token_id.empty()) {
    Status s = identity_.RevokeToken(system, run.token_id);
    if (!s.ok()) spdlog::warn("job {}: cannot revoke token: {}", r.job.job_id, s.message());
  }
  RecoveryDecision d = DecideRecovery(GatherRecoveryInput(r, run, exit));
  a.state = d.attempt_state;
  a.cause = d.attempt_cause;

  PriceAttempt(r, a, now);
  r.past_cost += a.cost_usd;
  r.past_paid += a.paid_seconds;
  r.past_productive += a.productive_seconds;
  RecordUsage(r, a);
  r.running.reset();
  Status s = PersistAttempt(r, a, run.processes);
  if (!s.ok()) spdlog::error("job {}: cannot record attempt: {}", r.job.job_id, s.message());
  Event(r,
        "attempt " + std::to_string(a.attempt) + " " + std::string(AttemptStateName(a.state)) +
            ": " + a.cause,
        now);
  ApplyRecovery(r, d, now);
}

void JobService::ApplyRecovery(Record& r, const RecoveryDecision& d, int64_t now) {
  r.job.restarts = d.restarts;
  r.job.consecutive_failures = d.consecutive_failures;
  r.job.excluded_nodes = d.excluded_nodes;
  switch (d.action) {
    case RecoveryAction::kSucceed:
      FinishJob(r, JobState::kSucceeded, d.message, now);
      break;
    case RecoveryAction::kCancel:
      FinishJob(r, JobState::kCancelled, d.message, now);
      break;
    case RecoveryAction::kFail:
      FinishJob(r, JobState::kFailed, d.message, now);
      break;
    case RecoveryAction::kRequeue:
      Requeue(r, 0, d.message, now);
      return;
    case RecoveryAction::kRetryAfter:
      Requeue(r, d.delay_ms, d.message, now);
      return;
  }
  std::string job_id = r.job.job_id;  // erasing destroys r
  active_.erase(job_id);
}

void JobService::Requeue(Record& r, int64_t delay_ms, const std::string& message, int64_t now) {
  r.job.state = JobState::kPending;
  r.job.not_before = now + delay_ms;
  r.job.message = message;
  Status s = Persist(r);
  if (!s.ok()) spdlog::error("job {}: {}", r.job.job_id, s.message());
  Event(r,
        delay_ms > 0
            ? "will restart in " + Seconds(delay_ms) +
                  (r.job.latest_checkpoint
                       ? " from checkpoint step " + std::to_string(r.job.latest_checkpoint->step)
                       : std::string(" from the beginning (no checkpoint)"))
            : "requeued",
        now);
}

void JobService::FinishJob(Record& r, JobState state, const std::string& message, int64_t now) {
  r.job.state = state;
  r.job.finished_at = now;
  r.job.message = message;
  r.pending_reason.clear();
  r.queue_position = 0;
  Status s = Persist(r);
  if (!s.ok()) spdlog::error("job {}: {}", r.job.job_id, s.message());
  auto updated = tracking_.UpdateRun(identity::Principal::System(), r.job.run_id,
                                     std::string(RunStatusFor(state)), now, std::nullopt);
  if (!updated.ok()) spdlog::warn("job {}: {}", r.job.job_id, updated.status().message());
  Event(r, std::string(JobStateName(state)) + ": " + message, now);
  if (finish_listener_) finish_listener_(r.job);
  MutexLock lock(progress_mu_);
  progress_by_run_.erase(r.job.run_id);
}

// --- reads

void JobService::Derive(const Record& r, JobInfo& out, int64_t now) const {
  out.queue_position = r.queue_position;
  if (out.state == JobState::kPending && !r.pending_reason.empty()) {
    out.message = r.pending_reason;
  }
  if (r.running && !r.running->stopping) {
    // A cluster executor may still be queueing the attempt (e.g. Slurm: PENDING (Resources)).
    executors::ClusterJobStatus status =
        executor_.ClusterStatus(r.job.job_id, r.running->attempt.attempt);
    if (status.pending()) out.message = "queued in the cluster: " + status.raw;
  }
  double cost = r.past_cost, paid = r.past_paid, productive = r.past_productive;
  if (r.running) {
    AttemptInfo a = r.running->attempt;
    PriceAttempt(r, a, now);
    cost += a.cost_usd;
    paid += a.paid_seconds;
    productive += a.productive_seconds;
  }
  out.cost_usd = cost;
  out.goodput = paid > 0 ? productive / paid : 1.0;
}

Result<JobInfo> JobService::GetJob(const std::string& job_id) {
  TY_ASSIGN_OR_RETURN(std::optional<JobInfo> stored, store_.GetJob(job_id));
  if (!stored) {
    return Status::NotFound("job '" + job_id +
                            "' does not exist (list jobs with 'trainyard jobs')");
  }
  JobInfo out = std::move(*stored);
  MutexLock lock(mu_);
  auto it = active_.find(job_id);
  if (it != active_.end()) {
    const Record& r = *it->second;
    int64_t now = clock_.NowMillis();
    out.state = r.job.state;
    Derive(r, out, now);
    if (r.running) {
      AttemptInfo live = r.running->attempt;
      PriceAttempt(r, live, now);
      for (auto& a : out.attempt_list) {
        if (a.attempt == live.attempt) a = live;
      }
    }
  }
  return out;
}

Result<std::vector<JobInfo>> JobService::ListJobs(const ListJobsRequest& request) {
  if (request.max_results < 1 || request.max_results > kMaxListResults) {
    return Status::InvalidArgument("max_results must be between 1 and " +
                                   std::to_string(kMaxListResults));
  }
  TY_ASSIGN_OR_RETURN(std::vector<JobInfo> out, store_.ListJobs(request));
  MutexLock lock(mu_);
  int64_t now = clock_.NowMillis();
  for (auto& j : out) {
    auto it = active_.find(j.job_id);
    if (it == active_.end()) continue;
    j.state = it->second->job.state;
    j.attempts = it->second->job.attempts;
    Derive(*it->second, j, now);
  }
  return out;
}

Result<std::vector<CheckpointInfo>> JobService::ListCheckpoints(const std::string& job_id) {
  TY_RETURN_IF_ERROR(GetJob(job_id).status());
  return store_.ListCheckpoints(job_id);
}

Result<std::vector<JobEvent>> JobService::Events(const std::string& job_id, int64_t after_seq) {
  TY_ASSIGN_OR_RETURN(std::optional<std::vector<JobEvent>> events,
                      store_.Events(job_id, after_seq));
  if (!events) return Status::NotFound("job '" + job_id + "' does not exist");
  return std::move(*events);
}

Result<std::string> JobService::LogPath(const std::string& job_id, int attempt, int rank) {
  TY_ASSIGN_OR_RETURN(JobInfo j, GetJob(job_id));
  if (j.attempts == 0) {
    return Status::NotFound("job " + job_id + " has not started yet: " + j.message);
  }
  if (attempt == 0) attempt = j.attempts;
  if (attempt < 1 || attempt > j.attempts) {
    return Status::InvalidArgument("attempt must be between 1 and " + std::to_string(j.attempts));
  }
  if (static_cast<size_t>(attempt) > j.attempt_list.size()) {
    return Status::NotFound("attempt " + std::to_string(attempt) + " of job " + job_id +
                            " has no record");
  }
  const AttemptInfo& a = j.attempt_list[static_cast<size_t>(attempt - 1)];
  if (rank < 0 || rank >= a.ranks) {
    return Status::InvalidArgument("rank must be between 0 and " + std::to_string(a.ranks - 1));
  }
  std::string path = a.log_dir + "/rank-" + std::to_string(rank) + ".log";
  // The job can replace its log: serve only a regular file, never what a link points at (the
  // server's own files) or a FIFO that would block the response.
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    return Status::FailedPrecondition("the log of rank " + std::to_string(rank) + " of attempt " +
                                      std::to_string(attempt) +
                                      " is not a regular file (the job replaced it); it is not "
                                      "served");
  }
  return path;
}

Result<std::vector<int>> JobService::RunningProcessIds(const std::string& job_id) {
  MutexLock lock(mu_);
  auto it = active_.find(job_id);
  if (it == active_.end() || !it->second->running) {
    return Status::FailedPrecondition("job " + job_id + " has no running attempt");
  }
  std::vector<int> out;
  for (const auto& p : ProcessesFromJson(it->second->running->processes)) out.push_back(p.pid);
  return out;
}

std::vector<JobService::NodeUsage> JobService::Cluster() {
  std::vector<NodeUsage> out;
  for (const auto& n : pool_.nodes) out.push_back({n, 0, 0, {}});
  MutexLock lock(mu_);
  for (const auto& [id, rec] : active_) {
    if (!rec->running) continue;
    for (const auto& alloc : rec->running->placement) {
      if (alloc.node < 0 || static_cast<size_t>(alloc.node) >= out.size()) continue;
      NodeUsage& u = out[static_cast<size_t>(alloc.node)];
      u.gpus_used += static_cast<int>(alloc.gpu_ids.size());
      u.cpus_used += alloc.cpus;
      u.jobs.push_back(id);
    }
  }
  return out;
}

}  // namespace trainyard::jobs
