// CaptureWriter: request capture ("inference tables"). Each served request's record is
// handed to Enqueue, which never blocks and never fails the request: records go to a
// bounded queue that one background thread writes
//   - as JSON lines to `<dir>/<endpoint>.jsonl` (append-only, one file per endpoint);
//   - into the request index (RequestIndex, when given a database): request id -> endpoint,
//     served entity, model version, time, so a response's id leads back to its lineage;
//   - for an endpoint that names a capture table, into that catalog table through a
//     CaptureTableSink, in batches: a batch is appended when it holds `table_batch_rows` rows
//     or its oldest row has waited `table_flush_interval` (on the injected Clock).
// A full queue or a failed write drops the record and counts it. A failed table batch is tried
// again after a backoff (doubling, on the injected Clock), up to `table_attempts` attempts in
// all; only when the last one fails (or the error is one that waiting cannot cure, or the
// endpoint's rows waiting for the table pass `max_table_pending`) are its rows dropped from the
// table (the JSON lines keep them) and counted. Stats reports the counts per endpoint.
// The request index forgets requests older than `index_retention`, pruned every
// `index_prune_interval` by the writer's thread.
//
// Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "trainyard/common/clock.h"
#include "trainyard/common/json.h"
#include "trainyard/common/mutex.h"
#include "trainyard/common/status.h"
#include "trainyard/store/database.h"

namespace trainyard::serving {

struct CaptureRecord {
  std::string endpoint;
  std::string served_entity;
  std::string model;
  int64_t model_version = 0;
  std::string request_id;
  int64_t timestamp_ms = 0;
  int64_t latency_ms = 0;
  int status = 0;
  std::string path;  // what was called ("/invocations", "/v1/chat/completions")
  std::string request_body;
  std::string response_body;
  std::string user;
  // The endpoint's capture table ("" = none) and its owner, whose privileges write it.
  std::string capture_table;
  std::string owner;
};

struct CaptureStats {
  int64_t captured = 0;
  int64_t dropped = 0;
  // The capture table's side (zero when the endpoint names none).
  int64_t table_captured = 0;  // rows committed to the table
  int64_t table_dropped = 0;   // rows that could not be (the JSON lines still hold them)
  int64_t table_pending = 0;   // rows waiting for the next batch
  int64_t table_retrying = 0;  // rows of failed batches waiting to be tried again
  int64_t table_version = -1;  // the version the last batch committed; -1 = none yet
  std::string table_error;     // the last failed batch's error, "" once one succeeds
};

// The capture table's columns, in order, as (name, type) with type one of "string",
// "bigint", "boolean"; every row the writer hands a sink has exactly these keys (null for an
// absent token count). Payloads are JSON text (what was sent, cut at the limit).
const std::vector<std::pair<std::string, std::string>>& CaptureTableColumns();
// The table row of one record.
json::object CaptureTableRow(const CaptureRecord& record, size_t max_payload_bytes);

// Appends captured rows to a catalog table. Implemented by the server over the catalog's
// table service (serving does not depend on the catalog). Called from the writer's thread.
class CaptureTableSink {
 public:
  virtual ~CaptureTableSink() = default;
  // Appends `rows` (CaptureTableRow objects) to `table` as `owner`, for `endpoint`; creates
  // the table when absent. Returns the table version committed.
  virtual Result<int64_t> Append(const std::string& endpoint, const std::string& owner,
                                 const std::string& table,
                                 const std::vector<json::object>& rows) = 0;
};

// A request as the index knows it.
struct IndexedRequest {
  std::string request_id;
  std::string endpoint;
  std::string served_entity;
  std::string model;
  int64_t model_version = 0;
  int64_t timestamp_ms = 0;
  int64_t latency_ms = 0;
  int status = 0;
  std::string capture_table;           // "" when the endpoint captured into no table
  int64_t capture_table_version = -1;  // the version holding its row; -1 = not (yet) in it
};

// The request index: one row per captured request in the metadata store (component
// "serving_requests"). Thread-safe (the Database is).
class RequestIndex {
 public:
  explicit RequestIndex(store::Database& db) : db_(db) {}
  static std::vector<store::Migration> Migrations();
  Status Add(const std::vector<CaptureRecord>& records);
  Status SetTableVersion(const std::vector<std::string>& request_ids, int64_t version);
  // Forgets the requests captured before `before_ms` (wall time); returns how many.
  Result<int64_t> Prune(int64_t before_ms);
  // NotFound when the id was never captured.
  Result<IndexedRequest> Find(const std::string& request_id);

 private:
  store::Database& db_;
};

struct CaptureOptions {
  std::string dir;                      // created if absent
  size_t max_queue = 10000;             // records waiting to be written
  size_t max_payload_bytes = 64 << 10;  // per request and per response body
  size_t table_batch_rows = 500;        // a table batch is appended at this many rows,
  std::chrono::milliseconds table_flush_interval{std::chrono::seconds(5)};  // or this age
  size_t max_table_pending = 10000;  // rows waiting per endpoint; the oldest drop beyond
  // A failed table batch: attempts in all (1 = no retry), and the wait before the second,
  // doubling for each next one up to the maximum.
  int table_attempts = 5;
  std::chrono::milliseconds table_retry_backoff{std::chrono::seconds(1)};
  std::chrono::milliseconds table_retry_max_backoff{std::chrono::seconds(30)};
  // The request index keeps a request this long (0 = forever); pruned at start and then
  // every `index_prune_interval`.
  std::chrono::milliseconds index_retention{0};
  std::chrono::milliseconds index_prune_interval{std::chrono::hours(1)};
};

class CaptureWriter {
 public:
  // `clock` times the table batches (the system clock when null); `index` and `sink` are
  // optional. All borrowed; they must outlive the writer.
  explicit CaptureWriter(CaptureOptions options, Clock* clock = nullptr,
                         RequestIndex* index = nullptr, CaptureTableSink* sink = nullptr);
  ~CaptureWriter();  // writes what is queued (and appends the pending table rows), then stops
  CaptureWriter(const CaptureWriter&) = delete;
  CaptureWriter& operator=(const CaptureWriter&) = delete;

  void Enqueue(CaptureRecord record) TY_EXCLUDES(mu_);
  CaptureStats Stats(const std::string& endpoint) TY_EXCLUDES(mu_);
  // Blocks until every record queued before the call is written (or dropped) to its JSON
  // lines and the index; table rows may still be pending. For tests.
  void FlushForTest() TY_EXCLUDES(mu_);
  // Wakes the writer to look at the clock again (a test that advanced a fake clock).
  void WakeForTest() TY_EXCLUDES(mu_);
  // How many table batches were attempted (appended or failed) so far.
  int64_t TableBatchesForTest() TY_EXCLUDES(mu_);
  // How many times the request index was pruned so far.
  int64_t IndexPrunesForTest() TY_EXCLUDES(mu_);
  // The endpoint's file.
  std::string PathFor(const std::string& endpoint) const;
  RequestIndex* index() { return index_; }

 private:
  struct Pending {
    std::string table;
    std::string owner;
    std::vector<json::object> rows;
    std::vector<std::string> request_ids;
    Clock::MonotonicTime first{};
  };
  // A failed batch waiting to be tried again.
  struct Retry {
    std::string endpoint;
    Pending batch;
    int attempts = 0;  // made so far
    Clock::MonotonicTime due{};
  };
  void Loop() TY_EXCLUDES(mu_);
  // Writes one record; false when it could not be written.
  bool Write(const CaptureRecord& record);
  // Takes the record's table row into its endpoint's batch (loop thread only).
  void AddToBatch(const CaptureRecord& record) TY_EXCLUDES(mu_);
  // Appends the batches that are due (all of them, with no retry, when `all`: the writer
  // stops). Loop thread only.
  void FlushBatches(bool all) TY_EXCLUDES(mu_);
  // One attempt at `batch` (its `attempts`-th); a failure is retried later unless `last`.
  void AppendBatch(const std::string& endpoint, Pending batch, int attempts = 1, bool last = false)
      TY_EXCLUDES(mu_);
  // Tries the failed batches that are due again (all of them, once and for the last time, when
  // `all`). Loop thread only.
  void RetryBatches(bool all) TY_EXCLUDES(mu_);
  // Prunes the request index when it is due. Loop thread only.
  void PruneIndexIfDue();
  // How long the loop may sleep before a batch or a retry falls due; nullopt when none is
  // waiting. The prune's due time is apart: the rows' waits are polled (see Loop).
  std::optional<std::chrono::milliseconds> NextDue();
  std::optional<std::chrono::milliseconds> NextPruneDue();

  const CaptureOptions options_;
  SystemClock system_clock_;
  Clock& clock_;
  RequestIndex* index_;
  CaptureTableSink* sink_;
  std::map<std::string, Pending> pending_;          // by endpoint; the loop thread's only
  std::deque<Retry> retries_;                       // in failure order; the loop thread's only
  std::optional<Clock::MonotonicTime> last_prune_;  // the loop thread's only
  Mutex mu_;
  CondVar cv_;
  CondVar flushed_cv_;
  std::deque<CaptureRecord> queue_ TY_GUARDED_BY(mu_);
  std::map<std::string, CaptureStats> stats_ TY_GUARDED_BY(mu_);
  uint64_t enqueued_ TY_GUARDED_BY(mu_) = 0;  // records accepted or dropped
  uint64_t done_ TY_GUARDED_BY(mu_) = 0;      // of those, written or dropped
  int64_t table_batches_ TY_GUARDED_BY(mu_) = 0;
  int64_t index_prunes_ TY_GUARDED_BY(mu_) = 0;
  bool wake_ TY_GUARDED_BY(mu_) = false;
  bool stop_ TY_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// The last `n` records of a capture file (newest first), as written above. Reads at most the
// file's last `max_bytes` (records beyond them are left out); a line that is not a JSON object
// (one being appended) is skipped; a missing file is no records. This is the one place that
// reads the capture back (the web UI's request samples): it changes with the capture's format.
Result<std::vector<json::object>> ReadRecentCaptures(const std::string& path, size_t n,
                                                     size_t max_bytes = 8 << 20);

}  // namespace trainyard::serving
