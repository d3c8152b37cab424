// CaptureWriter: request capture ("inference tables"). Each served request's record is
// handed to Enqueue, which never blocks and never fails the request: records go to a
// bounded queue that one background thread appends, as JSON lines, to
// `<dir>/<endpoint>.jsonl` (append-only, one file per endpoint, for the table importer).
// A full queue or a failed write drops the record and counts it; Stats reports the counts
// per endpoint.
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <thread>

#include "trainyard/common/json.h"
#include "trainyard/common/mutex.h"
#include "trainyard/common/status.h"

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
};

struct CaptureStats {
  int64_t captured = 0;
  int64_t dropped = 0;
};

struct CaptureOptions {
  std::string dir;                      // created if absent
  size_t max_queue = 10000;             // records waiting to be written
  size_t max_payload_bytes = 64 << 10;  // per request and per response body
};

class CaptureWriter {
 public:
  explicit CaptureWriter(CaptureOptions options);
  ~CaptureWriter();  // writes what is queued, then stops
  CaptureWriter(const CaptureWriter&) = delete;
  CaptureWriter& operator=(const CaptureWriter&) = delete;

  void Enqueue(CaptureRecord record) TY_EXCLUDES(mu_);
  CaptureStats Stats(const std::string& endpoint) TY_EXCLUDES(mu_);
  // Blocks until every record queued before the call is written (or dropped). For tests.
  void FlushForTest() TY_EXCLUDES(mu_);
  // The endpoint's file.
  std::string PathFor(const std::string& endpoint) const;

 private:
  void Loop() TY_EXCLUDES(mu_);
  // Writes one record; false when it could not be written.
  bool Write(const CaptureRecord& record);

  const CaptureOptions options_;
  Mutex mu_;
  CondVar cv_;
  CondVar flushed_cv_;
  std::deque<CaptureRecord> queue_ TY_GUARDED_BY(mu_);
  std::map<std::string, CaptureStats> stats_ TY_GUARDED_BY(mu_);
  uint64_t enqueued_ TY_GUARDED_BY(mu_) = 0;  // records accepted or dropped
  uint64_t done_ TY_GUARDED_BY(mu_) = 0;      // of those, written or dropped
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
