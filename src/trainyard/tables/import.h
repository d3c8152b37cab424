// Importers: JSON lines, CSV and Parquet files into a stream of Arrow record batches, with type
// inference or a check against an existing table's schema.
//
// A RecordImporter reads its source once, front to back, in batches of `batch_rows` rows, so
// memory stays bounded however large the file is (one batch, plus the inference sample of
// `infer_rows` records while the schema is inferred). Errors name the source and, for the text
// formats, the line the offending record starts on:
//   data.jsonl line 1834: field 'priority': expected int64, got string "high"
// An error can come from any Next() call: callers that write a table commit only after Next()
// has returned the end of the stream, so a bad row leaves nothing half-written.
//
// Type inference (no `expected_schema`): from the first `infer_rows` records.
//  - JSON: integers int64, other numbers double (a mix of the two is double), true/false bool,
//    strings string, strings that are all ISO-8601 date-times ("2024-05-01T12:00:00Z",
//    "2024-05-01 12:00:00.5+02:00") timestamp[us, UTC], objects struct (fields in the order first
//    seen), arrays list (e.g. chat `messages: [{role, content}]` is list<struct<role, content>>).
//    Any other mix (a number and a string, a string and an object...) is an error naming the
//    field and the two lines; a field that is null or absent in the whole sample is a nullable
//    string. A field first seen after the sample is an error that suggests raising infer_rows.
//  - CSV (all text): a column is int64 when every non-empty value is an integer, else double when
//    every one is a number, else bool (true/false, any case), else timestamp (ISO-8601), else
//    string; mixing there falls back to string, never an error. An empty unquoted field is null;
//    a quoted empty field ("") is the empty string.
// Enforcement: every record, in the sample or after, must fit the schema: missing fields are
// null (an error for a non-nullable field of `expected_schema`), unknown fields are an error
// unless `allow_new_columns` (then the sample's new fields become nullable columns appended to
// the schema; nested structs never evolve).
//
// Parquet files keep their own types; with `expected_schema` each column must have the expected
// type (missing nullable columns become nulls; unknown columns are an error unless
// `allow_new_columns`).
//
// Not thread-safe: one thread drives an importer.
#pragma once

#include <arrow/api.h>

#include <cstdint>
#include <istream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "trainyard/common/status.h"

namespace trainyard::tables {

enum class ImportFormat { kJsonl, kCsv, kParquet };

// By the file name's extension: .jsonl/.ndjson/.json, .csv, .parquet (any case).
Result<ImportFormat> ImportFormatFromPath(std::string_view path);

struct ImportOptions {
  ImportFormat format = ImportFormat::kJsonl;
  // How errors name the source ("data.jsonl"); OpenImportFile sets it to the file name if empty.
  std::string source_name;
  int64_t batch_rows = 64 * 1024;
  int64_t infer_rows = 1000;
  // Longest JSON line or CSV record, and longest single CSV field or JSON string.
  size_t max_record_bytes = size_t{16} << 20;
  size_t max_field_bytes = size_t{8} << 20;
  // The existing table's schema to check against; null means infer one.
  std::shared_ptr<arrow::Schema> expected_schema;
  // Schema evolution: unknown fields add nullable columns instead of failing.
  bool allow_new_columns = false;
  char csv_delimiter = ',';
};

class RecordImporter {
 public:
  virtual ~RecordImporter() = default;
  // The schema of every batch: the inferred one, or `expected_schema` (plus new columns).
  virtual std::shared_ptr<arrow::Schema> schema() const = 0;
  // The next batch (at most batch_rows rows, never empty); nullptr at the end of the source.
  virtual Result<std::shared_ptr<arrow::RecordBatch>> Next() = 0;
  // Records read so far (for progress).
  virtual int64_t rows_read() const = 0;
};

// Opens `path`; `options.format` is used as given (see ImportFormatFromPath).
Result<std::unique_ptr<RecordImporter>> OpenImportFile(const std::string& path,
                                                       ImportOptions options);
// Reads from `data` (owned by the importer): for tests, fuzzing and uploaded bodies.
Result<std::unique_ptr<RecordImporter>> OpenImportBuffer(std::string data, ImportOptions options);

// ISO-8601 date-time to microseconds since the epoch (UTC; no offset means UTC):
// YYYY-MM-DD('T'|' ')HH:MM[:SS[.fraction]][Z|±HH[:]MM]. nullopt when `s` is not one.
std::optional<int64_t> ParseIsoTimestampMicros(std::string_view s);

}  // namespace trainyard::tables
