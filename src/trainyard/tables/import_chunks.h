// Parallel parsing of import sources (prep reads its sources so): the reading thread only cuts
// the source into chunks of up to `batch_rows` records (NextChunk, cheap), and any thread turns
// a chunk into its batch (ParseChunk, most of the cost), several at once. Parsing the chunks in
// parallel and taking them in order gives the same rows, and the same first error naming the
// same line, as import.h's RecordImporter::Next() on the same file: it is the same importer
// (inference from the first `infer_rows` records, the schema check, the limits).
//  - JSON lines: chunks are cut at line ends; ParseChunk does the UTF-8 check, JSON parse and
//    Arrow builders.
//  - CSV: chunks are cut at record ends, found by a quote-aware scan that follows the parser's
//    rules (a quoted field may hold line ends; a record the parser would fail on ends the last
//    chunk, whose parse gives that error); ParseChunk splits fields, checks and converts them.
//  - Parquet: a chunk is a batch of a row group, counted from the footer; ParseChunk decodes.
//    Each row group is decoded front to back by its own reader, by whichever thread needs it
//    first, so different row groups decode at once; the batches are RecordImporter::Next()'s
//    (batch_rows rows at a time within each row group).
//
// Thread-safety: one thread calls NextChunk; ParseChunk is const and may run on any threads at
// once, also while NextChunk goes on; each chunk is parsed at most once. The importer must
// outlive the calls.
#pragma once

#include <arrow/api.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "trainyard/common/status.h"
#include "trainyard/tables/import.h"

namespace trainyard::tables {

// Records of a source, not parsed yet.
struct RecordChunk {
  // JSON lines and CSV: whole lines (JSON lines: each ending in "\n"; blank lines kept) and
  // the line number of the first of them.
  std::string text;
  int64_t first_line = 1;
  int64_t records = 0;  // the records in it (JSON lines: its non-blank lines)
  // Parquet: the row group, and which of its batches this is (from 0).
  int row_group = -1;
  int64_t slice = 0;
};

class ChunkedImporter {
 public:
  virtual ~ChunkedImporter() = default;
  // The schema of every batch (as RecordImporter::schema()).
  virtual std::shared_ptr<arrow::Schema> schema() const = 0;
  // The next chunk of 1..batch_rows records; nullopt at the end. A JSON line over the limit is
  // an error naming it.
  virtual Result<std::optional<RecordChunk>> NextChunk() = 0;
  // The chunk's records as a batch of schema(), or the first record's error naming its line.
  virtual Result<std::shared_ptr<arrow::RecordBatch>> ParseChunk(
      const RecordChunk& chunk) const = 0;
};

// A file (`options.format` says which: see ImportFormatFromPath) or one in memory.
Result<std::unique_ptr<ChunkedImporter>> OpenImportChunks(const std::string& path,
                                                          ImportOptions options);
Result<std::unique_ptr<ChunkedImporter>> OpenImportChunksBuffer(std::string data,
                                                                ImportOptions options);
// A JSON lines file (`options.format` is taken as JSON lines) or one in memory.
Result<std::unique_ptr<ChunkedImporter>> OpenJsonlChunks(const std::string& path,
                                                         ImportOptions options);
Result<std::unique_ptr<ChunkedImporter>> OpenJsonlChunksBuffer(std::string data,
                                                               ImportOptions options);

}  // namespace trainyard::tables
