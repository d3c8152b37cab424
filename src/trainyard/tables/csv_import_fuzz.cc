// libFuzzer target for the CSV importer: any input, with inferred or expected schemas and
// tiny batches and limits, must end in batches that Arrow validates fully (and that the JSON
// exporter can render) or in a clean error; never a crash, a hang or an invalid array. Read in
// chunks (NextChunk/ParseChunk, the parallel path: cut at record ends by a quote-aware scan) it
// must give the same rows and error.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "trainyard/tables/export.h"
#include "trainyard/tables/import.h"
#include "trainyard/tables/import_chunks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace trainyard::tables;
  if (size == 0) return 0;
  uint8_t mode = data[0];
  ImportOptions o;
  o.format = ImportFormat::kCsv;
  o.batch_rows = 1 + (mode & 3);
  o.infer_rows = 1 + ((mode >> 2) & 3);
  o.max_record_bytes = (mode & 16) ? 64 : 4096;
  o.max_field_bytes = (mode & 16) ? 16 : 1024;
  if (mode & 32) {
    o.expected_schema = arrow::schema(
        {arrow::field("id", arrow::int64(), false), arrow::field("text", arrow::utf8()),
         arrow::field("at", arrow::timestamp(arrow::TimeUnit::NANO, "UTC")),
         arrow::field("ok", arrow::boolean()), arrow::field("day", arrow::date32()),
         arrow::field("small", arrow::int8()), arrow::field("score", arrow::float64())});
  }
  o.allow_new_columns = (mode & 64) != 0;
  if ((mode & 128) && o.format == ImportFormat::kCsv) o.csv_delimiter = ';';
  const std::string input(reinterpret_cast<const char*>(data) + 1, size - 1);
  auto imp = OpenImportBuffer(input, o);
  if (!imp.ok()) return 0;
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
  auto chunks = OpenImportChunksBuffer(input, o);
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
  return 0;
}
