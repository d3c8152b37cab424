// Traverse without a database: edges from an in-memory list. Depth and node bounds stop the
// walk and say so, cycles terminate, kinds filter, and both directions are separate walks.
#include "trainyard/lineage/traversal.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "trainyard/testing/status_matchers.h"

namespace trainyard::lineage {
namespace {

NodeRef Table(const std::string& name, int64_t v) { return {NodeType::kTable, name, v}; }
NodeRef RunNode(const std::string& id) { return {NodeType::kRun, id, std::nullopt}; }
NodeRef JobNode(const std::string& id) { return {NodeType::kJob, id, std::nullopt}; }
NodeRef Model(const std::string& name, int64_t v) { return {NodeType::kModelVersion, name, v}; }

Edge E(NodeRef from, NodeRef to, EdgeKind kind) {
  Edge e;
  e.from = std::move(from);
  e.to = std::move(to);
  e.kind = kind;
  return e;
}

class FakeEdges {
 public:
  explicit FakeEdges(std::vector<Edge> edges) : edges_(std::move(edges)) {}
  EdgeSource Source() {
    return [this](const std::vector<std::string>& ids, Direction d,
                  size_t limit) -> Result<std::vector<Edge>> {
      ++calls_;
      std::set<std::string> want(ids.begin(), ids.end());
      std::vector<Edge> out;
      for (const auto& e : edges_) {
        const NodeRef& end = d == Direction::kUpstream ? e.to : e.from;
        if (want.count(FormatNodeRef(end)) > 0 && out.size() < limit) out.push_back(e);
      }
      return out;
    };
  }
  int calls() const { return calls_; }

 private:
  std::vector<Edge> edges_;
  int calls_ = 0;
};

std::set<std::string> Ids(const Traversal& t) {
  std::set<std::string> out;
  for (const auto& n : t.nodes) out.insert(FormatNodeRef(n.ref));
  return out;
}

// raw@1 -> clean@2 -> job -> run -> model@1
std::vector<Edge> Chain() {
  return {E(Table("main.raw.t", 1), Table("main.clean.t", 2), EdgeKind::kDerivedFrom),
          E(Table("main.clean.t", 2), JobNode("j1"), EdgeKind::kRead),
          E(JobNode("j1"), RunNode("r1"), EdgeKind::kLoggedTo),
          E(RunNode("r1"), Model("m", 1), EdgeKind::kProduced)};
}

TEST(TraverseTest, UpstreamReachesEveryAncestorWithDepths) {
  FakeEdges edges(Chain());
  TY_ASSERT_OK_AND_ASSIGN(Traversal t,
                          Traverse(Model("m", 1), Direction::kUpstream, {}, edges.Source()));
  EXPECT_EQ(Ids(t), (std::set<std::string>{"model_version:m@1", "run:r1", "job:j1",
                                           "table:main.clean.t@2", "table:main.raw.t@1"}));
  EXPECT_EQ(t.nodes[0].depth, 0);
  EXPECT_EQ(t.nodes.back().depth, 4);
  EXPECT_EQ(t.edges.size(), 4u);
  EXPECT_FALSE(t.truncated);
}

TEST(TraverseTest, DepthBoundStopsAndSaysTruncated) {
  FakeEdges edges(Chain());
  TraversalLimits limits;
  limits.max_depth = 2;
  TY_ASSERT_OK_AND_ASSIGN(Traversal t,
                          Traverse(Model("m", 1), Direction::kUpstream, limits, edges.Source()));
  EXPECT_EQ(Ids(t), (std::set<std::string>{"model_version:m@1", "run:r1", "job:j1"}));
  EXPECT_TRUE(t.truncated);
  limits.max_depth = 4;
  TY_ASSERT_OK_AND_ASSIGN(t, Traverse(Model("m", 1), Direction::kUpstream, limits, edges.Source()));
  EXPECT_FALSE(t.truncated);  // exactly deep enough
}

TEST(TraverseTest, CyclesTerminateAndEachEdgeAppearsOnce) {
  std::vector<Edge> cycle = {E(Table("main.a.t", 1), Table("main.b.t", 1), EdgeKind::kDerivedFrom),
                             E(Table("main.b.t", 1), Table("main.c.t", 1), EdgeKind::kDerivedFrom),
                             E(Table("main.c.t", 1), Table("main.a.t", 1), EdgeKind::kDerivedFrom)};
  FakeEdges edges(cycle);
  TraversalLimits limits;
  limits.max_depth = kMaxDepth;
  TY_ASSERT_OK_AND_ASSIGN(
      Traversal t, Traverse(Table("main.a.t", 1), Direction::kDownstream, limits, edges.Source()));
  EXPECT_EQ(t.nodes.size(), 3u);
  EXPECT_EQ(t.edges.size(), 3u);
  EXPECT_FALSE(t.truncated);
  EXPECT_LE(edges.calls(), 4);
}

TEST(TraverseTest, NodeBoundKeepsTheNearestAndSaysTruncated) {
  std::vector<Edge> fan;
  for (int i = 0; i < 50; ++i) {
    fan.push_back(E(Table("main.s.t", 3), RunNode("r" + std::to_string(i)), EdgeKind::kRead));
  }
  FakeEdges edges(fan);
  TraversalLimits limits;
  limits.max_nodes = 10;
  TY_ASSERT_OK_AND_ASSIGN(
      Traversal t, Traverse(Table("main.s.t", 3), Direction::kDownstream, limits, edges.Source()));
  EXPECT_EQ(t.nodes.size(), 10u);
  EXPECT_EQ(t.edges.size(), 9u);
  EXPECT_TRUE(t.truncated);
}

TEST(TraverseTest, KindsFilterAndBothDirections) {
  FakeEdges edges(Chain());
  TraversalLimits limits;
  limits.kinds = {EdgeKind::kLoggedTo, EdgeKind::kProduced};
  TY_ASSERT_OK_AND_ASSIGN(Traversal t,
                          Traverse(Model("m", 1), Direction::kUpstream, limits, edges.Source()));
  EXPECT_EQ(Ids(t), (std::set<std::string>{"model_version:m@1", "run:r1", "job:j1"}));
  TY_ASSERT_OK_AND_ASSIGN(t, Traverse(JobNode("j1"), Direction::kBoth, {}, edges.Source()));
  EXPECT_EQ(t.nodes.size(), 5u);
  TY_ASSERT_OK_AND_ASSIGN(t, Traverse(JobNode("j1"), Direction::kDownstream, {}, edges.Source()));
  EXPECT_EQ(Ids(t), (std::set<std::string>{"job:j1", "run:r1", "model_version:m@1"}));
}

TEST(TraverseTest, LimitsOutOfRangeAreRejected) {
  FakeEdges edges({});
  TraversalLimits limits;
  limits.max_depth = 0;
  TY_EXPECT_ERROR(Traverse(JobNode("j"), Direction::kUpstream, limits, edges.Source()),
                  StatusCode::kInvalidArgument, "depth");
  limits.max_depth = kMaxDepth + 1;
  TY_EXPECT_ERROR(Traverse(JobNode("j"), Direction::kUpstream, limits, edges.Source()),
                  StatusCode::kInvalidArgument, "depth");
  limits = {};
  limits.max_nodes = kMaxNodes + 1;
  TY_EXPECT_ERROR(Traverse(JobNode("j"), Direction::kUpstream, limits, edges.Source()),
                  StatusCode::kInvalidArgument, "max_nodes");
}

}  // namespace
}  // namespace trainyard::lineage
