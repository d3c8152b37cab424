// Scheduler: the job scheduler's policy core. One Schedule() call is one pass:
// given the pool's nodes, the running jobs and the queue, it decides which queued
// jobs start now and where, which running jobs to preempt, and why every other job
// waits. It starts no processes and keeps no state between passes; the job service
// owns the loop, the clock and the usage accounting (FairShareUsage), and feeds
// each pass a snapshot.
//
// Policy, in order:
//  - Queue order (QueueOrderPolicy): priority, higher first; within a priority the
//    project with the least usage per weight first; then submit_seq (FIFO).
//  - Gang allocation: a job gets all `nodes` distinct nodes at once or nothing.
//  - Placement (PlacementPolicy): best fit — the nodes whose free GPUs are the
//    fewest that fit — so big blocks stay whole for big jobs.
//  - EASY backfill: the first job in queue order that cannot start gets a
//    reservation (the earliest time enough resources are free, from running jobs'
//    end_by_ms, on specific nodes). Later jobs start only if they fit now and either
//    end before the reservation starts or leave what it needs untouched; such
//    starts are marked `backfilled`. A reservation is never delayed by a backfill.
//  - Preemption (PreemptionPolicy): when that first blocked job outranks running
//    preemptible jobs, a minimal set of them is chosen to make room; the job waits
//    (reserved on those resources) until they have stopped.
//
// Units: GPUs and CPUs are counts, memory is bytes, times are milliseconds since
// the epoch (the same clock as `now_ms`). Stopping jobs hold their resources until
// they are gone from `running`; for reservations they count as ending now.
//
// Thread-compatible: Schedule() is const and pure, so concurrent passes on one
// Scheduler are safe; the policies it holds must be too (the defaults are).
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "trainyard/common/status.h"

namespace trainyard::jobs {

// Named numbers of the scheduling policy and of the job service's accounting that feeds it.

// CPUs weigh this much less than GPUs in fair share: a running job without GPUs holds
// cpus / kCpusPerGpuShare GPUs, and its usage is CPU-seconds / kCpusPerGpuShare GPU-seconds.
inline constexpr double kCpusPerGpuShare = 100;
// How far back finished attempts count toward fair-share usage when the job service starts
// (seven of the default one-day half-lives: older usage has decayed below 1/128).
inline constexpr int64_t kFairShareWindowMs = int64_t{7} * 24 * 3600 * 1000;
// What one GPU a project's running jobs hold adds to its fair-share usage (see
// PriorityFairShareOrder): an hour of it.
inline constexpr double kDefaultRunningChargeSeconds = 3600;
// A hung attempt is stopped with its job's preemption grace, but at most this long: it has
// shown no sign of life, so it is unlikely to checkpoint on SIGTERM.
inline constexpr int64_t kHangStopGraceCapMs = 10'000;

struct NodeInfo {
  std::string name;
  int gpus = 0;
  int cpus = 0;
  int64_t memory_bytes = 0;
};

struct ResourceRequest {
  int nodes = 1;
  int gpus_per_node = 0;
  int cpus_per_node = 1;
  int64_t memory_per_node_bytes = 0;  // 0 = none
};

struct NodeAllocation {
  int node = 0;  // index into SchedulerInput::nodes
  std::vector<int> gpu_ids;
  int cpus = 0;
  int64_t memory_bytes = 0;
};
using Placement = std::vector<NodeAllocation>;

struct QueuedJob {
  std::string id;
  std::string project;
  int priority = 0;        // higher first
  int64_t submit_seq = 0;  // FIFO tie-break
  ResourceRequest request;
  int64_t time_limit_ms = 0;                // 0 = unlimited
  std::vector<std::string> excluded_nodes;  // node names to avoid
};

struct RunningJob {
  std::string id;
  std::string project;
  int priority = 0;
  bool preemptible = false;
  Placement placement;
  int64_t started_at_ms = 0;
  int64_t end_by_ms = 0;  // 0 = unlimited
  // Already being preempted or cancelled: never a victim again, but its resources
  // are busy until it leaves `running`.
  bool stopping = false;
};

struct SchedulerInput {
  std::vector<NodeInfo> nodes;
  std::vector<RunningJob> running;
  std::vector<QueuedJob> queued;
  // Decayed usage per project: GPU-seconds, or CPU-seconds / 100 for work without
  // GPUs (see FairShareUsage). Missing projects have used nothing.
  std::unordered_map<std::string, double> project_usage;
  std::unordered_map<std::string, double> project_weights;  // missing or <= 0: 1
  int64_t now_ms = 0;
};

struct StartDecision {
  std::string job_id;
  Placement placement;
  bool backfilled = false;  // started behind a higher job's reservation
};

struct PreemptDecision {
  std::string victim_id;
  std::string for_job_id;
};

struct PendingInfo {
  std::string job_id;
  int position = 0;  // 1-based position among the jobs still queued after this pass
  std::string reason;
};

struct SchedulingResult {
  std::vector<StartDecision> starts;  // in queue order
  std::vector<PreemptDecision> preemptions;
  std::vector<PendingInfo> pending;  // every queued job not started, in queue order
};

// Rejects (InvalidArgument) a request that no state of the pool could ever
// satisfy, or that makes no sense (nodes < 1, negative amounts), with a message
// that says what is missing, e.g. "needs 4 GPUs per node on 1 node; the largest
// node has 2 GPUs".
Status CheckFeasible(const std::vector<NodeInfo>& nodes, const ResourceRequest& request);

// Free resources of every node during one pass, indexed for placement: nodes are
// kept in buckets by their number of free GPUs, so "the best-fitting node for 4
// GPUs" and "how many nodes have >= 8 free" cost O(GPUs per node), not O(nodes).
// Keeps a pointer to `nodes`, which must outlive it. Copyable (a copy is a
// what-if view). Not thread-safe.
class ClusterState {
 public:
  explicit ClusterState(const std::vector<NodeInfo>& nodes);

  int num_nodes() const { return static_cast<int>(free_gpus_.size()); }
  const NodeInfo& node(int n) const { return (*nodes_)[n]; }
  int free_gpus(int n) const { return free_gpus_[n]; }
  int free_cpus(int n) const { return free_cpus_[n]; }
  int64_t free_memory(int n) const { return free_memory_[n]; }
  bool gpu_free(int n, int gpu) const;
  int max_node_gpus() const { return static_cast<int>(buckets_.size()) - 1; }

  // Nodes with exactly `k` free GPUs, in no particular (but deterministic) order.
  const std::vector<int>& NodesWithFreeGpus(int k) const { return buckets_[k]; }
  int CountNodesWithFreeGpusAtLeast(int k) const;
  int LargestFreeGpuBlock() const;
  // The `count` lowest-numbered free GPUs of node `n` (fewer if it has fewer).
  std::vector<int> LowestFreeGpuIds(int n, int count) const;

  // Marks `a` busy. Running jobs' placements are trusted: GPUs that are out of
  // range or already busy are skipped (the return value is false then), and CPUs
  // and memory may go below zero, meaning nothing more fits there.
  bool Allocate(const NodeAllocation& a);
  // Marks `a` free again; the inverse of Allocate for an allocation that was valid.
  void Release(const NodeAllocation& a);
  void Allocate(const Placement& p);
  void Release(const Placement& p);

 private:
  void Rebucket(int n, int old_free);

  const std::vector<NodeInfo>* nodes_;
  std::vector<int> free_gpus_;
  std::vector<int> free_cpus_;
  std::vector<int64_t> free_memory_;
  std::vector<uint32_t> gpu_word_begin_;  // node n's free-GPU bits: words [begin[n], begin[n+1])
  std::vector<uint64_t> gpu_free_bits_;
  std::vector<std::vector<int>> buckets_;  // [free GPUs] -> nodes
  std::vector<int> bucket_pos_;            // node -> index in its bucket
};

// Upper bounds on what may be taken from some nodes (at most a few dozen), on top
// of what is free: backfill uses them to keep a reservation's resources whole.
class NodeLimits {
 public:
  struct Limit {
    int node = 0;
    int gpus = 0;
    int cpus = 0;
    int64_t memory_bytes = 0;
  };

  explicit NodeLimits(int num_nodes) : slot_(num_nodes, -1) {}
  void Set(const Limit& limit);
  const Limit* Find(int node) const { return slot_[node] < 0 ? nullptr : &limits_[slot_[node]]; }
  const std::vector<Limit>& limits() const { return limits_; }
  // Lowers the limits of the nodes `p` uses by what it takes there.
  void Consume(const Placement& p);

 private:
  std::vector<int> slot_;  // node -> index in limits_, or -1
  std::vector<Limit> limits_;
};

struct PlacementConstraints {
  std::span<const int> excluded_nodes;  // sorted node indices that are never used
  const NodeLimits* limits = nullptr;   // when set, caps what limited nodes may give
};

// Where a job goes. Place() returns a gang-complete placement (exactly
// request.nodes distinct nodes, each with gpus_per_node concrete free GPU ids,
// cpus_per_node CPUs and the memory) or nullopt when none exists in `state`.
class PlacementPolicy {
 public:
  virtual ~PlacementPolicy() = default;
  virtual std::optional<Placement> Place(const ClusterState& state, const ResourceRequest& request,
                                         const PlacementConstraints& constraints) const = 0;
};

// The default: best fit. Each node taken is one whose (limited) free GPU count is
// the smallest that fits; among equals, the bucket's order.
class BestFitPlacement : public PlacementPolicy {
 public:
  std::optional<Placement> Place(const ClusterState& state, const ResourceRequest& request,
                                 const PlacementConstraints& constraints) const override;
};

// In which order the queue is considered. Returns indices into input.queued; every
// index exactly once.
class QueueOrderPolicy {
 public:
  virtual ~QueueOrderPolicy() = default;
  virtual std::vector<int> Order(const SchedulerInput& input) const = 0;
};

// The default: priority descending; then fair share, ascending
//   (project_usage + running_charge_seconds * GPUs the project's running jobs hold)
//   / project_weight
// (a running job without GPUs counts CPUs / kCpusPerGpuShare); then submit_seq. The charge turns
// "currently holds" into usage units: each running GPU counts as that many
// GPU-seconds (default one hour), so a project that holds the pool yields to one
// that holds nothing before its decayed usage has caught up.
class PriorityFairShareOrder : public QueueOrderPolicy {
 public:
  explicit PriorityFairShareOrder(double running_charge_seconds = kDefaultRunningChargeSeconds)
      : running_charge_seconds_(running_charge_seconds) {}
  std::vector<int> Order(const SchedulerInput& input) const override;

 private:
  double running_charge_seconds_;
};

struct PreemptionRequest {
  // Free resources with stopping jobs already released; the policy copies it for
  // what-if views.
  const ClusterState* state = nullptr;
  const QueuedJob* job = nullptr;
  const std::vector<RunningJob>* running = nullptr;
  const PlacementPolicy* placement = nullptr;
  PlacementConstraints constraints;
};

// Which running jobs to stop so that a blocked job fits. Returns indices into
// *request.running (each preemptible, not stopping, and of lower priority than
// the job), or nullopt when no allowed set makes room.
class PreemptionPolicy {
 public:
  virtual ~PreemptionPolicy() = default;
  virtual std::optional<std::vector<int>> ChooseVictims(const PreemptionRequest& request) const = 0;
};

// The default: takes candidates lowest priority first, then most recently started,
// until the job fits; then drops every victim not needed (trying the costliest
// first), so the set is minimal: no victim can be spared.
class LowestPriorityNewestFirstPreemption : public PreemptionPolicy {
 public:
  std::optional<std::vector<int>> ChooseVictims(const PreemptionRequest& request) const override;
};

struct SchedulerOptions {
  // Null members get the defaults above.
  std::shared_ptr<const QueueOrderPolicy> queue_order;
  std::shared_ptr<const PlacementPolicy> placement;
  std::shared_ptr<const PreemptionPolicy> preemption;
  bool enable_backfill = true;
  bool enable_preemption = true;
};

class Scheduler {
 public:
  explicit Scheduler(SchedulerOptions options = {});

  // One pass; pure. Running placements are taken as given (see ClusterState).
  SchedulingResult Schedule(const SchedulerInput& input) const;

 private:
  SchedulerOptions options_;
};

// "in 5m", "in 2h 5m", "in 3d 4h": how far `at_ms` is from `now_ms`, for reasons.
std::string FormatWait(int64_t now_ms, int64_t at_ms);

}  // namespace trainyard::jobs
