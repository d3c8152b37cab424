// JobStore against every backend: in-memory SQLite and a throwaway PostgreSQL
// (OpenTestDatabase): rows round-trip, replace, and the reads filter, order and sum.
#include "trainyard/jobs/job_store.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "trainyard/store/sql.h"
#include "trainyard/testing/test_database.h"

namespace trainyard::jobs {
namespace {

JobInfo MakeJob(const std::string& id, JobState state = JobState::kPending,
                const std::string& project = "default") {
  JobInfo j;
  j.job_id = id;
  j.owner = "alice";
  j.spec.name = "train-" + id;
  j.spec.project = project;
  j.spec.command = "python train.py";
  j.spec.env = {{"SEED", "7"}};
  j.spec.max_restarts = 5;
  j.spec.failure_policies = {{"CUDA out of memory", FailureAction::kFail}};
  j.state = state;
  j.experiment_id = "1";
  j.run_id = "run-" + id;
  j.submitted_at = 1000;
  return j;
}

StoredAttempt MakeAttempt(int n, AttemptState state, double cost = 0, double paid = 0,
                          double productive = 0) {
  StoredAttempt s;
  AttemptInfo& a = s.info;
  a.attempt = n;
  a.state = state;
  a.cause = "cause " + std::to_string(n);
  a.nodes = {"n0", "n1"};
  a.gpus = 2;
  a.cpus = 4;
  a.ranks = 2;
  a.started_at = 100 * n;
  a.ended_at = state == AttemptState::kRunning ? 0 : 100 * n + 50;
  a.log_dir = "/logs/attempt-" + std::to_string(n);
  a.cost_usd = cost;
  a.paid_seconds = paid;
  a.productive_seconds = productive;
  return s;
}

class JobStoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto db = store::OpenTestDatabase(GetParam(), JobStore::Migrations());
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    db_ = std::move(db).value();
    store_ = std::make_unique<JobStore>(*db_);
  }

  void Put(const JobInfo& j, int64_t seq) {
    Status s = store_->PutJob(j, seq);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  void Put(const std::string& job_id, const StoredAttempt& a) {
    Status s = store_->PutAttempt(job_id, a);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  JobInfo Get(const std::string& job_id) {
    auto j = store_->GetJob(job_id);
    EXPECT_TRUE(j.ok()) << j.status().ToString();
    if (!j.ok() || !j->has_value()) {
      ADD_FAILURE() << "no job " << job_id;
      return {};
    }
    return **j;
  }
  std::vector<std::string> List(const ListJobsRequest& request) {
    auto jobs = store_->ListJobs(request);
    EXPECT_TRUE(jobs.ok()) << jobs.status().ToString();
    std::vector<std::string> out;
    if (jobs.ok()) {
      for (const auto& j : *jobs) out.push_back(j.job_id);
    }
    return out;
  }

  std::unique_ptr<store::Database> db_;
  std::unique_ptr<JobStore> store_;
};

TEST_P(JobStoreTest, AJobRoundTripsAndIsReplacedByTheNextPut) {
  JobInfo j = MakeJob("j-1");
  j.excluded_nodes = {"n3", "n4"};
  j.not_before = 77;
  j.message = "waiting";
  Put(j, 1);
  JobInfo got = Get("j-1");
  EXPECT_EQ(got.owner, "alice");
  EXPECT_EQ(got.state, JobState::kPending);
  EXPECT_EQ(got.spec.name, "train-j-1");
  EXPECT_EQ(got.spec.command, "python train.py");
  EXPECT_EQ(got.spec.env.at("SEED"), "7");
  EXPECT_EQ(got.spec.max_restarts, 5);
  ASSERT_EQ(got.spec.failure_policies.size(), 1u);
  EXPECT_EQ(got.run_id, "run-j-1");
  EXPECT_EQ(got.excluded_nodes, (std::vector<std::string>{"n3", "n4"}));
  EXPECT_EQ(got.not_before, 77);
  EXPECT_EQ(got.message, "waiting");
  EXPECT_FALSE(got.latest_checkpoint);
  EXPECT_TRUE(got.attempt_list.empty());
  EXPECT_EQ(got.goodput, 1.0);  // nothing paid yet

  j.state = JobState::kFailed;
  j.attempts = 2;
  j.restarts = 1;
  j.consecutive_failures = 2;
  j.finished_at = 999;
  Put(j, 1);
  got = Get("j-1");
  EXPECT_EQ(got.state, JobState::kFailed);
  EXPECT_EQ(got.attempts, 2);
  EXPECT_EQ(got.restarts, 1);
  EXPECT_EQ(got.consecutive_failures, 2);
  EXPECT_EQ(got.finished_at, 999);

  auto missing = store_->GetJob("j-nope");
  ASSERT_TRUE(missing.ok());
  EXPECT_FALSE(missing->has_value());
}

TEST_P(JobStoreTest, AttemptsRoundTripInOrderWithCostAndGoodput) {
  Put(MakeJob("j-1", JobState::kRunning), 1);
  StoredAttempt second = MakeAttempt(2, AttemptState::kRunning, 1.0, 100, 25);
  Put("j-1", second);
  StoredAttempt first = MakeAttempt(1, AttemptState::kTimedOut, 3.0, 100, 75);
  first.info.exit_code = 3;
  first.info.signal = 15;
  first.info.failed_rank = 1;
  first.info.resumed_from = "ckpt/step-10";
  first.info.last_checkpoint_at = 120;
  Put("j-1", first);
  JobInfo got = Get("j-1");
  ASSERT_EQ(got.attempt_list.size(), 2u);
  const AttemptInfo& a = got.attempt_list[0];
  EXPECT_EQ(a.attempt, 1);
  EXPECT_EQ(a.state, AttemptState::kTimedOut);
  EXPECT_EQ(a.cause, "cause 1");
  EXPECT_EQ(a.nodes, (std::vector<std::string>{"n0", "n1"}));
  EXPECT_EQ(a.gpus, 2);
  EXPECT_EQ(a.cpus, 4);
  EXPECT_EQ(a.ranks, 2);
  EXPECT_EQ(a.started_at, 100);
  EXPECT_EQ(a.ended_at, 150);
  EXPECT_EQ(a.exit_code, 3);
  EXPECT_EQ(a.signal, 15);
  EXPECT_EQ(a.failed_rank, 1);
  EXPECT_EQ(a.resumed_from, "ckpt/step-10");
  EXPECT_EQ(a.last_checkpoint_at, 120);
  EXPECT_EQ(a.log_dir, "/logs/attempt-1");
  EXPECT_FALSE(got.attempt_list[1].exit_code);  // NULL stays unset
  EXPECT_FALSE(got.attempt_list[1].signal);
  EXPECT_FALSE(got.attempt_list[1].failed_rank);
  EXPECT_EQ(got.attempt_list[1].state, AttemptState::kRunning);
  EXPECT_DOUBLE_EQ(got.cost_usd, 4.0);
  EXPECT_DOUBLE_EQ(got.goodput, 0.5);

  second.info.state = AttemptState::kSucceeded;  // the same attempt, written again
  Put("j-1", second);
  got = Get("j-1");
  ASSERT_EQ(got.attempt_list.size(), 2u);
  EXPECT_EQ(got.attempt_list[1].state, AttemptState::kSucceeded);
}

TEST_P(JobStoreTest, TheLatestCheckpointIsTheLastReportedAndAReportedStepIsReplaced) {
  Put(MakeJob("j-1"), 1);
  ASSERT_TRUE(store_->PutCheckpoint("j-1", {20, "ckpt/20", 1, 500}).ok());
  ASSERT_TRUE(store_->PutCheckpoint("j-1", {10, "ckpt/10", 1, 400}).ok());
  ASSERT_TRUE(store_->PutCheckpoint("j-1", {30, "ckpt/30", 1, 500}).ok());
  JobInfo got = Get("j-1");
  ASSERT_TRUE(got.latest_checkpoint);
  EXPECT_EQ(got.latest_checkpoint->step, 30);  // same time: the higher step

  ASSERT_TRUE(store_->PutCheckpoint("j-1", {10, "ckpt/10-again", 2, 600}).ok());
  got = Get("j-1");
  EXPECT_EQ(got.latest_checkpoint->step, 10);
  EXPECT_EQ(got.latest_checkpoint->path, "ckpt/10-again");
  EXPECT_EQ(got.latest_checkpoint->attempt, 2);

  auto list = store_->ListCheckpoints("j-1");
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 3u);
  EXPECT_EQ((*list)[0].step, 10);
  EXPECT_EQ((*list)[0].created_at, 600);
  EXPECT_EQ((*list)[2].step, 30);
}

TEST_P(JobStoreTest, LoadActiveReturnsUnfinishedJobsWithTheirAttemptsAndSkipsDamagedRows) {
  Put(MakeJob("j-done", JobState::kSucceeded), 1);
  Put(MakeJob("j-run", JobState::kRunning), 3);
  Put(MakeJob("j-wait", JobState::kPending), 2);
  StoredAttempt running = MakeAttempt(1, AttemptState::kRunning);
  running.placement = {{1, {0, 1}, 4, 1024}};
  running.processes = R"([{"rank":0,"pid":42,"start_time":7}])";
  running.token_id = "tok-1";
  Put("j-run", running);
  ASSERT_TRUE(store_->AddEvent("j-run", {1, 10, "submitted"}).ok());
  ASSERT_TRUE(store_->AddEvent("j-run", {2, 11, "started"}).ok());
  ASSERT_TRUE(store_->PutCheckpoint("j-run", {5, "ckpt/5", 1, 12}).ok());
  ASSERT_TRUE(db_->Write([](store::Transaction& tx) {
                   return store::Run(tx,
                                     "INSERT INTO jobs (job_id, seq, name, project, owner, state, "
                                     "spec, experiment_id, run_id, submitted_at, finished_at, "
                                     "attempts, restarts, consecutive_failures, not_before, "
                                     "message, excluded_nodes) VALUES ('j-bad', 4, 'x', 'default', "
                                     "'bob', 'PENDING', 'not json', '1', 'r', 0, 0, 0, 0, 0, 0, "
                                     "'', '[]')");
                 })
                  .ok());

  auto active = store_->LoadActive();
  ASSERT_TRUE(active.ok()) << active.status().ToString();
  ASSERT_EQ(active->size(), 2u);
  EXPECT_EQ((*active)[0].job.job_id, "j-wait");
  EXPECT_EQ((*active)[0].seq, 2);
  EXPECT_EQ((*active)[0].last_event_seq, 0);
  const StoredActiveJob& run = (*active)[1];
  EXPECT_EQ(run.job.job_id, "j-run");
  EXPECT_EQ(run.last_event_seq, 2);
  ASSERT_TRUE(run.job.latest_checkpoint);
  EXPECT_EQ(run.job.latest_checkpoint->path, "ckpt/5");
  ASSERT_EQ(run.attempts.size(), 1u);
  EXPECT_EQ(run.attempts[0].info.state, AttemptState::kRunning);
  EXPECT_EQ(run.attempts[0].token_id, "tok-1");
  ASSERT_EQ(run.attempts[0].placement.size(), 1u);
  EXPECT_EQ(run.attempts[0].placement[0].node, 1);
  EXPECT_EQ(run.attempts[0].placement[0].gpu_ids, (std::vector<int>{0, 1}));
  EXPECT_EQ(run.attempts[0].placement[0].memory_bytes, 1024);
  auto processes = ProcessesFromJson(run.attempts[0].processes);
  ASSERT_EQ(processes.size(), 1u);
  EXPECT_EQ(processes[0].pid, 42);

  auto max_seq = store_->MaxSeq();
  ASSERT_TRUE(max_seq.ok());
  EXPECT_EQ(*max_seq, 4);
}

TEST_P(JobStoreTest, MaxSeqOfNoJobsIsZero) {
  auto max_seq = store_->MaxSeq();
  ASSERT_TRUE(max_seq.ok());
  EXPECT_EQ(*max_seq, 0);
}

TEST_P(JobStoreTest, UsageSinceReturnsAttemptsThatEndedAfterTheTimeWithTheirProject) {
  Put(MakeJob("j-1", JobState::kRunning, "nlp"), 1);
  Put("j-1", MakeAttempt(1, AttemptState::kFailed));   // ended at 150
  Put("j-1", MakeAttempt(2, AttemptState::kFailed));   // ended at 250
  Put("j-1", MakeAttempt(3, AttemptState::kRunning));  // not ended
  auto usage = store_->UsageSince(200);
  ASSERT_TRUE(usage.ok()) << usage.status().ToString();
  ASSERT_EQ(usage->size(), 1u);
  EXPECT_EQ((*usage)[0].project, "nlp");
  EXPECT_EQ((*usage)[0].gpus, 2);
  EXPECT_EQ((*usage)[0].cpus, 4);
  EXPECT_EQ((*usage)[0].started_at, 200);
  EXPECT_EQ((*usage)[0].ended_at, 250);
}

TEST_P(JobStoreTest, ListJobsFiltersNewestFirstWithCostTotals) {
  Put(MakeJob("j-1", JobState::kSucceeded, "nlp"), 1);
  Put(MakeJob("j-2", JobState::kPending, "nlp"), 2);
  Put(MakeJob("j-3", JobState::kRunning, "vision"), 3);
  Put(MakeJob("j-4", JobState::kFailed, "vision"), 4);
  Put("j-1", MakeAttempt(1, AttemptState::kFailed, 1.5, 10, 0));
  Put("j-1", MakeAttempt(2, AttemptState::kSucceeded, 0.5, 10, 10));

  EXPECT_EQ(List({}), (std::vector<std::string>{"j-4", "j-3", "j-2", "j-1"}));
  EXPECT_EQ(List({.state = JobState::kFailed, .project = ""}), std::vector<std::string>{"j-4"});
  EXPECT_EQ(List({.state = std::nullopt, .project = "", .active_only = true}),
            (std::vector<std::string>{"j-3", "j-2"}));
  EXPECT_EQ(List({.state = std::nullopt, .project = "nlp"}),
            (std::vector<std::string>{"j-2", "j-1"}));
  EXPECT_EQ(List({.state = std::nullopt, .project = "vision", .active_only = true}),
            std::vector<std::string>{"j-3"});
  EXPECT_EQ(List({.state = std::nullopt, .project = "", .active_only = false, .max_results = 2}),
            (std::vector<std::string>{"j-4", "j-3"}));

  auto jobs = store_->ListJobs({.state = std::nullopt, .project = "nlp"});
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_DOUBLE_EQ((*jobs)[1].cost_usd, 2.0);
  EXPECT_DOUBLE_EQ((*jobs)[1].goodput, 0.5);
  EXPECT_TRUE((*jobs)[1].attempt_list.empty());
  EXPECT_DOUBLE_EQ((*jobs)[0].cost_usd, 0.0);
}

TEST_P(JobStoreTest, ListJobsSumsTheCostOfMoreJobsThanOneParameterList) {
  const int n = static_cast<int>(store::kMaxListParams) + 5;
  for (int i = 0; i < n; ++i) {
    std::string id = "j-" + std::to_string(i);
    Put(MakeJob(id), i + 1);
    Put(id, MakeAttempt(1, AttemptState::kFailed, 1.0, 1, 0));
  }
  auto jobs = store_->ListJobs(
      {.state = std::nullopt, .project = "", .active_only = false, .max_results = 1000});
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  ASSERT_EQ(jobs->size(), static_cast<size_t>(n));
  for (const auto& j : *jobs) EXPECT_DOUBLE_EQ(j.cost_usd, 1.0) << j.job_id;
}

TEST_P(JobStoreTest, StateNameAndRunIdOf) {
  Put(MakeJob("j-1", JobState::kCancelled), 1);
  auto state = store_->StateName("j-1");
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(*state, "CANCELLED");
  EXPECT_TRUE(store_->StateName("j-nope").status().IsNotFound());
  auto run = store_->RunIdOf("j-1");
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(*run, "run-j-1");
  auto none = store_->RunIdOf("j-nope");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, "");
}

TEST_P(JobStoreTest, EventsAfterASeqOldestFirst) {
  Put(MakeJob("j-1"), 1);
  for (int64_t seq = 1; seq <= 3; ++seq) {
    ASSERT_TRUE(store_->AddEvent("j-1", {seq, 100 + seq, "event " + std::to_string(seq)}).ok());
  }
  auto events = store_->Events("j-1", 1);
  ASSERT_TRUE(events.ok());
  ASSERT_TRUE(events->has_value());
  ASSERT_EQ((*events)->size(), 2u);
  EXPECT_EQ((**events)[0].seq, 2);
  EXPECT_EQ((**events)[0].time, 102);
  EXPECT_EQ((**events)[1].message, "event 3");
  auto none = store_->Events("j-nope", 0);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
}

INSTANTIATE_TEST_SUITE_P(Backends, JobStoreTest, ::testing::Values("sqlite", "postgres"),
                         [](const auto& param_info) { return param_info.param; });

TEST(JobStoreJsonTest, PlacementsAndProcessesRoundTripAndDamagedTextReadsEmpty) {
  Placement p = {{0, {0, 1}, 8, 1 << 20}, {2, {}, 1, 0}};
  Placement back = PlacementFromJson(PlacementToJson(p));
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].node, 0);
  EXPECT_EQ(back[0].gpu_ids, (std::vector<int>{0, 1}));
  EXPECT_EQ(back[0].cpus, 8);
  EXPECT_EQ(back[0].memory_bytes, 1 << 20);
  EXPECT_EQ(back[1].node, 2);
  EXPECT_TRUE(back[1].gpu_ids.empty());

  std::vector<executors::RankProcess> ps = {{0, 100, 5}, {1, 101, 6}};
  auto ps_back = ProcessesFromJson(ProcessesToJson(ps));
  ASSERT_EQ(ps_back.size(), 2u);
  EXPECT_EQ(ps_back[1].rank, 1);
  EXPECT_EQ(ps_back[1].pid, 101);
  EXPECT_EQ(ps_back[1].start_time, 6);

  EXPECT_TRUE(PlacementFromJson("not json").empty());
  EXPECT_TRUE(PlacementFromJson(R"([{"node": 1}])").empty());  // missing fields
  EXPECT_TRUE(ProcessesFromJson("{}").empty());
}

}  // namespace
}  // namespace trainyard::jobs
