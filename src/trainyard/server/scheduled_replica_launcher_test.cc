// The pure halves of the scheduler-backed replica launcher: the job a replica runs as, where a
// replica is given its job's state, and how its end reads to serving.
#include "trainyard/server/scheduled_replica_launcher.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace trainyard::server
