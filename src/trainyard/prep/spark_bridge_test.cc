#include "trainyard/prep/spark_bridge.h"

#include <gtest/gtest.h>

#include "trainyard/testing/status_matchers.h"

namespace trainyard::prep {
namespace {

constexpr const char* kSpec = R"(name: p
source: {table: main.s.tickets, version: 3}
steps:
  - filter: {min_chars: 20}
  - redact_pii: {kinds: [email]}
  - split: {ratios: {train: 0.5, val: 0.5}, seed: 1}
outputs:
  train: main.s.train
  val: {path: out/val}
)";

// What prep_spark.py writes: ReportToJson's fields, engine and master instead of threads.
constexpr const char* kSparkReport = R"({
  "pipeline": "p", "version": "abc", "source": "main.s.tickets@3", "source_version": 3,
  "engine": "spark", "master": "local[2]", "rows_in": 10, "rows_out": 7, "rows_dropped": 3,
  "seconds": 1.5,
  "steps": [
    {"step": "0_filter", "kind": "filter", "rows_in": 10, "rows_out": 7, "rows_dropped": 3,
     "dropped": {"min_chars": {"rows": 3, "examples": ["a", "b", "c"]}}},
    {"step": "1_redact_pii", "kind": "redact_pii", "rows_in": 7, "rows_out": 7,
     "rows_dropped": 0, "dropped": {}, "rows_changed": 2, "changed": {"email": 3}},
    {"step": "2_split", "kind": "split", "rows_in": 7, "rows_out": 7, "rows_dropped": 0,
     "dropped": {}, "splits": {"train": 4, "val": 3}}],
  "outputs": [{"name": "train", "target": "main.s.train", "rows": 4},
              {"name": "val", "target": "out/val", "rows": 3, "version": 1}]
})";

TEST(ReportFromJsonTest, ReadsTheSparkProgramsReport) {
  TY_ASSERT_OK_AND_ASSIGN(PipelineSpec spec, ParsePipelineSpec(kSpec, "p.yaml"));
  TY_ASSERT_OK_AND_ASSIGN(json::object o, ParseJsonObject(kSparkReport));
  TY_ASSERT_OK_AND_ASSIGN(PipelineReport r, ReportFromJson(o, spec));
  EXPECT_EQ(r.source, "main.s.tickets@3");
  EXPECT_EQ(r.source_version, 3);
  EXPECT_EQ(r.rows_in, 10);
  EXPECT_EQ(r.master, "local[2]");
  ASSERT_EQ(r.steps.size(), 3u);
  EXPECT_EQ(r.steps[0].kind, StepKind::kFilter);
  EXPECT_EQ(r.steps[0].line, 4);
  EXPECT_EQ(r.steps[0].dropped_rows(), 3);
  EXPECT_EQ(r.steps[0].dropped.at("min_chars").examples, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(r.steps[1].changed.at("email"), 3);
  EXPECT_EQ(r.steps[1].rows_changed, 2);
  EXPECT_EQ(r.steps[2].split_rows.at("val"), 3);
  ASSERT_EQ(r.outputs.size(), 2u);
  EXPECT_FALSE(r.outputs[0].version.has_value());  // a catalog output: the import's version
  EXPECT_EQ(r.outputs[1].version, 1);
  // The metrics a job's run gets are the native engine's.
  auto metrics = ReportMetrics(r);
  EXPECT_EQ(metrics.at("prep.0_filter.dropped.min_chars"), 3);
  EXPECT_EQ(metrics.at("prep.1_redact_pii.redacted.email"), 3);
  EXPECT_EQ(metrics.at("prep.2_split.rows.train"), 4);
}

TEST(ReportFromJsonTest, RoundTripsTheNativeReport) {
  TY_ASSERT_OK_AND_ASSIGN(PipelineSpec spec, ParsePipelineSpec(kSpec, "p.yaml"));
  TY_ASSERT_OK_AND_ASSIGN(json::object o, ParseJsonObject(kSparkReport));
  TY_ASSERT_OK_AND_ASSIGN(PipelineReport r, ReportFromJson(o, spec));
  EXPECT_EQ(r.master, "local[2]");
  TY_ASSERT_OK_AND_ASSIGN(PipelineReport again, ReportFromJson(ReportToJson(r), spec));
  EXPECT_EQ(json::serialize(ReportToJson(again)), json::serialize(ReportToJson(r)));
}

TEST(ReportFromJsonTest, AReportThatDoesNotFitTheSpecIsAnError) {
  TY_ASSERT_OK_AND_ASSIGN(PipelineSpec spec, ParsePipelineSpec(kSpec, "p.yaml"));
  TY_ASSERT_OK_AND_ASSIGN(json::object o, ParseJsonObject(kSparkReport));
  o["steps"].as_array().pop_back();
  EXPECT_FALSE(ReportFromJson(o, spec).ok());
  TY_ASSERT_OK_AND_ASSIGN(o, ParseJsonObject(kSparkReport));
  o.erase("rows_in");
  EXPECT_FALSE(ReportFromJson(o, spec).ok());
  TY_ASSERT_OK_AND_ASSIGN(o, ParseJsonObject(kSparkReport));
  o["steps"].as_array()[0].as_object()["dropped"] = json::object{{"x", 3}};
  EXPECT_FALSE(ReportFromJson(o, spec).ok());
}

}  // namespace
}  // namespace trainyard::prep
