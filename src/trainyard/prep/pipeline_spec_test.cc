#include "trainyard/prep/pipeline_spec.h"

#include <gtest/gtest.h>

#include "trainyard/testing/status_matchers.h"

namespace trainyard::prep {
namespace {

constexpr const char* kFull = R"(name: support-prep
source:
  table: main.support.tickets
  version: 3
  id_column: ticket_id
text_column: body
steps:
  - filter: {min_chars: 20, max_chars: 20000}
  - filter: {min_tokens: 8, max_tokens: 4096, tokenizer: models/tok.json}
  - filter: {drop_regex: "(?i)lorem ipsum", required: [customer_id, body]}
  - filter: {max_repetition: 0.3, language: en, min_score: 0.1, column: title}
  - dedup_exact: {}
  - dedup_near: {shingle_words: 5, bands: 14, rows: 8, threshold: 0.5, keep: longest}
  - redact_pii: {kinds: [email, phone], patterns: {order_id: "ORD-[0-9]{6}"}, replacement: "<{kind}>"}
  - template: {format: chatml, prompt_column: question, response_column: answer, system: "Be kind."}
  - tokenize: {tokenizer: models/tok.json, output_column: ids}
  - split: {ratios: {train: 0.9, val: 0.05, test: 0.05}, seed: 42, group_by: customer_id}
outputs:
  train: main.support.train
  val: main.support.val
  test: {path: out/test}
  dropped: main.support.tickets_dropped
)";

// A spec around one step (line 5 of the document is the step).
std::string WithStep(const std::string& step,
                     const std::string& outputs = "  rows: {path: out}\n") {
  return "name: p\nsource:\n  files: [a.jsonl]\nsteps:\n  - " + step + "\noutputs:\n" + outputs;
}

std::string ErrorOf(const std::string& text) {
  auto spec = ParsePipelineSpec(text, "pipeline.yaml");
  EXPECT_FALSE(spec.ok());
  if (spec.ok()) return "";
  EXPECT_TRUE(spec.status().IsInvalidArgument()) << spec.status().ToString();
  return spec.status().message();
}

TEST(PipelineSpecTest, ParsesEveryStep) {
  TY_ASSERT_OK_AND_ASSIGN(PipelineSpec spec, ParsePipelineSpec(kFull, "pipeline.yaml"));
  EXPECT_EQ(spec.name, "support-prep");
  EXPECT_EQ(spec.source.table, "main.support.tickets");
  EXPECT_EQ(spec.source.version, 3);
  EXPECT_EQ(spec.source.id_column, "ticket_id");
  ASSERT_EQ(spec.steps.size(), 10u);
  EXPECT_EQ(spec.steps[0].label, "0_filter");
  EXPECT_EQ(spec.steps[0].line, 8);
  EXPECT_EQ(spec.steps[0].column, "body");  // text_column by default
  EXPECT_EQ(spec.steps[0].filter.min_chars, 20);
  EXPECT_EQ(spec.steps[1].filter.tokenizer, "models/tok.json");
  ASSERT_NE(spec.steps[2].filter.drop_regex, nullptr);
  EXPECT_EQ(spec.steps[2].filter.required, (std::vector<std::string>{"customer_id", "body"}));
  EXPECT_EQ(spec.steps[3].column, "title");
  EXPECT_DOUBLE_EQ(*spec.steps[3].filter.max_repetition, 0.3);
  EXPECT_EQ(spec.steps[4].kind, StepKind::kDedupExact);
  EXPECT_EQ(spec.steps[5].dedup_near.keep, KeepRule::kLongest);
  EXPECT_DOUBLE_EQ(spec.steps[5].dedup_near.threshold, 0.5);
  EXPECT_EQ(spec.steps[6].redact_pii.patterns.size(), 1u);
  EXPECT_EQ(spec.steps[6].redact_pii.replacement, "<{kind}>");
  EXPECT_EQ(spec.steps[7].template_.output_column, "text");
  EXPECT_EQ(spec.steps[8].tokenize.output_column, "ids");
  ASSERT_EQ(spec.steps[9].split.ratios.size(), 3u);
  EXPECT_EQ(spec.steps[9].split.ratios[0].first, "train");
  EXPECT_EQ(spec.steps[9].split.group_by, "customer_id");
  ASSERT_EQ(spec.outputs.size(), 4u);
  EXPECT_EQ(spec.Output("test")->path, "out/test");
  EXPECT_EQ(spec.Output("dropped")->table, "main.support.tickets_dropped");
  EXPECT_EQ(spec.version.size(), 64u);
}

TEST(PipelineSpecTest, VersionIsTheTextsHash) {
  TY_ASSERT_OK_AND_ASSIGN(PipelineSpec a, ParsePipelineSpec(kFull, ""));
  TY_ASSERT_OK_AND_ASSIGN(PipelineSpec b, ParsePipelineSpec(std::string(kFull) + "# c\n", ""));
  EXPECT_NE(a.version, b.version);
  TY_ASSERT_OK_AND_ASSIGN(PipelineSpec c, ParsePipelineSpec(kFull, "other.yaml"));
  EXPECT_EQ(a.version, c.version);
}

TEST(PipelineSpecTest, ErrorsNameTheFileLineAndField) {
  EXPECT_EQ(ErrorOf(WithStep("dedup_near: {bands: 0}")),
            "pipeline.yaml:5: steps[0].dedup_near.bands must be 1..1024 (got 0)");
  EXPECT_EQ(ErrorOf(WithStep("dedup_near: {bands: 64, rows: 32}")),
            "pipeline.yaml:5: steps[0].dedup_near.rows bands * rows must be at most 1024 "
            "permutations (got 64 * 32)");
  EXPECT_NE(ErrorOf(WithStep("filter: {min_chars: 5, colour: red}")).find("pipeline.yaml:5:"),
            std::string::npos);
  EXPECT_NE(ErrorOf(WithStep("filter: {min_chars: 5, colour: red}")).find("colour"),
            std::string::npos);
  EXPECT_NE(ErrorOf(WithStep("filter: {min_tokens: 5}")).find("steps[0].filter.tokenizer"),
            std::string::npos);
  EXPECT_NE(ErrorOf(WithStep("filter: {drop_regex: \"(\"}")).find("steps[0].filter.drop_regex"),
            std::string::npos);
  EXPECT_NE(ErrorOf(WithStep("redact_pii: {kinds: [email, ssn]}"))
                .find("steps[0].redact_pii.kinds[1] unknown PII kind \"ssn\""),
            std::string::npos);
  EXPECT_NE(ErrorOf(WithStep("template: {format: llama, prompt_column: q}"))
                .find("steps[0].template.format must be chatml, mistral or alpaca"),
            std::string::npos);
  EXPECT_NE(ErrorOf(WithStep("shuffle: {}")).find("unknown step \"shuffle\""), std::string::npos);
  EXPECT_NE(ErrorOf(WithStep("split: {ratios: {train: 0.5, val: 0.4}}",
                             "  train: {path: a}\n  val: {path: b}\n"))
                .find("steps[0].split.ratios must sum to 1"),
            std::string::npos);
  EXPECT_NE(ErrorOf(WithStep("split: {ratios: {train: 0.5, Val: 0.5}}")).find("split names"),
            std::string::npos);
}

TEST(PipelineSpecTest, OutputsMatchTheSplit) {
  // A split's names are the outputs; every one is required.
  EXPECT_NE(ErrorOf(WithStep("split: {ratios: {train: 0.5, val: 0.5}}", "  train: {path: a}\n"))
                .find("outputs.val is required"),
            std::string::npos);
  EXPECT_NE(
      ErrorOf(WithStep("dedup_exact: {}", "  train: {path: a}\n")).find("unknown output \"train\""),
      std::string::npos);
  EXPECT_NE(ErrorOf(WithStep("dedup_exact: {}", "  rows: main.s\n")).find("outputs.rows"),
            std::string::npos);
  EXPECT_NE(ErrorOf(WithStep("dedup_exact:", "  rows: {path: a}\n  dropped: {path: a}\n"))
                .find("the path of another output"),
            std::string::npos);
  TY_EXPECT_OK(ParsePipelineSpec(WithStep("dedup_exact:"), "p.yaml").status());
}

TEST(PipelineSpecTest, SourceNeedsOneOfTableAndFiles) {
  EXPECT_NE(
      ErrorOf("name: p\nsource: {table: a.b.c, files: [x.jsonl]}\noutputs: {rows: {path: o}}\n")
          .find("not both"),
      std::string::npos);
  EXPECT_NE(ErrorOf("name: p\nsource: {files: [x.txt]}\noutputs: {rows: {path: o}}\n")
                .find("source.files[0] must be a .jsonl, .csv or .parquet file"),
            std::string::npos);
  EXPECT_NE(ErrorOf("name: p\nsource: {files: [x.csv], version: 2}\noutputs: {rows: {path: o}}\n")
                .find("source.version applies to a table source only"),
            std::string::npos);
  EXPECT_NE(ErrorOf("name: p\nsource: {table: a.b.c}\noutputs: {rows: a.b.c}\n")
                .find("is the source table"),
            std::string::npos);
  EXPECT_NE(ErrorOf("name: p\nsource: {table: a.b.c}\noutputs: {rows: {path: o}}\nextra: 1\n")
                .find("extra"),
            std::string::npos);
}

TEST(PipelineSpecTest, SplitMustBeLast) {
  EXPECT_NE(ErrorOf("name: p\nsource: {files: [a.jsonl]}\nsteps:\n"
                    "  - split: {ratios: {train: 1}}\n  - dedup_exact: {}\n"
                    "outputs: {train: {path: t}}\n")
                .find("pipeline.yaml:4: steps[0].split must be the last step"),
            std::string::npos);
}

}  // namespace
}  // namespace trainyard::prep
