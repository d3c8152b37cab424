// The exporters: exact JSON lines and CSV text, and Parquet / Arrow IPC that Arrow's own readers
// read back to the same rows; CSV and JSONL round-trip through the importers.
#include "trainyard/tables/export.h"

#include <arrow/io/memory.h>
#include <arrow/ipc/reader.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "trainyard/tables/import.h"
#include "trainyard/testing/status_matchers.h"

namespace trainyard::tables {
namespace {

// Rows with the awkward values: nulls, quotes and newlines, NaN, binary, timestamps, nesting.
std::shared_ptr<arrow::RecordBatch> TrickyBatch() {
  auto message =
      arrow::struct_({arrow::field("role", arrow::utf8()), arrow::field("content", arrow::utf8())});
  auto schema = arrow::schema(
      {arrow::field("id", arrow::int64()), arrow::field("text", arrow::utf8()),
       arrow::field("score", arrow::float64()),
       arrow::field("at", arrow::timestamp(arrow::TimeUnit::MICRO, "UTC")),
       arrow::field("blob", arrow::binary()), arrow::field("messages", arrow::list(message))});
  arrow::Int64Builder id;
  arrow::StringBuilder text;
  arrow::DoubleBuilder score;
  arrow::TimestampBuilder at(arrow::timestamp(arrow::TimeUnit::MICRO, "UTC"),
                             arrow::default_memory_pool());
  arrow::BinaryBuilder blob;
  auto messages_builder = arrow::MakeBuilder(arrow::list(message)).ValueOrDie();
  auto* lb = static_cast<arrow::ListBuilder*>(messages_builder.get());
  auto* sb = static_cast<arrow::StructBuilder*>(lb->value_builder());
  auto* role = static_cast<arrow::StringBuilder*>(sb->field_builder(0));
  auto* content = static_cast<arrow::StringBuilder*>(sb->field_builder(1));

  EXPECT_TRUE(id.AppendValues({1, 2, 3}).ok());
  EXPECT_TRUE(text.Append("say \"hi\", then\nleave").ok());
  EXPECT_TRUE(text.Append("").ok());
  EXPECT_TRUE(text.AppendNull().ok());
  EXPECT_TRUE(score.AppendValues({0.5, std::nan(""), -2}).ok());
  EXPECT_TRUE(at.Append(1714564800000000).ok());  // 2024-05-01T12:00:00Z
  EXPECT_TRUE(at.Append(1714564800123456).ok());
  EXPECT_TRUE(at.AppendNull().ok());
  EXPECT_TRUE(blob.Append(std::string("\x00\xff\x10", 3)).ok());
  EXPECT_TRUE(blob.AppendNull().ok());
  EXPECT_TRUE(blob.Append("").ok());
  EXPECT_TRUE(lb->Append().ok());
  EXPECT_TRUE(sb->Append().ok());
  EXPECT_TRUE(role->Append("user").ok());
  EXPECT_TRUE(content->Append("a, b").ok());
  EXPECT_TRUE(lb->Append().ok());  // an empty list
  EXPECT_TRUE(lb->AppendNull().ok());
  return arrow::RecordBatch::Make(schema, 3,
                                  {*id.Finish(), *text.Finish(), *score.Finish(), *at.Finish(),
                                   *blob.Finish(), *messages_builder->Finish()});
}

Result<std::string> Export(ExportFormat format, const ExportOptions& options = {}) {
  auto batch = TrickyBatch();
  auto reader = *arrow::RecordBatchReader::Make({batch, batch->Slice(1)}, batch->schema());
  std::string out;
  TY_RETURN_IF_ERROR(ExportRecords(
                         *reader, format,
                         [&](std::string_view b) {
                           out.append(b);
                           return Status::Ok();
                         },
                         options)
                         .status());
  return out;
}

TEST(ExportTest, JsonLinesText) {
  TY_ASSERT_OK_AND_ASSIGN(std::string out, Export(ExportFormat::kJsonl));
  EXPECT_EQ(out,
            "{\"id\":1,\"text\":\"say \\\"hi\\\", then\\nleave\",\"score\":0.5,"
            "\"at\":\"2024-05-01T12:00:00Z\",\"blob\":\"AP8Q\","
            "\"messages\":[{\"role\":\"user\",\"content\":\"a, b\"}]}\n"
            "{\"id\":2,\"text\":\"\",\"score\":null,\"at\":\"2024-05-01T12:00:00.123456Z\","
            "\"blob\":null,\"messages\":[]}\n"
            "{\"id\":3,\"text\":null,\"score\":-2,\"at\":null,\"blob\":\"\",\"messages\":null}\n"
            "{\"id\":2,\"text\":\"\",\"score\":null,\"at\":\"2024-05-01T12:00:00.123456Z\","
            "\"blob\":null,\"messages\":[]}\n"
            "{\"id\":3,\"text\":null,\"score\":-2,\"at\":null,\"blob\":\"\",\"messages\":null}\n");
}

TEST(ExportTest, CsvTextAndRoundTrip) {
  ExportOptions o;
  o.max_rows = 3;
  TY_ASSERT_OK_AND_ASSIGN(std::string out, Export(ExportFormat::kCsv, o));
  EXPECT_EQ(out,
            "id,text,score,at,blob,messages\r\n"
            "1,\"say \"\"hi\"\", then\nleave\",0.5,2024-05-01T12:00:00Z,AP8Q,"
            "\"[{\"\"role\"\":\"\"user\"\",\"\"content\"\":\"\"a, b\"\"}]\"\r\n"
            "2,\"\",NaN,2024-05-01T12:00:00.123456Z,,[]\r\n"
            "3,,-2,,\"\",\r\n");
  // The scalar columns read back to the same values (nested ones are JSON text in CSV).
  ImportOptions io;
  io.format = ImportFormat::kCsv;
  io.expected_schema =
      arrow::schema({arrow::field("id", arrow::int64()), arrow::field("text", arrow::utf8()),
                     arrow::field("score", arrow::float64()),
                     arrow::field("at", arrow::timestamp(arrow::TimeUnit::MICRO, "UTC")),
                     arrow::field("blob", arrow::utf8()), arrow::field("messages", arrow::utf8())});
  TY_ASSERT_OK_AND_ASSIGN(auto imp, OpenImportBuffer(out, io));
  TY_ASSERT_OK_AND_ASSIGN(auto back, imp->Next());
  ASSERT_TRUE(back);
  auto original = TrickyBatch();
  for (int c = 0; c < 4; ++c) {
    EXPECT_TRUE(
        back->column(c)->Equals(*original->column(c), arrow::EqualOptions().nans_equal(true)))
        << "column " << c << ": " << back->column(c)->ToString();
  }
}

TEST(ExportTest, JsonLinesRoundTripThroughTheImporter) {
  TY_ASSERT_OK_AND_ASSIGN(std::string out, Export(ExportFormat::kJsonl));
  ImportOptions io;
  io.format = ImportFormat::kJsonl;
  io.expected_schema = TrickyBatch()->schema();
  TY_ASSERT_OK_AND_ASSIGN(auto imp, OpenImportBuffer(out, io));
  TY_ASSERT_OK_AND_ASSIGN(auto back, imp->Next());
  ASSERT_TRUE(back);
  ASSERT_EQ(back->num_rows(), 5);
  auto original = TrickyBatch();
  // NaN was written as null (JSON has no NaN): every other value survives.
  for (int c : {0, 1, 3, 4, 5}) {
    EXPECT_TRUE(back->column(c)->Slice(0, 3)->Equals(*original->column(c))) << "column " << c;
  }
}

TEST(ExportTest, ParquetAndArrowStreamReadBackWithArrow) {
  auto original = TrickyBatch();
  TY_ASSERT_OK_AND_ASSIGN(std::string ipc, Export(ExportFormat::kArrowIpc));
  auto input = std::make_shared<arrow::io::BufferReader>(arrow::Buffer::FromString(ipc));
  auto stream = arrow::ipc::RecordBatchStreamReader::Open(input);
  ASSERT_TRUE(stream.ok()) << stream.status().ToString();
  auto table = (*stream)->ToTable();
  ASSERT_TRUE(table.ok());
  EXPECT_EQ((*table)->num_rows(), 5);
  auto first = (*table)->Slice(0, 3)->CombineChunksToBatch().ValueOrDie();
  EXPECT_TRUE(first->Equals(*original, arrow::EqualOptions().nans_equal(true)));

  ExportOptions o;
  o.parquet_row_group_rows = 2;
  TY_ASSERT_OK_AND_ASSIGN(std::string parquet, Export(ExportFormat::kParquet, o));
  ImportOptions io;
  io.format = ImportFormat::kParquet;
  TY_ASSERT_OK_AND_ASSIGN(auto imp, OpenImportBuffer(parquet, io));
  EXPECT_TRUE(imp->schema()->Equals(*original->schema()));
  std::vector<std::shared_ptr<arrow::RecordBatch>> batches;
  for (;;) {
    TY_ASSERT_OK_AND_ASSIGN(auto b, imp->Next());
    if (!b) break;
    batches.push_back(b);
  }
  auto back = arrow::Table::FromRecordBatches(batches).ValueOrDie();
  ASSERT_EQ(back->num_rows(), 5);
  EXPECT_TRUE(back->Slice(0, 3)->CombineChunksToBatch().ValueOrDie()->Equals(
      *original, arrow::EqualOptions().nans_equal(true)));
}

TEST(ExportTest, SinkErrorsStopTheExport) {
  for (ExportFormat f : {ExportFormat::kJsonl, ExportFormat::kCsv, ExportFormat::kParquet,
                         ExportFormat::kArrowIpc}) {
    auto batch = TrickyBatch();
    auto reader = *arrow::RecordBatchReader::Make({batch}, batch->schema());
    Result<int64_t> r = ExportRecords(*reader, f, [](std::string_view) {
      return Status::ResourceExhausted("disk full: the client went away");
    });
    EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status().ToString();
  }
  EXPECT_TRUE(ExportFormatFromName("x.xlsx").status().IsInvalidArgument());
  EXPECT_EQ(ExportFormatFromName("out.arrows").value(), ExportFormat::kArrowIpc);
}

TEST(ExportTest, ToFileIsAtomic) {
  auto dir = std::filesystem::temp_directory_path() / ("ty-export-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto batch = TrickyBatch();
  auto reader = *arrow::RecordBatchReader::Make({batch}, batch->schema());
  TY_ASSERT_OK_AND_ASSIGN(
      int64_t rows, ExportToFile(*reader, ExportFormat::kJsonl, (dir / "out.jsonl").string()));
  EXPECT_EQ(rows, 3);
  std::ifstream in(dir / "out.jsonl");
  std::string first;
  std::getline(in, first);
  EXPECT_EQ(first.substr(0, 8), "{\"id\":1,");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), {}), 1);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace trainyard::tables
