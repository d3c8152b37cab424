// Parallel parsing of JSON lines (prep reads its sources so): the reading thread only cuts the
// source into chunks of up to `batch_rows` records at line ends (NextChunk, cheap), and any
// thread turns a chunk into its batch (ParseChunk: UTF-8 check, JSON parse, Arrow builders,
// most of the cost), several at once. Parsing the chunks in parallel and taking them in order
// gives the same rows, and the same first error naming the same line, as import.h's
// RecordImporter::Next() on the same file: it is the same importer (inference from the first
// `infer_rows` records, the schema check, the limits).
//
// Thread-safety: one thread calls NextChunk; ParseChunk is const and may run on any threads at
// once, also while NextChunk goes on. The importer must outlive the calls.
#pragma once

#include <arrow/api.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "trainyard/common/status.h"
#include "trainyard/tables/import.h"

namespace trainyard::tables {

// Lines of a JSON lines source, cut at a line end.
struct RecordChunk {
  std::string text;        // whole lines, each ending in "\n" (blank lines kept)
  int64_t first_line = 1;  // the line number of the first line in `text`
  int64_t records = 0;     // the records in it (its non-blank lines)
};

class ChunkedImporter {
 public:
  virtual ~ChunkedImporter() = default;
  // The schema of every batch (as RecordImporter::schema()).
  virtual std::shared_ptr<arrow::Schema> schema() const = 0;
  // The next chunk of 1..batch_rows records; nullopt at the end. A line over the limit is an
  // error naming it.
  virtual Result<std::optional<RecordChunk>> NextChunk() = 0;
  // The chunk's records as a batch of schema(), or the first record's error naming its line.
  virtual Result<std::shared_ptr<arrow::RecordBatch>> ParseChunk(
      const RecordChunk& chunk) const = 0;
};

// A JSON lines file (`options.format` is taken as JSON lines) or one in memory.
Result<std::unique_ptr<ChunkedImporter>> OpenJsonlChunks(const std::string& path,
                                                         ImportOptions options);
Result<std::unique_ptr<ChunkedImporter>> OpenJsonlChunksBuffer(std::string data,
                                                               ImportOptions options);

}  // namespace trainyard::tables
