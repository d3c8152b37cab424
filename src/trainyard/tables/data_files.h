// Data files of a Delta table: writing rows into Parquet files (Hive-style partition
// directories, per-file statistics for the `add` action) and scanning a snapshot's files into
// batches (projection, partition values as columns, pruning by statistics, row filter).
// Internal to tables/. A DataFileWriter is used by one thread; a scan reader likewise.
#pragma once

#include <arrow/api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainyard/blob/blob_store.h"
#include "trainyard/common/clock.h"
#include "trainyard/common/status.h"
#include "trainyard/tables/delta_log.h"
#include "trainyard/tables/delta_snapshot.h"
#include "trainyard/tables/predicate.h"
#include "trainyard/tables/table.h"

namespace trainyard::tables {

// `batch` with the columns of `schema` (by name), cast to its types; absent nullable columns
// are null. InvalidArgument naming the column for an extra or missing column, a type that does
// not convert, or a null in a non-nullable column.
Result<std::shared_ptr<arrow::RecordBatch>> ConformBatch(const arrow::RecordBatch& batch,
                                                         const arrow::Schema& schema);

// The statistics of a file for pruning: its `stats` JSON and its partition values, typed by
// the table's schema.
FileStats StatsOfFile(const AddAction& add, const arrow::Schema& schema);

// A random (version 4) UUID, "8-4-4-4-12" hex: data file names and commitInfo.txnId.
std::string NewUuid(Random& random);

class DataFileWriter {
 public:
  DataFileWriter(blob::BlobStore& store, const DeltaLog& log, std::shared_ptr<arrow::Schema> schema,
                 std::vector<std::string> partition_columns, const TableOptions& options,
                 Clock& clock, Random& random);
  ~DataFileWriter();

  // Writes the rows of `batch` (already conformed to the table's schema).
  Status Write(const arrow::RecordBatch& batch);
  // Closes every open file and returns their add actions.
  Result<std::vector<AddAction>> Finish();
  // Deletes the files written so far (after an error: nothing half-written stays behind).
  void Abandon();
  int64_t rows() const { return rows_; }

 private:
  struct OpenFile;
  Status WriteGroup(const std::string& key, const arrow::RecordBatch& rows,
                    const std::map<std::string, std::optional<std::string>>& values);
  Status WriteRowGroup(OpenFile& file);
  Status Close(OpenFile& file);

  blob::BlobStore& store_;
  const DeltaLog& log_;
  std::shared_ptr<arrow::Schema> schema_;
  std::shared_ptr<arrow::Schema> file_schema_;  // without partition columns
  std::vector<std::string> partition_columns_;
  TableOptions options_;
  Clock& clock_;
  Random& random_;
  std::map<std::string, std::unique_ptr<OpenFile>> open_;
  std::vector<AddAction> done_;
  int64_t rows_ = 0;
  int64_t files_ = 0;
};

// A streaming reader over `files` of `snapshot`: columns in `output_schema` order, rows where
// `filter` is TRUE. Files and row groups the filter rules out are skipped.
Result<std::unique_ptr<arrow::RecordBatchReader>> ScanFiles(
    blob::BlobStore& store, std::shared_ptr<const DeltaLog> log,
    std::shared_ptr<const Snapshot> snapshot, std::vector<AddAction> files,
    std::shared_ptr<arrow::Schema> output_schema, std::optional<Predicate> filter,
    int64_t batch_rows);

}  // namespace trainyard::tables
