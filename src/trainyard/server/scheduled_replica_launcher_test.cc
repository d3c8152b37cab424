// The pure halves of the scheduler-backed replica launcher: the job a replica runs as, where a
// replica is given its job's state, and how its end reads to serving.
#include "trainyard/server/scheduled_replica_launcher.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>
#include <vector>

#include "trainyard/jobs/job_info.h"
#include "trainyard/jobs/job_spec.h"
#include "trainyard/serving/replica_launcher.h"

namespace trainyard::server {
namespace {

using serving::ReplicaPlacement;

serving::ReplicaLaunch Launch() {
  serving::ReplicaLaunch l;
  l.id = "ep-chat-m-1-7";
  l.endpoint = "chat";
  l.served_entity = "main.support.model-1";
  l.owner = "alice";
  l.resources = {2, 6, int64_t{8} << 30};
  l.command = "serve --port 1234";
  l.env = {{"PATH", "/usr/bin"}};
  l.stop_grace = std::chrono::milliseconds(2500);
  return l;
}

TEST(ReplicaJobSpecTest, AReplicaCountsAgainstItsEndpointsProject) {
  serving::ReplicaLaunch l = Launch();
  l.project = "nlp";
  EXPECT_EQ(ReplicaJobSpec(l).project, "nlp");
  l.project.clear();
  EXPECT_EQ(ReplicaJobSpec(l).project, "default");
}

TEST(ReplicaJobSpecTest, AReplicaIsAOneProcessServiceJobWithTheEndpointsResources) {
  jobs::JobSpec spec = ReplicaJobSpec(Launch());
  EXPECT_EQ(spec.kind, jobs::JobKind::kService);
  EXPECT_EQ(spec.endpoint, "chat");
  EXPECT_EQ(spec.name, "chat.main.support.model-1");
  EXPECT_EQ(spec.project, "default");
  EXPECT_EQ(spec.command, "serve --port 1234");
  EXPECT_EQ(spec.env.at("PATH"), "/usr/bin");
  EXPECT_EQ(spec.env.at(kReplicaIdEnv), "ep-chat-m-1-7");
  EXPECT_EQ(spec.env.at("TRAINYARD_ENDPOINT"), "chat");
  EXPECT_EQ(spec.resources.nodes, 1);
  EXPECT_EQ(spec.resources.gpus_per_node, 2);
  EXPECT_EQ(spec.resources.cpus_per_node, 6);
  EXPECT_EQ(spec.resources.memory_bytes, int64_t{8} << 30);
  // Two GPUs, still one server process (not one rank per GPU).
  EXPECT_EQ(spec.EffectiveProcessesPerNode(), 1);
  EXPECT_EQ(spec.max_restarts, 0);
  EXPECT_EQ(spec.preemption_grace_ms, 2500);
  // It round-trips through the stored form (the jobs table keeps the spec as JSON).
  auto back = jobs::ParseJobSpecJson(jobs::JobSpecToJson(spec));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->kind, jobs::JobKind::kService);
  EXPECT_EQ(back->endpoint, "chat");
}

TEST(ReplicaJobSpecTest, NamesThatAreNotJobNamesAreMadeSo) {
  serving::ReplicaLaunch l = Launch();
  l.endpoint = "_x";
  l.served_entity = "a/b c";
  EXPECT_EQ(ReplicaJobSpec(l).name, "r_x.a_b_c");
}

jobs::JobInfo Job(jobs::JobState state, const std::string& message) {
  jobs::JobInfo j;
  j.job_id = "j-1";
  j.state = state;
  j.message = message;
  return j;
}

TEST(PlacementOfJobTest, APendingJobIsAPendingReplicaWithTheSchedulersReason) {
  ReplicaPlacement p = PlacementOfJob(
      Job(jobs::JobState::kPending, "waiting for resources: needs 1 GPU(s) per node"), false);
  EXPECT_EQ(p.state, ReplicaPlacement::State::kPending);
  EXPECT_EQ(p.job_id, "j-1");
  EXPECT_EQ(p.reason, "waiting for resources: needs 1 GPU(s) per node");
}

TEST(PlacementOfJobTest, AJobTheClusterStillQueuesIsPending) {
  ReplicaPlacement p = PlacementOfJob(
      Job(jobs::JobState::kRunning, "queued in the cluster: Slurm job 12 PENDING (Resources)"),
      true);
  EXPECT_EQ(p.state, ReplicaPlacement::State::kPending);
  EXPECT_NE(p.reason.find("Resources"), std::string::npos);
}

TEST(PlacementOfJobTest, ARunningJobIsReachedLocallyOrOnItsClusterNode) {
  jobs::JobInfo j = Job(jobs::JobState::kRunning, "");
  j.attempts = 2;
  jobs::AttemptInfo first, second;
  first.attempt = 1;
  first.nodes = {"n0"};
  first.log_dir = "/old";
  second.attempt = 2;
  second.nodes = {"n3"};
  second.log_dir = "/logs/attempt-2";
  j.attempt_list = {first, second};
  ReplicaPlacement local = PlacementOfJob(j, false);
  EXPECT_EQ(local.state, ReplicaPlacement::State::kRunning);
  EXPECT_EQ(local.host, "127.0.0.1");
  EXPECT_EQ(local.log, "/logs/attempt-2/rank-0.log");
  ReplicaPlacement cluster = PlacementOfJob(j, true);
  EXPECT_EQ(cluster.host, "n3");  // no address recorded: the node's name
  // Slurm's NodeAddr: node names need not resolve on the server's machine.
  ReplicaPlacement addressed = PlacementOfJob(j, true, {{"n0", "10.0.0.1"}, {"n3", "10.0.0.4"}});
  EXPECT_EQ(addressed.host, "10.0.0.4");
  EXPECT_EQ(addressed.port, 0);  // the replica reports it; not known from the job
  EXPECT_EQ(PlacementOfJob(j, false, {{"n3", "10.0.0.4"}}).host, "127.0.0.1");
}

TEST(ParseReplicaPortTest, OnlyAPortNumberIsAPort) {
  EXPECT_EQ(ParseReplicaPort("41234\n"), 41234);
  EXPECT_EQ(ParseReplicaPort(" 80 "), 80);
  for (const char* bad : {"", "0", "65536", "-1", "12ab", "port", "99999999999999999999"}) {
    EXPECT_EQ(ParseReplicaPort(bad), 0) << bad;
  }
}

TEST(PlacementOfJobTest, AFinishedJobIsAnEndedReplica) {
  for (auto s : {jobs::JobState::kSucceeded, jobs::JobState::kFailed, jobs::JobState::kCancelled}) {
    EXPECT_EQ(PlacementOfJob(Job(s, "x"), false).state, ReplicaPlacement::State::kEnded);
  }
}

TEST(EndOfJobTest, OnlyACancelledJobIsAStoppedReplica) {
  serving::ReplicaEnd cancelled = EndOfJob(Job(jobs::JobState::kCancelled, "cancelled by admin"));
  EXPECT_TRUE(cancelled.stopped);
  EXPECT_EQ(cancelled.cause, "CANCELLED: cancelled by admin");
  serving::ReplicaEnd failed =
      EndOfJob(Job(jobs::JobState::kFailed, "replica failed: killed by SIGKILL on rank 0"));
  EXPECT_FALSE(failed.stopped);
  EXPECT_NE(failed.cause.find("SIGKILL"), std::string::npos);
  EXPECT_FALSE(EndOfJob(Job(jobs::JobState::kSucceeded, "all 1 rank(s) exited 0")).stopped);
}

// SharedModelCopies: one copy per owner and model, counted, removed after its grace period.
class SharedModelCopiesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = std::filesystem::temp_directory_path() /
            ("ty-copies-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(base_);
    std::filesystem::create_directories(base_ / "model" / "sub");
    std::ofstream(base_ / "model" / "config.json") << "{}";
    std::ofstream(base_ / "model" / "sub" / "w.bin") << "weights";
    std::filesystem::create_directories(base_ / "other");
    std::ofstream(base_ / "other" / "config.json") << "{\"other\": 1}";
  }
  void TearDown() override { std::filesystem::remove_all(base_); }

  // Copies with CopyTreeAs (as this process's own account), counting the copies made.
  SharedModelCopies::Copier CountingCopier() {
    return [this](const std::string& from, const std::string& to, uid_t uid, gid_t gid) {
      ++copies_made_;
      return CopyTreeAs(from, to, uid, gid);
    };
  }
  std::string Model() const { return (base_ / "model").string(); }

  std::filesystem::path base_;
  int copies_made_ = 0;
  uid_t uid_ = ::geteuid();
  gid_t gid_ = ::getegid();
};

TEST_F(SharedModelCopiesTest, ReplicasOfOneOwnerAndModelShareOneCopyUntilTheLastEnds) {
  using namespace std::chrono_literals;
  SharedModelCopies copies((base_ / "models").string(), 0ms, CountingCopier());
  auto a = copies.Acquire(Model(), uid_, gid_);
  auto b = copies.Acquire(Model(), uid_, gid_);
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(copies_made_, 1);
  EXPECT_EQ(copies.UsesForTest(*a), 2);
  EXPECT_EQ(std::filesystem::path(*a).parent_path(), base_ / "models" / std::to_string(uid_));
  std::ifstream in(std::filesystem::path(*a) / "sub" / "w.bin");
  std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(text, "weights");
  EXPECT_EQ(std::filesystem::status(*a).permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_all);

  // Another model is another copy; the same model by another path is the same.
  auto other = copies.Acquire((base_ / "other").string(), uid_, gid_);
  ASSERT_TRUE(other.ok());
  EXPECT_NE(*other, *a);
  auto again = copies.Acquire((base_ / "model" / "sub" / "..").string(), uid_, gid_);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *a);
  EXPECT_EQ(copies_made_, 2);

  auto now = SharedModelCopies::Clock::now();
  copies.Release(*a, now);
  copies.Release(*again, now);
  EXPECT_EQ(copies.RemoveExpired(now), SharedModelCopies::Clock::time_point::max());
  EXPECT_TRUE(std::filesystem::exists(*a));  // b still uses it
  copies.Release(*b, now);
  copies.Release(*b, now);  // a second release of an unused copy counts nothing
  copies.RemoveExpired(now);
  EXPECT_FALSE(std::filesystem::exists(*a));
  EXPECT_EQ(copies.UsesForTest(*a), -1);
  EXPECT_TRUE(std::filesystem::exists(*other));

  // Acquired again, it is copied again.
  auto fresh = copies.Acquire(Model(), uid_, gid_);
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ(copies_made_, 3);
  EXPECT_TRUE(std::filesystem::exists(std::filesystem::path(*fresh) / "config.json"));
}

TEST_F(SharedModelCopiesTest, AnUnusedCopyIsKeptForTheGracePeriodAndReusedWithin) {
  using namespace std::chrono_literals;
  SharedModelCopies copies((base_ / "models").string(), 30s, CountingCopier());
  auto a = copies.Acquire(Model(), uid_, gid_);
  ASSERT_TRUE(a.ok());
  auto t0 = SharedModelCopies::Clock::now();
  copies.Release(*a, t0);
  EXPECT_EQ(copies.RemoveExpired(t0 + 10s), t0 + 30s);
  EXPECT_TRUE(std::filesystem::exists(*a));
  // A restart within the grace period reuses it, and its release restarts the period.
  auto b = copies.Acquire(Model(), uid_, gid_);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, *a);
  EXPECT_EQ(copies_made_, 1);
  EXPECT_EQ(copies.RemoveExpired(t0 + 40s), SharedModelCopies::Clock::time_point::max());
  copies.Release(*b, t0 + 40s);
  EXPECT_EQ(copies.RemoveExpired(t0 + 60s), t0 + 70s);
  EXPECT_TRUE(std::filesystem::exists(*a));
  EXPECT_EQ(copies.RemoveExpired(t0 + 70s), SharedModelCopies::Clock::time_point::max());
  EXPECT_FALSE(std::filesystem::exists(*a));
}

TEST_F(SharedModelCopiesTest, AFailedCopyLeavesNothingAndALeftoverIsNotTrusted) {
  using namespace std::chrono_literals;
  std::string root = (base_ / "models").string();
  bool fail = true;
  SharedModelCopies copies(root, 0ms,
                           [&](const std::string& from, const std::string& to, uid_t u, gid_t g) {
                             ++copies_made_;
                             Status s = CopyTreeAs(from, to, u, g);
                             return fail ? Status::IOError("disk full") : s;
                           });
  auto a = copies.Acquire(Model(), uid_, gid_);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("disk full"), std::string::npos);
  // Nothing under a final or temporary name stays behind.
  auto owner_dir = base_ / "models" / std::to_string(uid_);
  EXPECT_TRUE(std::filesystem::is_empty(owner_dir));

  // A half-written copy under the final name (an earlier run's) is replaced, not used.
  fail = false;
  auto ok = copies.Acquire(Model(), uid_, gid_);
  ASSERT_TRUE(ok.ok());
  copies.Release(*ok, SharedModelCopies::Clock::now());
  copies.RemoveExpired(SharedModelCopies::Clock::now());
  std::filesystem::create_directories(*ok);
  std::ofstream(std::filesystem::path(*ok) / "config.json") << "{half";
  auto fresh = copies.Acquire(Model(), uid_, gid_);
  ASSERT_TRUE(fresh.ok());
  std::ifstream in(std::filesystem::path(*fresh) / "config.json");
  std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(text, "{}");
  EXPECT_TRUE(std::filesystem::exists(std::filesystem::path(*fresh) / "sub" / "w.bin"));

  // RemoveAll (at start and at shutdown) removes every copy.
  copies.RemoveAll();
  EXPECT_FALSE(std::filesystem::exists(root));
  copies.Release(*fresh, SharedModelCopies::Clock::now());  // a late release is harmless
}

TEST_F(SharedModelCopiesTest, ConcurrentAcquiresMakeOneCopy) {
  using namespace std::chrono_literals;
  SharedModelCopies copies((base_ / "models").string(), 0ms, CountingCopier());
  std::vector<std::thread> threads;
  std::vector<std::string> paths(8);
  for (size_t i = 0; i < paths.size(); ++i) {
    threads.emplace_back([&, i] {
      auto p = copies.Acquire(Model(), uid_, gid_);
      if (p.ok()) paths[i] = *p;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(copies_made_, 1);
  for (const auto& p : paths) EXPECT_EQ(p, paths[0]);
  EXPECT_EQ(copies.UsesForTest(paths[0]), 8);
}

TEST_F(SharedModelCopiesTest, LeftoversOfAKilledRunAreRemovedWithoutFollowingLinks) {
  namespace fs = std::filesystem;
  fs::path staging = base_ / "serving-models";
  SharedModelCopies copies((staging / "models").string(), std::chrono::seconds(60),
                           CountingCopier());
  // What a killed run leaves: a copy in use, a half-written one, and a replica's directory
  // with its port file, in which its account planted a link out of it.
  auto copy = copies.Acquire(Model(), uid_, gid_);
  ASSERT_TRUE(copy.ok()) << copy.status().ToString();
  fs::path half = fs::path(*copy).parent_path() / "0123456789abcdef.tmp-1";
  fs::create_directories(half);
  std::ofstream(half / "config.json") << "{";
  fs::path replica = staging / "ep-chat-m-1-7";
  fs::create_directories(replica);
  std::ofstream(replica / "port") << "4242\n";
  fs::create_directory_symlink(base_ / "model", replica / "escape");

  auto removed = RemoveLeftoverStaging(staging.string());
  std::sort(removed.begin(), removed.end());
  std::vector<std::string> expected = {half.string(), *copy, replica.string()};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(removed, expected);
  EXPECT_TRUE(fs::is_directory(staging));
  EXPECT_TRUE(fs::is_empty(staging));
  // The link's target, outside, is untouched.
  EXPECT_TRUE(fs::exists(base_ / "model" / "sub" / "w.bin"));
  EXPECT_TRUE(fs::exists(base_ / "model" / "config.json"));
  // A new run copies again.
  SharedModelCopies next((staging / "models").string(), std::chrono::seconds(60), CountingCopier());
  auto again = next.Acquire(Model(), uid_, gid_);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *copy);
  EXPECT_EQ(copies_made_, 2);

  // A staging root that is a link (or not this account's) is not cleaned at all.
  fs::path link = base_ / "linked-staging";
  fs::create_directory_symlink(base_ / "other", link);
  EXPECT_TRUE(RemoveLeftoverStaging(link.string()).empty());
  EXPECT_TRUE(fs::exists(base_ / "other" / "config.json"));
  // None yet: nothing to do.
  EXPECT_TRUE(RemoveLeftoverStaging((base_ / "none").string()).empty());
}

}  // namespace
}  // namespace trainyard::server
