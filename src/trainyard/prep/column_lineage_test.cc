#include "trainyard/prep/column_lineage.h"

#include <gtest/gtest.h>

#include <map>

#include "trainyard/common/json.h"
#include "trainyard/testing/status_matchers.h"

namespace trainyard::prep {
namespace {

std::map<std::string, DerivedColumn> ByName(const std::vector<DerivedColumn>& columns) {
  std::map<std::string, DerivedColumn> out;
  for (const auto& c : columns) out[c.column] = c;
  return out;
}

using Names = std::vector<std::string>;

TEST(ColumnLineageTest, EachStepSaysWhatItDerivesFromWhat) {
  TY_ASSERT_OK_AND_ASSIGN(PipelineSpec spec, ParsePipelineSpec(R"(name: p
source: {table: main.support.raw, id_column: ticket_id}
text_column: body
steps:
  - filter: {min_chars: 5}
  - redact_pii: {kinds: [email]}
  - template: {format: chatml, prompt_column: question, response_column: body}
  - redact_pii: {kinds: [email], column: text}
  - tokenize: {tokenizer: tok.json, column: text, output_column: input_ids}
  - split: {ratios: {train: 0.9, val: 0.1}}
outputs:
  train: main.support.train
  val: main.support.val
)",
                                                               "p.yaml"));
  auto columns = DeriveOutputColumns(spec, {"ticket_id", "question", "body", "priority"});
  // Output order: doc_id, the source's columns, then the ones steps add.
  Names order;
  for (const auto& c : columns) order.push_back(c.column);
  EXPECT_EQ(order,
            (Names{"doc_id", "ticket_id", "question", "body", "priority", "text", "input_ids"}));
  auto by = ByName(columns);
  EXPECT_EQ(by["doc_id"].from, Names{"ticket_id"});
  EXPECT_EQ(by["doc_id"].transform, "doc_id");
  EXPECT_EQ(by["priority"].from, Names{"priority"});
  EXPECT_EQ(by["priority"].transform, "copy");
  EXPECT_EQ(by["body"].from, Names{"body"});
  EXPECT_EQ(by["body"].transform, "redact");
  // The template read the redacted body: its sources are the source's columns.
  EXPECT_EQ(by["text"].from, (Names{"question", "body"}));
  EXPECT_EQ(by["text"].transform, "template+redact");
  EXPECT_EQ(by["input_ids"].from, (Names{"question", "body"}));
  EXPECT_EQ(by["input_ids"].transform, "template+redact+tokenize");

  auto dropped = ByName(DroppedOutputColumns(spec));
  EXPECT_EQ(dropped["duplicate_of"].from, Names{"ticket_id"});
  EXPECT_TRUE(dropped["reason"].from.empty());

  // What goes to the import API parses back as the server reads it.
  auto json = ParseJsonExact(ColumnLineageJson("main.support.raw", 3, columns));
  TY_ASSERT_OK(json.status());
  EXPECT_EQ(json->at("source").as_string(), "main.support.raw@3");
  EXPECT_EQ(json->at("columns").as_array().size(), columns.size());
}

TEST(ColumnLineageTest, WithoutAnIdColumnDocIdComesFromNoColumn) {
  TY_ASSERT_OK_AND_ASSIGN(PipelineSpec spec, ParsePipelineSpec(R"(name: p
source: {table: main.support.raw}
steps:
  - template: {format: alpaca, prompt_column: q, output_column: q}
outputs:
  rows: main.support.train
)",
                                                               "p.yaml"));
  auto by = ByName(DeriveOutputColumns(spec, {"q"}));
  EXPECT_TRUE(by["doc_id"].from.empty());
  // A template writing over its own prompt column: derived from it, by the template.
  EXPECT_EQ(by["q"].from, Names{"q"});
  EXPECT_EQ(by["q"].transform, "template");
  EXPECT_EQ(by.size(), 2u);
}

}  // namespace
}  // namespace trainyard::prep
