// The Delta log's action codec: tolerant of unknown fields and actions, strict about the types
// of the fields it reads, and its output decodes back to the same actions.
#include "trainyard/tables/delta_log.h"

#include <gtest/gtest.h>

#include "trainyard/tables/delta_schema.h"
#include "trainyard/testing/status_matchers.h"

namespace trainyard::tables {
namespace {

TEST(DeltaLogTest, ParsesEveryActionKindAndSkipsUnknownOnes) {
  std::string commit =
      R"({"commitInfo":{"timestamp":1700000000123,"operation":"WRITE","somethingNew":[1]}})"
      "\n"
      R"({"protocol":{"minReaderVersion":3,"minWriterVersion":7,"readerFeatures":["timestampNtz"],"writerFeatures":["timestampNtz"]}})"
      "\n"
      R"({"metaData":{"id":"abc","format":{"provider":"parquet","options":{}},"schemaString":"{\"type\":\"struct\",\"fields\":[]}","partitionColumns":["p"],"configuration":{"k":"v"},"createdTime":5}})"
      "\n"
      R"({"add":{"path":"p=a%20b/f.parquet","partitionValues":{"p":null},"size":10,"modificationTime":1,"dataChange":true,"stats":"{}","clusteringProvider":"x"}})"
      "\n"
      R"({"remove":{"path":"old.parquet","deletionTimestamp":7,"dataChange":true}})"
      "\n"
      R"({"txn":{"appId":"app","version":3}})"
      "\n"
      R"({"domainMetadata":{"domain":"d","configuration":"{}","removed":false}})"
      "\n"
      R"({"cdc":{"path":"_change_data/x.parquet","partitionValues":{},"size":1,"dataChange":false}})"
      "\n"
      R"({"futureAction":{"x":1}})"
      "\n\n";
  TY_ASSERT_OK_AND_ASSIGN(auto actions, ParseCommit(commit));
  ASSERT_EQ(actions.size(), 9u);
  EXPECT_EQ(actions[0].commit_info->Timestamp(), 1700000000123);
  EXPECT_EQ(actions[1].protocol->reader_features->at(0), "timestampNtz");
  EXPECT_EQ(actions[2].metadata->partition_columns, std::vector<std::string>{"p"});
  EXPECT_EQ(actions[3].add->partition_values.at("p"), std::nullopt);
  EXPECT_EQ(actions[4].remove->deletion_timestamp, 7);
  EXPECT_EQ(actions[5].txn->version, 3);
  EXPECT_EQ(actions[6].domain_metadata->domain, "d");
  EXPECT_FALSE(actions[7].add.has_value());  // cdc: skipped
  // Each action encodes and decodes to the same line.
  for (size_t i = 1; i < 7; ++i) {
    std::string line = ActionLine(actions[i]);
    TY_ASSERT_OK_AND_ASSIGN(Action again, ParseActionLine(line));
    EXPECT_EQ(ActionLine(again), line);
  }
  TY_ASSERT_OK_AND_ASSIGN(std::string decoded, DecodePathUri(actions[3].add->path));
  EXPECT_EQ(decoded, "p=a b/f.parquet");
}

TEST(DeltaLogTest, ErrorsNameTheLineAndField) {
  TY_EXPECT_ERROR(ParseCommit("{\"add\":{\"path\":\"x\"}}\n").status(),
                  StatusCode::kInvalidArgument, "line 1: add: missing required field 'size'");
  TY_EXPECT_ERROR(ParseCommit("{}\n{\"protocol\":{\"minReaderVersion\":\"x\"}}").status(),
                  StatusCode::kInvalidArgument, "line 2: protocol: minReaderVersion");
  TY_EXPECT_ERROR(ParseCommit("[1]").status(), StatusCode::kInvalidArgument, "JSON object");
  TY_EXPECT_ERROR(ParseCommit("{\"add\":").status(), StatusCode::kInvalidArgument,
                  "not valid JSON");
  // An out-of-range number reads as infinity, which could not be written back (found by
  // delta_log_fuzz): the entry is corrupt.
  TY_EXPECT_ERROR(ParseCommit("{}\n{\"commitInfo\":{\"timestamp\":1E400}}").status(),
                  StatusCode::kInvalidArgument, "line 2: the action holds a number out of range");
}

TEST(DeltaLogTest, NamesAndPaths) {
  EXPECT_EQ(CommitFileName(7), "00000000000000000007.json");
  EXPECT_EQ(CheckpointFileName(10), "00000000000000000010.checkpoint.parquet");
  EXPECT_EQ(ParseCommitFileName("00000000000000000123.json"), 123);
  EXPECT_EQ(ParseCommitFileName("00000000000000000123.crc"), std::nullopt);
  EXPECT_EQ(EscapePartitionValue("a:b/c=d e%"), "a%3Ab%2Fc%3Dd e%25");
  EXPECT_EQ(EncodePathUri("k=a%3Ab c/part-0.parquet"), "k=a%253Ab%20c/part-0.parquet");
}

TEST(DeltaSchemaTest, MapsDeltaTypesToArrowAndBack) {
  std::string json =
      R"({"type":"struct","fields":[)"
      R"({"name":"s","type":"string","nullable":true,"metadata":{}},)"
      R"({"name":"l","type":"long","nullable":false,"metadata":{"comment":"id"}},)"
      R"({"name":"i","type":"integer","nullable":true,"metadata":{}},)"
      R"({"name":"sh","type":"short","nullable":true,"metadata":{}},)"
      R"({"name":"b","type":"byte","nullable":true,"metadata":{}},)"
      R"({"name":"f","type":"float","nullable":true,"metadata":{}},)"
      R"({"name":"d","type":"double","nullable":true,"metadata":{}},)"
      R"({"name":"bo","type":"boolean","nullable":true,"metadata":{}},)"
      R"({"name":"bi","type":"binary","nullable":true,"metadata":{}},)"
      R"({"name":"da","type":"date","nullable":true,"metadata":{}},)"
      R"({"name":"ts","type":"timestamp","nullable":true,"metadata":{}},)"
      R"({"name":"tn","type":"timestamp_ntz","nullable":true,"metadata":{}},)"
      R"j({"name":"de","type":"decimal(10,2)","nullable":true,"metadata":{}},)j"
      R"({"name":"st","type":{"type":"struct","fields":[{"name":"a","type":"integer","nullable":true,"metadata":{}}]},"nullable":true,"metadata":{}},)"
      R"({"name":"ar","type":{"type":"array","elementType":"string","containsNull":true},"nullable":true,"metadata":{}},)"
      R"({"name":"m","type":{"type":"map","keyType":"string","valueType":"long","valueContainsNull":true},"nullable":true,"metadata":{}}]})";
  TY_ASSERT_OK_AND_ASSIGN(auto schema, SchemaFromDeltaJson(json));
  ASSERT_EQ(schema->num_fields(), 16);
  EXPECT_TRUE(schema->field(10)->type()->Equals(arrow::timestamp(arrow::TimeUnit::MICRO, "UTC")));
  EXPECT_TRUE(schema->field(11)->type()->Equals(arrow::timestamp(arrow::TimeUnit::MICRO)));
  EXPECT_TRUE(schema->field(12)->type()->Equals(arrow::decimal128(10, 2)));
  EXPECT_FALSE(schema->field(1)->nullable());
  TY_ASSERT_OK_AND_ASSIGN(std::string back, SchemaToDeltaJson(*schema));
  EXPECT_EQ(back, json);
  TY_EXPECT_ERROR(
      SchemaFromDeltaJson(R"({"type":"struct","fields":[{"name":"v","type":"variant"}]})").status(),
      StatusCode::kInvalidArgument, "schema field v: unsupported type \"variant\"");
  TY_EXPECT_ERROR(SchemaToDeltaJson(*arrow::schema({arrow::field("u", arrow::uint64())})).status(),
                  StatusCode::kInvalidArgument, "u");
}

}  // namespace
}  // namespace trainyard::tables
