// Traverse: the pure walk of the lineage graph from one node, upstream (against the edges)
// or downstream (along them), breadth first, to a bounded depth and a bounded number of
// nodes. Cycle safe: a node is visited once. No I/O of its own: edges come from the
// EdgeSource the caller passes (the store, or a map in tests).
#pragma once

#include <cstddef>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "trainyard/common/status.h"
#include "trainyard/lineage/types.h"

namespace trainyard::lineage {

inline constexpr int kMaxDepth = 100;
inline constexpr int kDefaultDepth = 10;
inline constexpr size_t kMaxNodes = 5000;
inline constexpr size_t kDefaultMaxNodes = 500;

struct TraversalLimits {
  int max_depth = kDefaultDepth;        // 1..kMaxDepth
  size_t max_nodes = kDefaultMaxNodes;  // the root included; 1..kMaxNodes
  std::set<EdgeKind> kinds;             // edges to follow; empty = all
};

// The edges that end at (upstream) or start from (downstream) any of `node_ids`, at most
// `limit` of them (more may exist: the walk then reports itself truncated).
using EdgeSource = std::function<Result<std::vector<Edge>>(const std::vector<std::string>& node_ids,
                                                           Direction direction, size_t limit)>;

struct VisitedNode {
  NodeRef ref;
  int depth = 0;  // hops from the root
};

struct Traversal {
  std::vector<VisitedNode> nodes;  // the root first, then by depth
  std::vector<Edge> edges;         // each edge between visited nodes once
  // Whether more lineage exists than was returned: the node or depth bound stopped the walk.
  bool truncated = false;
};

// Walks from `root` in `direction` (kUpstream or kDownstream; kBoth is the union of the two
// walks, each bounded separately and sharing the node bound). Errors are the EdgeSource's,
// or InvalidArgument for limits out of range.
Result<Traversal> Traverse(const NodeRef& root, Direction direction, const TraversalLimits& limits,
                           const EdgeSource& edges);

Status ValidateLimits(const TraversalLimits& limits);

}  // namespace trainyard::lineage
