// Snapshot and DeltaLog: the state of a Delta table at one version, and reading/writing the
// `_delta_log` directory that defines it (JSON commits, classic Parquet checkpoints,
// `_last_checkpoint`). Internal to tables/; DeltaTable is the public face.
//
// A Snapshot is immutable once built and shared between readers (shared_ptr<const Snapshot>).
// DeltaLog holds no mutable state: its methods may be called from several threads.
#pragma once

#include <arrow/api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainyard/blob/blob_store.h"
#include "trainyard/common/status.h"
#include "trainyard/tables/delta_log.h"

namespace trainyard::tables {

// A JSON commit file of the log as listed: its version and the time its log entry was written.
struct CommitFile {
  int64_t version = 0;
  int64_t modified_ms = 0;
};

struct Snapshot {
  int64_t version = -1;
  // The commit's recorded time (commitInfo inCommitTimestamp, else timestamp; 0 when none).
  // Time travel does not use it: see DeltaLog::VersionAtTimestamp.
  int64_t timestamp_ms = 0;
  ProtocolAction protocol;
  MetadataAction metadata;
  std::shared_ptr<arrow::Schema> schema;   // from metadata.schema_string
  std::map<std::string, AddAction> files;  // active files by (URI) path
  std::map<std::string, RemoveAction> tombstones;
  std::map<std::string, TxnAction> txns;
  std::map<std::string, DomainMetadataAction> domains;
};

// FailedPrecondition naming the feature when this library cannot read (or write) the table.
Status CheckReadable(const Snapshot& snapshot);
Status CheckWritable(const Snapshot& snapshot);

// The table property `key` as milliseconds ("interval 7 days", "168 hours"...), or nullopt.
Result<std::optional<int64_t>> IntervalProperty(const Snapshot& snapshot, const std::string& key);

class DeltaLog {
 public:
  // `name` is how errors name the table (e.g. its location); "" names it by `root`.
  DeltaLog(blob::BlobStore& store, std::string root, std::string name = "");

  // The key of `relative` under the table root.
  std::string Key(std::string_view relative) const;
  std::string LogKey(std::string_view name) const { return Key("_delta_log/" + std::string(name)); }
  const std::string& root() const { return root_; }

  // The latest snapshot: from `_last_checkpoint` (or the newest checkpoint found by listing)
  // plus the JSON commits after it. NotFound when there is no table at the root.
  Result<std::shared_ptr<const Snapshot>> LoadLatest() const;
  // The snapshot at `version`. NotFound "version 12 does not exist; latest is 9".
  Result<std::shared_ptr<const Snapshot>> LoadVersion(int64_t version) const;
  // `base` advanced by every commit after it (base itself when there is none).
  Result<std::shared_ptr<const Snapshot>> Advance(std::shared_ptr<const Snapshot> base) const;
  // The latest version committed at or before `timestamp_ms`; InvalidArgument naming the first
  // commit's time when the timestamp is before it. A version's time is, as PROTOCOL.md and
  // Spark/delta-rs define it, its log entry's modification time from the listing (made
  // strictly increasing over versions, as Spark does), or with `in_commit_timestamps` (the
  // table property delta.enableInCommitTimestamps) the commit's inCommitTimestamp where it has
  // one. Versions after `latest` are ignored.
  Result<int64_t> VersionAtTimestamp(int64_t timestamp_ms, int64_t latest,
                                     bool in_commit_timestamps) const;

  // The actions of commit `version`; nullopt when it does not exist. Errors name the file.
  Result<std::optional<std::vector<Action>>> ReadCommit(int64_t version) const;
  // The commit's recorded timestamp (inCommitTimestamp, commitInfo.timestamp, else the log
  // entry's modification time from the listing).
  Result<int64_t> CommitTimestamp(int64_t version) const;
  // The JSON commits present, sorted by version, with their modification times.
  Result<std::vector<CommitFile>> ListCommits() const;
  // Sorted versions of the JSON commits present.
  Result<std::vector<int64_t>> ListCommitVersions() const;

  // Writes `_delta_log/<v>.checkpoint.parquet` for `snapshot` and then `_last_checkpoint`.
  // Tombstones deleted before `tombstone_cutoff_ms` are left out.
  Status WriteCheckpoint(const Snapshot& snapshot, int64_t tombstone_cutoff_ms) const;

  // Applies one commit's (or checkpoint's) actions to `snapshot`.
  static Status Apply(Snapshot& snapshot, std::vector<Action> actions);

 private:
  Result<std::shared_ptr<Snapshot>> LoadFromCheckpoint(int64_t version, int parts) const;
  Result<std::vector<Action>> ReadCheckpointFile(const std::string& name) const;
  Result<std::shared_ptr<const Snapshot>> Replay(std::shared_ptr<Snapshot> base, int64_t from,
                                                 std::optional<int64_t> until) const;
  Status Finish(Snapshot& snapshot) const;
  std::string Describe(int64_t version) const;
  // How the table is named in errors: its root, or "the table's root directory" for "".
  std::string TableName() const;

  blob::BlobStore& store_;
  std::string root_;
  std::string name_;
};

}  // namespace trainyard::tables
