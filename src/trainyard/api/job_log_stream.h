// JobLogStream: one rank's log of one attempt of a job as server-sent events, followed until
// the attempt is over (GET /api/trainyard/v1/jobs/{job_id}/logs/stream).
//
// Events:
//   id: <offset after this event>         (a client resumes with Last-Event-ID or ?offset=)
//   event: log    data: {"offset": O, "next": N, "text": "..."}   bytes [O, N) of the file,
//                 secrets redacted, at most kMaxLogEventBytes of them
//   event: end    data: {"state": "SUCCEEDED", "attempts": 2, "next": N}   then the body ends:
//                 the job is finished, or a later attempt started, and the log is read out
//   : heartbeat   (an SSE comment) after `heartbeat_ms` without an event, so proxies and the
//                 client see that the connection is alive
//   event: error  data: {"message": "..."}   then the body ends (the log cannot be read)
//
// Next never blocks: it reads what the file holds and returns, or returns an empty chunk, and
// the HTTP server calls it again after PollInterval() from a timer, so a follower holds no
// worker thread while it waits. Memory per stream is bounded by one event (kMaxLogEventBytes
// plus the longest secret). `open_streams` counts live streams (the route refuses new ones
// past its cap); the stream holds its share until destroyed.
//
// Next and Cancel may be called from different threads; Next is never called concurrently.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "trainyard/common/clock.h"
#include "trainyard/common/status.h"
#include "trainyard/http/message.h"

namespace trainyard::api {

inline constexpr size_t kMaxLogEventBytes = 64 * 1024;

// Where the followed attempt stands: over when the job finished or a later attempt began.
struct LogFollowState {
  bool over = false;
  std::string job_state;  // "RUNNING", "SUCCEEDED", ...
  int attempts = 0;
};

struct JobLogStreamOptions {
  std::string path;  // the rank's log file
  int64_t offset = 0;
  std::vector<std::string> secrets;  // values shown as "***"
  int64_t heartbeat_ms = 15000;
  int64_t state_check_ms = 1000;  // how often the job's state is asked while the log is idle
  std::chrono::milliseconds poll_interval{200};
};

class JobLogStream : public http::BodyStream {
 public:
  JobLogStream(JobLogStreamOptions options, Clock& clock,
               std::function<Result<LogFollowState>()> state,
               std::shared_ptr<std::atomic<int>> open_streams);
  ~JobLogStream() override;
  JobLogStream(const JobLogStream&) = delete;
  JobLogStream& operator=(const JobLogStream&) = delete;

  bool Next(std::string* chunk) override;
  void Cancel() override { cancelled_ = true; }
  std::chrono::milliseconds PollInterval() const override { return options_.poll_interval; }

 private:
  // The next log event in `chunk` if the file has new bytes; false when it has none. An error
  // reading the file is returned.
  Result<bool> ReadEvent(std::string* chunk);

  JobLogStreamOptions options_;
  Clock& clock_;
  std::function<Result<LogFollowState>()> state_;
  std::shared_ptr<std::atomic<int>> open_streams_;
  std::atomic<bool> cancelled_{false};
  size_t longest_secret_ = 0;
  int64_t last_event_ms_;
  int64_t last_state_check_ms_ = 0;
  bool started_ = false;
  // The attempt was seen over: one more read drains what was written before, then the end.
  bool over_seen_ = false;
  LogFollowState over_;
};

}  // namespace trainyard::api
