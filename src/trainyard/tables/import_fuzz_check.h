// The check the importers' fuzz targets share (csv_import_fuzz.cc, jsonl_import_fuzz.cc): an
// input read serially (OpenImportBuffer) must end in batches that Arrow validates fully, with
// the importer's schema and at most batch_rows rows, or in a clean error; read in chunks
// (NextChunk/ParseChunk, the parallel path) it must give the same rows, or the same error.
// When the input ends in an error only the errors are compared: an import that fails writes
// nothing, and the two paths may stop at different points of the batch that holds the bad
// record (the chunker ends a chunk before an over-long line, the serial reader drops the batch).
// Aborts otherwise, so that libFuzzer reports the input.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#include "trainyard/tables/export.h"
#include "trainyard/tables/import.h"
#include "trainyard/tables/import_chunks.h"

namespace trainyard::tables {

// `open_chunks` opens the chunked reader of the same format (e.g. OpenJsonlChunksBuffer).
template <typename OpenChunks>
void CheckSerialEqualsChunked(const std::string& input, const ImportOptions& o,
                              OpenChunks open_chunks) {
  auto imp = OpenImportBuffer(input, o);
  if (!imp.ok()) return;
  std::string serial, chunked;  // every value rendered
  std::string serial_error, chunked_error;
  for (;;) {
    auto batch = (*imp)->Next();
    if (!batch.ok()) serial_error = batch.status().message();
    if (!batch.ok() || !*batch) break;
    const arrow::RecordBatch& b = **batch;
    if (!b.ValidateFull().ok() || !b.schema()->Equals(*(*imp)->schema()) || b.num_rows() == 0 ||
        b.num_rows() > o.batch_rows) {
      std::abort();
    }
    for (int64_t r = 0; r < b.num_rows(); ++r) {
      for (int c = 0; c < b.num_columns(); ++c) AppendJsonValue(*b.column(c), r, &serial);
    }
  }
  auto chunks = open_chunks(input, o);
  if (!chunks.ok()) std::abort();  // opened once already
  for (;;) {
    auto chunk = (*chunks)->NextChunk();
    if (!chunk.ok()) chunked_error = chunk.status().message();
    if (!chunk.ok() || !*chunk) break;
    auto batch = (*chunks)->ParseChunk(**chunk);
    if (!batch.ok()) {
      chunked_error = batch.status().message();
      break;
    }
    const arrow::RecordBatch& b = **batch;
    if (!b.ValidateFull().ok() || b.num_rows() != (*chunk)->records ||
        b.num_rows() > o.batch_rows) {
      std::abort();
    }
    for (int64_t r = 0; r < b.num_rows(); ++r) {
      for (int c = 0; c < b.num_columns(); ++c) AppendJsonValue(*b.column(c), r, &chunked);
    }
  }
  if (serial_error != chunked_error || (serial_error.empty() && serial != chunked)) {
    std::fprintf(stderr, "serial:\n%s\n%s\nchunked:\n%s\n%s\n", serial.c_str(),
                 serial_error.c_str(), chunked.c_str(), chunked_error.c_str());
    std::abort();
  }
}

}  // namespace trainyard::tables
