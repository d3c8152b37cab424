#include "trainyard/jobs/job_store.h"

#include <spdlog/spdlog.h>

#include <map>
#include <tuple>

#include "trainyard/common/json.h"
#include "trainyard/store/sql.h"

namespace trainyard::jobs {
namespace {

using store::Rows;
using store::Transaction;
using store::Value;

// Calls `fn` on each object of a JSON array this store wrote; a damaged record (not JSON,
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

constexpr const char* kAttemptColumns =
    "attempt, state, cause, nodes, gpus, cpus, ranks, started_at, ended_at, exit_code, signal, "
    "failed_rank, resumed_from, last_checkpoint_at, log_dir, cost_usd, paid_seconds, "
    "productive_seconds, placement, processes, token_id";

constexpr const char* kJobColumns =
    "job_id, seq, owner, state, spec, experiment_id, run_id, submitted_at, finished_at, "
    "attempts, restarts, consecutive_failures, not_before, message, excluded_nodes";

Result<StoredAttempt> AttemptFromRow(const store::Row& row) {
  StoredAttempt out;
  AttemptInfo& a = out.info;
  a.attempt = static_cast<int>(row.Int(0));
  TY_ASSIGN_OR_RETURN(a.state, ParseAttemptState(row.Text(1)));
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
  out.placement = PlacementFromJson(row.Text(18));
  out.processes = row.Text(19);
  out.token_id = row.Text(20);
  return out;
}

Result<JobInfo> JobFromRow(const store::Row& row, int64_t* seq) {
  JobInfo j;
  j.job_id = row.Text(0);
  if (seq) *seq = row.Int(1);
  j.owner = row.Text(2);
  TY_ASSIGN_OR_RETURN(j.state, ParseJobState(row.Text(3)));
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

CheckpointInfo CheckpointFromRow(const store::Row& row) {
  return {row.Int(0), row.Text(1), static_cast<int>(row.Int(2)), row.Int(3)};
}

// The checkpoint reported last (the highest step among those reported at the same time).
Result<std::optional<CheckpointInfo>> LatestCheckpoint(Transaction& tx, const std::string& job_id) {
  TY_ASSIGN_OR_RETURN(Rows rows, tx.Query("SELECT step, path, attempt, created_at FROM "
                                          "job_checkpoints WHERE job_id = ? ORDER BY "
                                          "created_at DESC, step DESC LIMIT 1",
                                          {job_id}));
  if (rows.empty()) return std::optional<CheckpointInfo>();
  return std::optional<CheckpointInfo>(CheckpointFromRow(rows[0]));
}

// The job's attempts, oldest first. An attempt whose state no longer parses is an error: the
// loop could not tell whether it still runs.
Result<std::vector<StoredAttempt>> AttemptsOf(Transaction& tx, const std::string& job_id) {
  TY_ASSIGN_OR_RETURN(Rows rows,
                      tx.Query(std::string("SELECT ") + kAttemptColumns +
                                   " FROM job_attempts WHERE job_id = ? ORDER BY attempt",
                               {job_id}));
  std::vector<StoredAttempt> out;
  for (const auto& row : rows) {
    TY_ASSIGN_OR_RETURN(StoredAttempt a, AttemptFromRow(row));
    out.push_back(std::move(a));
  }
  return out;
}

// productive ÷ paid, 1 when nothing was paid yet.
double Goodput(double paid, double productive) { return paid > 0 ? productive / paid : 1.0; }

// Fills cost_usd and goodput of `jobs` from their attempts' totals, in one query per
// kMaxListParams jobs.
Status FillCostTotals(Transaction& tx, std::vector<JobInfo>& jobs) {
  std::map<std::string, std::tuple<double, double, double>> by_job;
  for (size_t begin = 0; begin < jobs.size(); begin += store::kMaxListParams) {
    size_t end = std::min(jobs.size(), begin + store::kMaxListParams);
    std::vector<Value> ids;
    for (size_t i = begin; i < end; ++i) ids.emplace_back(jobs[i].job_id);
    TY_ASSIGN_OR_RETURN(Rows sums, tx.Query("SELECT job_id, SUM(cost_usd), SUM(paid_seconds), "
                                            "SUM(productive_seconds) FROM job_attempts WHERE "
                                            "job_id IN " +
                                                store::InList(ids.size()) + " GROUP BY job_id",
                                            ids));
    for (const auto& s : sums) by_job[s.Text(0)] = {s.Double(1), s.Double(2), s.Double(3)};
  }
  for (auto& j : jobs) {
    auto it = by_job.find(j.job_id);
    if (it == by_job.end()) continue;
    j.cost_usd = std::get<0>(it->second);
    j.goodput = Goodput(std::get<1>(it->second), std::get<2>(it->second));
  }
  return Status::Ok();
}

}  // namespace

std::string PlacementToJson(const Placement& placement) {
  json::array out;
  for (const auto& a : placement) {
    json::array gpus;
    for (int g : a.gpu_ids) gpus.emplace_back(g);
    out.emplace_back(json::object{
        {"node", a.node}, {"gpus", std::move(gpus)}, {"cpus", a.cpus}, {"memory", a.memory_bytes}});
  }
  return json::serialize(out);
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

std::string ProcessesToJson(const std::vector<executors::RankProcess>& processes) {
  json::array out;
  for (const auto& p : processes) {
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

std::vector<store::Migration> JobStore::Migrations() {
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

Status JobStore::PutJob(const JobInfo& j, int64_t seq) {
  return db_.Write([&](Transaction& tx) -> Status {
    TY_RETURN_IF_ERROR(store::Run(tx, "DELETE FROM jobs WHERE job_id = ?", {j.job_id}));
    return store::Run(
        tx,
        "INSERT INTO jobs (job_id, seq, name, project, owner, state, spec, experiment_id, "
        "run_id, submitted_at, finished_at, attempts, restarts, consecutive_failures, "
        "not_before, message, excluded_nodes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
        "?, ?, ?, ?)",
        {j.job_id, seq, j.spec.name, j.spec.project, j.owner, std::string(JobStateName(j.state)),
         json::serialize(JobSpecToJson(j.spec)), j.experiment_id, j.run_id, j.submitted_at,
         j.finished_at, int64_t{j.attempts}, int64_t{j.restarts}, int64_t{j.consecutive_failures},
         j.not_before, j.message, StringsToJson(j.excluded_nodes)});
  });
}

Status JobStore::PutAttempt(const std::string& job_id, const StoredAttempt& stored) {
  const AttemptInfo& a = stored.info;
  return db_.Write([&](Transaction& tx) -> Status {
    TY_RETURN_IF_ERROR(store::Run(tx, "DELETE FROM job_attempts WHERE job_id = ? AND attempt = ?",
                                  {job_id, int64_t{a.attempt}}));
    return store::Run(
        tx,
        "INSERT INTO job_attempts (job_id, attempt, state, cause, nodes, gpus, cpus, ranks, "
        "started_at, ended_at, exit_code, signal, failed_rank, resumed_from, "
        "last_checkpoint_at, log_dir, cost_usd, paid_seconds, productive_seconds, placement, "
        "processes, token_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
        "?, ?, ?, ?)",
        {job_id,
         int64_t{a.attempt},
         std::string(AttemptStateName(a.state)),
         a.cause,
         StringsToJson(a.nodes),
         int64_t{a.gpus},
         int64_t{a.cpus},
         int64_t{a.ranks},
         a.started_at,
         a.ended_at,
         store::NullIfUnset(a.exit_code),
         store::NullIfUnset(a.signal),
         store::NullIfUnset(a.failed_rank),
         a.resumed_from,
         a.last_checkpoint_at,
         a.log_dir,
         a.cost_usd,
         a.paid_seconds,
         a.productive_seconds,
         PlacementToJson(stored.placement),
         stored.processes,
         stored.token_id});
  });
}

Status JobStore::PutCheckpoint(const std::string& job_id, const CheckpointInfo& ck) {
  return db_.Write([&](Transaction& tx) -> Status {
    return store::Run(
        tx,
        "INSERT INTO job_checkpoints (job_id, step, path, attempt, created_at) VALUES (?, ?, "
        "?, ?, ?) ON CONFLICT (job_id, step) DO UPDATE SET path = excluded.path, attempt = "
        "excluded.attempt, created_at = excluded.created_at",
        {job_id, ck.step, ck.path, int64_t{ck.attempt}, ck.created_at});
  });
}

Status JobStore::AddEvent(const std::string& job_id, const JobEvent& event) {
  return db_.Write([&](Transaction& tx) -> Status {
    return store::Run(tx, "INSERT INTO job_events (job_id, seq, time, message) VALUES (?, ?, ?, ?)",
                      {job_id, event.seq, event.time, event.message});
  });
}

Result<int64_t> JobStore::MaxSeq() {
  int64_t out = 0;
  TY_RETURN_IF_ERROR(db_.Read([&](Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(Rows rows, tx.Query("SELECT COALESCE(MAX(seq), 0) FROM jobs"));
    out = rows[0].Int(0);
    return Status::Ok();
  }));
  return out;
}

Result<std::vector<StoredActiveJob>> JobStore::LoadActive() {
  std::vector<StoredActiveJob> out;
  TY_RETURN_IF_ERROR(db_.Read([&](Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(Rows rows, tx.Query(std::string("SELECT ") + kJobColumns +
                                            " FROM jobs WHERE state IN ('PENDING', "
                                            "'RUNNING') ORDER BY seq"));
    for (const auto& row : rows) {
      StoredActiveJob a;
      auto job = JobFromRow(row, &a.seq);
      if (!job.ok()) {
        spdlog::error("job {}: cannot load: {}", row.Text(0), job.status().message());
        continue;
      }
      a.job = std::move(*job);
      TY_ASSIGN_OR_RETURN(Rows ev, tx.Query("SELECT COALESCE(MAX(seq), 0) FROM job_events "
                                            "WHERE job_id = ?",
                                            {a.job.job_id}));
      a.last_event_seq = ev[0].Int(0);
      TY_ASSIGN_OR_RETURN(a.job.latest_checkpoint, LatestCheckpoint(tx, a.job.job_id));
      TY_ASSIGN_OR_RETURN(a.attempts, AttemptsOf(tx, a.job.job_id));
      out.push_back(std::move(a));
    }
    return Status::Ok();
  }));
  return out;
}

Result<std::vector<AttemptUsage>> JobStore::UsageSince(int64_t since_ms) {
  std::vector<AttemptUsage> out;
  TY_RETURN_IF_ERROR(db_.Read([&](Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(Rows rows,
                        tx.Query("SELECT j.project, a.gpus, a.cpus, a.started_at, a.ended_at "
                                 "FROM job_attempts a JOIN jobs j ON j.job_id = a.job_id WHERE "
                                 "a.ended_at > ?",
                                 {since_ms}));
    for (const auto& u : rows) {
      out.push_back(
          {u.Text(0), static_cast<int>(u.Int(1)), static_cast<int>(u.Int(2)), u.Int(3), u.Int(4)});
    }
    return Status::Ok();
  }));
  return out;
}

Result<std::optional<JobInfo>> JobStore::GetJob(const std::string& job_id) {
  std::optional<JobInfo> out;
  TY_RETURN_IF_ERROR(db_.Read([&](Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(
        Rows rows,
        tx.Query(std::string("SELECT ") + kJobColumns + " FROM jobs WHERE job_id = ?", {job_id}));
    if (rows.empty()) return Status::Ok();
    TY_ASSIGN_OR_RETURN(JobInfo j, JobFromRow(rows[0], nullptr));
    TY_ASSIGN_OR_RETURN(j.latest_checkpoint, LatestCheckpoint(tx, job_id));
    TY_ASSIGN_OR_RETURN(std::vector<StoredAttempt> attempts, AttemptsOf(tx, job_id));
    double paid = 0, productive = 0;
    for (auto& a : attempts) {
      j.cost_usd += a.info.cost_usd;
      paid += a.info.paid_seconds;
      productive += a.info.productive_seconds;
      j.attempt_list.push_back(std::move(a.info));
    }
    j.goodput = Goodput(paid, productive);
    out = std::move(j);
    return Status::Ok();
  }));
  return out;
}

Result<std::vector<JobInfo>> JobStore::ListJobs(const ListJobsRequest& request) {
  std::vector<JobInfo> out;
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
      auto j = JobFromRow(row, nullptr);
      if (!j.ok()) continue;
      out.push_back(std::move(*j));
    }
    return FillCostTotals(tx, out);
  }));
  return out;
}

Result<std::string> JobStore::StateName(const std::string& job_id) {
  std::string state;
  TY_RETURN_IF_ERROR(db_.Read([&](Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(Rows rows, tx.Query("SELECT state FROM jobs WHERE job_id = ?", {job_id}));
    if (rows.empty()) return Status::NotFound("job '" + job_id + "' does not exist");
    state = rows[0].Text(0);
    return Status::Ok();
  }));
  return state;
}

Result<std::string> JobStore::RunIdOf(const std::string& job_id) {
  std::string run_id;
  TY_RETURN_IF_ERROR(db_.Read([&](Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(Rows rows, tx.Query("SELECT run_id FROM jobs WHERE job_id = ?", {job_id}));
    if (!rows.empty()) run_id = rows[0].Text(0);
    return Status::Ok();
  }));
  return run_id;
}

Result<std::vector<CheckpointInfo>> JobStore::ListCheckpoints(const std::string& job_id) {
  std::vector<CheckpointInfo> out;
  TY_RETURN_IF_ERROR(db_.Read([&](Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(Rows rows, tx.Query("SELECT step, path, attempt, created_at FROM "
                                            "job_checkpoints WHERE job_id = ? ORDER BY step",
                                            {job_id}));
    for (const auto& r : rows) out.push_back(CheckpointFromRow(r));
    return Status::Ok();
  }));
  return out;
}

Result<std::optional<std::vector<JobEvent>>> JobStore::Events(const std::string& job_id,
                                                              int64_t after_seq) {
  std::vector<JobEvent> out;
  bool exists = false;
  TY_RETURN_IF_ERROR(db_.Read([&](Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(Rows job, tx.Query("SELECT 1 FROM jobs WHERE job_id = ?", {job_id}));
    exists = !job.empty();
    TY_ASSIGN_OR_RETURN(Rows rows, tx.Query("SELECT seq, time, message FROM job_events WHERE "
                                            "job_id = ? AND seq > ? ORDER BY seq LIMIT " +
                                                std::to_string(kMaxEventsPerRead),
                                            {job_id, after_seq}));
    for (const auto& r : rows) out.push_back({r.Int(0), r.Int(1), r.Text(2)});
    return Status::Ok();
  }));
  if (!exists) return std::optional<std::vector<JobEvent>>();
  return std::optional<std::vector<JobEvent>>(std::move(out));
}

}  // namespace trainyard::jobs
