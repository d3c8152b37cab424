// The check the importers' fuzz targets share (csv_import_fuzz.cc, jsonl_import_fuzz.cc): an
// input read serially (OpenImportBuffer) must end in batches that Arrow validates fully, with
// the importer's schema and at most batch_rows rows, or in a clean error; read in chunks
// (NextChunk/ParseChunk, the parallel path) it must give the same rows and the same error.
// Aborts otherwise, so that libFuzzer reports the input.
#pragma once

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
  std::string serial, chunked;  // every value rendered, then the error
  for (;;) {
    auto batch = (*imp)->Next();
    if (!batch.ok()) serial += "\n" + batch.status().message();
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
    if (!chunk.ok()) chunked += "\n" + chunk.status().message();
    if (!chunk.ok() || !*chunk) break;
    auto batch = (*chunks)->ParseChunk(**chunk);
    if (!batch.ok()) {
      chunked += "\n" + batch.status().message();
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
  if (serial != chunked) std::abort();
}

}  // namespace trainyard::tables
