#include "trainyard/serving/capture.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "trainyard/common/json.h"

namespace trainyard::serving {
namespace {

// A payload as captured: its JSON when it is JSON and within the limit, its text otherwise
// (cut at the limit, with `truncated` set).
json::value Payload(const std::string& body, size_t limit, bool* truncated) {
  if (body.size() > limit) {
    *truncated = true;
    return json::value(body.substr(0, limit));
  }
  auto parsed = ParseJsonExact(body);
  if (parsed.ok()) return std::move(parsed).value();
  return json::value(body);
}

// The OpenAI `usage` of a JSON response, or of the last event of a streamed one that has it.
json::value Usage(const std::string& body) {
  auto parsed = ParseJsonExact(body);
  if (parsed.ok() && parsed->is_object()) {
    const auto& o = parsed->as_object();
    if (auto it = o.find("usage"); it != o.end() && it->value().is_object()) return it->value();
    return nullptr;
  }
  // Server-sent events: "data: {...}\n\n" lines; the usage comes in one of the last.
  size_t pos = body.rfind("\"usage\"");
  if (pos == std::string::npos) return nullptr;
  size_t line_start = body.rfind("data:", pos);
  size_t line_end = body.find('\n', pos);
  if (line_start == std::string::npos) return nullptr;
  auto event = ParseJsonExact(body.substr(line_start + 5, line_end == std::string::npos
                                                              ? std::string::npos
                                                              : line_end - line_start - 5));
  if (!event.ok() || !event->is_object()) return nullptr;
  const auto& o = event->as_object();
  if (auto it = o.find("usage"); it != o.end() && it->value().is_object()) return it->value();
  return nullptr;
}

}  // namespace

CaptureWriter::CaptureWriter(CaptureOptions options) : options_(std::move(options)) {
  std::error_code ec;
  std::filesystem::create_directories(options_.dir, ec);
  thread_ = std::thread([this] { Loop(); });
}

CaptureWriter::~CaptureWriter() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.NotifyAll();
  thread_.join();
}

std::string CaptureWriter::PathFor(const std::string& endpoint) const {
  return options_.dir + "/" + endpoint + ".jsonl";
}

void CaptureWriter::Enqueue(CaptureRecord record) {
  {
    MutexLock lock(mu_);
    ++enqueued_;
    if (queue_.size() >= options_.max_queue || stop_) {
      ++stats_[record.endpoint].dropped;
      ++done_;
      return;
    }
    queue_.push_back(std::move(record));
  }
  cv_.NotifyOne();
}

CaptureStats CaptureWriter::Stats(const std::string& endpoint) {
  MutexLock lock(mu_);
  auto it = stats_.find(endpoint);
  return it == stats_.end() ? CaptureStats{} : it->second;
}

void CaptureWriter::FlushForTest() {
  MutexLock lock(mu_);
  uint64_t target = enqueued_;
  while (done_ < target) flushed_cv_.Wait(mu_);
}

void CaptureWriter::Loop() {
  ReleasableMutexLock lock(mu_);
  while (true) {
    while (queue_.empty() && !stop_) cv_.Wait(mu_);
    if (queue_.empty() && stop_) return;
    CaptureRecord record = std::move(queue_.front());
    queue_.pop_front();
    lock.Unlock();
    bool ok = Write(record);
    lock.Lock();
    auto& stats = stats_[record.endpoint];
    ++(ok ? stats.captured : stats.dropped);
    ++done_;
    flushed_cv_.NotifyAll();
  }
}

bool CaptureWriter::Write(const CaptureRecord& r) {
  bool request_truncated = false, response_truncated = false;
  json::object o{{"endpoint", r.endpoint},
                 {"served_entity", r.served_entity},
                 {"model", r.model},
                 {"model_version", r.model_version},
                 {"request_id", r.request_id},
                 {"timestamp_ms", r.timestamp_ms},
                 {"latency_ms", r.latency_ms},
                 {"status", r.status},
                 {"path", r.path},
                 {"user", r.user}};
  o["request"] = Payload(r.request_body, options_.max_payload_bytes, &request_truncated);
  o["response"] = Payload(r.response_body, options_.max_payload_bytes, &response_truncated);
  json::value usage = Usage(r.response_body);
  if (usage.is_object()) {
    for (const char* k : {"prompt_tokens", "completion_tokens", "total_tokens"}) {
      if (auto it = usage.as_object().find(k); it != usage.as_object().end()) o[k] = it->value();
    }
  }
  if (request_truncated) o["request_truncated"] = true;
  if (response_truncated) o["response_truncated"] = true;
  std::string line = json::serialize(o) + "\n";
  int fd = ::open(PathFor(r.endpoint).c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  // O_APPEND with one write per line: a reader never sees half a line followed by another.
  size_t written = 0;
  while (written < line.size()) {
    ssize_t n = ::write(fd, line.data() + written, line.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    written += static_cast<size_t>(n);
  }
  ::close(fd);
  return written == line.size();
}

Result<std::vector<json::object>> ReadRecentCaptures(const std::string& path, size_t n,
                                                     size_t max_bytes) {
  std::vector<json::object> out;
  if (n == 0) return out;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return out;
    return Status::Internal("cannot open the capture file " + path + ": " + std::strerror(errno));
  }
  off_t end = ::lseek(fd, 0, SEEK_END);
  if (end < 0) {
    ::close(fd);
    return Status::Internal("cannot read the capture file " + path);
  }
  size_t size = static_cast<size_t>(end);
  size_t want = std::min(size, max_bytes);
  std::string tail(want, '\0');
  size_t got = 0;
  while (got < want) {
    ssize_t r = ::pread(fd, tail.data() + got, want - got, static_cast<off_t>(size - want + got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += static_cast<size_t>(r);
  }
  ::close(fd);
  tail.resize(got);
  // Whole lines only: what precedes the first newline may be the end of an earlier record.
  size_t stop = tail.size();
  while (out.size() < n && stop > 0) {
    size_t nl = tail.rfind('\n', stop - 1);
    size_t begin = nl == std::string::npos ? 0 : nl + 1;
    if (nl == std::string::npos && want < size) break;  // cut by max_bytes
    std::string_view line(tail.data() + begin, stop - begin);
    if (!line.empty()) {
      Result<json::object> record = ParseJsonObject(line);
      if (record.ok()) out.push_back(std::move(*record));
    }
    if (nl == std::string::npos) break;
    stop = nl;
  }
  return out;
}

}  // namespace trainyard::serving
