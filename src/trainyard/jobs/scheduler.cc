#include "trainyard/jobs/scheduler.h"

#include <algorithm>
#include <bit>
#include <string_view>
#include <utility>

namespace trainyard::jobs {
namespace {

constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
constexpr int64_t kGiB = int64_t{1} << 30;
constexpr int64_t kMiB = int64_t{1} << 20;

std::string Plural(int64_t n, std::string_view one, std::string_view many) {
  return std::to_string(n) + " " + std::string(n == 1 ? one : many);
}

std::string FormatBytes(int64_t bytes) {
  if (bytes >= kGiB) {
    if (bytes % kGiB == 0) return std::to_string(bytes / kGiB) + " GiB";
    int64_t tenths = (bytes * 10 + kGiB / 2) / kGiB;
    return std::to_string(tenths / 10) + "." + std::to_string(tenths % 10) + " GiB";
  }
  if (bytes >= kMiB) return std::to_string(bytes / kMiB) + " MiB";
  return std::to_string(bytes) + " bytes";
}

Status ValidateRequest(const ResourceRequest& r) {
  if (r.nodes < 1) {
    return Status::InvalidArgument("resources.nodes must be at least 1 (got " +
                                   std::to_string(r.nodes) + ")");
  }
  if (r.gpus_per_node < 0) {
    return Status::InvalidArgument("resources.gpus_per_node must not be negative (got " +
                                   std::to_string(r.gpus_per_node) + ")");
  }
  if (r.cpus_per_node < 0) {
    return Status::InvalidArgument("resources.cpus_per_node must not be negative (got " +
                                   std::to_string(r.cpus_per_node) + ")");
  }
  if (r.memory_per_node_bytes < 0) {
    return Status::InvalidArgument("resources.memory_per_node_bytes must not be negative (got " +
                                   std::to_string(r.memory_per_node_bytes) + ")");
  }
  return Status::Ok();
}

// "4 GPUs, 8 CPUs and 64 GiB memory": what one node of the request needs.
std::string DescribePerNode(const ResourceRequest& r) {
  std::vector<std::string> parts;
  if (r.gpus_per_node > 0) parts.push_back(Plural(r.gpus_per_node, "GPU", "GPUs"));
  if (r.cpus_per_node > 0) parts.push_back(Plural(r.cpus_per_node, "CPU", "CPUs"));
  if (r.memory_per_node_bytes > 0)
    parts.push_back(FormatBytes(r.memory_per_node_bytes) + " memory");
  if (parts.empty()) return "nothing";
  std::string out = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) {
    out += (i + 1 == parts.size()) ? " and " : ", ";
    out += parts[i];
  }
  return out;
}

}  // namespace

std::string FormatWait(int64_t now_ms, int64_t at_ms) {
  int64_t s = std::max<int64_t>(0, at_ms - now_ms) / 1000;
  if (s < 60) return "in " + std::to_string(s) + "s";
  int64_t m = s / 60;
  if (m < 60) return "in " + std::to_string(m) + "m";
  int64_t h = m / 60;
  if (h < 24) {
    return "in " + std::to_string(h) + "h" + (m % 60 ? " " + std::to_string(m % 60) + "m" : "");
  }
  int64_t d = h / 24;
  return "in " + std::to_string(d) + "d" + (h % 24 ? " " + std::to_string(h % 24) + "h" : "");
}

Status CheckFeasible(const std::vector<NodeInfo>& nodes, const ResourceRequest& request) {
  TY_RETURN_IF_ERROR(ValidateRequest(request));
  const int want = request.nodes;
  const std::string need =
      "needs " + DescribePerNode(request) + " per node on " + Plural(want, "node", "nodes");
  if (nodes.empty()) {
    return Status::InvalidArgument(need + "; the pool has no nodes (add nodes to the pool)");
  }
  int qualifying = 0;
  int max_gpus = 0;
  int max_cpus = 0;
  int64_t max_memory = 0;
  for (const NodeInfo& n : nodes) {
    max_gpus = std::max(max_gpus, n.gpus);
    max_cpus = std::max(max_cpus, n.cpus);
    max_memory = std::max(max_memory, n.memory_bytes);
    if (n.gpus >= request.gpus_per_node && n.cpus >= request.cpus_per_node &&
        n.memory_bytes >= request.memory_per_node_bytes) {
      ++qualifying;
    }
  }
  if (qualifying >= want) return Status::Ok();
  const int pool = static_cast<int>(nodes.size());
  if (want > pool) {
    return Status::InvalidArgument(need + "; the pool has " + Plural(pool, "node", "nodes") +
                                   " (lower resources.nodes to at most " + std::to_string(pool) +
                                   ")");
  }
  const std::string on = " per node on " + Plural(want, "node", "nodes");
  if (request.gpus_per_node > max_gpus) {
    return Status::InvalidArgument("needs " + Plural(request.gpus_per_node, "GPU", "GPUs") + on +
                                   "; the largest node has " + Plural(max_gpus, "GPU", "GPUs") +
                                   " (lower resources.gpus_per_node and use more nodes)");
  }
  if (request.cpus_per_node > max_cpus) {
    return Status::InvalidArgument("needs " + Plural(request.cpus_per_node, "CPU", "CPUs") + on +
                                   "; the largest node has " + Plural(max_cpus, "CPU", "CPUs") +
                                   " (lower resources.cpus_per_node)");
  }
  if (request.memory_per_node_bytes > max_memory) {
    return Status::InvalidArgument("needs " + FormatBytes(request.memory_per_node_bytes) +
                                   " memory" + on + "; the largest node has " +
                                   FormatBytes(max_memory) +
                                   " memory (lower resources.memory_per_node)");
  }
  return Status::InvalidArgument(need + "; only " + Plural(qualifying, "node", "nodes") +
                                 " of the pool " + (qualifying == 1 ? "has" : "have") +
                                 " that much (use fewer nodes or smaller ones)");
}

// ---------------------------------------------------------------------------
// ClusterState

ClusterState::ClusterState(const std::vector<NodeInfo>& nodes) : nodes_(&nodes) {
  const size_t n = nodes.size();
  free_gpus_.resize(n);
  free_cpus_.resize(n);
  free_memory_.resize(n);
  gpu_word_begin_.resize(n + 1);
  bucket_pos_.resize(n);
  int max_gpus = 0;
  uint32_t words = 0;
  for (size_t i = 0; i < n; ++i) {
    const int g = std::max(0, nodes[i].gpus);
    free_gpus_[i] = g;
    free_cpus_[i] = std::max(0, nodes[i].cpus);
    free_memory_[i] = std::max<int64_t>(0, nodes[i].memory_bytes);
    gpu_word_begin_[i] = words;
    words += static_cast<uint32_t>((g + 63) / 64);
    max_gpus = std::max(max_gpus, g);
  }
  gpu_word_begin_[n] = words;
  gpu_free_bits_.assign(words, 0);
  buckets_.assign(static_cast<size_t>(max_gpus) + 1, {});
  for (size_t i = 0; i < n; ++i) {
    const int g = free_gpus_[i];
    for (int w = 0; w < g / 64; ++w) gpu_free_bits_[gpu_word_begin_[i] + w] = ~uint64_t{0};
    if (g % 64) gpu_free_bits_[gpu_word_begin_[i] + g / 64] = (uint64_t{1} << (g % 64)) - 1;
    bucket_pos_[i] = static_cast<int>(buckets_[g].size());
    buckets_[g].push_back(static_cast<int>(i));
  }
}

bool ClusterState::gpu_free(int n, int gpu) const {
  if (gpu < 0 || gpu >= std::max(0, node(n).gpus)) return false;
  return (gpu_free_bits_[gpu_word_begin_[n] + gpu / 64] >> (gpu % 64)) & 1;
}

int ClusterState::CountNodesWithFreeGpusAtLeast(int k) const {
  if (k <= 0) return num_nodes();
  int count = 0;
  for (size_t b = static_cast<size_t>(k); b < buckets_.size(); ++b) {
    count += static_cast<int>(buckets_[b].size());
  }
  return count;
}

int ClusterState::LargestFreeGpuBlock() const {
  for (int k = max_node_gpus(); k > 0; --k) {
    if (!buckets_[k].empty()) return k;
  }
  return 0;
}

std::vector<int> ClusterState::LowestFreeGpuIds(int n, int count) const {
  std::vector<int> ids;
  ids.reserve(static_cast<size_t>(std::max(0, count)));
  for (uint32_t w = gpu_word_begin_[n]; w < gpu_word_begin_[n + 1] && (int)ids.size() < count;
       ++w) {
    uint64_t bits = gpu_free_bits_[w];
    while (bits && static_cast<int>(ids.size()) < count) {
      ids.push_back(static_cast<int>((w - gpu_word_begin_[n]) * 64) + std::countr_zero(bits));
      bits &= bits - 1;
    }
  }
  return ids;
}

void ClusterState::Rebucket(int n, int old_free) {
  std::vector<int>& from = buckets_[old_free];
  const int pos = bucket_pos_[n];
  const int last = from.back();
  from[pos] = last;
  bucket_pos_[last] = pos;
  from.pop_back();
  std::vector<int>& to = buckets_[free_gpus_[n]];
  bucket_pos_[n] = static_cast<int>(to.size());
  to.push_back(n);
}

bool ClusterState::Allocate(const NodeAllocation& a) {
  if (a.node < 0 || a.node >= num_nodes()) return false;
  const int n = a.node;
  bool ok = true;
  const int old_free = free_gpus_[n];
  for (int gpu : a.gpu_ids) {
    if (!gpu_free(n, gpu)) {
      ok = false;
      continue;
    }
    gpu_free_bits_[gpu_word_begin_[n] + gpu / 64] &= ~(uint64_t{1} << (gpu % 64));
    --free_gpus_[n];
  }
  free_cpus_[n] -= a.cpus;
  free_memory_[n] -= a.memory_bytes;
  if (free_gpus_[n] != old_free) Rebucket(n, old_free);
  return ok;
}

void ClusterState::Release(const NodeAllocation& a) {
  if (a.node < 0 || a.node >= num_nodes()) return;
  const int n = a.node;
  const int old_free = free_gpus_[n];
  for (int gpu : a.gpu_ids) {
    if (gpu < 0 || gpu >= std::max(0, node(n).gpus) || gpu_free(n, gpu)) continue;
    gpu_free_bits_[gpu_word_begin_[n] + gpu / 64] |= uint64_t{1} << (gpu % 64);
    ++free_gpus_[n];
  }
  free_cpus_[n] += a.cpus;
  free_memory_[n] += a.memory_bytes;
  if (free_gpus_[n] != old_free) Rebucket(n, old_free);
}

void ClusterState::Allocate(const Placement& p) {
  for (const NodeAllocation& a : p) Allocate(a);
}

void ClusterState::Release(const Placement& p) {
  for (const NodeAllocation& a : p) Release(a);
}

// ---------------------------------------------------------------------------
// NodeLimits

void NodeLimits::Set(const Limit& limit) {
  int& slot = slot_[limit.node];
  if (slot < 0) {
    slot = static_cast<int>(limits_.size());
    limits_.push_back(limit);
  } else {
    limits_[slot] = limit;
  }
}

void NodeLimits::Consume(const Placement& p) {
  for (const NodeAllocation& a : p) {
    if (a.node < 0 || a.node >= static_cast<int>(slot_.size()) || slot_[a.node] < 0) continue;
    Limit& l = limits_[slot_[a.node]];
    l.gpus -= static_cast<int>(a.gpu_ids.size());
    l.cpus -= a.cpus;
    l.memory_bytes -= a.memory_bytes;
  }
}

// ---------------------------------------------------------------------------
// BestFitPlacement

std::optional<Placement> BestFitPlacement::Place(const ClusterState& state,
                                                 const ResourceRequest& request,
                                                 const PlacementConstraints& constraints) const {
  const int want = request.nodes;
  const int gpus = request.gpus_per_node;
  const int cpus = request.cpus_per_node;
  const int64_t memory = request.memory_per_node_bytes;
  if (want < 1 || gpus < 0 || cpus < 0 || memory < 0) return std::nullopt;
  if (gpus > state.max_node_gpus() || want > state.num_nodes()) return std::nullopt;
  // Limits and exclusions only take nodes away, so this count is an upper bound.
  if (state.CountNodesWithFreeGpusAtLeast(gpus) < want) return std::nullopt;

  const std::span<const int> excluded = constraints.excluded_nodes;
  auto is_excluded = [excluded](int n) {
    return !excluded.empty() && std::binary_search(excluded.begin(), excluded.end(), n);
  };
  const NodeLimits* limits = constraints.limits;
  std::vector<int> chosen;
  chosen.reserve(static_cast<size_t>(want));
  const size_t target = static_cast<size_t>(want);
  for (int k = gpus; k <= state.max_node_gpus() && chosen.size() < target; ++k) {
    if (limits != nullptr) {
      for (const NodeLimits::Limit& l : limits->limits()) {
        if (chosen.size() == target) break;
        const int n = l.node;
        if (std::min(state.free_gpus(n), l.gpus) != k || is_excluded(n)) continue;
        if (std::min(state.free_cpus(n), l.cpus) < cpus) continue;
        if (std::min(state.free_memory(n), l.memory_bytes) < memory) continue;
        chosen.push_back(n);
      }
    }
    for (int n : state.NodesWithFreeGpus(k)) {
      if (chosen.size() == target) break;
      if (state.free_cpus(n) < cpus || state.free_memory(n) < memory) continue;
      if (limits != nullptr && limits->Find(n) != nullptr) continue;
      if (is_excluded(n)) continue;
      chosen.push_back(n);
    }
  }
  if (chosen.size() < target) return std::nullopt;
  Placement placement;
  placement.reserve(target);
  for (int n : chosen) {
    placement.push_back(NodeAllocation{n, state.LowestFreeGpuIds(n, gpus), cpus, memory});
  }
  return placement;
}

// ---------------------------------------------------------------------------
// PriorityFairShareOrder

std::vector<int> PriorityFairShareOrder::Order(const SchedulerInput& input) const {
  std::unordered_map<std::string_view, double> held;
  for (const RunningJob& r : input.running) {
    double gpus = 0;
    double cpus = 0;
    for (const NodeAllocation& a : r.placement) {
      gpus += static_cast<double>(a.gpu_ids.size());
      cpus += a.cpus;
    }
    held[r.project] += gpus > 0 ? gpus : cpus / kCpusPerGpuShare;
  }
  std::unordered_map<std::string_view, double> share_of;
  auto share = [&](const std::string& project) {
    auto it = share_of.find(project);
    if (it != share_of.end()) return it->second;
    double usage = 0;
    if (auto u = input.project_usage.find(project); u != input.project_usage.end()) {
      usage = u->second;
    }
    if (auto h = held.find(project); h != held.end()) usage += running_charge_seconds_ * h->second;
    double weight = 1;
    if (auto w = input.project_weights.find(project);
        w != input.project_weights.end() && w->second > 0) {
      weight = w->second;
    }
    const double s = usage / weight;
    share_of.emplace(project, s);
    return s;
  };
  struct Key {
    int priority;
    double share;
    int64_t seq;
    int index;
  };
  std::vector<Key> keys;
  keys.reserve(input.queued.size());
  for (size_t i = 0; i < input.queued.size(); ++i) {
    const QueuedJob& j = input.queued[i];
    keys.push_back(Key{j.priority, share(j.project), j.submit_seq, static_cast<int>(i)});
  }
  std::sort(keys.begin(), keys.end(), [](const Key& a, const Key& b) {
    if (a.priority != b.priority) return a.priority > b.priority;
    if (a.share != b.share) return a.share < b.share;
    if (a.seq != b.seq) return a.seq < b.seq;
    return a.index < b.index;
  });
  std::vector<int> order;
  order.reserve(keys.size());
  for (const Key& k : keys) order.push_back(k.index);
  return order;
}

// ---------------------------------------------------------------------------
// LowestPriorityNewestFirstPreemption

std::optional<std::vector<int>> LowestPriorityNewestFirstPreemption::ChooseVictims(
    const PreemptionRequest& request) const {
  const std::vector<RunningJob>& running = *request.running;
  const QueuedJob& job = *request.job;
  std::vector<int> candidates;
  for (size_t i = 0; i < running.size(); ++i) {
    const RunningJob& r = running[i];
    if (r.preemptible && !r.stopping && r.priority < job.priority) {
      candidates.push_back(static_cast<int>(i));
    }
  }
  if (candidates.empty()) return std::nullopt;
  std::sort(candidates.begin(), candidates.end(), [&running](int a, int b) {
    const RunningJob& x = running[a];
    const RunningJob& y = running[b];
    if (x.priority != y.priority) return x.priority < y.priority;
    if (x.started_at_ms != y.started_at_ms) return x.started_at_ms > y.started_at_ms;
    return a < b;
  });
  auto fits = [&](const ClusterState& s) {
    return request.placement->Place(s, job.request, request.constraints).has_value();
  };
  ClusterState what_if = *request.state;
  std::vector<int> chosen;
  bool enough = false;
  for (int i : candidates) {
    what_if.Release(running[i].placement);
    chosen.push_back(i);
    if (fits(what_if)) {
      enough = true;
      break;
    }
  }
  if (!enough) return std::nullopt;
  // Spare whoever is not needed, costliest (last taken) first.
  std::vector<bool> keep(chosen.size(), true);
  for (size_t k = chosen.size(); k-- > 0;) {
    what_if.Allocate(running[chosen[k]].placement);
    if (fits(what_if)) {
      keep[k] = false;
    } else {
      what_if.Release(running[chosen[k]].placement);
    }
  }
  std::vector<int> victims;
  for (size_t k = 0; k < chosen.size(); ++k) {
    if (keep[k]) victims.push_back(chosen[k]);
  }
  return victims;
}

// ---------------------------------------------------------------------------
// Scheduler

namespace {

struct Reservation {
  const QueuedJob* job = nullptr;
  int64_t start_ms = kNever;  // kNever: only when running jobs without a time limit end
  Placement placement;
  NodeLimits limits;  // what the reserved nodes can give to jobs still running at start_ms
};

// One Schedule() call's working state.
class Pass {
 public:
  Pass(const SchedulerOptions& options, const SchedulerInput& input)
      : options_(options), in_(input), state_(input.nodes) {}

  SchedulingResult Run();

 private:
  struct Started {
    size_t start_index;  // into result_.starts
    int64_t end_ms;
  };

  std::optional<Placement> Place(const ClusterState& s, const QueuedJob& job,
                                 const PlacementConstraints& c) const {
    return options_.placement->Place(s, job.request, c);
  }
  std::vector<int> ResolveExcluded(const QueuedJob& job);
  const ClusterState& Empty();
  void Start(const QueuedJob& job, Placement placement, bool backfilled, int64_t end_ms);
  void Pend(const QueuedJob& job, std::string reason);
  // The first blocked job: preempts for it or reserves resources for it.
  std::optional<Reservation> Block(const QueuedJob& job, std::span<const int> excluded);
  std::optional<Reservation> ReserveByEndTimes(const QueuedJob& job, std::span<const int> excluded);
  Reservation MakeReservation(const QueuedJob& job, int64_t start_ms, Placement placement,
                              const ClusterState& at_start);
  // Why `job` cannot run anywhere (exclusions or the pool), or "" when it could.
  std::string NeverReason(const QueuedJob& job, std::span<const int> excluded);
  std::string ResourceReason(const QueuedJob& job, std::span<const int> excluded) const;
  std::string ReservedWhen(const Reservation& r) const;

  const SchedulerOptions& options_;
  const SchedulerInput& in_;
  ClusterState state_;
  std::optional<ClusterState> empty_;
  std::unordered_map<std::string_view, int> node_index_;
  std::vector<Started> started_;
  SchedulingResult result_;
};

std::vector<int> Pass::ResolveExcluded(const QueuedJob& job) {
  std::vector<int> out;
  if (job.excluded_nodes.empty()) return out;
  if (node_index_.empty()) {
    node_index_.reserve(in_.nodes.size());
    for (size_t i = 0; i < in_.nodes.size(); ++i) {
      node_index_.emplace(in_.nodes[i].name, static_cast<int>(i));
    }
  }
  for (const std::string& name : job.excluded_nodes) {
    if (auto it = node_index_.find(name); it != node_index_.end()) out.push_back(it->second);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

const ClusterState& Pass::Empty() {
  if (!empty_) empty_.emplace(in_.nodes);
  return *empty_;
}

void Pass::Start(const QueuedJob& job, Placement placement, bool backfilled, int64_t end_ms) {
  state_.Allocate(placement);
  started_.push_back(Started{result_.starts.size(), end_ms});
  result_.starts.push_back(StartDecision{job.id, std::move(placement), backfilled});
}

void Pass::Pend(const QueuedJob& job, std::string reason) {
  const int position = static_cast<int>(result_.pending.size()) + 1;
  result_.pending.push_back(PendingInfo{job.id, position, std::move(reason)});
}

std::string Pass::NeverReason(const QueuedJob& job, std::span<const int> excluded) {
  const ClusterState& empty = Empty();
  if (Place(empty, job, PlacementConstraints{excluded, nullptr})) return "";
  if (!excluded.empty() && Place(empty, job, PlacementConstraints{})) {
    return "excluded nodes leave too few candidates: needs " +
           Plural(job.request.nodes, "node", "nodes") + " with " + DescribePerNode(job.request) +
           " each, and " + Plural(static_cast<int64_t>(excluded.size()), "node is", "nodes are") +
           " excluded (exclude fewer nodes)";
  }
  Status feasible = CheckFeasible(in_.nodes, job.request);
  return "can never run on this pool: " +
         (feasible.ok() ? std::string("no set of nodes fits it") : feasible.message());
}

std::string Pass::ResourceReason(const QueuedJob& job, std::span<const int> excluded) const {
  const ResourceRequest& r = job.request;
  const int gpus = r.gpus_per_node;
  const std::string outside = excluded.empty() ? "" : " outside the excluded nodes";
  if (r.nodes == 1) {
    if (gpus > 0 && state_.LargestFreeGpuBlock() < gpus) {
      return "needs " + Plural(gpus, "GPU", "GPUs") + " on 1 node; largest free block is " +
             std::to_string(state_.LargestFreeGpuBlock());
    }
    return "needs " + DescribePerNode(r) + " on 1 node; no node" + outside +
           " has all of them free";
  }
  if (gpus > 0) {
    const int k = state_.CountNodesWithFreeGpusAtLeast(gpus);
    if (k < r.nodes) {
      return "needs " + std::to_string(r.nodes) + " nodes with " + std::to_string(gpus) +
             " free GPUs; " + std::to_string(k) +
             (k == 1 ? " such node is free" : " such nodes are free");
    }
  }
  return "needs " + std::to_string(r.nodes) + " nodes with " + DescribePerNode(r) +
         " free each; fewer nodes" + outside + " have that much free";
}

std::string Pass::ReservedWhen(const Reservation& r) const {
  if (r.start_ms == kNever) return "reserved from when running jobs end";
  if (r.start_ms <= in_.now_ms) return "reserved from now, as stopping jobs exit";
  return "reserved from " + FormatWait(in_.now_ms, r.start_ms);
}

Reservation Pass::MakeReservation(const QueuedJob& job, int64_t start_ms, Placement placement,
                                  const ClusterState& at_start) {
  Reservation r{&job, start_ms, std::move(placement), NodeLimits(state_.num_nodes())};
  for (const NodeAllocation& a : r.placement) {
    r.limits.Set(NodeLimits::Limit{
        a.node, at_start.free_gpus(a.node) - static_cast<int>(a.gpu_ids.size()),
        at_start.free_cpus(a.node) - a.cpus, at_start.free_memory(a.node) - a.memory_bytes});
  }
  return r;
}

std::optional<Reservation> Pass::ReserveByEndTimes(const QueuedJob& job,
                                                   std::span<const int> excluded) {
  struct Ending {
    int64_t at;
    const Placement* placement;
  };
  std::vector<Ending> ends;
  ends.reserve(in_.running.size() + started_.size());
  for (const RunningJob& r : in_.running) {
    int64_t at = r.stopping         ? in_.now_ms
                 : r.end_by_ms == 0 ? kNever
                                    : std::max(r.end_by_ms, in_.now_ms);
    ends.push_back(Ending{at, &r.placement});
  }
  for (const Started& s : started_) {
    ends.push_back(Ending{s.end_ms, &result_.starts[s.start_index].placement});
  }
  std::sort(ends.begin(), ends.end(), [](const Ending& a, const Ending& b) { return a.at < b.at; });
  ClusterState projected = state_;
  const PlacementConstraints c{excluded, nullptr};
  for (size_t i = 0; i < ends.size();) {
    const int64_t at = ends[i].at;
    for (; i < ends.size() && ends[i].at == at; ++i) projected.Release(*ends[i].placement);
    if (auto p = Place(projected, job, c)) {
      return MakeReservation(job, at, std::move(*p), projected);
    }
  }
  return std::nullopt;
}

std::optional<Reservation> Pass::Block(const QueuedJob& job, std::span<const int> excluded) {
  if (std::string never = NeverReason(job, excluded); !never.empty()) {
    Pend(job, std::move(never));
    return std::nullopt;  // the next blocked job may reserve instead
  }
  const PlacementConstraints c{excluded, nullptr};
  if (options_.enable_preemption) {
    const bool any_candidate =
        std::any_of(in_.running.begin(), in_.running.end(), [&job](const RunningJob& r) {
          return r.preemptible && !r.stopping && r.priority < job.priority;
        });
    if (any_candidate) {
      ClusterState soon = state_;
      for (const RunningJob& r : in_.running) {
        if (r.stopping) soon.Release(r.placement);
      }
      if (!Place(soon, job, c)) {
        PreemptionRequest request{&soon, &job, &in_.running, options_.placement.get(), c};
        if (auto victims = options_.preemption->ChooseVictims(request); victims) {
          for (int v : *victims) soon.Release(in_.running[v].placement);
          if (auto p = Place(soon, job, c)) {
            std::string names;
            for (size_t k = 0; k < victims->size(); ++k) {
              if (k == 5) {
                names += ", and " + std::to_string(victims->size() - 5) + " more";
                break;
              }
              if (k > 0) names += ", ";
              names += in_.running[(*victims)[k]].id;
              result_.preemptions.push_back(PreemptDecision{in_.running[(*victims)[k]].id, job.id});
            }
            for (size_t k = 5; k < victims->size(); ++k) {
              result_.preemptions.push_back(PreemptDecision{in_.running[(*victims)[k]].id, job.id});
            }
            Pend(job, "preempting " + std::to_string(victims->size()) +
                          " lower-priority job(s): " + names);
            return MakeReservation(job, in_.now_ms, std::move(*p), soon);
          }
        }
      }
    }
  }
  std::optional<Reservation> reservation = ReserveByEndTimes(job, excluded);
  std::string reason = ResourceReason(job, excluded);
  if (reservation) reason += "; " + ReservedWhen(*reservation);
  Pend(job, std::move(reason));
  return reservation;
}

SchedulingResult Pass::Run() {
  for (const RunningJob& r : in_.running) state_.Allocate(r.placement);
  const std::vector<int> order = options_.queue_order->Order(in_);
  std::optional<Reservation> reservation;
  for (int qi : order) {
    if (qi < 0 || qi >= static_cast<int>(in_.queued.size())) continue;
    const QueuedJob& job = in_.queued[qi];
    if (Status valid = ValidateRequest(job.request); !valid.ok()) {
      Pend(job, "invalid request: " + valid.message());
      continue;
    }
    const std::vector<int> excluded = ResolveExcluded(job);
    const int64_t end_ms = job.time_limit_ms > 0 ? in_.now_ms + job.time_limit_ms : kNever;
    if (!reservation) {
      if (auto p = Place(state_, job, PlacementConstraints{excluded, nullptr})) {
        Start(job, std::move(*p), false, end_ms);
      } else {
        reservation = Block(job, excluded);
      }
      continue;
    }
    // Behind the reservation: start only what cannot delay it.
    const bool ends_first =
        end_ms != kNever && reservation->start_ms != kNever && end_ms <= reservation->start_ms;
    if (options_.enable_backfill) {
      const PlacementConstraints c{excluded, ends_first ? nullptr : &reservation->limits};
      if (auto p = Place(state_, job, c)) {
        if (!ends_first) reservation->limits.Consume(*p);
        Start(job, std::move(*p), true, end_ms);
        continue;
      }
    }
    if (!excluded.empty() || job.request.gpus_per_node > state_.max_node_gpus() ||
        job.request.nodes > state_.num_nodes()) {
      if (std::string never = NeverReason(job, excluded); !never.empty()) {
        Pend(job, std::move(never));
        continue;
      }
    }
    const bool fits_now = (!options_.enable_backfill || !ends_first) &&
                          Place(state_, job, PlacementConstraints{excluded, nullptr}).has_value();
    if (fits_now) {
      const QueuedJob& holder = *reservation->job;
      Pend(job, (holder.priority > job.priority ? "waiting for higher-priority job "
                                                : "waiting for job ") +
                    holder.id + (holder.priority > job.priority ? "" : " ahead in the queue") +
                    " (" + ReservedWhen(*reservation) + ")");
    } else {
      Pend(job, ResourceReason(job, excluded));
    }
  }
  return std::move(result_);
}

}  // namespace

Scheduler::Scheduler(SchedulerOptions options) : options_(std::move(options)) {
  if (!options_.queue_order) options_.queue_order = std::make_shared<PriorityFairShareOrder>();
  if (!options_.placement) options_.placement = std::make_shared<BestFitPlacement>();
  if (!options_.preemption) {
    options_.preemption = std::make_shared<LowestPriorityNewestFirstPreemption>();
  }
}

SchedulingResult Scheduler::Schedule(const SchedulerInput& input) const {
  return Pass(options_, input).Run();
}

}  // namespace trainyard::jobs
