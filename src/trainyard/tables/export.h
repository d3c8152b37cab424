// Exporters: a stream of Arrow record batches out as JSON lines, CSV, Parquet or an Arrow IPC
// stream, written through a byte sink (a file, an HTTP response body, a buffer).
//
// JSON lines: one object per row, keys in schema order; timestamps ISO-8601 ("...Z" for
// timestamps with a time zone, which Arrow stores as UTC), dates "YYYY-MM-DD", binary base64,
// NaN and infinities null (JSON has no such numbers), structs objects, lists arrays.
// CSV (RFC 4180): a header row, then one record per row; a field is quoted when it holds the
// delimiter, a quote, a line break or leading/trailing spaces; null is an empty unquoted field and
// the empty string a quoted one (""), so the importer (import.h) reads it back exactly; nested
// values are their JSON text.
// Parquet and Arrow IPC go through Arrow's own writers (one row group per `parquet_row_group_rows`
// rows; IPC as the streaming format, application/vnd.apache.arrow.stream).
//
// Batches are written as they are read: memory stays bounded by one batch (plus a Parquet row
// group). Not thread-safe; each call is independent.
#pragma once

#include <arrow/api.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "trainyard/common/status.h"

namespace trainyard::tables {

enum class ExportFormat { kJsonl, kCsv, kParquet, kArrowIpc };

// "jsonl", "csv", "parquet", "arrow" (also by a file name's extension: .jsonl/.ndjson, .csv,
// .parquet, .arrow/.arrows).
Result<ExportFormat> ExportFormatFromName(std::string_view name_or_path);

// Receives the exported bytes in order; an error stops the export and is returned.
using ByteSink = std::function<Status(std::string_view bytes)>;

struct ExportOptions {
  char csv_delimiter = ',';
  int64_t parquet_row_group_rows = 1 << 20;
  // Stop after this many rows (-1: all), for paging through the REST API.
  int64_t max_rows = -1;
};

// Writes every batch of `reader` in `format` to `sink`; returns the number of rows written.
Result<int64_t> ExportRecords(arrow::RecordBatchReader& reader, ExportFormat format,
                              const ByteSink& sink, const ExportOptions& options = {});

// Convenience: the export into a file at `path` (written to a temporary name, then renamed).
Result<int64_t> ExportToFile(arrow::RecordBatchReader& reader, ExportFormat format,
                             const std::string& path, const ExportOptions& options = {});

// One value as JSON text (for JSON lines and nested CSV fields).
void AppendJsonValue(const arrow::Array& array, int64_t row, std::string* out);

}  // namespace trainyard::tables
