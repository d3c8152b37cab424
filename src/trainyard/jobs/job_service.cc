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

#include "trainyard/common/os_account.h"
#include "trainyard/common/paths.h"
#include "trainyard/common/regex.h"
#include "trainyard/common/strings.h"
#include "trainyard/store/sql.h"

namespace trainyard::jobs {
namespace {

namespace fs = std::filesystem;
using store::Rows;
using store::Transaction;
using store::Value;

constexpr size_t kLogTailBytes = 64 * 1024;

// Patterns that are always checked after a failure (after the job's own policies).
const std::vector<FailurePolicy>& DefaultFailurePolicies() {
  static const std::vector<FailurePolicy> kDefaults = {
      {"CUDA out of memory|CUDA error: out of memory", FailureAction::kFail},
      {"NCCL error.*unhandled system error|uncorrectable ECC error|Xid [0-9]+",
       FailureAction::kAvoidNode},
  };
  return kDefaults;
}

// Whether a failure policy's pattern matches the log tail. A pattern that fails to compile (stored
// before patterns were validated at submit) or stops at a match limit counts as no match.
bool PolicyMatches(const FailurePolicy& p, std::string_view tail) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const BoundedRegex>> compiled;  // guarded by mu
  std::shared_ptr<const BoundedRegex> re;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = compiled.find(p.pattern); it != compiled.end()) re = it->second;
  }
  if (!re) {
    auto c = BoundedRegex::Compile(p.pattern, "failure policy pattern");
    if (!c.ok()) {
      spdlog::warn("{}", c.status().message());
      return false;
    }
    re = *c;
    std::lock_guard<std::mutex> lock(mu);
    if (compiled.size() >= 1024) compiled.clear();  // bounded: many distinct user patterns
    compiled.emplace(p.pattern, re);
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

std::string_view AttemptStateFor(JobState s) {
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

Result<JobState> ParseState(const std::string& s) {
  if (s == "PENDING") return JobState::kPending;
  if (s == "RUNNING") return JobState::kRunning;
  if (s == "SUCCEEDED") return JobState::kSucceeded;
  if (s == "FAILED") return JobState::kFailed;
  if (s == "CANCELLED") return JobState::kCancelled;
  return Status::Internal("unknown job state " + s);
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

json::value PlacementToJson(const Placement& p) {
  json::array out;
  for (const auto& a : p) {
    json::array gpus;
    for (int g : a.gpu_ids) gpus.emplace_back(g);
    out.emplace_back(json::object{
        {"node", a.node}, {"gpus", std::move(gpus)}, {"cpus", a.cpus}, {"memory", a.memory_bytes}});
  }
  return out;
}

// Calls `fn` on each object of a JSON array this service wrote; a damaged record (not JSON,
// missing fields) reads as empty rather than failing the caller.
template <typename T, typename Fn>
std::vector<T> ReadRecordArray(const std::string& text, Fn fn) {
  std::vector<T> out;
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  if (ec || !v.is_array()) return out;
  try {
    for (const auto& item : v.as_array()) out.push_back(fn(item.as_object()));
  } catch (const std::exception&) {
    return {};
  }
  return out;
}

int IntAt(const json::object& o, std::string_view key) {
  return static_cast<int>(o.at(key).to_number<int64_t>());
}

Placement PlacementFromJson(const std::string& text) {
  return ReadRecordArray<NodeAllocation>(text, [](const json::object& o) {
    NodeAllocation a;
    a.node = IntAt(o, "node");
    for (const auto& g : o.at("gpus").as_array()) {
      a.gpu_ids.push_back(static_cast<int>(g.to_number<int64_t>()));
    }
    a.cpus = IntAt(o, "cpus");
    a.memory_bytes = o.at("memory").to_number<int64_t>();
    return a;
  });
}

std::string ProcessesToJson(const std::vector<executors::RankProcess>& ps) {
  json::array out;
  for (const auto& p : ps) {
    out.emplace_back(json::object{{"rank", p.rank}, {"pid", p.pid}, {"start_time", p.start_time}});
  }
  return json::serialize(out);
}

std::vector<executors::RankProcess> ProcessesFromJson(const std::string& text) {
  return ReadRecordArray<executors::RankProcess>(text, [](const json::object& o) {
    return executors::RankProcess{IntAt(o, "rank"), IntAt(o, "pid"),
                                  o.at("start_time").to_number<int64_t>()};
  });
}

std::string StringsToJson(const std::vector<std::string>& v) {
  json::array a;
  for (const auto& s : v) a.emplace_back(s);
  return json::serialize(a);
}

std::vector<std::string> StringsFromJson(const std::string& text) {
  std::vector<std::string> out;
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  if (ec || !v.is_array()) return out;
  for (const auto& s : v.as_array()) {
    if (s.is_string()) out.emplace_back(s.as_string());
  }
  return out;
}

std::string Seconds(int64_t ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1fs", static_cast<double>(ms) / 1000.0);
  return buf;
}

}  // namespace

std::string_view JobStateName(JobState s) {
  switch (s) {
    case JobState::kPending:
      return "PENDING";
    case JobState::kRunning:
      return "RUNNING";
    case JobState::kSucceeded:
      return "SUCCEEDED";
    case JobState::kFailed:
      return "FAILED";
    case JobState::kCancelled:
      return "CANCELLED";
  }
  return "PENDING";
}

bool IsTerminal(JobState s) {
  return s == JobState::kSucceeded || s == JobState::kFailed || s == JobState::kCancelled;
}

struct JobService::Running {
  AttemptInfo attempt;
  Placement placement;
  std::string token_id;
  std::string processes;  // JSON, for re-adoption
  bool stopping = false;
  std::string stop_state;  // the attempt's state once it exits: cancelled, preempted, ...
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

JobService::JobService(store::Database& db, Clock& clock, Random& random,
                       identity::IdentityService& identity, tracking::TrackingService& tracking,
                       executors::Executor& executor, cost::PriceCatalog prices, PoolConfig pool,
                       JobServiceOptions options)
    : db_(db),
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
    std::lock_guard<std::mutex> lock(scope_mu_);
    auto it = run_of_job_.find(job_id);
    if (it != run_of_job_.end()) return it->second == what.id;
  }
  std::string run_id;
  Status s = db_.Read([&](Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(Rows rows, tx.Query("SELECT run_id FROM jobs WHERE job_id = ?", {job_id}));
    if (!rows.empty()) run_id = rows[0].Text(0);
    return Status::Ok();
  });
  if (!s.ok() || run_id.empty()) return false;
  std::lock_guard<std::mutex> lock(scope_mu_);
  if (run_of_job_.size() > 10000) run_of_job_.clear();
  run_of_job_[job_id] = run_id;  // a job's run never changes
  return run_id == what.id;
}

JobService::~JobService() {
  Stop();
  identity_.SetScopeWritePolicy(nullptr);
}

std::vector<store::Migration> JobService::Migrations() {
  return {{"jobs",
           1,
           {
               "CREATE TABLE jobs (job_id TEXT PRIMARY KEY, seq BIGINT NOT NULL, name TEXT NOT "
               "NULL, project TEXT NOT NULL, owner TEXT NOT NULL, state TEXT NOT NULL, spec TEXT "
               "NOT NULL, experiment_id TEXT NOT NULL, run_id TEXT NOT NULL, submitted_at BIGINT "
               "NOT NULL, finished_at BIGINT NOT NULL, attempts INTEGER NOT NULL, restarts "
               "INTEGER NOT NULL, consecutive_failures INTEGER NOT NULL, not_before BIGINT NOT "
               "NULL, message TEXT NOT NULL, excluded_nodes TEXT NOT NULL)",
               "CREATE INDEX jobs_by_state ON jobs (state, seq)",
               "CREATE INDEX jobs_by_seq ON jobs (seq)",
               "CREATE TABLE job_attempts (job_id TEXT NOT NULL, attempt INTEGER NOT NULL, state "
               "TEXT NOT NULL, cause TEXT NOT NULL, nodes TEXT NOT NULL, gpus INTEGER NOT NULL, "
               "cpus INTEGER NOT NULL, ranks INTEGER NOT NULL, started_at BIGINT NOT NULL, "
               "ended_at BIGINT NOT NULL, exit_code INTEGER, signal INTEGER, failed_rank INTEGER, "
               "resumed_from TEXT NOT NULL, last_checkpoint_at BIGINT NOT NULL, log_dir TEXT NOT "
               "NULL, cost_usd DOUBLE PRECISION NOT NULL, paid_seconds DOUBLE PRECISION NOT NULL, "
               "productive_seconds DOUBLE PRECISION NOT NULL, placement TEXT NOT NULL, processes "
               "TEXT NOT NULL, token_id TEXT NOT NULL, PRIMARY KEY (job_id, attempt))",
               "CREATE TABLE job_checkpoints (job_id TEXT NOT NULL, step BIGINT NOT NULL, path "
               "TEXT NOT NULL, attempt INTEGER NOT NULL, created_at BIGINT NOT NULL, PRIMARY KEY "
               "(job_id, step))",
               "CREATE TABLE job_events (job_id TEXT NOT NULL, seq BIGINT NOT NULL, time BIGINT "
               "NOT NULL, message TEXT NOT NULL, PRIMARY KEY (job_id, seq))",
           }}};
}

// --- persistence

Status JobService::Persist(const Record& r) {
  const JobInfo& j = r.job;
  return db_.Write([&](Transaction& tx) -> Status {
    TY_RETURN_IF_ERROR(tx.Exec("DELETE FROM jobs WHERE job_id = ?", {j.job_id}).status());
    return tx
        .Exec(
            "INSERT INTO jobs (job_id, seq, name, project, owner, state, spec, experiment_id, "
            "run_id, submitted_at, finished_at, attempts, restarts, consecutive_failures, "
            "not_before, message, excluded_nodes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
            "?, ?, ?, ?)",
            {j.job_id, r.seq, j.spec.name, j.spec.project, j.owner,
             std::string(JobStateName(j.state)), json::serialize(JobSpecToJson(j.spec)),
             j.experiment_id, j.run_id, j.submitted_at, j.finished_at, int64_t{j.attempts},
             int64_t{j.restarts}, int64_t{j.consecutive_failures}, j.not_before, j.message,
             StringsToJson(j.excluded_nodes)})
        .status();
  });
}

Status JobService::PersistAttempt(const Record& r, const AttemptInfo& a,
                                  const std::string& processes) {
  auto opt = [](const std::optional<int>& v) { return store::NullIfUnset(v); };
  std::string placement =
      r.running ? json::serialize(PlacementToJson(r.running->placement)) : std::string("[]");
  std::string token = r.running ? r.running->token_id : "";
  return db_.Write([&](Transaction& tx) -> Status {
    TY_RETURN_IF_ERROR(tx.Exec("DELETE FROM job_attempts WHERE job_id = ? AND attempt = ?",
                               {r.job.job_id, int64_t{a.attempt}})
                           .status());
    return tx
        .Exec(
            "INSERT INTO job_attempts (job_id, attempt, state, cause, nodes, gpus, cpus, ranks, "
            "started_at, ended_at, exit_code, signal, failed_rank, resumed_from, "
            "last_checkpoint_at, log_dir, cost_usd, paid_seconds, productive_seconds, placement, "
            "processes, token_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
            "?, ?, ?, ?)",
            {r.job.job_id,
             int64_t{a.attempt},
             a.state,
             a.cause,
             StringsToJson(a.nodes),
             int64_t{a.gpus},
             int64_t{a.cpus},
             int64_t{a.ranks},
             a.started_at,
             a.ended_at,
             opt(a.exit_code),
             opt(a.signal),
             opt(a.failed_rank),
             a.resumed_from,
             a.last_checkpoint_at,
             a.log_dir,
             a.cost_usd,
             a.paid_seconds,
             a.productive_seconds,
             placement,
             processes,
             token})
        .status();
  });
}

void JobService::Event(Record& r, const std::string& message, int64_t now) {
  int64_t seq = ++r.event_seq;
  Status s = db_.Write([&](Transaction& tx) -> Status {
    return tx
        .Exec("INSERT INTO job_events (job_id, seq, time, message) VALUES (?, ?, ?, ?)",
              {r.job.job_id, seq, now, message})
        .status();
  });
  if (!s.ok()) spdlog::warn("job {}: cannot record event: {}", r.job.job_id, s.message());
  spdlog::info("job {}: {}", r.job.job_id, message);
}

namespace {

AttemptInfo AttemptFromRow(const store::Row& row) {
  AttemptInfo a;
  a.attempt = static_cast<int>(row.Int(0));
  a.state = row.Text(1);
  a.cause = row.Text(2);
  a.nodes = StringsFromJson(row.Text(3));
  a.gpus = static_cast<int>(row.Int(4));
  a.cpus = static_cast<int>(row.Int(5));
  a.ranks = static_cast<int>(row.Int(6));
  a.started_at = row.Int(7);
  a.ended_at = row.Int(8);
  if (!row.IsNull(9)) a.exit_code = static_cast<int>(row.Int(9));
  if (!row.IsNull(10)) a.signal = static_cast<int>(row.Int(10));
  if (!row.IsNull(11)) a.failed_rank = static_cast<int>(row.Int(11));
  a.resumed_from = row.Text(12);
  a.last_checkpoint_at = row.Int(13);
  a.log_dir = row.Text(14);
  a.cost_usd = row.Double(15);
  a.paid_seconds = row.Double(16);
  a.productive_seconds = row.Double(17);
  return a;
}

constexpr const char* kAttemptColumns =
    "attempt, state, cause, nodes, gpus, cpus, ranks, started_at, ended_at, exit_code, signal, "
    "failed_rank, resumed_from, last_checkpoint_at, log_dir, cost_usd, paid_seconds, "
    "productive_seconds, placement, processes, token_id";

constexpr const char* kJobColumns =
    "job_id, seq, owner, state, spec, experiment_id, run_id, submitted_at, finished_at, "
    "attempts, restarts, consecutive_failures, not_before, message, excluded_nodes";

Result<JobInfo> JobFromRow(const store::Row& row, int64_t* seq) {
  JobInfo j;
  j.job_id = row.Text(0);
  if (seq) *seq = row.Int(1);
  j.owner = row.Text(2);
  TY_ASSIGN_OR_RETURN(j.state, ParseState(row.Text(3)));
  TY_ASSIGN_OR_RETURN(json::value spec, ParseJsonExact(row.Text(4)));
  TY_ASSIGN_OR_RETURN(j.spec, ParseJobSpecJson(spec));
  j.experiment_id = row.Text(5);
  j.run_id = row.Text(6);
  j.submitted_at = row.Int(7);
  j.finished_at = row.Int(8);
  j.attempts = static_cast<int>(row.Int(9));
  j.restarts = static_cast<int>(row.Int(10));
  j.consecutive_failures = static_cast<int>(row.Int(11));
  j.not_before = row.Int(12);
  j.message = row.Text(13);
  j.excluded_nodes = StringsFromJson(row.Text(14));
  return j;
}

}  // namespace

Result<std::vector<AttemptInfo>> JobService::LoadAttempts(const std::string& job_id) {
  std::vector<AttemptInfo> out;
  TY_RETURN_IF_ERROR(db_.Read([&](Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(Rows rows,
                        tx.Query(std::string("SELECT ") + kAttemptColumns +
                                     " FROM job_attempts WHERE job_id = ? ORDER BY attempt",
                                 {job_id}));
    for (const auto& row : rows) out.push_back(AttemptFromRow(row));
    return Status::Ok();
  }));
  return out;
}

// --- start and stop

Status JobService::Start() {
  executor_.SetExitCallback([this](const executors::AttemptExit& exit) {
    executors::AttemptExit copy = exit;
    Post([this, copy] { OnAttemptExitGuarded(copy); });
  });
  tracking_.SetRunActivityListener([this](const std::string& run_id) { OnRunActivity(run_id); });

  int64_t now = clock_.NowMillis();
  std::vector<std::pair<std::string, std::string>> adopt;  // job id → processes
  {
    std::lock_guard<std::mutex> lock(mu_);
    TY_RETURN_IF_ERROR(db_.Read([&](Transaction& tx) -> Status {
      TY_ASSIGN_OR_RETURN(Rows max_seq, tx.Query("SELECT COALESCE(MAX(seq), 0) FROM jobs"));
      next_seq_ = max_seq[0].Int(0) + 1;
      TY_ASSIGN_OR_RETURN(Rows rows, tx.Query(std::string("SELECT ") + kJobColumns +
                                              " FROM jobs WHERE state IN ('PENDING', "
                                              "'RUNNING') ORDER BY seq"));
      for (const auto& row : rows) {
        auto rec = std::make_unique<Record>();
        auto job = JobFromRow(row, &rec->seq);
        if (!job.ok()) {
          spdlog::error("job {}: cannot load: {}", row.Text(0), job.status().message());
          continue;
        }
        rec->job = std::move(*job);
        TY_ASSIGN_OR_RETURN(Rows ev, tx.Query("SELECT COALESCE(MAX(seq), 0) FROM job_events "
                                              "WHERE job_id = ?",
                                              {rec->job.job_id}));
        rec->event_seq = ev[0].Int(0);
        TY_ASSIGN_OR_RETURN(Rows ck, tx.Query("SELECT step, path, attempt, created_at FROM "
                                              "job_checkpoints WHERE job_id = ? ORDER BY "
                                              "created_at DESC, step DESC LIMIT 1",
                                              {rec->job.job_id}));
        if (!ck.empty()) {
          rec->job.latest_checkpoint = CheckpointInfo{ck[0].Int(0), ck[0].Text(1),
                                                      static_cast<int>(ck[0].Int(2)), ck[0].Int(3)};
        }
        TY_ASSIGN_OR_RETURN(Rows attempts,
                            tx.Query(std::string("SELECT ") + kAttemptColumns +
                                         " FROM job_attempts WHERE job_id = ? ORDER BY attempt",
                                     {rec->job.job_id}));
        for (const auto& arow : attempts) {
          AttemptInfo a = AttemptFromRow(arow);
          if (a.state == "running" && rec->job.state == JobState::kRunning) {
            Running run;
            run.attempt = a;
            run.placement = PlacementFromJson(arow.Text(18));
            run.processes = arow.Text(19);
            run.token_id = arow.Text(20);
            run.last_progress = now;
            rec->running = std::move(run);
            adopt.emplace_back(rec->job.job_id, arow.Text(19));
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
      // Fair share remembers a week of usage.
      TY_ASSIGN_OR_RETURN(Rows usage,
                          tx.Query("SELECT j.project, a.gpus, a.cpus, a.started_at, a.ended_at "
                                   "FROM job_attempts a JOIN jobs j ON j.job_id = a.job_id WHERE "
                                   "a.ended_at > ?",
                                   {now - int64_t{7} * 24 * 3600 * 1000}));
      for (const auto& u : usage) {
        double secs = static_cast<double>(u.Int(4) - u.Int(3)) / 1000.0;
        double amount = u.Int(1) > 0 ? secs * static_cast<double>(u.Int(1))
                                     : secs * static_cast<double>(u.Int(2)) / 100.0;
        usage_.Add(u.Text(0), amount, u.Int(4));
      }
      return Status::Ok();
    }));
  }
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
    Post([this, lost] { OnAttemptExitGuarded(lost); });
  }
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    stop_ = false;
  }
  if (options_.start_loop_thread) loop_ = std::thread([this] { Loop(); });
  return Status::Ok();
}

void JobService::Stop() {
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    stop_ = true;
  }
  inbox_cv_.notify_all();
  if (loop_.joinable()) loop_.join();
}

void JobService::Post(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    inbox_.push_back(std::move(fn));
  }
  inbox_cv_.notify_all();
}

void JobService::Loop() {
  int64_t wait_ms = 0;
  while (true) {
    std::deque<std::function<void()>> work;
    {
      std::unique_lock<std::mutex> lock(inbox_mu_);
      inbox_cv_.wait_for(lock, std::chrono::milliseconds(std::max<int64_t>(wait_ms, 1)),
                         [&] { return stop_ || wake_ || !inbox_.empty(); });
      if (stop_) return;
      work.swap(inbox_);
      wake_ = false;
    }
    std::lock_guard<std::mutex> lock(mu_);
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
    // Sleep until the earliest backoff ends, or the regular health check.
    int64_t now = clock_.NowMillis();
    wait_ms = options_.max_wait_ms;
    for (const auto& [id, r] : active_) {
      if (r->job.state == JobState::kPending && r->job.not_before > now) {
        wait_ms = std::min(wait_ms, r->job.not_before - now);
      }
    }
  }
}

void JobService::RunPassForTest() {
  std::deque<std::function<void()>> work;
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    work.swap(inbox_);
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& fn : work) fn();
  Pass();
}

void JobService::Pass() {
  int64_t now = clock_.NowMillis();
  CheckHealth(now);
  ScheduleAndLaunch(now);
}

// --- submit, cancel, workload calls

Result<JobInfo> JobService::Submit(const identity::Principal& who, JobSpec spec) {
  if (!who.scope.empty()) {
    return Status::PermissionDenied("a token scoped to " + who.scope + " may not submit jobs");
  }
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
  int64_t now = clock_.NowMillis();
  std::string experiment_name = spec.experiment.empty() ? spec.name : spec.experiment;
  std::string experiment_id;
  auto experiment = tracking_.GetExperimentByName(experiment_name);
  if (experiment.ok()) {
    experiment_id = experiment->experiment_id;
    TY_RETURN_IF_ERROR(identity_.Authorize(who, identity::Action::kEdit,
                                           {"experiment", experiment_id, experiment->owner}));
  } else if (experiment.status().IsNotFound()) {
    TY_ASSIGN_OR_RETURN(experiment_id, tracking_.CreateExperiment(who, experiment_name, "", {}));
  } else {
    return experiment.status();
  }
  auto rec = std::make_unique<Record>();
  JobInfo& j = rec->job;
  j.job_id = "j-" + random_.Hex(5);
  j.owner = who.user;
  j.spec = std::move(spec);
  j.state = JobState::kPending;
  j.experiment_id = experiment_id;
  j.submitted_at = now;
  TY_ASSIGN_OR_RETURN(
      tracking::Run run,
      tracking_.CreateRun(who, experiment_id, who.user, j.spec.name, now,
                          {{"trainyard.job_id", j.job_id}, {"trainyard.project", j.spec.project}}));
  j.run_id = run.info.run_id;
  TY_RETURN_IF_ERROR(
      tracking_.UpdateRun(who, j.run_id, "SCHEDULED", std::nullopt, std::nullopt).status());
  std::lock_guard<std::mutex> lock(mu_);
  rec->seq = next_seq_++;
  TY_RETURN_IF_ERROR(Persist(*rec));
  Event(*rec, "submitted by " + who.user, now);
  run_to_job_[j.run_id] = j.job_id;
  JobInfo out = j;
  active_[j.job_id] = std::move(rec);
  {
    std::lock_guard<std::mutex> inbox_lock(inbox_mu_);
    wake_ = true;
  }
  inbox_cv_.notify_all();
  return out;
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

Result<std::string> JobService::StoredState(const std::string& job_id) {
  std::string state;
  TY_RETURN_IF_ERROR(db_.Read([&](Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(Rows rows, tx.Query("SELECT state FROM jobs WHERE job_id = ?", {job_id}));
    if (rows.empty()) return Status::NotFound("job '" + job_id + "' does not exist");
    state = rows[0].Text(0);
    return Status::Ok();
  }));
  return state;
}

Status JobService::Cancel(const identity::Principal& who, const std::string& job_id) {
  if (!who.scope.empty()) {
    return Status::PermissionDenied("a token scoped to " + who.scope + " may not cancel jobs");
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = active_.find(job_id);
  if (it == active_.end()) {
    TY_ASSIGN_OR_RETURN(std::string state, StoredState(job_id));
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
  if (r.running->stopping && r.running->stop_state == "cancelled") return Status::Ok();
  StopAttempt(r, "cancelled", "cancelled by " + who.user, r.job.spec.preemption_grace_ms);
  return Status::Ok();
}

Status JobService::AuthorizeWorkload(const identity::Principal& who, const std::string& job_id) {
  auto it = active_.find(job_id);
  if (it == active_.end()) {
    TY_ASSIGN_OR_RETURN(std::string state, StoredState(job_id));
    return Status::FailedPrecondition("job " + job_id + " is not running (" + state + ")");
  }
  return Authorize(who, *it->second, identity::Action::kEdit);
}

Status JobService::Heartbeat(const identity::Principal& who, const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  TY_RETURN_IF_ERROR(AuthorizeWorkload(who, job_id));
  Record& r = *active_[job_id];
  if (r.running) r.running->last_progress = clock_.NowMillis();
  return Status::Ok();
}

Status JobService::ReportCheckpoint(const identity::Principal& who, const std::string& job_id,
                                    int64_t step, const std::string& path) {
  if (step < 0) return Status::InvalidArgument("step must be a non-negative integer");
  if (path.empty() || path.size() > 4096 || path.find('\0') != std::string::npos) {
    return Status::InvalidArgument("path must be a non-empty string of at most 4096 bytes");
  }
  std::lock_guard<std::mutex> lock(mu_);
  TY_RETURN_IF_ERROR(AuthorizeWorkload(who, job_id));
  Record& r = *active_[job_id];
  int64_t now = clock_.NowMillis();
  CheckpointInfo ck{step, path, r.running ? r.running->attempt.attempt : r.job.attempts, now};
  TY_RETURN_IF_ERROR(db_.Write([&](Transaction& tx) -> Status {
    return tx
        .Exec(
            "INSERT INTO job_checkpoints (job_id, step, path, attempt, created_at) VALUES (?, ?, "
            "?, ?, ?) ON CONFLICT (job_id, step) DO UPDATE SET path = excluded.path, attempt = "
            "excluded.attempt, created_at = excluded.created_at",
            {job_id, step, path, int64_t{ck.attempt}, now})
        .status();
  }));
  r.job.latest_checkpoint = ck;
  if (r.running) {
    r.running->last_progress = now;
    r.running->attempt.last_checkpoint_at = now;
    TY_RETURN_IF_ERROR(PersistAttempt(r, r.running->attempt, r.running->processes));
  }
  return Status::Ok();
}

void JobService::OnRunActivity(const std::string& run_id) {
  std::lock_guard<std::mutex> lock(progress_mu_);
  progress_by_run_[run_id] = clock_.NowMillis();
}

// --- the loop's work

void JobService::CheckHealth(int64_t now) {
  for (auto& [id, rec] : active_) {
    Record& r = *rec;
    if (!r.running || r.running->stopping) continue;
    const JobSpec& spec = r.job.spec;
    AttemptInfo& a = r.running->attempt;
    if (executor_.ClusterStatus(r.job.job_id, a.attempt).find(" PENDING") != std::string::npos) {
      // Still queued by the cluster (Slurm): nothing runs, nothing is paid, nothing can hang.
      a.started_at = now;
      r.running->last_progress = now;
      continue;
    }
    if (spec.time_limit_ms > 0 && now - a.started_at >= spec.time_limit_ms) {
      StopAttempt(r, "timed_out",
                  "time limit of " + FormatDuration(spec.time_limit_ms) + " reached",
                  spec.preemption_grace_ms);
      continue;
    }
    if (spec.hang_timeout_ms > 0) {
      int64_t last = r.running->last_progress;
      {
        std::lock_guard<std::mutex> lock(progress_mu_);
        auto it = progress_by_run_.find(r.job.run_id);
        if (it != progress_by_run_.end()) last = std::max(last, it->second);
      }
      if (now - last > spec.hang_timeout_ms) {
        StopAttempt(r, "hung",
                    "hung: no heartbeat or metric for " + Seconds(now - last) + " (hang_timeout " +
                        FormatDuration(spec.hang_timeout_ms) + ")",
                    std::min<int64_t>(spec.preemption_grace_ms, 10000));
      }
    }
  }
}

void JobService::ScheduleAndLaunch(int64_t now) {
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
  SchedulingResult result = scheduler_.Schedule(in);
  for (const auto& p : result.preemptions) {
    auto it = active_.find(p.victim_id);
    if (it == active_.end() || !it->second->running) continue;
    StopAttempt(*it->second, "preempted", "preempted by higher-priority job " + p.for_job_id,
                it->second->job.spec.preemption_grace_ms);
  }
  for (const auto& start : result.starts) {
    auto it = active_.find(start.job_id);
    if (it == active_.end()) continue;
    Record& r = *it->second;
    r.pending_reason.clear();
    r.queue_position = 0;
    Status s = Launch(r, start.placement, now);
    if (!s.ok()) {
      // The attempt could not start at all (e.g. the executor refused): count it as a
      // failed attempt so that the retry limit applies.
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
  }
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

Status JobService::Launch(Record& r, const Placement& placement, int64_t now) {
  JobInfo& j = r.job;
  const JobSpec& spec = j.spec;
  int attempt = ++j.attempts;
  fs::path job_dir = fs::path(options_.data_dir) / "jobs" / j.job_id;
  fs::path private_dir = (options_.job_dir_root.empty() ? fs::path(options_.data_dir) / "jobs"
                                                        : fs::path(options_.job_dir_root)) /
                         j.job_id;
  fs::path log_dir =
      (options_.logs_in_job_dir ? private_dir : job_dir) / ("attempt-" + std::to_string(attempt));
  fs::path checkpoint_dir = private_dir / "checkpoints";
  std::error_code ec;
  if (!options_.logs_in_job_dir) fs::create_directories(log_dir, ec);
  fs::create_directories(private_dir.parent_path(), ec);

  Running run;
  run.placement = placement;
  run.last_progress = now;
  AttemptInfo& a = run.attempt;
  a.attempt = attempt;
  a.state = "running";
  a.started_at = now;
  a.log_dir = log_dir.string();
  int ppn = spec.EffectiveProcessesPerNode();
  for (const auto& alloc : placement) {
    a.nodes.push_back(pool_.nodes[alloc.node].name);
    a.gpus += static_cast<int>(alloc.gpu_ids.size());
    a.cpus += alloc.cpus;
  }
  a.ranks = ppn * static_cast<int>(placement.size());
  if (j.latest_checkpoint) a.resumed_from = j.latest_checkpoint->path;

  executors::AttemptLaunch launch;
  launch.job_id = j.job_id;
  launch.attempt = attempt;
  launch.command = spec.command;
  launch.working_dir =
      spec.working_dir.empty() ? (private_dir / "work").string() : spec.working_dir;
  launch.tmp_dir = (private_dir / "tmp").string();
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
  launch.env["TRAINYARD_ATTEMPT"] = std::to_string(attempt);
  launch.env["TRAINYARD_PROJECT"] = spec.project;
  launch.env["TRAINYARD_CHECKPOINT_DIR"] = checkpoint_dir.string();
  launch.env["TRAINYARD_RESUME_FROM"] = a.resumed_from;
  launch.env["MLFLOW_TRACKING_URI"] = server_url_;
  launch.env["MLFLOW_RUN_ID"] = j.run_id;
  launch.env["MLFLOW_EXPERIMENT_ID"] = j.experiment_id;
  launch.nnodes = static_cast<int>(placement.size());
  launch.local_world_size = ppn;
  launch.master_addr = pool_.master_addr;
  launch.master_port = 0;
  launch.log_dir = log_dir;
  // For cluster executors (Slurm): what to ask the cluster's scheduler for.
  launch.cluster.cpus_per_rank = std::max(1, spec.resources.cpus_per_node / ppn);
  launch.cluster.memory_mb_per_node = spec.resources.memory_bytes / (1024 * 1024);
  launch.cluster.time_limit = std::chrono::seconds((spec.time_limit_ms + 999) / 1000);
  launch.cluster.term_grace = std::chrono::seconds((spec.preemption_grace_ms + 999) / 1000);
  launch.cluster.exclude_nodes = j.excluded_nodes;
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
      launch.ranks.push_back(std::move(rank));
    }
  }
  r.running = std::move(run);
  j.state = JobState::kRunning;
  j.message.clear();
  // The job's account and its private directory; a failure here fails this attempt.
  TY_ASSIGN_OR_RETURN(JobAccount account, ResolveAccount(j));
  launch.os_user = account.os_user;
  std::vector<std::string> subdirs = {"work", "tmp", "checkpoints"};
  if (options_.logs_in_job_dir) subdirs.push_back(log_dir.filename().string());
  TY_RETURN_IF_ERROR(
      EnsurePrivateDirectory(private_dir.string(), account.uid, account.gid, subdirs));
  identity::Principal owner{j.owner, false, "", ""};
  auto token = identity_.CreateToken(
      owner, {.user = j.owner,
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
  std::string nodes;
  for (const auto& n : started.nodes) nodes += (nodes.empty() ? "" : ",") + n;
  Event(r,
        "attempt " + std::to_string(attempt) + " started on " + nodes + " (" +
            std::to_string(r.running->attempt.ranks) + " rank" +
            (r.running->attempt.ranks == 1 ? "" : "s") +
            (started.resumed_from.empty() ? "" : ", resuming from " + started.resumed_from) + ")",
        now);
  return Status::Ok();
}

void JobService::StopAttempt(Record& r, const std::string& state, const std::string& cause,
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
  if (a.state == "succeeded") {
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
  double secs = static_cast<double>(a.ended_at - a.started_at) / 1000.0;
  double amount = a.gpus > 0 ? secs * a.gpus : secs * a.cpus / 100.0;
  usage_.Add(r.job.spec.project, amount, a.ended_at);
}

bool JobService::ExcludeNodes(Record& r, const std::vector<std::string>& nodes) {
  std::vector<std::string> excluded = r.job.excluded_nodes;
  for (const auto& n : nodes) {
    if (std::find(excluded.begin(), excluded.end(), n) == excluded.end()) excluded.push_back(n);
  }
  std::vector<NodeInfo> remaining;
  for (const auto& n : pool_.nodes) {
    if (std::find(excluded.begin(), excluded.end(), n.name) == excluded.end()) {
      remaining.push_back(n);
    }
  }
  // Only exclude while the job can still be placed on what remains.
  if (!CheckFeasible(remaining, ToRequest(r.job.spec)).ok()) return false;
  r.job.excluded_nodes = std::move(excluded);
  return true;
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
  std::string cause = "internal error while handling the attempt's exit (" + Abbreviate(what, 200) +
                      "); the job is failed instead of retried; resubmit it";
  try {
    if (r.running) {
      AttemptInfo a = r.running->attempt;
      std::string processes = r.running->processes;
      r.running.reset();
      a.state = "failed";
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
  const identity::Principal system = identity::Principal::System();
  if (!run.token_id.empty()) {
    Status s = identity_.RevokeToken(system, run.token_id);
    if (!s.ok()) spdlog::warn("job {}: cannot revoke token: {}", r.job.job_id, s.message());
  }
  std::string failure;
  if (exit.lost) {
    failure = a.cause.empty() ? "lost: the attempt's processes disappeared without an exit status"
                              : a.cause;
  } else if (exit.failed_rank >= 0) {
    std::string rank_node;
    for (const auto& rank : exit.ranks) {
      if (rank.rank == exit.failed_rank) rank_node = rank.node;
    }
    std::string node = !rank_node.empty() ? rank_node
                       : exit.failed_rank < a.ranks && !a.nodes.empty()
                           ? a.nodes[static_cast<size_t>(exit.failed_rank) * a.nodes.size() /
                                     static_cast<size_t>(std::max(a.ranks, 1))]
                           : "";
    failure = (exit.signal > 0 ? "killed by " + SignalName(exit.signal)
                               : "exit code " + std::to_string(exit.exit_code)) +
              " on rank " + std::to_string(exit.failed_rank) +
              (node.empty() ? "" : " (node " + node + ")");
    if (!exit.cluster_state.empty() && exit.failed_node.empty()) {
      failure += "; cluster: " + exit.cluster_state;
    }
  }

  enum class Next { kSucceed, kCancel, kRequeue, kFail, kRetry } next;
  std::string message;
  if (run.stopping && run.stop_state == "cancelled") {
    a.state = "cancelled";
    a.cause = run.stop_cause;
    next = Next::kCancel;
  } else if (run.stopping && run.stop_state == "preempted") {
    a.state = "preempted";
    a.cause = run.stop_cause;
    next = Next::kRequeue;
  } else if (run.stopping && run.stop_state == "timed_out") {
    a.state = "timed_out";
    a.cause = run.stop_cause;
    next = Next::kFail;
    message = run.stop_cause;
  } else if (!run.stopping && exit.cluster_state.rfind("PREEMPTED", 0) == 0) {
    // The cluster preempted it (e.g. Slurm's partition priorities): requeue, not a failure.
    a.state = "preempted";
    a.cause = "preempted by the cluster (" + exit.cluster_state + ")";
    next = Next::kRequeue;
  } else if (exit.success && !run.stopping) {
    a.state = "succeeded";
    a.cause = "all " + std::to_string(a.ranks) + " rank(s) exited 0";
    next = Next::kSucceed;
  } else {
    if (run.stopping && run.stop_state == "hung") {
      a.state = "hung";
      a.cause = run.stop_cause;
    } else {
      a.state = exit.lost ? "lost" : "failed";
      a.cause = failure.empty() ? "failed" : failure;
    }
    next = Next::kRetry;
  }

  if (next == Next::kRetry && !exit.failed_node.empty()) {
    // The cluster says a node failed under the attempt: run the next one elsewhere.
    a.cause += " (node " + exit.failed_node +
               (exit.cluster_state.empty() ? "" : ": " + exit.cluster_state) + ")";
    if (ExcludeNodes(r, {exit.failed_node})) a.cause += "; node " + exit.failed_node + " excluded";
  }
  if (next == Next::kRetry) {
    bool new_checkpoint = r.job.latest_checkpoint && r.job.latest_checkpoint->attempt == a.attempt;
    r.job.consecutive_failures = new_checkpoint ? 1 : r.job.consecutive_failures + 1;
    std::optional<FailurePolicy> policy = MatchFailurePolicy(r, a);
    if (policy && policy->action == FailureAction::kFail) {
      next = Next::kFail;
      message = a.cause + "; the logs match failure policy '" + policy->pattern +
                "' (action fail), so it is not retried";
    } else {
      if (policy && policy->action == FailureAction::kAvoidNode) {
        if (ExcludeNodes(r, a.nodes)) {
          a.cause += "; the logs match '" + policy->pattern + "': node(s) excluded";
        } else {
          a.cause += "; the logs match '" + policy->pattern +
                     "' but excluding the node would leave too few nodes";
        }
      }
      bool forced_retry = policy && policy->action == FailureAction::kRetry;
      if (r.job.restarts >= r.job.spec.max_restarts) {
        next = Next::kFail;
        message = "gave up after " + std::to_string(a.attempt) + " attempt(s) (max_restarts " +
                  std::to_string(r.job.spec.max_restarts) + "): " + a.cause;
      } else if (!forced_retry && r.job.consecutive_failures >= r.job.spec.crash_loop_limit) {
        next = Next::kFail;
        message = "crash loop: " + std::to_string(r.job.consecutive_failures) +
                  " consecutive failures without a new checkpoint; last: " + a.cause;
      }
    }
  }

  PriceAttempt(r, a, now);
  r.past_cost += a.cost_usd;
  r.past_paid += a.paid_seconds;
  r.past_productive += a.productive_seconds;
  RecordUsage(r, a);
  r.running.reset();
  Status s = PersistAttempt(r, a, run.processes);
  if (!s.ok()) spdlog::error("job {}: cannot record attempt: {}", r.job.job_id, s.message());
  Event(r, "attempt " + std::to_string(a.attempt) + " " + a.state + ": " + a.cause, now);

  switch (next) {
    case Next::kSucceed:
      FinishJob(r, JobState::kSucceeded, a.cause, now);
      break;
    case Next::kCancel:
      FinishJob(r, JobState::kCancelled, a.cause, now);
      break;
    case Next::kFail:
      FinishJob(r, JobState::kFailed, message, now);
      break;
    case Next::kRequeue:
      Requeue(r, 0, a.cause, now);
      return;
    case Next::kRetry: {
      int64_t delay = r.job.spec.restart_backoff_ms;
      for (int i = 1; i < r.job.consecutive_failures && delay < r.job.spec.restart_backoff_max_ms;
           ++i) {
        delay *= 2;
      }
      delay = std::min(delay, r.job.spec.restart_backoff_max_ms);
      r.job.restarts++;
      Requeue(r, delay, "attempt " + std::to_string(a.attempt) + " " + a.state + ": " + a.cause,
              now);
      return;
    }
  }
  active_.erase(exit.job_id);
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
                                     std::string(AttemptStateFor(state)), now, std::nullopt);
  if (!updated.ok()) spdlog::warn("job {}: {}", r.job.job_id, updated.status().message());
  Event(r, std::string(JobStateName(state)) + ": " + message, now);
  std::lock_guard<std::mutex> lock(progress_mu_);
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
    std::string status = executor_.ClusterStatus(r.job.job_id, r.running->attempt.attempt);
    if (status.find(" PENDING") != std::string::npos)
      out.message = "queued in the cluster: " + status;
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
  JobInfo out;
  bool found = false;
  TY_RETURN_IF_ERROR(db_.Read([&](Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(
        Rows rows,
        tx.Query(std::string("SELECT ") + kJobColumns + " FROM jobs WHERE job_id = ?", {job_id}));
    if (rows.empty()) return Status::Ok();
    TY_ASSIGN_OR_RETURN(out, JobFromRow(rows[0], nullptr));
    found = true;
    TY_ASSIGN_OR_RETURN(Rows ck, tx.Query("SELECT step, path, attempt, created_at FROM "
                                          "job_checkpoints WHERE job_id = ? ORDER BY "
                                          "created_at DESC, step DESC LIMIT 1",
                                          {job_id}));
    if (!ck.empty()) {
      out.latest_checkpoint =
          CheckpointInfo{ck[0].Int(0), ck[0].Text(1), static_cast<int>(ck[0].Int(2)), ck[0].Int(3)};
    }
    TY_ASSIGN_OR_RETURN(Rows attempts,
                        tx.Query(std::string("SELECT ") + kAttemptColumns +
                                     " FROM job_attempts WHERE job_id = ? ORDER BY attempt",
                                 {job_id}));
    double cost = 0, paid = 0, productive = 0;
    for (const auto& row : attempts) {
      out.attempt_list.push_back(AttemptFromRow(row));
      cost += out.attempt_list.back().cost_usd;
      paid += out.attempt_list.back().paid_seconds;
      productive += out.attempt_list.back().productive_seconds;
    }
    out.cost_usd = cost;
    out.goodput = paid > 0 ? productive / paid : 1.0;
    return Status::Ok();
  }));
  if (!found) {
    return Status::NotFound("job '" + job_id +
                            "' does not exist (list jobs with 'trainyard jobs')");
  }
  std::lock_guard<std::mutex> lock(mu_);
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
  if (request.max_results < 1 || request.max_results > 10000) {
    return Status::InvalidArgument("max_results must be between 1 and 10000");
  }
  std::vector<JobInfo> out;
  std::map<std::string, int64_t> seqs;
  TY_RETURN_IF_ERROR(db_.Read([&](Transaction& tx) -> Status {
    std::string sql = std::string("SELECT ") + kJobColumns + " FROM jobs";
    std::vector<Value> params;
    std::vector<std::string> where;
    if (request.state) {
      where.push_back("state = ?");
      params.emplace_back(std::string(JobStateName(*request.state)));
    } else if (request.active_only) {
      where.push_back("state IN ('PENDING', 'RUNNING')");
    }
    if (!request.project.empty()) {
      where.push_back("project = ?");
      params.emplace_back(request.project);
    }
    for (size_t i = 0; i < where.size(); ++i) sql += (i ? " AND " : " WHERE ") + where[i];
    sql += " ORDER BY seq DESC LIMIT " + std::to_string(request.max_results);
    TY_ASSIGN_OR_RETURN(Rows rows, tx.Query(sql, params));
    for (const auto& row : rows) {
      int64_t seq = 0;
      auto j = JobFromRow(row, &seq);
      if (!j.ok()) continue;
      out.push_back(std::move(*j));
    }
    if (out.empty()) return Status::Ok();
    std::vector<Value> ids;
    for (const auto& j : out) ids.emplace_back(j.job_id);
    TY_ASSIGN_OR_RETURN(Rows sums, tx.Query("SELECT job_id, SUM(cost_usd), SUM(paid_seconds), "
                                            "SUM(productive_seconds) FROM job_attempts WHERE "
                                            "job_id IN " +
                                                store::InList(ids.size()) + " GROUP BY job_id",
                                            ids));
    std::map<std::string, std::tuple<double, double, double>> by_job;
    for (const auto& s : sums) {
      by_job[s.Text(0)] = {s.Double(1), s.Double(2), s.Double(3)};
    }
    for (auto& j : out) {
      auto it = by_job.find(j.job_id);
      if (it == by_job.end()) continue;
      j.cost_usd = std::get<0>(it->second);
      double paid = std::get<1>(it->second);
      j.goodput = paid > 0 ? std::get<2>(it->second) / paid : 1.0;
    }
    return Status::Ok();
  }));
  std::lock_guard<std::mutex> lock(mu_);
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
  std::vector<CheckpointInfo> out;
  TY_RETURN_IF_ERROR(db_.Read([&](Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(Rows rows, tx.Query("SELECT step, path, attempt, created_at FROM "
                                            "job_checkpoints WHERE job_id = ? ORDER BY step",
                                            {job_id}));
    for (const auto& r : rows) {
      out.push_back({r.Int(0), r.Text(1), static_cast<int>(r.Int(2)), r.Int(3)});
    }
    return Status::Ok();
  }));
  return out;
}

Result<std::vector<JobEvent>> JobService::Events(const std::string& job_id, int64_t after_seq) {
  std::vector<JobEvent> out;
  bool exists = false;
  TY_RETURN_IF_ERROR(db_.Read([&](Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(Rows job, tx.Query("SELECT 1 FROM jobs WHERE job_id = ?", {job_id}));
    exists = !job.empty();
    TY_ASSIGN_OR_RETURN(Rows rows, tx.Query("SELECT seq, time, message FROM job_events WHERE "
                                            "job_id = ? AND seq > ? ORDER BY seq LIMIT 1000",
                                            {job_id, after_seq}));
    for (const auto& r : rows) out.push_back({r.Int(0), r.Int(1), r.Text(2)});
    return Status::Ok();
  }));
  if (!exists) return Status::NotFound("job '" + job_id + "' does not exist");
  return out;
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

std::vector<JobService::NodeUsage> JobService::Cluster() {
  std::vector<NodeUsage> out;
  for (const auto& n : pool_.nodes) out.push_back({n, 0, 0, {}});
  std::lock_guard<std::mutex> lock(mu_);
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
