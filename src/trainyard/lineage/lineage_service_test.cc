// LineageStore and LineageService on every backend (in-memory SQLite and a throwaway
// PostgreSQL): recording is idempotent, table reads and writes become edges (with column
// mappings), queries walk the stored graph bounded and cycle safe, unknown objects are
// NotFound, and nodes the caller may not read come back redacted.
#include "trainyard/lineage/lineage_service.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <set>

#include "trainyard/testing/status_matchers.h"
#include "trainyard/testing/test_database.h"

namespace trainyard::lineage {
namespace {

using identity::Action;
using identity::Principal;
using identity::Securable;

// Denies READ on the securables whose id is listed; allows everything else.
class FakeAuthorizer : public identity::Authorizer {
 public:
  std::set<std::string> denied;
  Status Authorize(const Principal& who, Action, const Securable& what) override {
    if (denied.count(what.id) > 0 && !who.is_admin) {
      return Status::PermissionDenied("no READ on " + what.type + " " + what.id);
    }
    return Status::Ok();
  }
  Status Authorize(const Principal& who, Action a, const Securable& what,
                   const Securable&) override {
    return Authorize(who, a, what);
  }
};

// Knows runs, jobs and model versions it was told about; the rest is NotFound.
class FakeDirectory : public ObjectDirectory {
 public:
  std::map<std::string, ObjectAccess> known;
  Result<ObjectAccess> Find(const NodeRef& node) override {
    auto it = known.find(FormatNodeRef(node));
    if (it == known.end()) return Status::NotFound("no " + FormatNodeRef(node));
    return it->second;
  }
  void Add(const NodeRef& node, const std::string& experiment) {
    known[FormatNodeRef(node)] = {{"experiment", experiment, "alice"},
                                  {std::string(NodeTypeName(node.type)), node.key, "alice"},
                                  "name of " + node.key};
  }
};

NodeRef Table(const std::string& name, int64_t v) { return {NodeType::kTable, name, v}; }
NodeRef RunNode(const std::string& id) { return {NodeType::kRun, id, std::nullopt}; }
NodeRef JobNode(const std::string& id) { return {NodeType::kJob, id, std::nullopt}; }
NodeRef Model(const std::string& name, int64_t v) { return {NodeType::kModelVersion, name, v}; }

EdgeRecord Rec(NodeRef from, NodeRef to, EdgeKind kind) {
  EdgeRecord r;
  r.from = std::move(from);
  r.to = std::move(to);
  r.kind = kind;
  return r;
}

std::set<std::string> Ids(const LineageGraph& g) {
  std::set<std::string> out;
  for (const auto& n : g.nodes) out.insert(n.id);
  return out;
}

class LineageServiceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto db = store::OpenTestDatabase(GetParam(), LineageService::Migrations());
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    db_ = std::move(db).value();
    service_ = std::make_unique<LineageService>(*db_, clock_, authz_, directory_);
    store_ = std::make_unique<LineageStore>(*db_);
  }

  // table@7 -read-> run r1 <-logged_to- job j1; r1 -produced-> m@1
  void RecordTrainingChain() {
    TableReadRecord read{"main.support.train", 7, RunNode("r1"), "j1", "r1"};
    TY_ASSERT_OK(service_->RecordTableRead(alice_, read));
    TY_ASSERT_OK(service_->Record(alice_, Rec(JobNode("j1"), RunNode("r1"), EdgeKind::kLoggedTo)));
    TY_ASSERT_OK(service_->Record(alice_, Rec(RunNode("r1"), Model("m", 1), EdgeKind::kProduced)));
    directory_.Add(RunNode("r1"), "1");
    directory_.Add(JobNode("j1"), "1");
    directory_.Add(Model("m", 1), "1");
  }

  FakeClock clock_{1000};
  FakeAuthorizer authz_;
  FakeDirectory directory_;
  std::unique_ptr<store::Database> db_;
  std::unique_ptr<LineageService> service_;
  std::unique_ptr<LineageStore> store_;
  Principal alice_{"alice", false, "", ""};
  Principal bob_{"bob", false, "", ""};
};

TEST_P(LineageServiceTest, SameEdgeTwiceIsOneEdgeAndKeepsTheFirstRecord) {
  EdgeRecord r = Rec(JobNode("j1"), RunNode("r1"), EdgeKind::kLoggedTo);
  r.to_display = "first";
  TY_ASSERT_OK(service_->Record(alice_, r));
  clock_.AdvanceMillis(500);
  r.to_display = "second";
  TY_ASSERT_OK(service_->Record(bob_, r));
  TY_ASSERT_OK_AND_ASSIGN(auto edges, store_->EdgesOf({"job:j1"}, Direction::kDownstream, 10));
  ASSERT_EQ(edges.size(), 1u);
  EXPECT_EQ(edges[0].recorded_by, "alice");
  EXPECT_EQ(edges[0].created_at, 1000);
  TY_ASSERT_OK_AND_ASSIGN(StoredNode run, store_->GetNode(RunNode("r1")));
  EXPECT_EQ(run.display_name, "first");
  // A different kind between the same nodes is another edge.
  TY_ASSERT_OK_AND_ASSIGN(
      int64_t added,
      store_->RecordEdges(
          {NewEdge{Edge{JobNode("j1"), RunNode("r1"), EdgeKind::kLoggedTo, "", "", {}, 5, "carol"},
                   "", ""}}));
  EXPECT_EQ(added, 0);
}

TEST_P(LineageServiceTest, MalformedEdgesAreRejectedAndNothingIsWritten) {
  TableWriteRecord write;
  write.table = "main.clean.t";
  write.version = 2;
  write.writer = JobNode("j1");
  write.sources = {{"main.raw.t", 1, {}}, {"not a table", 1, {}}};
  TY_EXPECT_ERROR(service_->RecordTableWrite(alice_, write), StatusCode::kInvalidArgument, "from");
  EXPECT_TRUE(store_->GetNode(JobNode("j1")).status().IsNotFound());  // all or nothing
  TY_EXPECT_ERROR(
      service_->Record(alice_, Rec(RunNode("r1"), Table("main.s.t", 1), EdgeKind::kServes)),
      StatusCode::kInvalidArgument, "kind");
}

TEST_P(LineageServiceTest, UpstreamOfAModelVersionReachesRunJobAndTableVersion) {
  RecordTrainingChain();
  TY_ASSERT_OK_AND_ASSIGN(LineageGraph g, service_->Upstream(alice_, Model("m", 1)));
  EXPECT_EQ(g.root, "model_version:m@1");
  EXPECT_EQ(Ids(g), (std::set<std::string>{"model_version:m@1", "run:r1", "job:j1",
                                           "table:main.support.train@7"}));
  EXPECT_EQ(g.edges.size(), 3u);
  EXPECT_FALSE(g.truncated);
  for (const auto& n : g.nodes) {
    if (n.id == "run:r1") {
      EXPECT_EQ(n.display_name, "name of r1");
    }
  }
  TY_ASSERT_OK_AND_ASSIGN(g, service_->Downstream(alice_, Table("main.support.train", 7)));
  EXPECT_EQ(Ids(g),
            (std::set<std::string>{"table:main.support.train@7", "run:r1", "model_version:m@1"}));
  // Another version of the table has no lineage of its own.
  TY_EXPECT_ERROR(service_->Downstream(alice_, Table("main.support.train", 8)),
                  StatusCode::kNotFound, "main.support.train@8");
}

TEST_P(LineageServiceTest, TableWritesRecordDerivationWithColumnMappings) {
  TableWriteRecord write;
  write.table = "main.support.train";
  write.version = 7;
  write.writer = JobNode("prep");
  write.sources = {{"main.support.tickets", 3, {{"prompt", {"subject", "body"}}}}};
  TY_ASSERT_OK(service_->RecordTableWrite(alice_, write));
  TY_ASSERT_OK_AND_ASSIGN(LineageGraph g,
                          service_->Upstream(alice_, Table("main.support.train", 7)));
  EXPECT_EQ(Ids(g), (std::set<std::string>{"table:main.support.train@7", "job:prep",
                                           "table:main.support.tickets@3"}));
  bool mapped = false;
  for (const auto& e : g.edges) {
    if (e.kind == EdgeKind::kDerivedFrom) {
      mapped = e.columns.at("prompt") == std::vector<std::string>{"subject", "body"};
    }
  }
  EXPECT_TRUE(mapped);
}

TEST_P(LineageServiceTest, UnknownObjectsAreNotFoundAndBadLimitsInvalid) {
  TY_EXPECT_ERROR(service_->Upstream(alice_, RunNode("nope")), StatusCode::kNotFound, "run:nope");
  directory_.Add(RunNode("lonely"), "1");
  TY_ASSERT_OK_AND_ASSIGN(LineageGraph g, service_->Upstream(alice_, RunNode("lonely")));
  EXPECT_EQ(g.nodes.size(), 1u);  // known to tracking, no lineage yet
  TraversalLimits limits;
  limits.max_depth = 0;
  TY_EXPECT_ERROR(service_->Upstream(alice_, RunNode("lonely"), limits),
                  StatusCode::kInvalidArgument, "depth");
}

TEST_P(LineageServiceTest, NodesTheReaderMayNotSeeAreRedacted) {
  RecordTrainingChain();
  authz_.denied = {"table:main.support.train@7"};
  TY_ASSERT_OK_AND_ASSIGN(LineageGraph g, service_->Upstream(bob_, Model("m", 1)));
  ASSERT_EQ(g.nodes.size(), 4u);
  int redacted = 0;
  for (const auto& n : g.nodes) {
    if (!n.redacted) continue;
    ++redacted;
    EXPECT_EQ(n.ref.type, NodeType::kTable);
    EXPECT_TRUE(n.ref.key.empty());
    EXPECT_EQ(n.id.find("support"), std::string::npos);
  }
  EXPECT_EQ(redacted, 1);
  for (const auto& e : g.edges) {
    EXPECT_EQ(e.from.find("support"), std::string::npos);
    if (e.from.rfind("redacted:", 0) == 0) {
      EXPECT_TRUE(e.run_id.empty());
    }
  }
  // The start itself must be readable.
  TY_EXPECT_ERROR(service_->Downstream(bob_, Table("main.support.train", 7)),
                  StatusCode::kPermissionDenied, "no READ");
  Principal admin = Principal::System();
  TY_ASSERT_OK_AND_ASSIGN(g, service_->Upstream(admin, Model("m", 1)));
  for (const auto& n : g.nodes) EXPECT_FALSE(n.redacted);
}

TEST_P(LineageServiceTest, CyclesAndHubsStayBounded) {
  TY_ASSERT_OK(service_->Record(
      alice_, Rec(Table("main.a.t", 1), Table("main.b.t", 1), EdgeKind::kDerivedFrom)));
  TY_ASSERT_OK(service_->Record(
      alice_, Rec(Table("main.b.t", 1), Table("main.a.t", 1), EdgeKind::kDerivedFrom)));
  TraversalLimits deep;
  deep.max_depth = kMaxDepth;
  TY_ASSERT_OK_AND_ASSIGN(LineageGraph g,
                          service_->Query(alice_, {Table("main.a.t", 1), Direction::kBoth, deep}));
  EXPECT_EQ(g.nodes.size(), 2u);
  EXPECT_EQ(g.edges.size(), 2u);
  for (int i = 0; i < 30; ++i) {
    TY_ASSERT_OK(service_->RecordTableRead(
        alice_, {"main.hub.t", 1, RunNode("r" + std::to_string(i)), "", ""}));
  }
  TraversalLimits small;
  small.max_nodes = 5;
  TY_ASSERT_OK_AND_ASSIGN(g, service_->Downstream(alice_, Table("main.hub.t", 1), small));
  EXPECT_EQ(g.nodes.size(), 5u);
  EXPECT_TRUE(g.truncated);
}

INSTANTIATE_TEST_SUITE_P(Backends, LineageServiceTest, ::testing::Values("sqlite", "postgres"),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace trainyard::lineage
