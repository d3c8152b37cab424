// JobService's recovery policy and bookkeeping without processes: a scripted executor,
// a fake clock, an in-memory store, and loop passes driven by the test.
#include "trainyard/jobs/job_service.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "trainyard/common/clock.h"
#include "trainyard/testing/status_matchers.h"

namespace trainyard::jobs {
namespace {

using ::testing::HasSubstr;

// Records launches and stops; the test decides when and how attempts end.
class ScriptedExecutor : public executors::Executor {
 public:
  void SetExitCallback(ExitCallback cb) override { cb_ = std::move(cb); }
  Result<std::vector<executors::RankProcess>> Launch(
      const executors::AttemptLaunch& launch) override {
    launches.push_back(launch);
    std::vector<executors::RankProcess> out;
    for (const auto& r : launch.ranks) out.push_back({r.rank, 1000 + r.rank, 1});
    return out;
  }
  Status Stop(const std::string& job_id, int attempt, std::chrono::milliseconds grace) override {
    stops.push_back({job_id, attempt});
    return Status::Ok();
  }
  Status Adopt(const std::string& job_id, int attempt, const std::filesystem::path&,
               const std::vector<executors::RankProcess>&) override {
    adopted.push_back({job_id, attempt});
    return adopt_status;
  }
  void Shutdown() override {}

  executors::ClusterJobStatus ClusterStatus(const std::string& job_id, int attempt) override {
    return cluster_status;
  }

  void Exit(const std::string& job_id, int attempt, int exit_code, bool stopped = false,
            const std::string& cluster_state = "") {
    executors::AttemptExit e;
    e.cluster_state = cluster_state;
    e.job_id = job_id;
    e.attempt = attempt;
    e.success = exit_code == 0;
    e.failed_rank = exit_code == 0 ? -1 : 0;
    e.exit_code = exit_code;
    e.stopped = stopped;
    cb_(e);
  }

  std::vector<executors::AttemptLaunch> launches;
  std::vector<std::pair<std::string, int>> stops;
  std::vector<std::pair<std::string, int>> adopted;
  Status adopt_status;
  executors::ClusterJobStatus cluster_status;

 private:
  ExitCallback cb_;
};

class JobServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("ty-jobs-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    auto db = store::OpenDatabase({.url = (dir_ / "t.db").string()});
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    db_ = std::move(*db);
    std::vector<store::Migration> migrations = identity::IdentityService::Migrations();
    for (auto& m : tracking::TrackingService::Migrations()) migrations.push_back(std::move(m));
    for (auto& m : JobService::Migrations()) migrations.push_back(std::move(m));
    TY_ASSERT_OK(store::ApplyMigrations(*db_, migrations));
    identity_ = std::make_unique<identity::IdentityService>(*db_, clock_, random_);
    TY_ASSERT_OK(identity_->Bootstrap(dir_.string()));
    tracking_ = std::make_unique<tracking::TrackingService>(*db_, clock_, random_, *identity_,
                                                            "mlflow-artifacts:");
    TY_ASSERT_OK(tracking_->Init("admin"));
    StartService();
  }

  void StartService() {
    PoolConfig pool;
    pool.nodes = {{"n0", 4, 8, 0}, {"n1", 4, 8, 0}};
    JobServiceOptions options;
    options.data_dir = dir_.string();
    options.start_loop_thread = false;
    jobs_ = std::make_unique<JobService>(*db_, clock_, random_, *identity_, *tracking_, executor_,
                                         cost::PriceCatalog(), pool, options);
    jobs_->SetServerUrl("http://127.0.0.1:1");
    TY_ASSERT_OK(jobs_->Start());
  }

  void TearDown() override {
    jobs_.reset();
    tracking_.reset();
    identity_.reset();
    db_.reset();
    std::filesystem::remove_all(dir_);
  }

  JobSpec Spec(const std::string& name) {
    JobSpec s;
    s.name = name;
    s.command = "train";
    s.restart_backoff_ms = 1000;
    s.restart_backoff_max_ms = 8000;
    return s;
  }

  JobInfo Get(const std::string& id) {
    auto j = jobs_->GetJob(id);
    EXPECT_TRUE(j.ok()) << j.status().ToString();
    return j.ok() ? *j : JobInfo{};
  }

  identity::Principal admin_{"admin", true, "", ""};
  std::filesystem::path dir_;
  FakeClock clock_;
  SeededRandom random_{7};
  std::unique_ptr<store::Database> db_;
  std::unique_ptr<identity::IdentityService> identity_;
  std::unique_ptr<tracking::TrackingService> tracking_;
  ScriptedExecutor executor_;
  std::unique_ptr<JobService> jobs_;
};

TEST_F(JobServiceTest, RetriesWithDoublingBackoffAndResumesFromTheLatestCheckpoint) {
  auto job = jobs_->Submit(admin_, Spec("retry"));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  std::string id = job->job_id;
  jobs_->RunPassForTest();
  ASSERT_EQ(executor_.launches.size(), 1u);
  EXPECT_EQ(executor_.launches[0].env.at("TRAINYARD_RESUME_FROM"), "");
  EXPECT_EQ(executor_.launches[0].env.at("MLFLOW_RUN_ID"), job->run_id);

  TY_ASSERT_OK(jobs_->ReportCheckpoint(admin_, id, 100, "/ck/100"));
  executor_.Exit(id, 1, 3);
  jobs_->RunPassForTest();
  JobInfo j = Get(id);
  EXPECT_EQ(j.state, JobState::kPending);
  EXPECT_EQ(j.restarts, 1);
  EXPECT_EQ(executor_.launches.size(), 1u);  // backing off for 1 s

  clock_.AdvanceMillis(999);
  jobs_->RunPassForTest();
  EXPECT_EQ(executor_.launches.size(), 1u);
  clock_.AdvanceMillis(1);
  jobs_->RunPassForTest();
  ASSERT_EQ(executor_.launches.size(), 2u);
  EXPECT_EQ(executor_.launches[1].env.at("TRAINYARD_RESUME_FROM"), "/ck/100");
  EXPECT_EQ(executor_.launches[1].env.at("TRAINYARD_ATTEMPT"), "2");

  // A failure without a new checkpoint doubles the backoff.
  executor_.Exit(id, 2, 1);
  jobs_->RunPassForTest();
  clock_.AdvanceMillis(1999);
  jobs_->RunPassForTest();
  EXPECT_EQ(executor_.launches.size(), 2u);
  clock_.AdvanceMillis(1);
  jobs_->RunPassForTest();
  EXPECT_EQ(executor_.launches.size(), 3u);

  executor_.Exit(id, 3, 0);
  jobs_->RunPassForTest();
  j = Get(id);
  EXPECT_EQ(j.state, JobState::kSucceeded);
  ASSERT_EQ(j.attempt_list.size(), 3u);
  EXPECT_EQ(j.attempt_list[0].state, AttemptState::kFailed);
  EXPECT_EQ(j.attempt_list[0].cause, "exit code 3 on rank 0 (node n0)");
  EXPECT_EQ(j.attempt_list[2].state, AttemptState::kSucceeded);
  auto run = tracking_->GetRun(j.run_id);
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->info.status, "FINISHED");
}

TEST_F(JobServiceTest, CrashLoopGuardAndRestartLimit) {
  JobSpec spec = Spec("loop");
  spec.crash_loop_limit = 2;
  spec.max_restarts = 10;
  auto job = jobs_->Submit(admin_, spec);
  ASSERT_TRUE(job.ok());
  for (int attempt = 1; attempt <= 2; ++attempt) {
    jobs_->RunPassForTest();
    ASSERT_EQ(executor_.launches.size(), static_cast<size_t>(attempt));
    executor_.Exit(job->job_id, attempt, 1);
    jobs_->RunPassForTest();
    clock_.AdvanceMillis(60000);
  }
  jobs_->RunPassForTest();
  JobInfo j = Get(job->job_id);
  EXPECT_EQ(j.state, JobState::kFailed);
  EXPECT_NE(j.message.find("crash loop: 2 consecutive failures"), std::string::npos) << j.message;

  spec = Spec("limited");
  spec.max_restarts = 0;
  job = jobs_->Submit(admin_, spec);
  ASSERT_TRUE(job.ok());
  jobs_->RunPassForTest();
  executor_.Exit(job->job_id, 1, 2);
  jobs_->RunPassForTest();
  j = Get(job->job_id);
  EXPECT_EQ(j.state, JobState::kFailed);
  EXPECT_NE(j.message.find("gave up after 1 attempt(s)"), std::string::npos) << j.message;
}

TEST_F(JobServiceTest, PreemptionRequeuesWithoutCountingAFailure) {
  JobSpec low = Spec("low");
  low.preemptible = true;
  low.resources.gpus_per_node = 4;
  low.resources.nodes = 2;
  auto victim = jobs_->Submit(admin_, low);
  ASSERT_TRUE(victim.ok());
  jobs_->RunPassForTest();
  ASSERT_EQ(executor_.launches.size(), 1u);
  EXPECT_EQ(executor_.launches[0].ranks.size(), 8u);  // one rank per GPU on 2 nodes
  EXPECT_EQ(executor_.launches[0].ranks[5].gpu_ids, std::vector<int>{1});

  JobSpec high = Spec("high");
  high.priority = 10;
  high.resources.gpus_per_node = 4;
  auto urgent = jobs_->Submit(admin_, high);
  ASSERT_TRUE(urgent.ok());
  jobs_->RunPassForTest();
  ASSERT_EQ(executor_.stops.size(), 1u);
  EXPECT_EQ(executor_.stops[0].first, victim->job_id);
  EXPECT_EQ(executor_.launches.size(), 1u);  // the victim still holds its GPUs
  executor_.Exit(victim->job_id, 1, 0, /*stopped=*/true);
  jobs_->RunPassForTest();
  ASSERT_EQ(executor_.launches.size(), 2u);
  EXPECT_EQ(executor_.launches[1].job_id, urgent->job_id);
  JobInfo v = Get(victim->job_id);
  EXPECT_EQ(v.state, JobState::kPending);
  EXPECT_EQ(v.restarts, 0);
  EXPECT_EQ(v.attempt_list[0].state, AttemptState::kPreempted);
  EXPECT_NE(v.attempt_list[0].cause.find(urgent->job_id), std::string::npos);
}

TEST_F(JobServiceTest, HangAndTimeLimitStopAttempts) {
  JobSpec spec = Spec("hangs");
  spec.hang_timeout_ms = 5000;
  auto job = jobs_->Submit(admin_, spec);
  ASSERT_TRUE(job.ok());
  jobs_->RunPassForTest();
  clock_.AdvanceMillis(4000);
  TY_ASSERT_OK(jobs_->Heartbeat(admin_, job->job_id));
  clock_.AdvanceMillis(4000);
  jobs_->RunPassForTest();
  EXPECT_TRUE(executor_.stops.empty());
  clock_.AdvanceMillis(1001);
  jobs_->RunPassForTest();
  ASSERT_EQ(executor_.stops.size(), 1u);
  executor_.Exit(job->job_id, 1, 143, true);
  jobs_->RunPassForTest();
  JobInfo j = Get(job->job_id);
  EXPECT_EQ(j.attempt_list[0].state, AttemptState::kHung);
  EXPECT_EQ(j.state, JobState::kPending);  // retried

  spec = Spec("slow");
  spec.time_limit_ms = 10000;
  auto slow = jobs_->Submit(admin_, spec);
  ASSERT_TRUE(slow.ok());
  jobs_->RunPassForTest();
  clock_.AdvanceMillis(10000);
  jobs_->RunPassForTest();
  ASSERT_EQ(executor_.stops.back().first, slow->job_id);
  executor_.Exit(slow->job_id, 1, 143, true);
  jobs_->RunPassForTest();
  j = Get(slow->job_id);
  EXPECT_EQ(j.state, JobState::kFailed);
  EXPECT_NE(j.message.find("time limit of 10s reached"), std::string::npos) << j.message;
}

TEST_F(JobServiceTest, ClusterQueueingAndClusterPreemption) {
  JobSpec spec = Spec("queued-in-slurm");
  spec.hang_timeout_ms = 5000;
  spec.time_limit_ms = 8000;
  auto job = jobs_->Submit(admin_, spec);
  ASSERT_TRUE(job.ok());
  executor_.cluster_status = {executors::ClusterJobStatus::State::kPending, "Resources",
                              "Slurm job 12 PENDING (Resources)"};
  jobs_->RunPassForTest();
  ASSERT_EQ(executor_.launches.size(), 1u);
  // Queued by the cluster for longer than the hang timeout and the time limit: not stopped.
  for (int i = 0; i < 10; ++i) {
    clock_.AdvanceMillis(1000);
    jobs_->RunPassForTest();
  }
  EXPECT_TRUE(executor_.stops.empty());
  JobInfo j = Get(job->job_id);
  EXPECT_NE(j.message.find("queued in the cluster: Slurm job 12 PENDING (Resources)"),
            std::string::npos)
      << j.message;
  EXPECT_EQ(j.cost_usd, 0);
  executor_.cluster_status = {executors::ClusterJobStatus::State::kRunning, "",
                              "Slurm job 12 RUNNING"};
  clock_.AdvanceMillis(4000);
  jobs_->RunPassForTest();
  EXPECT_TRUE(executor_.stops.empty());  // 4 s since it really started
  // The cluster preempts it: requeued, not counted as a failure.
  executor_.Exit(job->job_id, 1, 143, false, "PREEMPTED None");
  jobs_->RunPassForTest();
  j = Get(job->job_id);
  EXPECT_EQ(j.attempt_list[0].state, AttemptState::kPreempted);
  EXPECT_EQ(j.restarts, 0);
  EXPECT_EQ(executor_.launches.size(), 2u);
}

TEST_F(JobServiceTest, RestartReadoptsRunningAttemptsAndRecoversLostOnes) {
  auto a = jobs_->Submit(admin_, Spec("a"));
  auto b = jobs_->Submit(admin_, Spec("b"));
  ASSERT_TRUE(a.ok() && b.ok());
  jobs_->RunPassForTest();
  ASSERT_EQ(executor_.launches.size(), 2u);
  jobs_.reset();  // the server stops; the attempts keep running
  StartService();
  ASSERT_EQ(executor_.adopted.size(), 2u);
  EXPECT_EQ(Get(a->job_id).state, JobState::kRunning);
  executor_.Exit(a->job_id, 1, 0);
  jobs_->RunPassForTest();
  EXPECT_EQ(Get(a->job_id).state, JobState::kSucceeded);

  // A restart where the processes are gone: lost, and recovered like a failure.
  jobs_.reset();
  executor_.adopt_status = Status::NotFound("no such process");
  StartService();
  jobs_->RunPassForTest();
  JobInfo j = Get(b->job_id);
  ASSERT_GE(j.attempt_list.size(), 1u);
  EXPECT_EQ(j.attempt_list[0].state, AttemptState::kLost);
  EXPECT_EQ(j.state, JobState::kPending);
  EXPECT_EQ(j.restarts, 1);
}

TEST_F(JobServiceTest, RejectsWhatThePoolCanNeverRun) {
  JobSpec spec = Spec("huge");
  spec.resources.gpus_per_node = 8;
  auto job = jobs_->Submit(admin_, spec);
  ASSERT_FALSE(job.ok());
  EXPECT_TRUE(job.status().IsInvalidArgument());
  EXPECT_NE(job.status().message().find("resources: "), std::string::npos);
  spec = Spec("odd");
  spec.resources.gpus_per_node = 4;
  spec.processes_per_node = 3;
  job = jobs_->Submit(admin_, spec);
  ASSERT_FALSE(job.ok());
  EXPECT_NE(job.status().message().find("processes_per_node (3) must divide"), std::string::npos);
  identity::Principal scoped{"admin", false, "t", "job:j-x"};
  EXPECT_EQ(jobs_->Submit(scoped, Spec("x")).status().code(), StatusCode::kPermissionDenied);
}

TEST_F(JobServiceTest, RunAsGivesTheWorkloadTheServicePrincipalsTokenLimitedToItsJob) {
  TY_ASSERT_OK(identity_->CreateServicePrincipal(admin_, "etl-bot"));
  TY_ASSERT_OK(identity_->CreateUser(admin_, {.name = "carol"}));
  JobSpec spec = Spec("etl");
  spec.run_as = "etl-bot";
  auto job = jobs_->Submit(admin_, spec);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  auto other = jobs_->Submit(admin_, Spec("plain"));
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  EXPECT_EQ(job->owner, "admin");  // the submitter still owns the job and its run
  jobs_->RunPassForTest();
  ASSERT_EQ(executor_.launches.size(), 2u);
  const auto& launch =
      executor_.launches[0].job_id == job->job_id ? executor_.launches[0] : executor_.launches[1];
  TY_ASSERT_OK_AND_ASSIGN(identity::Principal workload,
                          identity_->Authenticate(launch.env.at("TRAINYARD_TOKEN")));
  EXPECT_EQ(workload.user, "etl-bot");
  EXPECT_FALSE(workload.is_admin);
  EXPECT_EQ(workload.scope, "job:" + job->job_id);
  // It writes its own job and run, though the submitter owns them, and nothing else.
  TY_EXPECT_OK(jobs_->Heartbeat(workload, job->job_id));
  TY_EXPECT_OK(jobs_->ReportCheckpoint(workload, job->job_id, 10, "/ck/10"));
  tracking::Metric loss;
  loss.key = "loss";
  loss.value = 0.5;
  TY_EXPECT_OK(tracking_->LogBatch(workload, job->run_id, {loss}, {}, {}));
  EXPECT_THAT(jobs_->Heartbeat(workload, other->job_id), StatusIs(StatusCode::kPermissionDenied));
  EXPECT_THAT(tracking_->LogBatch(workload, other->run_id, {loss}, {}, {}),
              StatusIs(StatusCode::kPermissionDenied));
  auto run = tracking_->GetRun(job->run_id);
  ASSERT_TRUE(run.ok());
  bool tagged = false;
  for (const auto& t : run->tags) tagged |= t.key == "trainyard.run_as" && t.value == "etl-bot";
  EXPECT_TRUE(tagged);

  // Who may not use it, and what is no service principal, are refused at submit.
  identity::Principal carol{"carol", false, "", ""};
  EXPECT_THAT(jobs_->Submit(carol, spec),
              StatusIs(StatusCode::kPermissionDenied, HasSubstr("run_as: user 'carol'")));
  spec.run_as = "carol";
  EXPECT_THAT(jobs_->Submit(admin_, spec),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("run_as: 'carol' is a user")));
  spec.run_as = "ghost";
  EXPECT_THAT(jobs_->Submit(admin_, spec),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("run_as: 'ghost'")));

  // The right is checked again at launch: a disabled principal's job does not start.
  spec.run_as = "etl-bot";
  spec.max_restarts = 0;
  auto later = jobs_->Submit(admin_, spec);
  ASSERT_TRUE(later.ok()) << later.status().ToString();
  TY_ASSERT_OK(identity_->SetUserDisabled(admin_, "etl-bot", true));
  jobs_->RunPassForTest();
  EXPECT_EQ(executor_.launches.size(), 2u);
  JobInfo refused = Get(later->job_id);
  ASSERT_EQ(refused.attempt_list.size(), 1u);
  EXPECT_THAT(refused.attempt_list[0].cause, HasSubstr("run_as: service principal 'etl-bot'"));
}

}  // namespace
}  // namespace trainyard::jobs
