// DeltaTable: a Delta Lake table (Parquet data files + the `_delta_log` transaction log, per the
// Delta protocol's PROTOCOL.md) under a prefix of a BlobStore (a local directory or an S3
// prefix). Tables written here are plain Delta tables (reader version 1, writer version 2;
// reader 3 / writer 7 with the timestampNtz feature when a column needs it) that Spark,
// delta-rs and DuckDB read; tables those tools write are read here.
//
// Every write is one atomic commit: data files first, then the next log entry
// `_delta_log/%020d.json` created with put-if-absent; its commitInfo carries a fresh `txnId`
// (uuid), by which a writer recognises its own entry after a lost answer (decision 0011). When
// another writer took that version, the winner's actions are checked against what this write read:
// an append conflicts only with a metadata or protocol change; Delete/Update/Overwrite also
// conflict with a winner that added or removed files in what they read. A conflict is
// FailedPrecondition ("concurrent commit at version N: <why>; retry"); otherwise the commit
// retries at the next version, up to TableOptions::max_commit_attempts. A writer that dies before
// its log entry leaves the table at the previous version; its data files are orphans that Vacuum
// removes.
//
// Reads see a snapshot: the latest version, or one chosen by version or timestamp (time
// travel). Tables with reader features this library does not implement (deletionVectors,
// columnMapping with mode other than "none", any unknown one) are refused with
// FailedPrecondition naming the feature, never read wrongly.
//
// Thread-safety: a DeltaTable may be used from several threads at once; reads run concurrently
// with a commit (each read holds its own immutable snapshot). The BlobStore and Clock passed to
// Create/Open are borrowed and must outlive the DeltaTable and every reader it returned.
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
#include "trainyard/tables/predicate.h"

namespace trainyard::tables {

// Which snapshot: the latest (both empty), a version, or the latest version committed at or
// before a time. NotFound "version 12 does not exist; latest is 9"; a timestamp before the
// first commit is InvalidArgument naming the first commit's time.
struct VersionSpec {
  std::optional<int64_t> version;
  std::optional<int64_t> timestamp_ms;
};

struct CreateTableRequest {
  std::shared_ptr<arrow::Schema> schema;          // the columns, partition columns included
  std::vector<std::string> partition_columns;     // each names a top-level primitive column
  std::map<std::string, std::string> properties;  // the table's `configuration`
  std::string name;                               // metaData.name (optional)
  std::string description;                        // metaData.description (optional)
};

struct TableOptions {
  int max_commit_attempts = 10;
  int64_t target_file_rows = 1 << 20;  // rows per data file (per partition)
  int64_t row_group_rows = 128 * 1024;
  // A row group also ends when its rows hold this many bytes of Arrow data. A write keeps
  // references to the rows it was given until they are encoded: per file the row group being
  // gathered, and for the whole write one waiting and one being encoded.
  int64_t row_group_bytes = 256 << 20;
  bool zstd = false;  // snappy otherwise (what Spark and delta-rs write by default)
  // Checkpoint every N commits when the table has no `delta.checkpointInterval` property.
  int64_t default_checkpoint_interval = 10;
  // Source of table ids, data file names and commitInfo.txnId (uuids); nullptr = a
  // SecureRandom. Borrowed.
  Random* random = nullptr;
  // How errors name the table (e.g. its location); "" names it by its root.
  std::string name;
  // commitInfo.userMetadata of every commit this DeltaTable makes ("" = none): a free-form
  // string, as Spark's `userMetadata` write option sets it (prep puts its pipeline's version
  // there). HistoryEntry::user_metadata reads it back.
  std::string commit_user_metadata;
  // Who commits through this handle: written to each commit's commitInfo as `userId` and
  // `userName` (the fields Spark on Databricks fills; other readers ignore them). Empty: the
  // commit names no user.
  std::string user_id;
  std::string user_name;
};

struct ReadOptions {
  VersionSpec at;
  std::vector<std::string> columns;  // projection, in this order; empty = all columns
  std::optional<Predicate> filter;   // files pruned by it, then rows filtered by it
  int64_t batch_rows = 64 * 1024;    // upper bound on a batch's rows
};

struct CommitResult {
  int64_t version = 0;
  int64_t timestamp_ms = 0;
  int64_t files_added = 0;
  int64_t files_removed = 0;
  int64_t rows_written = 0;   // rows in added files
  int64_t rows_affected = 0;  // deleted / updated rows for Delete / Update
  int attempts = 1;           // 1 + retries after concurrent commits
};

struct HistoryEntry {
  int64_t version = 0;
  int64_t timestamp_ms = 0;
  std::string operation;  // WRITE, DELETE, UPDATE, ADD COLUMNS, CREATE TABLE, ...
  std::map<std::string, std::string> operation_parameters;  // values as JSON text
  std::map<std::string, std::string> operation_metrics;     // numAddedFiles, numOutputRows...
  std::string engine_info;
  std::string user_metadata;  // commitInfo.userMetadata, "" when none
  std::string user_id;        // commitInfo.userId: who made the version ("" when not recorded)
  std::string user_name;      // commitInfo.userName
};

struct DataFile {
  std::string path;  // relative to the table root (URL-decoded)
  int64_t size_bytes = 0;
  int64_t modification_time_ms = 0;
  std::map<std::string, std::optional<std::string>> partition_values;
  std::optional<int64_t> num_records;
};

struct TableInfo {
  int64_t version = 0;
  int64_t timestamp_ms = 0;
  std::string id;  // metaData.id
  std::string name;
  std::string description;
  std::shared_ptr<arrow::Schema> schema;
  std::vector<std::string> partition_columns;
  std::map<std::string, std::string> properties;
  int64_t created_time_ms = 0;
  int min_reader_version = 1;
  int min_writer_version = 2;
  std::vector<std::string> reader_features;
  std::vector<std::string> writer_features;
  std::vector<DataFile> files;
  int64_t num_files = 0;
  std::optional<int64_t> num_rows;  // unknown when a file has no stats
  int64_t size_bytes = 0;
};

struct VacuumOptions {
  // Files unreferenced by the current version and older than this are deleted. Default: the
  // table's `delta.deletedFileRetentionDuration`, else 7 days. Shorter than the default is
  // refused (FailedPrecondition) unless `force`.
  std::optional<int64_t> retention_ms;
  bool force = false;
  bool dry_run = false;
};

struct VacuumResult {
  std::vector<std::string> deleted;  // paths relative to the table root (or to-be, if dry run)
  int64_t bytes = 0;
};

class DeltaTable {
 public:
  // Creates a table at `root` (a key prefix in `store`; "" is the store's root) with version 0
  // (protocol + metaData + commitInfo). AlreadyExists when `root` already holds a table;
  // InvalidArgument naming the field for a bad schema, partition column or property.
  static Result<std::unique_ptr<DeltaTable>> Create(blob::BlobStore& store, std::string root,
                                                    Clock& clock, const CreateTableRequest& request,
                                                    TableOptions options = {});
  // Opens the table at `root`: NotFound when there is none; FailedPrecondition for a table
  // whose protocol this library cannot read. A damaged latest log entry does not fail Open:
  // reads of earlier versions (by version) work, and reads of the latest version return
  // InvalidArgument naming the entry's version.
  static Result<std::unique_ptr<DeltaTable>> Open(blob::BlobStore& store, std::string root,
                                                  Clock& clock, TableOptions options = {});

  ~DeltaTable();
  DeltaTable(const DeltaTable&) = delete;
  DeltaTable& operator=(const DeltaTable&) = delete;

  const std::string& root() const;

  // Adds rows. Their schema must match the table's (by name; nullable columns may be absent).
  Result<CommitResult> Append(arrow::RecordBatchReader& rows);
  Result<CommitResult> Append(const arrow::Table& rows);
  // Replaces all rows, or with `replace_where` only the rows it matches (the new rows must all
  // match it too).
  Result<CommitResult> Overwrite(arrow::RecordBatchReader& rows,
                                 std::optional<Predicate> replace_where = std::nullopt);
  Result<CommitResult> Overwrite(const arrow::Table& rows,
                                 std::optional<Predicate> replace_where = std::nullopt);
  // Removes the rows where `where` is TRUE (copy-on-write: affected files are rewritten).
  Result<CommitResult> Delete(const Predicate& where);
  // Sets columns to literals in the rows where `where` is TRUE.
  Result<CommitResult> Update(const Predicate& where, const std::map<std::string, Literal>& set);
  // Schema evolution: appends nullable columns (existing rows read them as null).
  Result<CommitResult> AddColumns(const std::vector<std::shared_ptr<arrow::Field>>& fields);

  // Streams the snapshot's rows in batches of at most `batch_rows`; memory does not grow with
  // the table (a few row groups are decoded ahead on the reader's own threads, at most 512 MiB
  // of them). The reader keeps the snapshot it started with.
  Result<std::unique_ptr<arrow::RecordBatchReader>> Read(const ReadOptions& options);
  // Read() collected into one table (for tests and small tables).
  Result<std::shared_ptr<arrow::Table>> ReadAll(const ReadOptions& options);

  Result<TableInfo> Describe(const VersionSpec& at = {});
  // Newest first; at most `limit` entries (0 = all).
  Result<std::vector<HistoryEntry>> History(int64_t limit = 0);
  Result<VacuumResult> Vacuum(const VacuumOptions& options = {});
  // Writes `_delta_log/<latest>.checkpoint.parquet` and `_last_checkpoint`. Also done after
  // every commit whose version is a multiple of the checkpoint interval.
  Status Checkpoint();
  // The latest committed version (re-reads the log).
  Result<int64_t> LatestVersion();

  class Impl;

 private:
  explicit DeltaTable(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainyard::tables
