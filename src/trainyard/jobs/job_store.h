// JobStore: the jobs tables (jobs, job_attempts, job_checkpoints, job_events) — their schema,
// the mapping between rows and JobInfo/AttemptInfo, and every query the job service runs
// against them. No caching and no policy: JobService decides, the store reads and writes.
//
// Writes replace whole rows (a job or an attempt is written as it is now). Reads of a job
// fill its latest checkpoint, its attempts and its cost and goodput from the attempts'
// totals. A stored job whose spec or state no longer parses is skipped (and logged) by the
// listing reads rather than failing them.
//
// The store does not own the Database; it must outlive the store. Thread-safe as the
// Database is (every method runs in its own transaction).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trainyard/common/status.h"
#include "trainyard/executors/executor.h"
#include "trainyard/jobs/job_info.h"
#include "trainyard/jobs/scheduler.h"
#include "trainyard/store/database.h"

namespace trainyard::jobs {

// An attempt as stored, with what re-adopting a running one needs.
struct StoredAttempt {
  AttemptInfo info;
  Placement placement;    // the scheduler's placement ([] once it has ended)
  std::string processes;  // the executor's rank processes, JSON (see ProcessesToJson)
  std::string token_id;   // the attempt's workload token ("" once it has ended)
};

// An unfinished (pending or running) job as stored, for loading it after a restart.
struct StoredActiveJob {
  JobInfo job;  // with latest_checkpoint
  int64_t seq = 0;
  int64_t last_event_seq = 0;
  std::vector<StoredAttempt> attempts;  // oldest first
};

// One ended attempt's use of the pool, for fair share.
struct AttemptUsage {
  std::string project;
  int gpus = 0;
  int cpus = 0;
  int64_t started_at = 0;
  int64_t ended_at = 0;
};

class JobStore {
 public:
  explicit JobStore(store::Database& db) : db_(db) {}
  JobStore(const JobStore&) = delete;
  JobStore& operator=(const JobStore&) = delete;

  static std::vector<store::Migration> Migrations();

  // Writes the job's row (replacing it); `seq` orders submissions.
  Status PutJob(const JobInfo& job, int64_t seq);
  // Writes one attempt's row (replacing it).
  Status PutAttempt(const std::string& job_id, const StoredAttempt& attempt);
  // Records a checkpoint; a second report of the same step replaces the first.
  Status PutCheckpoint(const std::string& job_id, const CheckpointInfo& checkpoint);
  Status AddEvent(const std::string& job_id, const JobEvent& event);

  // The highest submission seq so far (0 when there are no jobs).
  Result<int64_t> MaxSeq();
  // Pending and running jobs, oldest first, with their attempts.
  Result<std::vector<StoredActiveJob>> LoadActive();
  // Attempts that ended after `since_ms`, with their job's project.
  Result<std::vector<AttemptUsage>> UsageSince(int64_t since_ms);

  // The job with its latest checkpoint, attempts, cost and goodput; nullopt if there is none.
  Result<std::optional<JobInfo>> GetJob(const std::string& job_id);
  // Newest first, at most request.max_results, with cost and goodput (no attempt lists).
  Result<std::vector<JobInfo>> ListJobs(const ListJobsRequest& request);
  // The stored state name of a job; NotFound if there is none.
  Result<std::string> StateName(const std::string& job_id);
  // The job's run id; "" if there is no such job.
  Result<std::string> RunIdOf(const std::string& job_id);
  // Oldest step first.
  Result<std::vector<CheckpointInfo>> ListCheckpoints(const std::string& job_id);
  // Events after `after_seq`, oldest first, at most kMaxEventsPerRead; nullopt if there is
  // no such job.
  static constexpr int kMaxEventsPerRead = 1000;
  Result<std::optional<std::vector<JobEvent>>> Events(const std::string& job_id, int64_t after_seq);

 private:
  store::Database& db_;
};

// The JSON the store keeps placements and rank processes in; damaged text reads as empty.
std::string PlacementToJson(const Placement& placement);
Placement PlacementFromJson(const std::string& text);
std::string ProcessesToJson(const std::vector<executors::RankProcess>& processes);
std::vector<executors::RankProcess> ProcessesFromJson(const std::string& text);

}  // namespace trainyard::jobs
