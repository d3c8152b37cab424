#include "trainyard/lineage/traversal.h"

#include <map>
#include <tuple>

namespace trainyard::lineage {
namespace {

// The edges a walk may fetch per node it may still add: a hub (a table read by a million
// runs) is cut off here and the walk reports itself truncated.
constexpr size_t kEdgesPerNode = 4;

using EdgeKey = std::tuple<std::string, std::string, EdgeKind>;

EdgeKey KeyOf(const Edge& e) { return {FormatNodeRef(e.from), FormatNodeRef(e.to), e.kind}; }

struct Walk {
  const TraversalLimits& limits;
  const EdgeSource& source;
  Traversal out;
  std::map<std::string, size_t> index;  // node id → position in out.nodes
  std::set<EdgeKey> edge_keys;

  bool Full() const { return out.nodes.size() >= limits.max_nodes; }

  bool AddNode(const NodeRef& ref, int depth) {
    std::string id = FormatNodeRef(ref);
    if (index.count(id) > 0) return false;
    index[id] = out.nodes.size();
    out.nodes.push_back({ref, depth});
    return true;
  }

  void AddEdge(const Edge& e) {
    if (edge_keys.insert(KeyOf(e)).second) out.edges.push_back(e);
  }

  // One breadth-first walk; `seen` holds the ids this direction has expanded or queued.
  Status Run(const NodeRef& root, Direction direction) {
    std::vector<NodeRef> frontier = {root};
    std::set<std::string> seen = {FormatNodeRef(root)};
    for (int depth = 1; !frontier.empty(); ++depth) {
      std::vector<std::string> ids;
      for (const auto& n : frontier) ids.push_back(FormatNodeRef(n));
      size_t room = limits.max_nodes > out.nodes.size() ? limits.max_nodes - out.nodes.size() : 0;
      size_t limit = (room + 1) * kEdgesPerNode;
      TY_ASSIGN_OR_RETURN(std::vector<Edge> found, source(ids, direction, limit));
      if (found.size() >= limit) out.truncated = true;
      std::vector<NodeRef> next;
      for (const Edge& e : found) {
        if (!limits.kinds.empty() && limits.kinds.count(e.kind) == 0) continue;
        if (depth > limits.max_depth) {
          out.truncated = true;  // lineage continues past the depth bound
          return Status::Ok();
        }
        const NodeRef& other = direction == Direction::kUpstream ? e.from : e.to;
        std::string id = FormatNodeRef(other);
        if (index.count(id) == 0 && Full()) {
          out.truncated = true;
          continue;
        }
        AddNode(other, depth);
        AddEdge(e);
        if (seen.insert(id).second) next.push_back(other);
      }
      frontier = std::move(next);
    }
    return Status::Ok();
  }
};

}  // namespace

Status ValidateLimits(const TraversalLimits& limits) {
  if (limits.max_depth < 1 || limits.max_depth > kMaxDepth) {
    return Status::InvalidArgument("depth must be between 1 and " + std::to_string(kMaxDepth) +
                                   " (got " + std::to_string(limits.max_depth) + ")");
  }
  if (limits.max_nodes < 1 || limits.max_nodes > kMaxNodes) {
    return Status::InvalidArgument("max_nodes must be between 1 and " + std::to_string(kMaxNodes) +
                                   " (got " + std::to_string(limits.max_nodes) + ")");
  }
  return Status::Ok();
}

Result<Traversal> Traverse(const NodeRef& root, Direction direction, const TraversalLimits& limits,
                           const EdgeSource& edges) {
  TY_RETURN_IF_ERROR(ValidateLimits(limits));
  Walk walk{limits, edges, {}, {}, {}};
  walk.AddNode(root, 0);
  if (direction != Direction::kDownstream) {
    TY_RETURN_IF_ERROR(walk.Run(root, Direction::kUpstream));
  }
  if (direction != Direction::kUpstream) {
    TY_RETURN_IF_ERROR(walk.Run(root, Direction::kDownstream));
  }
  return std::move(walk.out);
}

}  // namespace trainyard::lineage
