// The JSONL, CSV and Parquet importers: type inference, the schema check with the first
// offending line, limits, and bounded batches.
#include "trainyard/tables/import.h"

#include <arrow/io/memory.h>
#include <gtest/gtest.h>
#include <parquet/arrow/writer.h>

#include <random>
#include <string>
#include <thread>
#include <vector>

#include "trainyard/tables/export.h"
#include "trainyard/tables/import_chunks.h"
#include "trainyard/testing/status_matchers.h"

namespace trainyard::tables {
namespace {

ImportOptions Jsonl(std::string name = "data.jsonl") {
  ImportOptions o;
  o.format = ImportFormat::kJsonl;
  o.source_name = std::move(name);
  return o;
}

ImportOptions Csv(std::string name = "data.csv") {
  ImportOptions o;
  o.format = ImportFormat::kCsv;
  o.source_name = std::move(name);
  return o;
}

// All batches of an import, concatenated into one table; or the first error.
Result<std::shared_ptr<arrow::Table>> ReadAll(std::string data, ImportOptions options,
                                              std::vector<int64_t>* sizes = nullptr) {
  TY_ASSIGN_OR_RETURN(std::unique_ptr<RecordImporter> imp,
                      OpenImportBuffer(std::move(data), std::move(options)));
  std::vector<std::shared_ptr<arrow::RecordBatch>> batches;
  for (;;) {
    TY_ASSIGN_OR_RETURN(std::shared_ptr<arrow::RecordBatch> b, imp->Next());
    if (!b) break;
    if (!b->schema()->Equals(*imp->schema())) return Status::Internal("batch schema differs");
    if (sizes) sizes->push_back(b->num_rows());
    batches.push_back(std::move(b));
  }
  auto table = arrow::Table::FromRecordBatches(imp->schema(), batches);
  if (!table.ok()) return Status::Internal(table.status().ToString());
  return *table;
}

// How ReadAllChunked parses the chunks it has cut: one by one from the last to the first, or
// all at once on threads of their own (as the engine's workers would).
enum class ParseOrder { kLastToFirst, kThreads };

// The same through NextChunk/ParseChunk, parsing each chunk on its own and assembling them in
// order: the rows, or the first error in source order.
Result<std::shared_ptr<arrow::Table>> ReadAllChunked(std::string data, ImportOptions options,
                                                     std::vector<int64_t>* sizes = nullptr,
                                                     ParseOrder order = ParseOrder::kLastToFirst) {
  TY_ASSIGN_OR_RETURN(std::unique_ptr<ChunkedImporter> imp,
                      OpenImportChunksBuffer(std::move(data), std::move(options)));
  std::vector<RecordChunk> chunks;
  Status read_error;
  for (;;) {
    Result<std::optional<RecordChunk>> c = imp->NextChunk();
    if (!c.ok()) {
      read_error = c.status();
      break;
    }
    if (!*c) break;
    chunks.push_back(std::move(**c));
  }
  std::vector<Result<std::shared_ptr<arrow::RecordBatch>>> parsed(chunks.size(),
                                                                  Status::Internal("unparsed"));
  if (order == ParseOrder::kLastToFirst) {
    for (size_t i = chunks.size(); i-- > 0;) parsed[i] = imp->ParseChunk(chunks[i]);
  } else {
    std::vector<std::thread> threads;
    for (size_t i = 0; i < chunks.size(); ++i) {
      threads.emplace_back([&, i] { parsed[i] = imp->ParseChunk(chunks[i]); });
    }
    for (auto& t : threads) t.join();
  }
  std::vector<std::shared_ptr<arrow::RecordBatch>> batches;
  for (size_t i = 0; i < parsed.size(); ++i) {
    TY_ASSIGN_OR_RETURN(std::shared_ptr<arrow::RecordBatch> b, std::move(parsed[i]));
    if (b->num_rows() != chunks[i].records) return Status::Internal("records miscounted");
    if (sizes) sizes->push_back(b->num_rows());
    batches.push_back(std::move(b));
  }
  TY_RETURN_IF_ERROR(read_error);
  auto table = arrow::Table::FromRecordBatches(imp->schema(), batches);
  if (!table.ok()) return Status::Internal(table.status().ToString());
  return *table;
}

std::string JsonOf(const arrow::Table& t, int64_t row) {
  auto batch = t.CombineChunksToBatch().ValueOrDie();
  std::string out;
  for (int c = 0; c < batch->num_columns(); ++c) {
    if (c) out += ",";
    AppendJsonValue(*batch->column(c), row, &out);
  }
  return out;
}

// Next() against the chunks, parsed last to first and on threads at once: the same batches
// (their sizes and rows) and the same first error.
void ExpectChunksMatchNext(const std::string& input, const ImportOptions& o) {
  std::vector<int64_t> serial_sizes;
  auto serial = ReadAll(input, o, &serial_sizes);
  for (ParseOrder order : {ParseOrder::kLastToFirst, ParseOrder::kThreads}) {
    SCOPED_TRACE(order == ParseOrder::kThreads ? "parsed on threads" : "parsed last to first");
    std::vector<int64_t> sizes;
    auto chunked = ReadAllChunked(input, o, &sizes, order);
    ASSERT_EQ(serial.ok(), chunked.ok())
        << serial.status().ToString() << " vs " << chunked.status().ToString();
    if (!serial.ok()) {
      EXPECT_EQ(serial.status().ToString(), chunked.status().ToString());
      continue;
    }
    EXPECT_EQ(serial_sizes, sizes);
    EXPECT_TRUE((*serial)->schema()->Equals(*(*chunked)->schema()));
    EXPECT_TRUE((*serial)->Equals(**chunked)) << (*serial)->ToString() << "\nvs\n"
                                              << (*chunked)->ToString();
  }
}

TEST(ImportTest, JsonlInfersScalarNestedAndNullOnlyTypes) {
  std::string data =
      "{\"id\": 1, \"score\": 2, \"ok\": true, \"at\": \"2024-05-01T12:00:00Z\", \"note\": null,"
      " \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"meta\": {\"lang\": \"en\"}}\n"
      "\n"
      "{\"id\": 2, \"score\": 2.5, \"ok\": false, \"at\": \"2024-05-01 14:30:00.25+02:00\","
      " \"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\","
      " \"content\": \"b\"}], \"meta\": {\"lang\": \"de\", \"tags\": [\"x\"]}}\r\n";
  TY_ASSERT_OK_AND_ASSIGN(auto t, ReadAll(data, Jsonl()));
  EXPECT_EQ(t->schema()->ToString(),
            "id: int64\n"
            "score: double\n"
            "ok: bool\n"
            "at: timestamp[us, tz=UTC]\n"
            "note: string\n"
            "messages: list<item: struct<role: string, content: string>>\n"
            "meta: struct<lang: string, tags: list<item: string>>");
  ASSERT_EQ(t->num_rows(), 2);
  EXPECT_EQ(JsonOf(*t, 0),
            "1,2,true,\"2024-05-01T12:00:00Z\",null,[{\"role\":\"user\",\"content\":\"hi\"}],"
            "{\"lang\":\"en\",\"tags\":null}");
  EXPECT_EQ(
      JsonOf(*t, 1),
      "2,2.5,false,\"2024-05-01T12:30:00.250000Z\",null,[{\"role\":\"user\",\"content\":"
      "\"a\"},{\"role\":\"assistant\",\"content\":\"b\"}],{\"lang\":\"de\",\"tags\":[\"x\"]}");
}

TEST(ImportTest, JsonlMixedTypesAreAnErrorNamingBothLines) {
  Result<std::shared_ptr<arrow::Table>> r =
      ReadAll("{\"p\": 1}\n{\"p\": 2}\n{\"p\": \"high\"}\n", Jsonl());
  ASSERT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "data.jsonl line 3: field 'p': string here but int64 at line 1; a field must have one "
            "type (fix the data, or import into a table whose schema says which)");
  // Timestamps and other strings mix into string; objects and numbers do not.
  TY_ASSERT_OK_AND_ASSIGN(auto t,
                          ReadAll("{\"a\": \"2024-01-01T00:00\"}\n{\"a\": \"x\"}", Jsonl()));
  EXPECT_TRUE(t->schema()->field(0)->type()->Equals(arrow::utf8()));
  EXPECT_THAT(ReadAll("{\"m\": {\"x\": 1}}\n{\"m\": [1]}\n", Jsonl()).status(),
              StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(ReadAll("{\"l\": [1, \"a\"]}\n", Jsonl()).status(),
              StatusIs(StatusCode::kInvalidArgument));
}

TEST(ImportTest, SchemaCheckReportsTheFirstOffendingLine) {
  auto schema = arrow::schema({arrow::field("id", arrow::int64(), /*nullable=*/false),
                               arrow::field("priority", arrow::int64()),
                               arrow::field("text", arrow::utf8())});
  std::string data;
  for (int i = 1; i <= 2000; ++i) {
    std::string priority = i == 1834 || i == 1900 ? "\"high\"" : std::to_string(i % 3);
    data += "{\"id\": " + std::to_string(i) + ", \"priority\": " + priority +
            ", \"text\": \"ticket " + std::to_string(i) + "\"}\n";
  }
  ImportOptions o = Jsonl();
  o.expected_schema = schema;
  o.batch_rows = 500;
  TY_ASSERT_OK_AND_ASSIGN(auto imp, OpenImportBuffer(data, o));
  int64_t rows = 0;
  Status error;
  for (;;) {
    Result<std::shared_ptr<arrow::RecordBatch>> b = imp->Next();
    if (!b.ok()) {
      error = b.status();
      break;
    }
    ASSERT_TRUE(*b) << "the import ended without the error";
    rows += (*b)->num_rows();
  }
  EXPECT_EQ(rows, 1500);  // the batches before the bad line's
  EXPECT_EQ(error.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(error.message(),
            "data.jsonl line 1834: field 'priority': expected int64, got string \"high\"");
  // The error sticks.
  EXPECT_EQ(imp->Next().status().message(), error.message());
}

TEST(ImportTest, JsonlRequiredUnknownAndEvolvedFields) {
  auto schema = arrow::schema(
      {arrow::field("id", arrow::int64(), false), arrow::field("text", arrow::utf8())});
  ImportOptions o = Jsonl();
  o.expected_schema = schema;
  EXPECT_EQ(ReadAll("{\"id\": 1}\n{\"text\": \"x\"}\n", o).status().message(),
            "data.jsonl line 2: missing required field 'id' (int64, not nullable)");
  EXPECT_EQ(ReadAll("{\"id\": 1}\n{\"id\": null}\n", o).status().message(),
            "data.jsonl line 2: missing required field 'id' (int64, not nullable)");
  EXPECT_EQ(ReadAll("{\"id\": 1, \"lang\": \"en\"}\n", o).status().message(),
            "data.jsonl line 1: unknown field 'lang': the table has no such column (allow new "
            "columns to add it)");
  EXPECT_EQ(ReadAll("{\"id\": 1.5}\n", o).status().message(),
            "data.jsonl line 1: field 'id': expected int64, got double 1.5");
  o.allow_new_columns = true;
  TY_ASSERT_OK_AND_ASSIGN(auto t, ReadAll("{\"id\": 1, \"lang\": \"en\"}\n{\"id\": 2}\n", o));
  EXPECT_EQ(t->schema()->ToString(), "id: int64 not null\ntext: string\nlang: string");
  EXPECT_EQ(JsonOf(*t, 1), "2,null,null");
  // Without an expected schema, a field first seen after the sample is refused.
  ImportOptions small = Jsonl();
  small.infer_rows = 2;
  Status late = ReadAll("{\"a\": 1}\n{\"a\": 2}\n{\"a\": 3, \"b\": 1}\n", small).status();
  EXPECT_EQ(late.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(late.message().find("line 3: field 'b' first appears after the 2 records"),
            std::string::npos)
      << late.message();
}

TEST(ImportTest, JsonlMalformedInput) {
  EXPECT_EQ(ReadAll("{\"a\": 1}\n{\"a\": 2\n", Jsonl()).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_NE(ReadAll("{\"a\": 1}\n{\"a\": 2\n", Jsonl())
                .status()
                .message()
                .find("data.jsonl line 2: malformed JSON"),
            std::string::npos);
  EXPECT_EQ(ReadAll("{\"a\": 1}\n[1, 2]\n", Jsonl()).status().message(),
            "data.jsonl line 2: expected a JSON object, got an array");
  EXPECT_EQ(ReadAll("{\"a\": \"ok\"}\n{\"a\": \"\xff\"}\n", Jsonl()).status().message(),
            "data.jsonl line 2: invalid UTF-8 at byte 8 of the line");
  ImportOptions o = Jsonl();
  o.max_record_bytes = 20;
  EXPECT_EQ(ReadAll("{\"a\": 1}\n{\"a\": \"0123456789012345\"}\n", o).status().message(),
            "data.jsonl line 2 is longer than the limit of 20 bytes");
  o = Jsonl();
  o.max_field_bytes = 4;
  EXPECT_EQ(ReadAll("{\"a\": \"abcdef\"}\n", o).status().message(),
            "data.jsonl line 1: field 'a': a value of 6 bytes is longer than the limit of 4");
  // Deep nesting is refused, not a stack overflow.
  std::string deep = "{\"a\": " + std::string(5000, '[') + std::string(5000, ']') + "}";
  EXPECT_EQ(ReadAll(deep, Jsonl()).status().code(), StatusCode::kInvalidArgument);
  // A byte order mark and an empty file.
  TY_ASSERT_OK_AND_ASSIGN(auto t, ReadAll("\xEF\xBB\xBF{\"a\": 1}", Jsonl()));
  EXPECT_EQ(t->num_rows(), 1);
  TY_ASSERT_OK_AND_ASSIGN(auto empty, ReadAll("", Jsonl()));
  EXPECT_EQ(empty->num_rows(), 0);
  EXPECT_EQ(empty->num_columns(), 0);
}

TEST(ImportTest, CsvQuotesEmbeddedNewlinesAndInference) {
  std::string data =
      "id,score,ok,at,text,note\r\n"
      "1,2,true,2024-05-01T12:00:00Z,\"hello, \"\"world\"\"\",\r\n"
      "2,2.5,FALSE,2024-05-01T12:00:01Z,\"two\r\nlines\",\"\"\r\n"
      "\n"
      "3,,,,plain,x\r\n";
  TY_ASSERT_OK_AND_ASSIGN(auto t, ReadAll(data, Csv()));
  EXPECT_EQ(t->schema()->ToString(),
            "id: int64\nscore: double\nok: bool\nat: timestamp[us, tz=UTC]\ntext: string\n"
            "note: string");
  ASSERT_EQ(t->num_rows(), 3);
  EXPECT_EQ(JsonOf(*t, 0), "1,2,true,\"2024-05-01T12:00:00Z\",\"hello, \\\"world\\\"\",null");
  EXPECT_EQ(JsonOf(*t, 1), "2,2.5,false,\"2024-05-01T12:00:01Z\",\"two\\r\\nlines\",\"\"");
  EXPECT_EQ(JsonOf(*t, 2), "3,null,null,null,\"plain\",\"x\"");
  // Mixed text falls back to string rather than failing.
  TY_ASSERT_OK_AND_ASSIGN(auto mixed, ReadAll("a,b\n1,x\nhigh,2\n", Csv()));
  EXPECT_EQ(mixed->schema()->ToString(), "a: string\nb: string");
}

TEST(ImportTest, CsvErrorsNameTheLine) {
  auto schema =
      arrow::schema({arrow::field("id", arrow::int64()), arrow::field("priority", arrow::int64()),
                     arrow::field("text", arrow::utf8())});
  ImportOptions o = Csv();
  o.expected_schema = schema;
  // The quoted newline in record 2 makes record 3 start on line 5.
  EXPECT_EQ(ReadAll("id,priority,text\n1,1,a\n2,2,\"b\nc\"\n3,high,d\n", o).status().message(),
            "data.csv line 5: field 'priority': expected int64, got \"high\"");
  EXPECT_EQ(ReadAll("id,priority,text\n1,1,a\n2,2\n", o).status().message(),
            "data.csv line 3: expected 3 fields (as the header has), got 2");
  EXPECT_EQ(ReadAll("id,priority,lang\n", o).status().message(),
            "data.csv line 1: unknown field 'lang': the table has no such column (allow new "
            "columns to add it)");
  EXPECT_EQ(ReadAll("id,priority,text\n1,2,\"open\n", o).status().message(),
            "data.csv line 2: field 3 opens a quote that is never closed");
  EXPECT_EQ(ReadAll("id,priority,text\n1,2,\"a\"b\n", o).status().message(),
            "data.csv line 2: field 3 has characters after its closing quote; quote the whole "
            "field and double the quotes inside it");
  EXPECT_EQ(ReadAll("id,priority,text\n1,2,\xc3\x28\n", o).status().message(),
            "data.csv line 2: field 'text': invalid UTF-8 at byte 1");
  EXPECT_EQ(ReadAll("", o).status().message(), "data.csv is empty: a CSV file needs a header row");
  EXPECT_EQ(ReadAll("id,id\n1,2\n", Csv()).status().message(),
            "data.csv line 1: header names column 'id' twice");
  ImportOptions small = Csv();
  small.max_field_bytes = 3;
  EXPECT_EQ(ReadAll("a\nabcd\n", small).status().message(),
            "data.csv line 2: field 1 is longer than the limit of 3 bytes");
  // A header column the table lacks, and a required column the file lacks.
  auto required = arrow::schema(
      {arrow::field("id", arrow::int64(), false), arrow::field("text", arrow::utf8())});
  o.expected_schema = required;
  EXPECT_EQ(ReadAll("text\nx\n", o).status().message(),
            "data.csv line 2: missing required field 'id' (empty)");
  // Nested columns cannot come from CSV.
  o.expected_schema = arrow::schema({arrow::field("m", arrow::list(arrow::utf8()))});
  EXPECT_NE(ReadAll("m\nx\n", o).status().message().find("import JSON lines instead"),
            std::string::npos);
}

TEST(ImportTest, BatchesAreBoundedAndCoverEveryRow) {
  std::string data;
  for (int i = 0; i < 10; ++i) data += "{\"i\": " + std::to_string(i) + "}\n";
  ImportOptions o = Jsonl();
  o.batch_rows = 3;
  o.infer_rows = 4;
  TY_ASSERT_OK_AND_ASSIGN(auto imp, OpenImportBuffer(data, o));
  std::vector<int64_t> sizes;
  int64_t expect = 0;
  for (;;) {
    TY_ASSERT_OK_AND_ASSIGN(auto b, imp->Next());
    if (!b) break;
    sizes.push_back(b->num_rows());
    auto ints = std::static_pointer_cast<arrow::Int64Array>(b->column(0));
    for (int64_t r = 0; r < b->num_rows(); ++r) EXPECT_EQ(ints->Value(r), expect++);
  }
  EXPECT_EQ(sizes, (std::vector<int64_t>{3, 3, 3, 1}));
  EXPECT_EQ(imp->rows_read(), 10);
  TY_ASSERT_OK_AND_ASSIGN(auto end, imp->Next());
  EXPECT_EQ(end, nullptr);
}

TEST(ImportTest, ChunksGiveTheSameRowsAndErrorsAsNext) {
  std::string rows;
  for (int i = 0; i < 10; ++i) rows += "{\"i\": " + std::to_string(i) + ", \"s\": \"x\"}\n";
  const std::vector<std::string> inputs = {
      rows,
      "\xEF\xBB\xBF" + rows,                         // a byte order mark
      "\n  \n" + rows + "\n\n",                      // blank lines around
      "{\"i\": 1}\r\n\r\n{\"i\": 2}\r\n{\"i\": 3}",  // CRLF, no final newline
      rows + "{\"i\": 10, \"s\": 3}\n",              // a type error after the sample
      rows + "{\"i\": 11, \"new\": 1}\n",            // a field new after the sample
      "{\"i\": 1}\n\n{\"i\": 2\n",                   // malformed, in the sample
      rows + "{\"i\": \"\xff\"}\n",                  // invalid UTF-8
      rows + "{\"s\": \"" + std::string(100, 'y') + "\"}\n" + rows,  // a line over the limit
      // ...after a bad record of its batch, whose error comes first
      rows + "{\"i\": \"bad\"}\n" + "{\"s\": \"" + std::string(100, 'y') + "\"}\n",
      "",
  };
  for (size_t k = 0; k < inputs.size(); ++k) {
    SCOPED_TRACE("input " + std::to_string(k));
    ImportOptions o = Jsonl();
    o.batch_rows = 3;
    o.infer_rows = 4;  // the sample spans two chunks
    o.max_record_bytes = 80;
    auto serial = ReadAll(inputs[k], o);
    std::vector<int64_t> sizes;
    auto chunked = ReadAllChunked(inputs[k], o, &sizes);
    ASSERT_EQ(serial.ok(), chunked.ok())
        << serial.status().ToString() << " vs " << chunked.status().ToString();
    if (!serial.ok()) {
      EXPECT_EQ(serial.status().message(), chunked.status().message());
      continue;
    }
    ASSERT_EQ((*serial)->num_rows(), (*chunked)->num_rows());
    EXPECT_TRUE((*serial)->schema()->Equals(*(*chunked)->schema()));
    for (int64_t r = 0; r < (*serial)->num_rows(); ++r) {
      EXPECT_EQ(JsonOf(**serial, r), JsonOf(**chunked, r)) << "row " << r;
    }
    for (int64_t n : sizes) EXPECT_LE(n, 3);
  }
  // The messages name the line, as Next's do.
  ImportOptions o = Jsonl();
  o.infer_rows = 2;
  EXPECT_EQ(ReadAllChunked("{\"a\": 1}\n\n{\"a\": 2}\n{\"a\": \"x\"}\n", o).status().message(),
            "data.jsonl line 4: field 'a': expected int64, got string \"x\"");
}

TEST(ImportTest, CsvChunksGiveTheSameRowsAndErrorsAsNext) {
  std::string rows;  // 10 records, some spanning lines
  for (int i = 0; i < 10; ++i) {
    rows += std::to_string(i) + (i % 3 == 0 ? ",\"line\nbreak, \"\"quoted\"\"\"" : ",plain") +
            (i % 4 == 0 ? "\r\n" : "\n");
  }
  const std::string header = "id,text\n";
  const std::vector<std::string> inputs = {
      header + rows,
      "\xEF\xBB\xBF" + header + rows,                   // a byte order mark
      header + "\n\r\n" + rows + "\n\r\n\n",            // blank lines around
      "id,text\r\n1,\"a\r\nb\"\r\n\r\n2,c\r\n3,\"d\"",  // CRLF, no final newline
      header + rows + "4,\"e\"\"\"",                    // ends in a quoted field
      header + rows +
          "\xEF\xBB\xBF"
          "5,bom-like bytes\n",                                        // not a BOM mid-file: data
      header + rows + "x,late type error\n",                           // after the sample
      header + rows + "11\n",                                          // too few fields, late
      header + rows + "12,a,b\n" + rows,                               // too many fields, late
      header + rows + "13,\"\xff\"\n",                                 // invalid UTF-8, late
      header + rows + "14,\"closed\"then more\n" + rows,               // characters after a quote
      header + rows + "15,\"closed\"\rx\n",                            // a lone CR after a quote
      header + rows + "16,\"never closed\n" + rows,                    // runs to the end
      header + rows + "17,a lone \r in a field\n",                     // kept as text
      header + rows + "18,ab\"cd\n",                                   // a quote inside: text
      header + rows + "19,\"" + std::string(70, 'y') + "\"\n" + rows,  // a field over the limit
      header + rows + "20," + std::string(70, 'z') + "\n" + rows,      // unquoted, too
      header + rows + "21,\"" + std::string(30, '"') + "\"\n",         // doubled quotes: 15 bytes
      header + "1,\"a\nb\"\n2,bad\"\"x\n",                             // in the sample
      header,                                                          // no records
      "id,text",                                                       // nor a line end
      "",
  };
  for (size_t k = 0; k < inputs.size(); ++k) {
    SCOPED_TRACE("input " + std::to_string(k));
    ImportOptions o = Csv();
    o.batch_rows = 3;
    o.infer_rows = 4;  // the sample spans two chunks
    o.max_field_bytes = 60;
    o.max_record_bytes = 100;
    ExpectChunksMatchNext(inputs[k], o);
    o.expected_schema =
        arrow::schema({arrow::field("id", arrow::int64()), arrow::field("text", arrow::utf8())});
    ExpectChunksMatchNext(inputs[k], o);
  }
  // The messages name the line a record starts on, as Next's do.
  ImportOptions o = Csv();
  o.batch_rows = 2;
  o.infer_rows = 2;
  EXPECT_EQ(ReadAllChunked("id,t\n1,\"a\nb\"\n2,x\n\n3,y\nq,z\n", o).status().message(),
            "data.csv line 7: field 'id': expected int64, got \"q\"");
  EXPECT_EQ(ReadAllChunked("id,t\n1,a\n2,b\n3,c\n4,\"d\n", o).status().message(),
            "data.csv line 5: field 2 opens a quote that is never closed");
}

TEST(ImportTest, CsvChunksMatchNextOnRandomInputs) {
  // Texts from a few bytes that matter to CSV: a third are soup, most of it malformed; the rest
  // are records of two fields, quoted ones holding line breaks, CRs, delimiters and doubled
  // quotes, with now and then a piece of soup in place of a field (an error somewhere late).
  const std::string soup[] = {"a",    "1",  ",", ",", "\"",           "\"\"",     "\n",
                              "\r\n", "\r", " ", ";", "\xEF\xBB\xBF", "\xc3\xa9", "\xff"};
  const std::string quoted[] = {"a", "1", ",", ";", "\"\"", "\n", "\r\n", "\r", " ", "\xc3\xa9"};
  const std::string plain[] = {"a", "1", " ", "\xc3\xa9", "\r", "x\"y"};
  std::mt19937 random(18);
  auto pick = [&](const auto& from) { return from[random() % std::size(from)]; };
  int parsed = 0, failed = 0;
  for (int k = 0; k < 3000; ++k) {
    const char delim = k % 2 ? ',' : ';';
    std::string input = k % 2 ? "a,b\n" : "a;b\r\n";
    if (k % 3 == 0) {
      for (int i = static_cast<int>(random() % 60); i > 0; --i) input += pick(soup);
    } else {
      for (int r = static_cast<int>(random() % 12); r > 0; --r) {
        for (int f = 0; f < 2; ++f) {
          if (f == 1) input += delim;
          int n = static_cast<int>(random() % 5);
          if (random() % 40 == 0) {
            input += pick(soup);
          } else if (random() % 2) {
            input += "\"";
            for (int i = 0; i < n; ++i) input += pick(quoted);
            input += "\"";
          } else {
            for (int i = 0; i < n; ++i) input += pick(plain);
          }
        }
        input += random() % 3 ? "\n" : random() % 2 ? "\r\n" : "\n\n";
      }
      if (random() % 4 == 0 && input.back() == '\n') input.pop_back();  // no final line end
    }
    SCOPED_TRACE("input " + std::to_string(k) + ": " + input);
    ImportOptions o = Csv();
    o.csv_delimiter = delim;
    o.batch_rows = 1 + k % 3;
    o.infer_rows = 1 + k % 4;
    o.max_field_bytes = 6 + k % 5;
    o.max_record_bytes = 12 + k % 7;
    ExpectChunksMatchNext(input, o);
    (ReadAll(input, o).ok() ? parsed : failed) += 1;
  }
  // Both kinds are well represented.
  EXPECT_GT(parsed, 500);
  EXPECT_GT(failed, 500);
}

std::string ParquetFile(const arrow::Table& table, int64_t row_group_rows) {
  auto sink = arrow::io::BufferOutputStream::Create().ValueOrDie();
  auto written =
      parquet::arrow::WriteTable(table, arrow::default_memory_pool(), sink, row_group_rows);
  EXPECT_TRUE(written.ok()) << written.ToString();
  return sink->Finish().ValueOrDie()->ToString();
}

TEST(ImportTest, ParquetChunksGiveTheSameBatchesAsNext) {
  // 1000 rows in row groups of 70: batches of 32 within each row group, the last one shorter.
  arrow::Int64Builder ids;
  arrow::StringBuilder texts;
  for (int64_t i = 0; i < 1000; ++i) {
    ASSERT_TRUE(ids.Append(i).ok());
    ASSERT_TRUE((i % 97 == 96 ? texts.AppendNull() : texts.Append("t" + std::to_string(i))).ok());
  }
  auto schema =
      arrow::schema({arrow::field("id", arrow::int64()), arrow::field("text", arrow::utf8())});
  auto table = arrow::Table::Make(schema, {*ids.Finish(), *texts.Finish()});
  const std::string file = ParquetFile(*table, 70);
  ImportOptions o;
  o.format = ImportFormat::kParquet;
  o.source_name = "data.parquet";
  o.batch_rows = 32;
  ExpectChunksMatchNext(file, o);
  std::vector<int64_t> sizes;
  TY_ASSERT_OK_AND_ASSIGN(auto chunked, ReadAllChunked(file, o, &sizes, ParseOrder::kThreads));
  EXPECT_TRUE(chunked->Equals(*table));
  ASSERT_GE(sizes.size(), 4u);
  EXPECT_EQ(std::vector<int64_t>(sizes.begin(), sizes.begin() + 4),
            (std::vector<int64_t>{32, 32, 6, 32}));
  // A column the table has and the file lacks: nulls; a required column with nulls (the first at
  // row 96, in row group 1): the same error.
  o.expected_schema =
      arrow::schema({arrow::field("id", arrow::int64()), arrow::field("text", arrow::utf8()),
                     arrow::field("lang", arrow::utf8())});
  ExpectChunksMatchNext(file, o);
  o.expected_schema = arrow::schema(
      {arrow::field("id", arrow::int64()), arrow::field("text", arrow::utf8(), false)});
  ExpectChunksMatchNext(file, o);
  EXPECT_EQ(ReadAllChunked(file, o).status().message(),
            "data.parquet: field 'text' is required but has nulls");
  // One row group, and batches larger than it.
  o.expected_schema = nullptr;
  o.batch_rows = 5000;
  ExpectChunksMatchNext(ParquetFile(*table, 1000), o);
  ExpectChunksMatchNext(file, o);
}

TEST(ImportTest, ParquetKeepsItsTypesAndIsCheckedAgainstTheSchema) {
  auto schema =
      arrow::schema({arrow::field("id", arrow::int64()), arrow::field("text", arrow::utf8())});
  arrow::Int64Builder ids;
  arrow::StringBuilder texts;
  ASSERT_TRUE(ids.AppendValues({1, 2, 3}).ok());
  ASSERT_TRUE(texts.AppendValues({"a", "b", "c"}).ok());
  auto batch = arrow::RecordBatch::Make(schema, 3, {*ids.Finish(), *texts.Finish()});
  auto reader = *arrow::RecordBatchReader::Make({batch}, schema);
  std::string file;
  TY_ASSERT_OK(ExportRecords(*reader, ExportFormat::kParquet, [&](std::string_view b) {
                 file.append(b);
                 return Status::Ok();
               }).status());
  ImportOptions o;
  o.format = ImportFormat::kParquet;
  o.source_name = "data.parquet";
  TY_ASSERT_OK_AND_ASSIGN(auto t, ReadAll(file, o));
  EXPECT_TRUE(t->schema()->Equals(*schema));
  EXPECT_EQ(JsonOf(*t, 2), "3,\"c\"");
  // A table with another column: filled with nulls when nullable.
  o.expected_schema =
      arrow::schema({arrow::field("id", arrow::int64()), arrow::field("text", arrow::utf8()),
                     arrow::field("lang", arrow::utf8())});
  TY_ASSERT_OK_AND_ASSIGN(auto wider, ReadAll(file, o));
  EXPECT_EQ(JsonOf(*wider, 0), "1,\"a\",null");
  o.expected_schema =
      arrow::schema({arrow::field("id", arrow::utf8()), arrow::field("text", arrow::utf8())});
  EXPECT_EQ(ReadAll(file, o).status().message(),
            "data.parquet: field 'id': expected string, got int64 (the file's column type)");
  o.expected_schema = arrow::schema({arrow::field("id", arrow::int64())});
  EXPECT_NE(ReadAll(file, o).status().message().find("unknown field 'text'"), std::string::npos);
  o.expected_schema = nullptr;
  EXPECT_EQ(ReadAll("not parquet at all", o).status().code(), StatusCode::kInvalidArgument);
}

TEST(ImportTest, IsoTimestamps) {
  EXPECT_EQ(ParseIsoTimestampMicros("1970-01-01T00:00:00Z"), 0);
  EXPECT_EQ(ParseIsoTimestampMicros("1970-01-01T00:00:01.5Z"), 1500000);
  EXPECT_EQ(ParseIsoTimestampMicros("1970-01-01 01:00+01:00"), 0);
  EXPECT_EQ(ParseIsoTimestampMicros("1969-12-31T23:59:59.999999Z"), -1);
  EXPECT_EQ(ParseIsoTimestampMicros("2024-02-29T12:00:00"), 1709208000000000);
  EXPECT_EQ(ParseIsoTimestampMicros("2023-02-29T12:00:00"), std::nullopt);
  EXPECT_EQ(ParseIsoTimestampMicros("2024-05-01"), std::nullopt);  // a date alone stays text
  EXPECT_EQ(ParseIsoTimestampMicros("2024-05-01T25:00"), std::nullopt);
  EXPECT_EQ(ParseIsoTimestampMicros("2024-05-01T12:00:00Zjunk"), std::nullopt);
  EXPECT_EQ(ParseIsoTimestampMicros("2024-05-01T12:00:00."), std::nullopt);
  EXPECT_EQ(ImportFormatFromPath("x/Data.JSONL").value(), ImportFormat::kJsonl);
  EXPECT_EQ(ImportFormatFromPath("a.parquet").value(), ImportFormat::kParquet);
  EXPECT_TRUE(ImportFormatFromPath("a.xlsx").status().IsInvalidArgument());
}

}  // namespace
}  // namespace trainyard::tables
