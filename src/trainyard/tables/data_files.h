// Data files of a Delta table: writing rows into Parquet files (Hive-style partition
// directories, per-file statistics for the `add` action) and scanning a snapshot's files into
// batches (projection, partition values as columns, pruning by statistics, row filter).
// Internal to tables/. A DataFileWriter is used by one thread (it runs threads of its own); a scan
// reader is used by one thread (it runs decoders of its own).
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
#include "trainyard/common/mutex.h"
#include "trainyard/common/status.h"
#include "trainyard/tables/delta_log.h"
#include "trainyard/tables/delta_snapshot.h"
#include "trainyard/tables/predicate.h"
#include "trainyard/tables/serial_worker.h"
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

// Writes rows into the Parquet data files of a table and returns their add actions. Used by
// one thread, the caller; inside, a pipeline: the caller gathers each row group (references
// to the rows of the batches it passes, not copies); encoder threads (one per core, at most 4)
// encode row groups in parallel, each into a Parquet file of its own in memory; an appender
// thread copies their column chunks into the data file in row-group order and writes the
// footer (the metadata of the row groups with their offsets moved); a storer thread puts
// finished files into the BlobStore. Files, row groups and rows come out in the order given.
// Memory is bounded by about two row groups (TableOptions::row_group_rows/row_group_bytes) per
// encoder plus one per open file, and their encoded bytes. Errors of the encoders, appender
// or storer surface at the next Write or at Finish.
class DataFileWriter {
 public:
  DataFileWriter(blob::BlobStore& store, const DeltaLog& log, std::shared_ptr<arrow::Schema> schema,
                 std::vector<std::string> partition_columns, const TableOptions& options,
                 Clock& clock, Random& random);
  // Stops the pipeline; files not yet stored are deleted, stored ones stay (see Abandon).
  ~DataFileWriter();
  DataFileWriter(const DataFileWriter&) = delete;
  DataFileWriter& operator=(const DataFileWriter&) = delete;

  // Writes the rows of `batch` (already conformed to the table's schema). Its arrays must stay
  // unchanged until Finish returns (Arrow's arrays are immutable).
  Status Write(const arrow::RecordBatch& batch);
  // Closes every open file, waits until all are stored and returns their add actions.
  Result<std::vector<AddAction>> Finish();
  // After an error: stops the pipeline and deletes the files written so far, so nothing
  // half-written stays behind. The writer cannot be used afterwards.
  void Abandon();
  int64_t rows() const { return rows_; }

 private:
  struct OpenFile;
  struct Encoded;       // a row group encoded as a Parquet file of its own, in memory
  struct EncodedGroup;  // a row group handed to an encoder, which the appender waits for
  struct EncodeTask;
  static Result<Encoded> Encode(const EncodeTask& task);
  // On the appender: copies the encoded row group's column chunks to the end of the file and
  // adds its metadata, with the offsets moved, to the file's footer.
  static Status AppendRowGroup(OpenFile& file, const Encoded& encoded);
  static Status WriteFooter(OpenFile& file);
  Status WriteGroup(const std::string& key, const arrow::RecordBatch& rows,
                    const std::map<std::string, std::optional<std::string>>& values);
  // Hands the file's gathered rows to an encoder as one row group, and its copy into the file
  // to the appender.
  Status WriteRowGroup(const std::shared_ptr<OpenFile>& file);
  // Hands the file to the appender to finish, then to the storer.
  Status Close(std::shared_ptr<OpenFile> file);
  // On the storer: puts the finished file into the store and records its add action.
  Status Store(OpenFile& file);
  void StopWorkers();

  blob::BlobStore& store_;
  const DeltaLog& log_;
  std::shared_ptr<arrow::Schema> schema_;
  std::shared_ptr<arrow::Schema> file_schema_;  // without partition columns
  std::vector<std::string> partition_columns_;
  TableOptions options_;
  Clock& clock_;
  Random& random_;
  std::map<std::string, std::shared_ptr<OpenFile>> open_;
  int64_t rows_ = 0;
  int64_t files_ = 0;
  bool abandoned_ = false;
  Mutex done_mu_;
  std::vector<AddAction> done_ TY_GUARDED_BY(done_mu_);  // appended by the storer
  // Started with the first file. Stopped in this order: the appender's tasks wait for the
  // encoders' row groups, and submit to the storer.
  std::unique_ptr<SerialWorker> storer_;
  std::unique_ptr<SerialWorker> appender_;
  std::vector<std::unique_ptr<SerialWorker>> encoders_;
  size_t next_encoder_ = 0;
};

// A streaming reader over `files` of `snapshot`: columns in `output_schema` order, rows where
// `filter` is TRUE. Files and row groups the filter rules out are skipped. Batches come in file
// and row-group order; the reader decodes row groups ahead of its caller on threads of its own
// (one per core, at most 4), up to one run of row groups more than it has threads and 512 MiB
// of uncompressed row groups ahead, into buffers from ScanMemoryPool() (recycling_pool.h).
// Used by one thread.
Result<std::unique_ptr<arrow::RecordBatchReader>> ScanFiles(
    blob::BlobStore& store, std::shared_ptr<const DeltaLog> log,
    std::shared_ptr<const Snapshot> snapshot, std::vector<AddAction> files,
    std::shared_ptr<arrow::Schema> output_schema, std::optional<Predicate> filter,
    int64_t batch_rows);

}  // namespace trainyard::tables
