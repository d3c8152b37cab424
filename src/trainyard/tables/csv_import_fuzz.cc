// libFuzzer target for the CSV importer: any input, with inferred or expected schemas and
// tiny batches and limits, must end in batches that Arrow validates fully (and that the JSON
// exporter can render) or in a clean error; never a crash, a hang or an invalid array. Read in
// chunks (NextChunk/ParseChunk, the parallel path: cut at record ends by a quote-aware scan) it
// must give the same rows and error.
#include <cstdint>
#include <string>

#include "trainyard/tables/import_fuzz_check.h"

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
  CheckSerialEqualsChunked(input, o, [](const std::string& in, const ImportOptions& opt) {
    return OpenImportChunksBuffer(in, opt);
  });
  return 0;
}
