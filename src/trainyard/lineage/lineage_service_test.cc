// LineageStore and LineageService on every backend (in-memory SQLite and a throwaway
// PostgreSQL): recording is idempotent, table reads and writes become edges (with column
// mappings), queries walk the stored graph bounded and cycle safe, unknown objects are
// NotFound, and nodes the caller may not read come back redacted.
#include "trainyard/lineage/lineage_service.h"

#include <gmock/gmock.h>
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
                                  "name of " + node.key,
                                  nullptr};
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
  write.sources = {{"main.raw.t", 1, {}, {}}, {"not a table", 1, {}, {}}};
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
  write.sources = {{"main.support.tickets", 3, {{"prompt", {"subject", "body"}}}, {}}};
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

// An endpoint that served m@1, then m@2, then m@1 again, then nothing: every version keeps
// its serves edge, and only the current ones are open (ended_at 0).
TEST_P(LineageServiceTest, ServingKeepsHistoryAndMarksTheCurrentVersions) {
  RecordTrainingChain();
  TY_ASSERT_OK(service_->Record(alice_, Rec(RunNode("r1"), Model("m", 2), EdgeKind::kProduced)));
  directory_.Add(Model("m", 2), "1");
  NodeRef ep{NodeType::kEndpoint, "support-bot", std::nullopt};
  auto open_serves = [&]() {
    std::map<std::string, int64_t> out;  // model version -> ended_at
    auto g = service_->Upstream(alice_, ep, {});
    EXPECT_TRUE(g.ok()) << g.status().ToString();
    if (!g.ok()) return out;
    for (const auto& e : g->edges) {
      if (e.kind == EdgeKind::kServes) out[e.from] = e.ended_at;
    }
    return out;
  };
  TY_ASSERT_OK(service_->RecordServing(alice_, "support-bot", {{"m", 1}}));
  EXPECT_EQ(open_serves(), (std::map<std::string, int64_t>{{"model_version:m@1", 0}}));
  clock_.AdvanceMillis(1000);
  TY_ASSERT_OK(service_->RecordServing(alice_, "support-bot", {{"m", 2}}));
  EXPECT_EQ(open_serves(), (std::map<std::string, int64_t>{{"model_version:m@1", 2000},
                                                           {"model_version:m@2", 0}}));
  // Upstream of the endpoint reaches the whole training chain through both versions.
  TY_ASSERT_OK_AND_ASSIGN(LineageGraph g, service_->Upstream(alice_, ep, {}));
  EXPECT_EQ(Ids(g),
            (std::set<std::string>{"endpoint:support-bot", "model_version:m@1", "model_version:m@2",
                                   "run:r1", "job:j1", "table:main.support.train@7"}));
  TY_ASSERT_OK_AND_ASSIGN(g, service_->Downstream(alice_, Table("main.support.train", 7), {}));
  EXPECT_TRUE(Ids(g).count("endpoint:support-bot")) << g.nodes.size();
  clock_.AdvanceMillis(1000);
  TY_ASSERT_OK(service_->RecordServing(alice_, "support-bot", {{"m", 1}, {"m", 2}}));
  EXPECT_EQ(open_serves(),
            (std::map<std::string, int64_t>{{"model_version:m@1", 0}, {"model_version:m@2", 0}}));
  clock_.AdvanceMillis(1000);
  TY_ASSERT_OK(service_->RecordServing(alice_, "support-bot", {}));
  EXPECT_EQ(open_serves(), (std::map<std::string, int64_t>{{"model_version:m@1", 4000},
                                                           {"model_version:m@2", 4000}}));
  EXPECT_FALSE(service_->RecordServing(alice_, "", {{"m", 1}}).ok());
}

// The directory may hand the decision to the object's component (an endpoint's grants).
TEST_P(LineageServiceTest, AnEndpointIsVisibleToWhomItsComponentSays) {
  RecordTrainingChain();
  TY_ASSERT_OK(service_->RecordServing(alice_, "support-bot", {{"m", 1}}));
  NodeRef ep{NodeType::kEndpoint, "support-bot", std::nullopt};
  ObjectAccess access{{"endpoint", "support-bot", "alice"},
                      {"endpoint", "support-bot", "alice"},
                      "support-bot",
                      [](const Principal& who) {
                        return who.user == "alice" ? Status::Ok()
                                                   : Status::PermissionDenied("no QUERY");
                      }};
  directory_.known["endpoint:support-bot"] = access;
  TY_ASSERT_OK(service_->Upstream(alice_, ep, {}).status());
  EXPECT_THAT(service_->Upstream(bob_, ep, {}), StatusIs(StatusCode::kPermissionDenied));
  // From the model version, bob sees that some endpoint serves it, but not which.
  TY_ASSERT_OK_AND_ASSIGN(LineageGraph g, service_->Downstream(bob_, Model("m", 1), {}));
  ASSERT_EQ(g.nodes.size(), 2u);
  EXPECT_TRUE(g.nodes[1].redacted);
  EXPECT_EQ(g.nodes[1].ref.type, NodeType::kEndpoint);
}

// A table write with column transforms records each column's sources and transform; queries
// answer per column and name the field they reject.
TEST_P(LineageServiceTest, ColumnLineageOfATableWrite) {
  TableWriteRecord w;
  w.table = "main.support.train";
  w.version = 1;
  w.writer = RunNode("r1");
  w.run_id = "r1";
  TableSource src{"main.support.raw", 3, {}, {}};
  src.columns["text"] = {"question", "answer"};
  src.columns["input_ids"] = {"question", "answer"};
  src.columns["doc_id"] = {"ticket_id"};
  src.column_transforms = {{"text", "template"},
                           {"input_ids", "template+tokenize"},
                           {"doc_id", "doc_id"},
                           {"split", "prep_step"}};
  w.sources.push_back(src);
  TY_ASSERT_OK(service_->RecordTableWrite(alice_, w));
  TY_ASSERT_OK_AND_ASSIGN(auto all, service_->Columns(alice_, {"main.support.train", 1, ""}));
  ASSERT_EQ(all.size(), 4u);
  std::map<std::string, StoredColumn> by;
  for (auto& c : all) by[c.lineage.column] = c;
  EXPECT_EQ(by["text"].lineage.source_columns, (std::vector<std::string>{"question", "answer"}));
  EXPECT_EQ(by["text"].lineage.transform, "template");
  EXPECT_EQ(by["text"].lineage.source, Table("main.support.raw", 3));
  EXPECT_EQ(by["text"].run_id, "r1");
  EXPECT_EQ(by["text"].recorded_by, "alice");
  EXPECT_EQ(by["input_ids"].lineage.transform, "template+tokenize");
  EXPECT_TRUE(by["split"].lineage.source_columns.empty());
  TY_ASSERT_OK_AND_ASSIGN(auto one, service_->Columns(alice_, {"main.support.train", 1, "text"}));
  ASSERT_EQ(one.size(), 1u);
  // The derived_from edge carries the same mapping for the graph.
  TY_ASSERT_OK_AND_ASSIGN(LineageGraph g,
                          service_->Upstream(alice_, Table("main.support.train", 1), {}));
  EXPECT_TRUE(Ids(g).count("table:main.support.raw@3"));

  auto field_of = [&](ColumnLineageQuery q) {
    auto r = service_->Columns(alice_, q);
    return r.ok() ? std::string("ok") : r.status().message();
  };
  EXPECT_THAT(field_of({"main.support.train", 2, ""}), ::testing::StartsWith("table"));
  EXPECT_THAT(field_of({"main.support.nosuch", 1, ""}), ::testing::StartsWith("table"));
  EXPECT_THAT(field_of({"not-a-table", 1, ""}), ::testing::StartsWith("table"));
  EXPECT_THAT(field_of({"main.support.train", -1, ""}), ::testing::StartsWith("version"));
  EXPECT_THAT(field_of({"main.support.train", 1, "nosuch"}), ::testing::StartsWith("column"));
  EXPECT_THAT(service_->Columns(alice_, {"main.support.train", 2, ""}),
              StatusIs(StatusCode::kNotFound));
  // Reading the column lineage is reading the table.
  authz_.denied.insert("main.support.train");
  EXPECT_THAT(service_->Columns(bob_, {"main.support.train", 1, ""}),
              StatusIs(StatusCode::kPermissionDenied));

  authz_.denied.clear();
  // A malformed transform or a table deriving from itself records nothing at all.
  TableWriteRecord bad = w;
  bad.version = 2;
  bad.sources[0].column_transforms["text"] = "Template!";
  EXPECT_THAT(service_->RecordTableWrite(alice_, bad), StatusIs(StatusCode::kInvalidArgument));
  bad.sources[0].column_transforms["text"] = "template";
  bad.sources[0].table = "main.support.train";
  bad.sources[0].version = 2;
  EXPECT_THAT(service_->RecordTableWrite(alice_, bad), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(service_->Columns(alice_, {"main.support.train", 2, ""}),
              StatusIs(StatusCode::kNotFound));
}

TEST(ColumnLineageParse, ReadsTheImportParameterAndNamesTheBadField) {
  TY_ASSERT_OK_AND_ASSIGN(auto rows,
                          ParseColumnLineage(R"({"source": "main.support.raw@3", "columns": [
        {"column": "text", "from": ["q", "a"], "transform": "template"},
        {"column": "doc_id", "from": "id", "transform": "doc_id"},
        {"column": "split", "transform": "prep_step"}]})"));
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].source, Table("main.support.raw", 3));
  EXPECT_EQ(rows[0].source_columns, (std::vector<std::string>{"q", "a"}));
  EXPECT_EQ(rows[1].source_columns, (std::vector<std::string>{"id"}));
  EXPECT_TRUE(rows[2].source_columns.empty());
  TY_ASSERT_OK(ValidateColumnLineage(Table("main.support.train", 1), rows));
  EXPECT_TRUE(ParseColumnLineage("")->empty());
  const std::pair<const char*, const char*> bad[] = {
      {"[]", "column_lineage"},
      {R"({"columns": []})", "column_lineage.source"},
      {R"({"source": "main.support.raw", "columns": []})", "column_lineage.source"},
      {R"({"source": "raw@1", "columns": []})", "column_lineage.source"},
      {R"({"source": "main.s.raw@1"})", "column_lineage.columns"},
      {R"({"source": "main.s.raw@1", "columns": [{"from": "a", "transform": "copy"}]})",
       "column_lineage.columns[0].column"},
      {R"({"source": "main.s.raw@1", "columns": [{"column": "a"}]})",
       "column_lineage.columns[0].transform"},
      {R"({"source": "main.s.raw@1", "columns": [{"column": "a", "transform": "copy", "x": 1}]})",
       "column_lineage.columns[0]"},
      {R"({"source": "main.s.raw@1", "columns": [{"column": "a", "from": 3, "transform": "c"}]})",
       "column_lineage.columns[0].from"},
      {R"({"source": "main.s.raw@1", "columns": [], "extra": 1})", "column_lineage"},
  };
  for (const auto& [text, field] : bad) {
    auto r = ParseColumnLineage(text);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_THAT(r.status().message(), ::testing::StartsWith(field)) << text;
  }
  auto twice = ParseColumnLineage(R"({"source": "main.s.raw@1", "columns": [
      {"column": "a", "transform": "copy"}, {"column": "a", "transform": "copy"}]})");
  TY_ASSERT_OK(twice.status());
  EXPECT_THAT(ValidateColumnLineage(Table("main.s.t", 1), *twice).message(),
              ::testing::HasSubstr("column_lineage[1].column"));
}

INSTANTIATE_TEST_SUITE_P(Backends, LineageServiceTest, ::testing::Values("sqlite", "postgres"),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace trainyard::lineage
