// Lineage's pure vocabulary: node references parse and format both ways, bad ones are
// InvalidArgument naming the field, edges join only the node types their kind allows, column
// mappings round-trip, and MLflow dataset inputs that name a table become table@version.
#include "trainyard/lineage/types.h"

#include <gtest/gtest.h>

#include "trainyard/testing/status_matchers.h"

namespace trainyard::lineage {
namespace {

TEST(NodeRefTest, ParsesAndFormatsEveryType) {
  for (const char* text :
       {"table:main.support.train@7", "model_version:intent_model@3", "checkpoint:j-1a2b@1200",
        "job:j-1a2b", "run:0123abcd", "endpoint:support-bot", "model_version:a@b@2"}) {
    TY_ASSERT_OK_AND_ASSIGN(NodeRef ref, ParseNodeRef(text));
    EXPECT_EQ(FormatNodeRef(ref), text);
  }
  TY_ASSERT_OK_AND_ASSIGN(NodeRef mv, ParseNodeRef("model_version:a@b@2"));
  EXPECT_EQ(mv.key, "a@b");
  EXPECT_EQ(mv.version, 2);
  TY_ASSERT_OK_AND_ASSIGN(NodeRef run, ParseNodeRef("run:abc@3"));
  EXPECT_EQ(run.key, "abc@3");  // runs are not versioned: '@' is part of the key
  EXPECT_FALSE(run.version.has_value());
}

TEST(NodeRefTest, RejectsMalformedReferencesNamingTheField) {
  for (const char* text :
       {"", "table", "tabel:main.a.b@1", "table:main.support.train", "table:main.support@1",
        "table:main.sup port.train@1", "table:main.a.b@-1", "table:main.a.b@x",
        "job:", "model_version:m@0", "checkpoint:j-1", "run:a\nb"}) {
    auto ref = ParseNodeRef(text, "object");
    ASSERT_FALSE(ref.ok()) << text;
    EXPECT_TRUE(ref.status().IsInvalidArgument()) << text;
    EXPECT_NE(ref.status().message().find("object"), std::string::npos) << ref.status().message();
  }
  EXPECT_FALSE(ParseNodeRef("run:" + std::string(kMaxNodeKeyLength + 1, 'a')).ok());
}

Edge E(NodeRef from, NodeRef to, EdgeKind kind) {
  Edge e;
  e.from = std::move(from);
  e.to = std::move(to);
  e.kind = kind;
  return e;
}

TEST(EdgeTest, KindsJoinOnlyTheirNodeTypes) {
  Edge ok = E({NodeType::kTable, "main.support.train", 7}, {NodeType::kRun, "r1", std::nullopt},
              EdgeKind::kRead);
  TY_EXPECT_OK(ValidateEdge(ok));
  Edge bad = ok;
  bad.kind = EdgeKind::kServes;
  TY_EXPECT_ERROR(ValidateEdge(bad), StatusCode::kInvalidArgument, "kind 'serves' cannot join");
  Edge self = E({NodeType::kJob, "j", std::nullopt}, {NodeType::kJob, "j", std::nullopt},
                EdgeKind::kLoggedTo);
  TY_EXPECT_ERROR(ValidateEdge(self), StatusCode::kInvalidArgument, "same object");
  Edge mapped = ok;
  mapped.columns = {{"prompt", {"question"}}};
  TY_EXPECT_ERROR(ValidateEdge(mapped), StatusCode::kInvalidArgument,
                  "only allowed on derived_from");
  Edge derived = E({NodeType::kTable, "main.raw.t", 1}, {NodeType::kTable, "main.clean.t", 4},
                   EdgeKind::kDerivedFrom);
  derived.columns = {{"prompt", {"question", "context"}}};
  TY_EXPECT_OK(ValidateEdge(derived));
}

TEST(ColumnMappingTest, RoundTripsAndRejectsBadShapes) {
  TY_ASSERT_OK_AND_ASSIGN(ColumnMapping m,
                          ParseColumnMapping(R"({"prompt": ["q", "ctx"], "label": "intent"})"));
  EXPECT_EQ(m.at("prompt"), (std::vector<std::string>{"q", "ctx"}));
  EXPECT_EQ(m.at("label"), (std::vector<std::string>{"intent"}));
  TY_ASSERT_OK_AND_ASSIGN(ColumnMapping again, ParseColumnMapping(FormatColumnMapping(m)));
  EXPECT_EQ(again, m);
  TY_ASSERT_OK_AND_ASSIGN(ColumnMapping empty, ParseColumnMapping(""));
  EXPECT_TRUE(empty.empty());
  for (const char* bad : {"[1]", R"({"a": 1})", R"({"a": [1]})", R"({"": ["x"]})", "{"}) {
    TY_EXPECT_ERROR(ParseColumnMapping(bad), StatusCode::kInvalidArgument, "column_mapping");
  }
}

TEST(DatasetTest, TrainyardAndDeltaTableSourcesBecomeTableVersions) {
  auto delta = TableVersionOfDataset(
      "delta_table", R"({"delta_table_name": "main.support.train", "delta_table_version": 7})",
      "abc");
  ASSERT_TRUE(delta.has_value());
  EXPECT_EQ(FormatNodeRef(*delta), "table:main.support.train@7");
  auto by_digest = TableVersionOfDataset("trainyard_table", "main.support.train", "12");
  ASSERT_TRUE(by_digest.has_value());
  EXPECT_EQ(FormatNodeRef(*by_digest), "table:main.support.train@12");
  auto json_source =
      TableVersionOfDataset("trainyard_table", R"({"table": "main.s.t", "version": 3})", "x");
  ASSERT_TRUE(json_source.has_value());
  EXPECT_EQ(FormatNodeRef(*json_source), "table:main.s.t@3");
  EXPECT_FALSE(TableVersionOfDataset("local", "/data/train.jsonl", "7").has_value());
  EXPECT_FALSE(TableVersionOfDataset("trainyard_table", "main.support.train", "d41d8cd9"));
  EXPECT_FALSE(TableVersionOfDataset("trainyard_table", "not-a-table", "7").has_value());
  EXPECT_FALSE(TableVersionOfDataset("delta_table", "{}", "7").has_value());
}

}  // namespace
}  // namespace trainyard::lineage
