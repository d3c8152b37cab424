#include "trainyard/api/job_log_stream.h"

#include <algorithm>

#include "trainyard/api/jobs_api.h"
#include "trainyard/common/json.h"
#include "trainyard/common/paths.h"

namespace trainyard::api {

JobLogStream::JobLogStream(JobLogStreamOptions options, Clock& clock,
                           std::function<Result<LogFollowState>()> state,
                           std::shared_ptr<std::atomic<int>> open_streams)
    : options_(std::move(options)),
      clock_(clock),
      state_(std::move(state)),
      open_streams_(std::move(open_streams)),
      last_event_ms_(clock.NowMillis()) {
  for (const auto& s : options_.secrets) longest_secret_ = std::max(longest_secret_, s.size());
}

JobLogStream::~JobLogStream() {
  if (open_streams_) open_streams_->fetch_sub(1);
}

Result<bool> JobLogStream::ReadEvent(std::string* chunk) {
  auto range =
      ReadFileRangeSafely(options_.path, options_.offset, kMaxLogEventBytes + longest_secret_);
  if (!range.ok()) {
    if (range.status().IsNotFound()) return false;  // the rank has not written yet
    return Status::FailedPrecondition(
        "the log is not a regular file (the job replaced it); it is not served");
  }
  int64_t start = range->offset;
  size_t body_bytes = std::min(range->data.size(), kMaxLogEventBytes);
  std::string text = range->data.substr(0, body_bytes);
  int64_t consumed = -1;
  if (!options_.secrets.empty()) {
    text = RedactSecrets(text, range->data.substr(body_bytes), options_.secrets, consumed);
  }
  int64_t next = start + (consumed >= 0 ? consumed : static_cast<int64_t>(body_bytes));
  if (next <= start) return false;  // nothing, or only the start of a secret being written
  json::object data{{"offset", start}, {"next", next}, {"text", std::move(text)}};
  *chunk = "id: " + std::to_string(next) + "\nevent: log\ndata: " + json::serialize(data) + "\n\n";
  options_.offset = next;
  return true;
}

bool JobLogStream::Next(std::string* chunk) {
  chunk->clear();
  if (cancelled_) return false;
  if (!started_) {
    started_ = true;
    // How long a client waits before reconnecting after a dropped connection.
    *chunk = "retry: 2000\n\n";
  }
  std::string event;
  auto read = ReadEvent(&event);
  if (!read.ok()) {
    json::object data{{"message", std::string(read.status().message())}};
    *chunk += "event: error\ndata: " + json::serialize(data) + "\n\n";
    return false;
  }
  int64_t now = clock_.NowMillis();
  if (*read) {
    *chunk += event;
    last_event_ms_ = now;
    return true;
  }
  if (over_seen_) {
    json::object data{
        {"state", over_.job_state}, {"attempts", over_.attempts}, {"next", options_.offset}};
    *chunk += "event: end\ndata: " + json::serialize(data) + "\n\n";
    return false;
  }
  if (now - last_state_check_ms_ >= options_.state_check_ms) {
    last_state_check_ms_ = now;
    auto state = state_();
    if (!state.ok()) {
      json::object data{{"message", std::string(state.status().message())}};
      *chunk += "event: error\ndata: " + json::serialize(data) + "\n\n";
      return false;
    }
    if (state->over) {
      // Read once more before ending: bytes written before the attempt ended are sent first.
      over_seen_ = true;
      over_ = *state;
      return true;
    }
  }
  if (chunk->empty() && now - last_event_ms_ >= options_.heartbeat_ms) {
    *chunk = ": heartbeat\n\n";
    last_event_ms_ = now;
  }
  return true;
}

}  // namespace trainyard::api
