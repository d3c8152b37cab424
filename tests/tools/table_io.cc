// Test-only: our side of tests/test_table_io.py. Converts a data file with the importers and
// exporters of tables/ (import.h, export.h), so that pyarrow and Python's csv module can check
// what we read and what we write.
//
//   table_io_tool IN OUT [--schema-like FILE] [--batch-rows N] [--infer-rows N] [--evolve]
//
// IN's format comes from its extension (.jsonl, .csv, .parquet), OUT's too (.jsonl, .csv,
// .parquet, .arrows). --schema-like FILE checks IN against the schema of the Parquet file FILE
// (an existing table's). Prints the schema on stdout; an error goes to stderr, exit status 1.
#include <cstdlib>
#include <iostream>
#include <string>

#include "trainyard/tables/export.h"
#include "trainyard/tables/import.h"

namespace {

using namespace trainyard;
using namespace trainyard::tables;

// A RecordBatchReader over an importer, for the exporters.
class ImporterReader : public arrow::RecordBatchReader {
 public:
  explicit ImporterReader(RecordImporter* imp) : imp_(imp) {}
  std::shared_ptr<arrow::Schema> schema() const override { return imp_->schema(); }
  arrow::Status ReadNext(std::shared_ptr<arrow::RecordBatch>* batch) override {
    Result<std::shared_ptr<arrow::RecordBatch>> b = imp_->Next();
    if (!b.ok()) {
      error = b.status();
      return arrow::Status::Invalid(b.status().message());
    }
    *batch = *b;
    return arrow::Status::OK();
  }
  Status error;

 private:
  RecordImporter* imp_;
};

int Fail(const Status& s) {
  std::cerr << s.ToString() << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: table_io_tool IN OUT [--schema-like FILE] [--batch-rows N] "
                 "[--infer-rows N] [--evolve]\n";
    return 2;
  }
  std::string in = argv[1], out = argv[2];
  ImportOptions options;
  for (int i = 3; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--evolve") {
      options.allow_new_columns = true;
    } else if (i + 1 < argc && a == "--batch-rows") {
      options.batch_rows = std::atoll(argv[++i]);
    } else if (i + 1 < argc && a == "--infer-rows") {
      options.infer_rows = std::atoll(argv[++i]);
    } else if (i + 1 < argc && a == "--schema-like") {
      ImportOptions like;
      like.format = ImportFormat::kParquet;
      Result<std::unique_ptr<RecordImporter>> ref = OpenImportFile(argv[++i], like);
      if (!ref.ok()) return Fail(ref.status());
      options.expected_schema = (*ref)->schema();
    } else {
      std::cerr << "unknown argument " << a << "\n";
      return 2;
    }
  }
  Result<ImportFormat> in_format = ImportFormatFromPath(in);
  if (!in_format.ok()) return Fail(in_format.status());
  options.format = *in_format;
  Result<ExportFormat> out_format = ExportFormatFromName(out);
  if (!out_format.ok()) return Fail(out_format.status());
  Result<std::unique_ptr<RecordImporter>> imp = OpenImportFile(in, options);
  if (!imp.ok()) return Fail(imp.status());
  ImporterReader reader(imp->get());
  Result<int64_t> rows = ExportToFile(reader, *out_format, out);
  if (!reader.error.ok()) return Fail(reader.error);
  if (!rows.ok()) return Fail(rows.status());
  std::cout << (*imp)->schema()->ToString() << "\n";
  return 0;
}
