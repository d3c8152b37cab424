#include "trainyard/jobs/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "trainyard/jobs/fair_share.h"

namespace trainyard::jobs {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;
constexpr int64_t kNow = 1'700'000'000'000;
constexpr int64_t kMinute = 60'000;
constexpr int64_t kHour = 60 * kMinute;

std::vector<NodeInfo> Nodes(int count, int gpus, int cpus = 64, int64_t memory = 512 * kGiB) {
  std::vector<NodeInfo> nodes;
  for (int i = 0; i < count; ++i) {
    nodes.push_back(NodeInfo{"n" + std::to_string(i), gpus, cpus, memory});
  }
  return nodes;
}

QueuedJob Job(std::string id, int gpus, int nodes = 1, int priority = 0, int64_t seq = 0,
              std::string project = "p", int64_t time_limit_ms = 0) {
  QueuedJob j;
  j.id = std::move(id);
  j.project = std::move(project);
  j.priority = priority;
  j.submit_seq = seq;
  j.request.nodes = nodes;
  j.request.gpus_per_node = gpus;
  j.request.cpus_per_node = 1;
  j.time_limit_ms = time_limit_ms;
  return j;
}

NodeAllocation On(int node, std::vector<int> gpus, int cpus = 1) {
  return NodeAllocation{node, std::move(gpus), cpus, 0};
}

std::vector<int> Range(int begin, int end) {
  std::vector<int> ids;
  for (int i = begin; i < end; ++i) ids.push_back(i);
  return ids;
}

RunningJob Running(std::string id, Placement placement, int64_t end_by_ms = 0, int priority = 0,
                   bool preemptible = false, int64_t started_at_ms = kNow - kHour) {
  RunningJob r;
  r.id = std::move(id);
  r.project = "p";
  r.priority = priority;
  r.preemptible = preemptible;
  r.placement = std::move(placement);
  r.started_at_ms = started_at_ms;
  r.end_by_ms = end_by_ms;
  return r;
}

SchedulerInput Input(std::vector<NodeInfo> nodes) {
  SchedulerInput in;
  in.nodes = std::move(nodes);
  in.now_ms = kNow;
  return in;
}

const StartDecision* FindStart(const SchedulingResult& r, const std::string& id) {
  for (const StartDecision& s : r.starts) {
    if (s.job_id == id) return &s;
  }
  return nullptr;
}

const PendingInfo* FindPending(const SchedulingResult& r, const std::string& id) {
  for (const PendingInfo& p : r.pending) {
    if (p.job_id == id) return &p;
  }
  return nullptr;
}

std::vector<std::string> StartedIds(const SchedulingResult& r) {
  std::vector<std::string> ids;
  for (const StartDecision& s : r.starts) ids.push_back(s.job_id);
  return ids;
}

// Checks what any valid pass must satisfy: every queued job is started or pending
// exactly once; starts are gang-complete, within capacity, off excluded nodes, and
// never overlap each other or running jobs.
void ExpectValid(const SchedulerInput& in, const SchedulingResult& r) {
  std::map<std::string, const QueuedJob*> queued;
  for (const QueuedJob& j : in.queued) queued[j.id] = &j;
  ASSERT_EQ(r.starts.size() + r.pending.size(), in.queued.size());
  std::set<std::string> seen;
  for (const StartDecision& s : r.starts) ASSERT_TRUE(seen.insert(s.job_id).second);
  for (const PendingInfo& p : r.pending) ASSERT_TRUE(seen.insert(p.job_id).second);
  for (size_t i = 0; i < r.pending.size(); ++i) {
    EXPECT_EQ(r.pending[i].position, static_cast<int>(i) + 1);
    EXPECT_FALSE(r.pending[i].reason.empty()) << r.pending[i].job_id;
  }
  std::set<std::pair<int, int>> gpus_used;
  std::vector<int64_t> cpus(in.nodes.size(), 0);
  std::vector<int64_t> memory(in.nodes.size(), 0);
  for (const RunningJob& j : in.running) {
    for (const NodeAllocation& a : j.placement) {
      for (int g : a.gpu_ids) gpus_used.insert({a.node, g});
      cpus[a.node] += a.cpus;
      memory[a.node] += a.memory_bytes;
    }
  }
  for (const StartDecision& s : r.starts) {
    ASSERT_TRUE(queued.count(s.job_id)) << s.job_id;
    const QueuedJob& job = *queued[s.job_id];
    ASSERT_EQ(static_cast<int>(s.placement.size()), job.request.nodes) << s.job_id;
    std::set<int> nodes;
    for (const NodeAllocation& a : s.placement) {
      ASSERT_GE(a.node, 0);
      ASSERT_LT(a.node, static_cast<int>(in.nodes.size()));
      EXPECT_TRUE(nodes.insert(a.node).second) << s.job_id << " uses a node twice";
      const NodeInfo& node = in.nodes[a.node];
      EXPECT_EQ(std::count(job.excluded_nodes.begin(), job.excluded_nodes.end(), node.name), 0)
          << s.job_id << " placed on excluded " << node.name;
      EXPECT_EQ(static_cast<int>(a.gpu_ids.size()), job.request.gpus_per_node);
      EXPECT_EQ(a.cpus, job.request.cpus_per_node);
      EXPECT_EQ(a.memory_bytes, job.request.memory_per_node_bytes);
      for (int g : a.gpu_ids) {
        EXPECT_GE(g, 0);
        EXPECT_LT(g, node.gpus);
        EXPECT_TRUE(gpus_used.insert({a.node, g}).second)
            << s.job_id << " takes busy GPU " << g << " of node " << a.node;
      }
      cpus[a.node] += a.cpus;
      memory[a.node] += a.memory_bytes;
      EXPECT_LE(cpus[a.node], node.cpus) << s.job_id;
      EXPECT_LE(memory[a.node], node.memory_bytes) << s.job_id;
    }
  }
}

// ---------------------------------------------------------------------------
// Queue order

TEST(SchedulerOrder, HigherPriorityStartsFirst) {
  SchedulerInput in = Input(Nodes(1, 8));
  in.queued = {Job("low", 8, 1, /*priority=*/0, /*seq=*/1), Job("high", 8, 1, 5, 2)};
  SchedulingResult r = Scheduler().Schedule(in);
  ExpectValid(in, r);
  EXPECT_EQ(StartedIds(r), std::vector<std::string>{"high"});
  ASSERT_EQ(r.pending.size(), 1u);
  EXPECT_EQ(r.pending[0].job_id, "low");
  EXPECT_EQ(r.pending[0].position, 1);
}

TEST(SchedulerOrder, EqualPriorityIsFifoBySubmitSeq) {
  SchedulerInput in = Input(Nodes(1, 8));
  in.queued = {Job("second", 8, 1, 0, 7), Job("first", 8, 1, 0, 3), Job("third", 8, 1, 0, 9)};
  SchedulingResult r = Scheduler().Schedule(in);
  ExpectValid(in, r);
  EXPECT_EQ(StartedIds(r), std::vector<std::string>{"first"});
  ASSERT_EQ(r.pending.size(), 2u);
  EXPECT_EQ(r.pending[0].job_id, "second");
  EXPECT_EQ(r.pending[1].job_id, "third");
}

TEST(SchedulerOrder, FairShareByUsagePerWeightWithinAPriority) {
  SchedulerInput in = Input(Nodes(1, 8));
  in.queued = {Job("a1", 8, 1, 0, 1, "a"), Job("b1", 8, 1, 0, 2, "b")};
  in.project_usage = {{"a", 1000}, {"b", 10}};
  EXPECT_EQ(StartedIds(Scheduler().Schedule(in)), std::vector<std::string>{"b1"});

  in.project_weights = {{"a", 1000}};  // a: 1 per weight, b: 10
  EXPECT_EQ(StartedIds(Scheduler().Schedule(in)), std::vector<std::string>{"a1"});

  // Priority still comes first.
  in.project_weights.clear();
  in.queued[0].priority = 1;
  EXPECT_EQ(StartedIds(Scheduler().Schedule(in)), std::vector<std::string>{"a1"});
}

TEST(SchedulerOrder, RunningGpusCountAsUsage) {
  SchedulerInput in = Input(Nodes(2, 8));
  RunningJob held = Running("a-running", {On(0, Range(0, 8))});
  held.project = "a";
  in.running = {held};
  in.queued = {Job("a1", 8, 1, 0, 1, "a"), Job("b1", 8, 1, 0, 2, "b")};
  in.project_usage = {{"b", 100}};  // far below 8 GPUs x the default one-hour charge
  EXPECT_EQ(StartedIds(Scheduler().Schedule(in)), std::vector<std::string>{"b1"});
}

// ---------------------------------------------------------------------------
// Fair share

TEST(FairShareUsage, DecaysByHalfLife) {
  FairShareUsage usage(kHour);
  usage.Add("a", 100, kNow);
  EXPECT_DOUBLE_EQ(usage.Get("a", kNow), 100);
  EXPECT_NEAR(usage.Get("a", kNow + kHour), 50, 1e-9);
  EXPECT_NEAR(usage.Get("a", kNow + 2 * kHour), 25, 1e-9);
  usage.Add("a", 25, kNow + 2 * kHour);
  EXPECT_NEAR(usage.Get("a", kNow + 3 * kHour), 25, 1e-9);
  EXPECT_EQ(usage.Get("never-seen", kNow), 0);
  // Time running backwards decays nothing.
  EXPECT_NEAR(usage.Get("a", kNow), 50, 1e-9);
  auto snapshot = usage.Snapshot(kNow + 3 * kHour);
  ASSERT_EQ(snapshot.size(), 1u);
  EXPECT_NEAR(snapshot["a"], 25, 1e-9);
}

TEST(FairShareUsage, DefaultHalfLifeIsADayAndZeroDisablesDecay) {
  FairShareUsage usage;
  EXPECT_EQ(usage.half_life_ms(), 24 * kHour);
  usage.Add("a", 8, kNow);
  EXPECT_NEAR(usage.Get("a", kNow + 24 * kHour), 4, 1e-9);
  FairShareUsage forever(0);
  forever.Add("a", 8, kNow);
  EXPECT_EQ(forever.Get("a", kNow + 1000 * kHour), 8);
}

// Two projects always have work queued; every round the pool frees up and the
// scheduler fills it. Over many rounds usage must split by weight (1 : 3).
TEST(FairShareSimulation, UsageEvensOutPerWeight) {
  FairShareUsage usage(24 * kHour);
  SchedulerInput in = Input(Nodes(2, 4));
  in.project_weights = {{"a", 1}, {"b", 3}};
  int64_t seq = 0;
  std::map<std::string, int> started_late;
  const int kRounds = 600;
  for (int round = 0; round < kRounds; ++round) {
    in.now_ms = kNow + round * 10 * kMinute;
    in.queued.clear();
    for (int i = 0; i < 10; ++i) {
      in.queued.push_back(Job("a" + std::to_string(seq), 1 + i % 2, 1, 0, seq, "a"));
      ++seq;
      in.queued.push_back(Job("b" + std::to_string(seq), 1 + i % 2, 1, 0, seq, "b"));
      ++seq;
    }
    in.project_usage = usage.Snapshot(in.now_ms);
    SchedulingResult r = Scheduler().Schedule(in);
    ExpectValid(in, r);
    ASSERT_FALSE(r.starts.empty());
    for (const StartDecision& s : r.starts) {
      const std::string project = s.job_id.substr(0, 1);
      // Each job runs the whole 10-minute round.
      usage.Add(project, static_cast<double>(s.placement[0].gpu_ids.size()) * 600, in.now_ms);
      if (round >= kRounds - 60) ++started_late[project];
    }
  }
  const int64_t end = kNow + kRounds * 10 * kMinute;
  const double ratio = usage.Get("b", end) / usage.Get("a", end);
  EXPECT_NEAR(ratio, 3.0, 0.3);
  EXPECT_GT(started_late["a"], 0);  // nobody starves
  EXPECT_GT(started_late["b"], started_late["a"]);
}

// ---------------------------------------------------------------------------
// Gang allocation and packing

TEST(SchedulerGang, ThreeGpuJobNeverStartsWithTwoFree) {
  SchedulerInput in = Input(Nodes(2, 4));
  in.running = {Running("r0", {On(0, {0, 1, 2})}), Running("r1", {On(1, {0, 1})})};
  in.queued = {Job("three", 3)};
  SchedulingResult r = Scheduler().Schedule(in);
  ExpectValid(in, r);
  EXPECT_TRUE(r.starts.empty());
  ASSERT_EQ(r.pending.size(), 1u);
  EXPECT_NE(r.pending[0].reason.find("needs 3 GPUs on 1 node; largest free block is 2"),
            std::string::npos)
      << r.pending[0].reason;
}

TEST(SchedulerGang, MultiNodeJobGetsAllNodesOrNone) {
  SchedulerInput in = Input(Nodes(3, 8));
  in.running = {Running("r0", {On(0, {0})}), Running("r1", {On(1, {5})})};
  in.queued = {Job("two-full-nodes", 8, 2), Job("one-full-node", 8, 1, 0, 1)};
  SchedulingResult r = Scheduler().Schedule(in);
  ExpectValid(in, r);
  EXPECT_EQ(FindStart(r, "two-full-nodes"), nullptr);
  const PendingInfo* p = FindPending(r, "two-full-nodes");
  ASSERT_NE(p, nullptr);
  EXPECT_NE(p->reason.find("needs 2 nodes with 8 free GPUs; 1 such node is free"),
            std::string::npos)
      << p->reason;

  in.running.pop_back();
  r = Scheduler().Schedule(in);
  ExpectValid(in, r);
  const StartDecision* s = FindStart(r, "two-full-nodes");
  ASSERT_NE(s, nullptr);
  ASSERT_EQ(s->placement.size(), 2u);
  EXPECT_EQ(s->placement[0].gpu_ids, Range(0, 8));
  EXPECT_EQ(s->placement[1].gpu_ids, Range(0, 8));
}

TEST(SchedulerGang, CpuAndMemoryMustFitOnEveryNode) {
  SchedulerInput in = Input(Nodes(2, 8, 16, 64 * kGiB));
  in.running = {Running("r0", {NodeAllocation{0, {}, 12, 0}})};
  QueuedJob job = Job("cpu-heavy", 1, 2);
  job.request.cpus_per_node = 8;
  in.queued = {job};
  SchedulingResult r = Scheduler().Schedule(in);
  ExpectValid(in, r);
  EXPECT_TRUE(r.starts.empty());

  in.running.clear();
  in.queued[0].request.memory_per_node_bytes = 100 * kGiB;
  r = Scheduler().Schedule(in);
  EXPECT_TRUE(r.starts.empty());
  ASSERT_EQ(r.pending.size(), 1u);
  EXPECT_NE(r.pending[0].reason.find("can never run"), std::string::npos) << r.pending[0].reason;
}

TEST(SchedulerPacking, BestFitKeepsBigBlocksWhole) {
  SchedulerInput in = Input(Nodes(3, 8));
  in.running = {Running("r1", {On(1, Range(0, 6))}), Running("r2", {On(2, Range(0, 4))})};
  in.queued = {Job("two", 2, 1, 0, 1), Job("four", 4, 1, 0, 2), Job("eight", 8, 1, 0, 3)};
  SchedulingResult r = Scheduler().Schedule(in);
  ExpectValid(in, r);
  ASSERT_EQ(r.starts.size(), 3u);
  EXPECT_EQ(FindStart(r, "two")->placement[0].node, 1);
  EXPECT_EQ(FindStart(r, "two")->placement[0].gpu_ids, (std::vector<int>{6, 7}));
  EXPECT_EQ(FindStart(r, "four")->placement[0].node, 2);
  EXPECT_EQ(FindStart(r, "four")->placement[0].gpu_ids, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(FindStart(r, "eight")->placement[0].node, 0);
}

TEST(SchedulerPacking, MultiNodeJobTakesTheLeastFreeNodesThatFit) {
  SchedulerInput in = Input(Nodes(5, 8));
  in.running = {Running("r2", {On(2, {0, 1})}), Running("r3", {On(3, {2, 3})}),
                Running("r4", {On(4, Range(0, 5))})};
  in.queued = {Job("gang", 6, 2)};
  SchedulingResult r = Scheduler().Schedule(in);
  ExpectValid(in, r);
  ASSERT_EQ(r.starts.size(), 1u);
  std::set<int> nodes;
  for (const NodeAllocation& a : r.starts[0].placement) nodes.insert(a.node);
  EXPECT_EQ(nodes, (std::set<int>{2, 3}));
  EXPECT_EQ(r.starts[0].placement[1].node == 3 ? r.starts[0].placement[1].gpu_ids
                                               : r.starts[0].placement[0].gpu_ids,
            (std::vector<int>{0, 1, 4, 5, 6, 7}));
}

// ---------------------------------------------------------------------------
// Backfill

// Node 0 is busy for an hour, node 1 half busy for two hours. "big" needs both
// whole nodes, so it is reserved from +2h on both.
SchedulerInput BackfillScenario() {
  SchedulerInput in = Input(Nodes(2, 8));
  in.running = {Running("r0", {On(0, Range(0, 8))}, kNow + kHour),
                Running("r1", {On(1, Range(0, 4))}, kNow + 2 * kHour)};
  in.queued = {Job("big", 8, 2, /*priority=*/5, 1)};
  return in;
}

TEST(SchedulerBackfill, ShortJobFillsTheHoleButLongJobMustWait) {
  SchedulerInput in = BackfillScenario();
  in.queued.push_back(Job("long", 4, 1, 0, 2, "p", 3 * kHour));
  in.queued.push_back(Job("unlimited", 4, 1, 0, 3, "p", 0));
  in.queued.push_back(Job("short", 4, 1, 0, 4, "p", 30 * kMinute));
  SchedulingResult r = Scheduler().Schedule(in);
  ExpectValid(in, r);
  ASSERT_EQ(StartedIds(r), std::vector<std::string>{"short"});
  EXPECT_TRUE(r.starts[0].backfilled);
  EXPECT_EQ(r.starts[0].placement[0].node, 1);

  const PendingInfo* big = FindPending(r, "big");
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(big->position, 1);
  EXPECT_NE(big->reason.find("needs 2 nodes with 8 free GPUs; 0 such nodes are free"),
            std::string::npos)
      << big->reason;
  EXPECT_NE(big->reason.find("reserved from in 2h"), std::string::npos) << big->reason;
  for (const char* id : {"long", "unlimited"}) {
    const PendingInfo* p = FindPending(r, id);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(p->reason, "waiting for higher-priority job big (reserved from in 2h)");
  }
}

TEST(SchedulerBackfill, JobEndingExactlyAtTheReservationMayBackfill) {
  SchedulerInput in = BackfillScenario();
  in.queued.push_back(Job("just-in-time", 4, 1, 0, 2, "p", 2 * kHour));
  SchedulingResult r = Scheduler().Schedule(in);
  ExpectValid(in, r);
  EXPECT_EQ(StartedIds(r), std::vector<std::string>{"just-in-time"});
  in.queued.back().time_limit_ms = 2 * kHour + 1;
  EXPECT_TRUE(Scheduler().Schedule(in).starts.empty());
}

TEST(SchedulerBackfill, LongJobMayUseResourcesTheReservationDoesNotNeed) {
  // A third node that the reservation does not need: the long and unlimited jobs
  // may go there, but only one fits.
  SchedulerInput in = BackfillScenario();
  in.nodes = Nodes(3, 8);
  in.running.push_back(Running("r2", {On(2, Range(0, 4))}, 0));  // unlimited
  in.queued.push_back(Job("unlimited", 4, 1, 0, 2, "p", 0));
  in.queued.push_back(Job("long", 4, 1, 0, 3, "p", 5 * kHour));
  SchedulingResult r = Scheduler().Schedule(in);
  ExpectValid(in, r);
  ASSERT_EQ(StartedIds(r), std::vector<std::string>{"unlimited"});
  EXPECT_TRUE(r.starts[0].backfilled);
  EXPECT_EQ(r.starts[0].placement[0].node, 2);
  EXPECT_EQ(FindPending(r, "long")->reason,
            "waiting for higher-priority job big (reserved from in 2h)");
}

TEST(SchedulerBackfill, SpareResourcesOnReservedNodesCanBeUsed) {
  // big needs 4 GPUs of node 0 at +1h; node 0's other 4 GPUs are spare then.
  SchedulerInput in = Input(Nodes(1, 8));
  in.running = {Running("r0", {On(0, Range(0, 6))}, kNow + kHour)};
  in.queued = {Job("big", 4, 1, 5, 1), Job("long-2", 2, 1, 0, 2, "p", 10 * kHour),
               Job("long-1", 1, 1, 0, 3, "p", 10 * kHour)};
  SchedulingResult r = Scheduler().Schedule(in);
  ExpectValid(in, r);
  EXPECT_EQ(StartedIds(r), std::vector<std::string>{"long-2"});
  EXPECT_NE(FindPending(r, "long-1")->reason.find("largest free block is 0"), std::string::npos);
}

TEST(SchedulerBackfill, UnlimitedRunningJobsMeanReservedFromWhenTheyEnd) {
  SchedulerInput in = Input(Nodes(2, 8));
  in.running = {Running("r0", {On(0, Range(0, 4))}, 0), Running("r1", {On(1, Range(0, 4))}, 0)};
  in.queued = {Job("big", 8, 1, 5, 1), Job("short", 2, 1, 0, 2, "p", kMinute),
               Job("unlimited", 2, 1, 0, 3, "p", 0)};
  SchedulingResult r = Scheduler().Schedule(in);
  ExpectValid(in, r);
  EXPECT_NE(FindPending(r, "big")->reason.find("reserved from when running jobs end"),
            std::string::npos)
      << FindPending(r, "big")->reason;
  // Even a one-minute job may not take the reserved node's GPUs, but the other
  // node's are free for anyone.
  ASSERT_EQ(StartedIds(r), (std::vector<std::string>{"short", "unlimited"}));
  EXPECT_EQ(r.starts[0].placement[0].node, r.starts[1].placement[0].node);
}

TEST(SchedulerBackfill, DisabledBackfillKeepsStrictOrder) {
  SchedulerInput in = BackfillScenario();
  in.queued.push_back(Job("short", 4, 1, 0, 2, "p", 30 * kMinute));
  SchedulerOptions options;
  options.enable_backfill = false;
  SchedulingResult r = Scheduler(options).Schedule(in);
  EXPECT_TRUE(r.starts.empty());
  EXPECT_EQ(FindPending(r, "short")->reason,
            "waiting for higher-priority job big (reserved from in 2h)");
}

// Whether `job` fits in the free resources left by `held` allocations (brute
// force, independent of the scheduler's indexes).
bool FitsBruteForce(const SchedulerInput& in, const std::vector<const Placement*>& held,
                    const QueuedJob& job) {
  std::vector<int> gpus(in.nodes.size());
  std::vector<int64_t> cpus(in.nodes.size());
  std::vector<int64_t> memory(in.nodes.size());
  for (size_t n = 0; n < in.nodes.size(); ++n) {
    gpus[n] = in.nodes[n].gpus;
    cpus[n] = in.nodes[n].cpus;
    memory[n] = in.nodes[n].memory_bytes;
  }
  for (const Placement* p : held) {
    for (const NodeAllocation& a : *p) {
      gpus[a.node] -= static_cast<int>(a.gpu_ids.size());
      cpus[a.node] -= a.cpus;
      memory[a.node] -= a.memory_bytes;
    }
  }
  int ok = 0;
  for (size_t n = 0; n < in.nodes.size(); ++n) {
    if (gpus[n] >= job.request.gpus_per_node && cpus[n] >= job.request.cpus_per_node &&
        memory[n] >= job.request.memory_per_node_bytes) {
      ++ok;
    }
  }
  return ok >= job.request.nodes;
}

SchedulerInput RandomScenario(uint32_t seed, bool with_preemptible) {
  std::mt19937 rng(seed);
  auto uniform = [&rng](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  SchedulerInput in = Input(Nodes(uniform(2, 8), 8, 32, 256 * kGiB));
  // Fill the nodes partly with running jobs.
  for (size_t n = 0; n < in.nodes.size(); ++n) {
    int next_gpu = 0;
    while (next_gpu < 8 && uniform(0, 3) != 0) {
      int take = std::min(8 - next_gpu, 1 << uniform(0, 3));
      int64_t end = uniform(0, 4) == 0 ? 0 : kNow + uniform(1, 300) * kMinute;
      RunningJob r = Running("r" + std::to_string(n) + "-" + std::to_string(next_gpu),
                             {NodeAllocation{static_cast<int>(n), Range(next_gpu, next_gpu + take),
                                             take * 4, take * 32 * kGiB}},
                             end, uniform(0, 2), with_preemptible && uniform(0, 1) == 0,
                             kNow - uniform(1, 100) * kMinute);
      r.stopping = with_preemptible && uniform(0, 9) == 0;
      in.running.push_back(r);
      next_gpu += take;
    }
  }
  const int jobs = uniform(3, 25);
  for (int i = 0; i < jobs; ++i) {
    const bool multi = uniform(0, 5) == 0;
    int gpus = multi ? 8 : 1 << uniform(0, 3);
    QueuedJob j = Job("q" + std::to_string(i), gpus,
                      multi ? uniform(2, static_cast<int>(in.nodes.size())) : 1, uniform(0, 3), i,
                      "p" + std::to_string(uniform(0, 2)),
                      uniform(0, 3) == 0 ? 0 : uniform(1, 400) * kMinute);
    j.request.cpus_per_node = gpus * 4;
    j.request.memory_per_node_bytes = gpus * 32 * kGiB;
    in.queued.push_back(j);
  }
  return in;
}

// The heart of EASY backfill: whatever backfills, the first blocked job still fits
// at the time it was promised.
TEST(SchedulerBackfill, BackfillNeverDelaysTheReservation) {
  int backfilled = 0;
  int checked = 0;
  for (uint32_t seed = 1; seed <= 400; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    SchedulerInput in = RandomScenario(seed, /*with_preemptible=*/false);
    SchedulerOptions strict;
    strict.enable_backfill = false;
    SchedulingResult without = Scheduler(strict).Schedule(in);
    SchedulingResult with = Scheduler().Schedule(in);
    ExpectValid(in, with);
    if (without.pending.empty()) continue;
    const QueuedJob* holder = nullptr;
    for (const QueuedJob& j : in.queued) {
      if (j.id == without.pending[0].job_id) holder = &j;
    }
    ASSERT_NE(holder, nullptr);
    ASSERT_EQ(with.pending[0].job_id, holder->id);
    // The promised time: the earliest end (or never) at which it fits without backfill.
    std::vector<int64_t> times = {kNow};
    for (const RunningJob& r : in.running)
      times.push_back(r.end_by_ms == 0 ? INT64_MAX : r.end_by_ms);
    for (const StartDecision& s : without.starts) {
      for (const QueuedJob& j : in.queued) {
        if (j.id == s.job_id) times.push_back(j.time_limit_ms ? kNow + j.time_limit_ms : INT64_MAX);
      }
    }
    std::sort(times.begin(), times.end());
    auto end_of_start = [&in](const StartDecision& s) {
      for (const QueuedJob& j : in.queued) {
        if (j.id == s.job_id) return j.time_limit_ms ? kNow + j.time_limit_ms : INT64_MAX;
      }
      return INT64_MAX;
    };
    auto held_at = [&](const SchedulingResult& result, int64_t t) {
      std::vector<const Placement*> held;
      for (const RunningJob& r : in.running) {
        if ((r.end_by_ms == 0 ? INT64_MAX : r.end_by_ms) > t) held.push_back(&r.placement);
      }
      for (const StartDecision& s : result.starts) {
        // At "never", only what backfilled still holds its resources.
        if (end_of_start(s) > t || (t == INT64_MAX && s.backfilled)) held.push_back(&s.placement);
      }
      return held;
    };
    int64_t promised = -1;
    for (int64_t t : times) {
      if (FitsBruteForce(in, held_at(without, t), *holder)) {
        promised = t;
        break;
      }
    }
    ASSERT_NE(promised, -1);
    ++checked;
    EXPECT_TRUE(FitsBruteForce(in, held_at(with, promised), *holder))
        << holder->id << " no longer fits at " << promised;
    for (const StartDecision& s : with.starts) backfilled += s.backfilled;
  }
  EXPECT_GT(checked, 100);
  EXPECT_GT(backfilled, 50);  // the property was exercised, not vacuous
}

TEST(SchedulerValidity, RandomPassesProduceValidPlacements) {
  for (uint32_t seed = 1000; seed < 1300; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    SchedulerInput in = RandomScenario(seed, /*with_preemptible=*/true);
    if (seed % 3 == 0) in.queued[0].excluded_nodes = {"n0", "n2"};
    SchedulingResult r = Scheduler().Schedule(in);
    ExpectValid(in, r);
    for (const PreemptDecision& p : r.preemptions) {
      auto victim = std::find_if(in.running.begin(), in.running.end(),
                                 [&p](const RunningJob& j) { return j.id == p.victim_id; });
      ASSERT_NE(victim, in.running.end());
      EXPECT_TRUE(victim->preemptible);
      EXPECT_FALSE(victim->stopping);
      auto job = std::find_if(in.queued.begin(), in.queued.end(),
                              [&p](const QueuedJob& j) { return j.id == p.for_job_id; });
      ASSERT_NE(job, in.queued.end());
      EXPECT_LT(victim->priority, job->priority);
    }
  }
}

// ---------------------------------------------------------------------------
// Preemption

SchedulerInput PreemptionScenario() {
  SchedulerInput in = Input(Nodes(1, 8));
  in.running = {Running("old-low", {On(0, {0, 1})}, 0, 0, true, kNow - 3 * kHour),
                Running("new-low", {On(0, {2, 3})}, 0, 0, true, kNow - kHour),
                Running("mid", {On(0, {4, 5})}, 0, 1, true, kNow - 30 * kMinute),
                Running("pinned", {On(0, {6, 7})}, 0, 0, false, kNow - kMinute)};
  return in;
}

std::vector<std::string> Victims(const SchedulingResult& r) {
  std::vector<std::string> ids;
  for (const PreemptDecision& p : r.preemptions) ids.push_back(p.victim_id);
  return ids;
}

TEST(SchedulerPreemption, LowestPriorityThenNewestFirst) {
  SchedulerInput in = PreemptionScenario();
  in.queued = {Job("urgent", 2, 1, 3)};
  SchedulingResult r = Scheduler().Schedule(in);
  EXPECT_TRUE(r.starts.empty());
  EXPECT_EQ(Victims(r), std::vector<std::string>{"new-low"});
  ASSERT_EQ(r.preemptions.size(), 1u);
  EXPECT_EQ(r.preemptions[0].for_job_id, "urgent");
  EXPECT_EQ(r.pending[0].reason, "preempting 1 lower-priority job(s): new-low");

  in.queued = {Job("urgent", 6, 1, 3)};
  r = Scheduler().Schedule(in);
  EXPECT_EQ(Victims(r), (std::vector<std::string>{"new-low", "old-low", "mid"}));
  EXPECT_EQ(r.pending[0].reason, "preempting 3 lower-priority job(s): new-low, old-low, mid");

  // The non-preemptible job is never a victim, so 8 GPUs cannot be had.
  in.queued = {Job("urgent", 8, 1, 3)};
  r = Scheduler().Schedule(in);
  EXPECT_TRUE(r.preemptions.empty());
}

TEST(SchedulerPreemption, NeverPreemptsEqualOrHigherPriority) {
  SchedulerInput in = PreemptionScenario();
  in.queued = {Job("peer", 2, 1, 1)};  // only priority-0 jobs are below it
  EXPECT_EQ(Victims(Scheduler().Schedule(in)), std::vector<std::string>{"new-low"});
  in.queued = {Job("peer", 2, 1, 0)};
  EXPECT_TRUE(Scheduler().Schedule(in).preemptions.empty());
  SchedulerOptions off;
  off.enable_preemption = false;
  in.queued = {Job("urgent", 2, 1, 9)};
  EXPECT_TRUE(Scheduler(off).Schedule(in).preemptions.empty());
}

TEST(SchedulerPreemption, StoppingJobsAreNotVictimsAgainButTheirResourcesAreAwaited) {
  SchedulerInput in = PreemptionScenario();
  in.running[1].stopping = true;  // new-low
  in.queued = {Job("urgent", 2, 1, 3)};
  SchedulingResult r = Scheduler().Schedule(in);
  EXPECT_TRUE(r.preemptions.empty());
  EXPECT_EQ(r.pending[0].reason,
            "needs 2 GPUs on 1 node; largest free block is 0; reserved from now, as stopping "
            "jobs exit");

  in.queued = {Job("urgent", 4, 1, 3)};
  r = Scheduler().Schedule(in);
  EXPECT_EQ(Victims(r), std::vector<std::string>{"old-low"});
}

TEST(SchedulerPreemption, ResourcesOfStoppingJobsAreKeptForTheWaitingJob) {
  SchedulerInput in = Input(Nodes(1, 8));
  RunningJob stopping = Running("stopping", {On(0, Range(0, 4))}, 0, 0, true);
  stopping.stopping = true;
  in.running = {stopping, Running("pinned", {On(0, {4, 5})})};
  in.queued = {Job("urgent", 6, 1, 3), Job("small", 2, 1, 0, 1, "p", kMinute)};
  SchedulingResult r = Scheduler().Schedule(in);
  ExpectValid(in, r);
  EXPECT_TRUE(r.preemptions.empty());
  // GPUs 6 and 7 are free now, but "urgent" needs them with the stopping job's four.
  EXPECT_TRUE(r.starts.empty());
  EXPECT_EQ(FindPending(r, "small")->reason,
            "waiting for higher-priority job urgent (reserved from now, as stopping jobs exit)");
  in.queued[0].request.gpus_per_node = 4;  // now GPUs 6 and 7 are spare
  r = Scheduler().Schedule(in);
  EXPECT_EQ(StartedIds(r), std::vector<std::string>{"small"});
}

TEST(SchedulerPreemption, VictimSetIsMinimal) {
  SchedulerInput in = Input(Nodes(2, 8));
  in.running = {Running("newest-1gpu", {On(0, {0})}, 0, 0, true, kNow - kMinute),
                Running("whole-node", {On(1, Range(0, 8))}, 0, 0, true, kNow - kHour),
                Running("oldest-7gpu", {On(0, Range(1, 8))}, 0, 0, true, kNow - 2 * kHour)};
  in.queued = {Job("urgent", 8, 1, 1)};
  SchedulingResult r = Scheduler().Schedule(in);
  EXPECT_EQ(Victims(r), std::vector<std::string>{"whole-node"});
}

TEST(SchedulerPreemption, BackfillDoesNotTakeThePreemptedResources) {
  SchedulerInput in = Input(Nodes(2, 8));
  in.running = {Running("victim", {On(0, Range(0, 8))}, 0, 0, true),
                Running("other", {On(1, Range(0, 6))}, 0, 0, false)};
  in.queued = {Job("urgent", 8, 1, 3), Job("filler", 2, 1, 0, 1), Job("too-big", 4, 1, 0, 2)};
  SchedulingResult r = Scheduler().Schedule(in);
  ExpectValid(in, r);
  EXPECT_EQ(Victims(r), std::vector<std::string>{"victim"});
  ASSERT_EQ(StartedIds(r), std::vector<std::string>{"filler"});
  EXPECT_EQ(r.starts[0].placement[0].node, 1);
  EXPECT_TRUE(r.starts[0].backfilled);
  EXPECT_EQ(FindPending(r, "too-big")->reason, "needs 4 GPUs on 1 node; largest free block is 0");
}

// ---------------------------------------------------------------------------
// Exclusions and reasons

TEST(SchedulerExclusion, ExcludedNodesAreNeverUsed) {
  SchedulerInput in = Input(Nodes(3, 8));
  in.running = {Running("r1", {On(1, Range(0, 8))})};
  QueuedJob job = Job("picky", 4);
  job.excluded_nodes = {"n0", "n2"};
  in.queued = {job};
  SchedulingResult r = Scheduler().Schedule(in);
  ExpectValid(in, r);
  EXPECT_TRUE(r.starts.empty());
  EXPECT_NE(r.pending[0].reason.find("no node outside the excluded nodes has all of them free"),
            std::string::npos)
      << r.pending[0].reason;

  in.queued[0].excluded_nodes = {"n0", "unknown-node"};
  r = Scheduler().Schedule(in);
  ExpectValid(in, r);
  ASSERT_EQ(r.starts.size(), 1u);
  EXPECT_EQ(r.starts[0].placement[0].node, 2);
}

TEST(SchedulerExclusion, TooFewCandidatesIsReportedAndDoesNotBlockOthers) {
  SchedulerInput in = Input(Nodes(2, 8));
  QueuedJob job = Job("gang", 8, 2, 5);
  job.excluded_nodes = {"n1"};
  in.queued = {job, Job("next", 8, 1, 0, 1)};
  SchedulingResult r = Scheduler().Schedule(in);
  ExpectValid(in, r);
  EXPECT_EQ(StartedIds(r), std::vector<std::string>{"next"});
  EXPECT_FALSE(r.starts[0].backfilled);  // gang could never start, so it reserves nothing
  const std::string& reason = FindPending(r, "gang")->reason;
  EXPECT_EQ(reason.rfind("excluded nodes leave too few candidates", 0), 0u) << reason;
}

TEST(SchedulerReasons, EveryPendingJobHasAPositionAndAReadableReason) {
  SchedulerInput in = Input(Nodes(2, 8));
  in.running = {Running("r0", {On(0, Range(0, 6))}, kNow + 5 * kMinute),
                Running("r1", {On(1, Range(0, 8))}, kNow + 3 * kHour)};
  QueuedJob bad = Job("bad", 1, 1, 0, 4);
  bad.request.nodes = 0;
  in.queued = {Job("four", 4, 1, 2, 1), Job("two-nodes", 8, 2, 1, 2), Job("later", 4, 1, 0, 3),
               bad};
  SchedulingResult r = Scheduler().Schedule(in);
  ExpectValid(in, r);
  ASSERT_EQ(r.pending.size(), 4u);
  EXPECT_EQ(r.pending[0].reason,
            "needs 4 GPUs on 1 node; largest free block is 2; reserved from in 5m");
  EXPECT_EQ(r.pending[1].reason, "needs 2 nodes with 8 free GPUs; 0 such nodes are free");
  EXPECT_EQ(r.pending[2].reason, "needs 4 GPUs on 1 node; largest free block is 2");
  EXPECT_EQ(r.pending[3].reason, "invalid request: resources.nodes must be at least 1 (got 0)");
}

TEST(SchedulerReasons, FormatWait) {
  EXPECT_EQ(FormatWait(0, 45'000), "in 45s");
  EXPECT_EQ(FormatWait(0, 5 * kMinute), "in 5m");
  EXPECT_EQ(FormatWait(0, 2 * kHour), "in 2h");
  EXPECT_EQ(FormatWait(0, 2 * kHour + 5 * kMinute), "in 2h 5m");
  EXPECT_EQ(FormatWait(0, 76 * kHour), "in 3d 4h");
  EXPECT_EQ(FormatWait(10, 0), "in 0s");
}

// ---------------------------------------------------------------------------
// CheckFeasible

TEST(SchedulerFeasibility, RejectsWhatNoStateOfThePoolCouldRun) {
  std::vector<NodeInfo> pool = Nodes(3, 2, 16, 64 * kGiB);
  pool.push_back(NodeInfo{"big", 8, 64, 512 * kGiB});
  ResourceRequest r;
  r.gpus_per_node = 8;
  EXPECT_TRUE(CheckFeasible(pool, r).ok());

  r.gpus_per_node = 16;
  Status s = CheckFeasible(pool, r);
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_EQ(s.message().rfind("needs 16 GPUs per node on 1 node; the largest node has 8 GPUs", 0),
            0u)
      << s.message();

  r = ResourceRequest{};
  r.nodes = 2;
  r.gpus_per_node = 4;
  s = CheckFeasible(pool, r);
  EXPECT_NE(s.message().find("only 1 node of the pool has that much"), std::string::npos)
      << s.message();

  r = ResourceRequest{};
  r.nodes = 5;
  s = CheckFeasible(pool, r);
  EXPECT_NE(s.message().find("the pool has 4 nodes"), std::string::npos) << s.message();

  r = ResourceRequest{};
  r.cpus_per_node = 65;
  EXPECT_NE(CheckFeasible(pool, r).message().find("the largest node has 64 CPUs"),
            std::string::npos);
  r = ResourceRequest{};
  r.memory_per_node_bytes = 600 * kGiB;
  EXPECT_NE(CheckFeasible(pool, r).message().find("the largest node has 512 GiB memory"),
            std::string::npos)
      << CheckFeasible(pool, r).message();

  EXPECT_FALSE(CheckFeasible({}, ResourceRequest{}).ok());
}

TEST(SchedulerFeasibility, RejectsNonsense) {
  std::vector<NodeInfo> pool = Nodes(2, 8);
  ResourceRequest r;
  r.nodes = 0;
  EXPECT_EQ(CheckFeasible(pool, r).message(), "resources.nodes must be at least 1 (got 0)");
  r = ResourceRequest{};
  r.gpus_per_node = -1;
  EXPECT_TRUE(CheckFeasible(pool, r).IsInvalidArgument());
  r = ResourceRequest{};
  r.cpus_per_node = -2;
  EXPECT_TRUE(CheckFeasible(pool, r).IsInvalidArgument());
  r = ResourceRequest{};
  r.memory_per_node_bytes = -5;
  EXPECT_TRUE(CheckFeasible(pool, r).IsInvalidArgument());
}

// ---------------------------------------------------------------------------
// Swappable policies

class ReverseOrder : public QueueOrderPolicy {
 public:
  std::vector<int> Order(const SchedulerInput& input) const override {
    std::vector<int> order;
    for (int i = static_cast<int>(input.queued.size()); i-- > 0;) order.push_back(i);
    return order;
  }
};

class FirstFitPlacement : public PlacementPolicy {
 public:
  std::optional<Placement> Place(const ClusterState& state, const ResourceRequest& request,
                                 const PlacementConstraints& constraints) const override {
    Placement p;
    for (int n = 0; n < state.num_nodes() && static_cast<int>(p.size()) < request.nodes; ++n) {
      if (state.free_gpus(n) >= request.gpus_per_node &&
          state.free_cpus(n) >= request.cpus_per_node) {
        p.push_back(NodeAllocation{n, state.LowestFreeGpuIds(n, request.gpus_per_node),
                                   request.cpus_per_node, request.memory_per_node_bytes});
      }
    }
    if (static_cast<int>(p.size()) < request.nodes) return std::nullopt;
    return p;
  }
};

TEST(SchedulerPolicies, OrderAndPlacementCanBeSwapped) {
  SchedulerInput in = Input(Nodes(2, 8));
  in.running = {Running("r1", {On(1, Range(0, 6))})};
  in.queued = {Job("first", 8, 1, 0, 1), Job("second", 2, 1, 0, 2)};
  SchedulerOptions options;
  options.queue_order = std::make_shared<ReverseOrder>();
  options.placement = std::make_shared<FirstFitPlacement>();
  SchedulingResult r = Scheduler(options).Schedule(in);
  ExpectValid(in, r);
  EXPECT_EQ(StartedIds(r), (std::vector<std::string>{"second"}));
  EXPECT_EQ(FindStart(r, "second")->placement[0].node, 0);
  EXPECT_EQ(FindPending(r, "first")->position, 1);
}

}  // namespace
}  // namespace trainyard::jobs
