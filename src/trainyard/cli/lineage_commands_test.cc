// RenderLineageTree: the CLI's tree of a lineage graph, upstream and downstream, with shared
// ancestors printed once, cycles terminating and redacted nodes showing only their type.
#include "trainyard/cli/lineage_commands.h"

#include <gtest/gtest.h>

namespace trainyard::cli {
namespace {

json::value Graph(const std::string& text) { return json::parse(text); }

TEST(RenderLineageTreeTest, UpstreamTreeFromTheRoot) {
  auto g = Graph(R"({"root": "model_version:m@1", "nodes": [
      {"id": "model_version:m@1", "type": "model_version", "key": "m", "display_name": "m v1"},
      {"id": "run:r1", "type": "run", "key": "r1", "display_name": ""},
      {"id": "job:j1", "type": "job", "key": "j1", "display_name": "finetune"},
      {"id": "redacted:3", "type": "table", "redacted": true}],
    "edges": [{"from": "run:r1", "to": "model_version:m@1", "kind": "produced"},
              {"from": "job:j1", "to": "run:r1", "kind": "logged_to"},
              {"from": "redacted:3", "to": "run:r1", "kind": "read"}]})");
  EXPECT_EQ(RenderLineageTree(g, true),
            "upstream of model_version:m@1  (m v1)\n"
            "└─ produced <- run:r1\n"
            "   ├─ logged_to <- job:j1  (finetune)\n"
            "   └─ read <- <table: not visible to you>\n");
  EXPECT_EQ(RenderLineageTree(g, false),
            "downstream of model_version:m@1  (m v1)\n   (none recorded)\n");
}

TEST(RenderLineageTreeTest, SharedNodesAndCyclesPrintOnce) {
  auto g = Graph(R"({"root": "table:a.b.c@1", "nodes": [
      {"id": "table:a.b.c@1", "type": "table", "key": "a.b.c"},
      {"id": "table:a.b.d@1", "type": "table", "key": "a.b.d"}],
    "edges": [{"from": "table:a.b.c@1", "to": "table:a.b.d@1", "kind": "derived_from"},
              {"from": "table:a.b.d@1", "to": "table:a.b.c@1", "kind": "derived_from"}]})");
  EXPECT_EQ(RenderLineageTree(g, false),
            "downstream of table:a.b.c@1\n"
            "└─ derived_from -> table:a.b.d@1\n"
            "   └─ derived_from -> table:a.b.c@1  (see above)\n");
}

TEST(RenderLineageTreeTest, EndedEdgesSayUntilWhen) {
  auto g = Graph(R"({"root": "endpoint:bot", "nodes": [
      {"id": "endpoint:bot", "type": "endpoint", "key": "bot"},
      {"id": "model_version:m@1", "type": "model_version", "key": "m"},
      {"id": "model_version:m@2", "type": "model_version", "key": "m"}],
    "edges": [{"from": "model_version:m@1", "to": "endpoint:bot", "kind": "serves",
               "ended_at": 1795996800000},
              {"from": "model_version:m@2", "to": "endpoint:bot", "kind": "serves",
               "ended_at": 0}]})");
  EXPECT_EQ(RenderLineageTree(g, true),
            "upstream of endpoint:bot\n"
            "├─ serves (until 2026-11-30 00:00) <- model_version:m@1\n"
            "└─ serves <- model_version:m@2\n");
}

TEST(RenderColumnLineageTest, OneRowPerColumnWithItsSources) {
  auto a = Graph(R"({"table": "main.s.train", "version": 2, "columns": [
      {"column": "text", "source": {"table": "main.s.raw", "version": 3},
       "source_columns": ["q", "a"], "transform": "template"},
      {"column": "doc_id", "source": {"table": "main.s.raw", "version": 3},
       "source_columns": [], "transform": "doc_id"}]})");
  std::string out = RenderColumnLineage(a);
  EXPECT_EQ(out.substr(0, out.find('\n')), "columns of main.s.train@2");
  EXPECT_NE(out.find("COLUMN"), std::string::npos) << out;
  EXPECT_NE(out.find("main.s.raw@3.q, main.s.raw@3.a"), std::string::npos) << out;
  EXPECT_NE(out.find("(none: computed by the transform)"), std::string::npos) << out;
  auto none = Graph(R"({"table": "main.s.train", "version": 2, "columns": []})");
  EXPECT_NE(RenderColumnLineage(none).find("(no column lineage recorded)"), std::string::npos);
}

}  // namespace
}  // namespace trainyard::cli
