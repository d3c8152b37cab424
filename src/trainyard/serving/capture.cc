#include "trainyard/serving/capture.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

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

void CopyTokenCounts(const json::value& usage, json::object& o) {
  for (const char* k : {"prompt_tokens", "completion_tokens", "total_tokens"}) {
    if (!usage.is_object()) continue;
    if (auto it = usage.as_object().find(k); it != usage.as_object().end()) o[k] = it->value();
  }
}

// A payload as the table keeps it: its text, cut at the limit.
std::string PayloadText(const std::string& body, size_t limit, bool* truncated) {
  *truncated = body.size() > limit;
  return *truncated ? body.substr(0, limit) : body;
}

}  // namespace

const std::vector<std::pair<std::string, std::string>>& CaptureTableColumns() {
  static const std::vector<std::pair<std::string, std::string>> columns = {
      {"endpoint", "string"},
      {"served_entity", "string"},
      {"model", "string"},
      {"model_version", "bigint"},
      {"request_id", "string"},
      {"timestamp_ms", "bigint"},
      {"latency_ms", "bigint"},
      {"status", "bigint"},
      {"path", "string"},
      {"user", "string"},
      {"request", "string"},
      {"response", "string"},
      {"request_truncated", "boolean"},
      {"response_truncated", "boolean"},
      {"prompt_tokens", "bigint"},
      {"completion_tokens", "bigint"},
      {"total_tokens", "bigint"}};
  return columns;
}

// The fields a capture line and a capture table row share (everything but the payloads and
// token counts).
static json::object RecordFields(const CaptureRecord& r) {
  return json::object{{"endpoint", r.endpoint},
                      {"served_entity", r.served_entity},
                      {"model", r.model},
                      {"model_version", r.model_version},
                      {"request_id", r.request_id},
                      {"timestamp_ms", r.timestamp_ms},
                      {"latency_ms", r.latency_ms},
                      {"status", r.status},
                      {"path", r.path},
                      {"user", r.user}};
}

json::object CaptureTableRow(const CaptureRecord& r, size_t max_payload_bytes) {
  bool request_truncated = false, response_truncated = false;
  json::object o = RecordFields(r);
  o["request"] = PayloadText(r.request_body, max_payload_bytes, &request_truncated);
  o["response"] = PayloadText(r.response_body, max_payload_bytes, &response_truncated);
  o["request_truncated"] = request_truncated;
  o["response_truncated"] = response_truncated;
  o["prompt_tokens"] = nullptr;
  o["completion_tokens"] = nullptr;
  o["total_tokens"] = nullptr;
  CopyTokenCounts(Usage(r.response_body), o);
  return o;
}

std::vector<store::Migration> RequestIndex::Migrations() {
  return {{"serving_requests",
           1,
           {"CREATE TABLE serving_requests (request_id TEXT PRIMARY KEY, endpoint TEXT NOT NULL, "
            "served_entity TEXT NOT NULL, model TEXT NOT NULL, model_version BIGINT NOT NULL, "
            "timestamp_ms BIGINT NOT NULL, latency_ms BIGINT NOT NULL, status BIGINT NOT NULL, "
            "capture_table TEXT NOT NULL, capture_table_version BIGINT NOT NULL)"}},
          // Retention prunes by time.
          {"serving_requests",
           2,
           {"CREATE INDEX serving_requests_by_time ON serving_requests (timestamp_ms)"}}};
}

Result<int64_t> RequestIndex::Prune(int64_t before_ms) {
  int64_t pruned = 0;
  TY_RETURN_IF_ERROR(db_.Write([&](store::Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(
        pruned, tx.Exec("DELETE FROM serving_requests WHERE timestamp_ms < ?", {before_ms}));
    return Status::Ok();
  }));
  return pruned;
}

Status RequestIndex::Add(const std::vector<CaptureRecord>& records) {
  return db_.Write([&](store::Transaction& tx) -> Status {
    for (const CaptureRecord& r : records) {
      TY_RETURN_IF_ERROR(
          tx.Exec("INSERT INTO serving_requests (request_id, endpoint, served_entity, model, "
                  "model_version, timestamp_ms, latency_ms, status, capture_table, "
                  "capture_table_version) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, -1) "
                  "ON CONFLICT (request_id) DO NOTHING",
                  {r.request_id, r.endpoint, r.served_entity, r.model, r.model_version,
                   r.timestamp_ms, r.latency_ms, int64_t{r.status}, r.capture_table})
              .status());
    }
    return Status::Ok();
  });
}

Status RequestIndex::SetTableVersion(const std::vector<std::string>& request_ids, int64_t version) {
  return db_.Write([&](store::Transaction& tx) -> Status {
    for (const std::string& id : request_ids) {
      TY_RETURN_IF_ERROR(
          tx.Exec("UPDATE serving_requests SET capture_table_version = ? WHERE request_id = ?",
                  {version, id})
              .status());
    }
    return Status::Ok();
  });
}

Result<IndexedRequest> RequestIndex::Find(const std::string& request_id) {
  Result<IndexedRequest> out =
      Status::NotFound("request '" + request_id +
                       "' was not captured by any endpoint; use the x-request-id header or the "
                       "id of a response from /serving-endpoints");
  TY_RETURN_IF_ERROR(db_.Read([&](store::Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(
        auto rows, tx.Query("SELECT request_id, endpoint, served_entity, model, model_version, "
                            "timestamp_ms, latency_ms, status, capture_table, "
                            "capture_table_version FROM serving_requests WHERE request_id = ?",
                            {request_id}));
    if (rows.empty()) return Status::Ok();
    const store::Row& row = rows[0];
    IndexedRequest r;
    r.request_id = row.Text(0);
    r.endpoint = row.Text(1);
    r.served_entity = row.Text(2);
    r.model = row.Text(3);
    r.model_version = row.Int(4);
    r.timestamp_ms = row.Int(5);
    r.latency_ms = row.Int(6);
    r.status = static_cast<int>(row.Int(7));
    r.capture_table = row.Text(8);
    r.capture_table_version = row.Int(9);
    out = std::move(r);
    return Status::Ok();
  }));
  return out;
}

CaptureWriter::CaptureWriter(CaptureOptions options, Clock* clock, RequestIndex* index,
                             CaptureTableSink* sink)
    : options_(std::move(options)),
      clock_(clock != nullptr ? *clock : system_clock_),
      index_(index),
      sink_(sink) {
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
      auto& stats = stats_[record.endpoint];
      ++stats.dropped;
      if (!record.capture_table.empty()) ++stats.table_dropped;
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

void CaptureWriter::WakeForTest() {
  {
    MutexLock lock(mu_);
    wake_ = true;
  }
  cv_.NotifyAll();
}

int64_t CaptureWriter::TableBatchesForTest() {
  MutexLock lock(mu_);
  return table_batches_;
}

int64_t CaptureWriter::IndexPrunesForTest() {
  MutexLock lock(mu_);
  return index_prunes_;
}

std::optional<std::chrono::milliseconds> CaptureWriter::NextPruneDue() {
  if (index_ == nullptr || options_.index_retention.count() <= 0) return std::nullopt;
  if (!last_prune_) return std::chrono::milliseconds(0);
  return std::chrono::duration_cast<std::chrono::milliseconds>(
      *last_prune_ + options_.index_prune_interval - clock_.MonotonicNow());
}

void CaptureWriter::PruneIndexIfDue() {
  auto due = NextPruneDue();
  if (!due || due->count() > 0) return;
  last_prune_ = clock_.MonotonicNow();
  int64_t before = clock_.NowMillis() - options_.index_retention.count();
  Result<int64_t> pruned = index_->Prune(before);
  if (!pruned.ok()) {
    spdlog::warn("request capture: the request index was not pruned: {}",
                 pruned.status().ToString());
  } else if (*pruned > 0) {
    spdlog::info("request capture: forgot {} requests older than the index's retention", *pruned);
  }
  MutexLock lock(mu_);
  ++index_prunes_;
}

std::optional<std::chrono::milliseconds> CaptureWriter::NextDue() {
  std::optional<std::chrono::milliseconds> due;
  auto now = clock_.MonotonicNow();
  for (const Retry& r : retries_) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(r.due - now);
    if (!due || left < *due) due = left;
  }
  for (const auto& [endpoint, p] : pending_) {
    if (p.rows.empty()) continue;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        p.first + options_.table_flush_interval - now);
    if (p.rows.size() >= options_.table_batch_rows) left = std::chrono::milliseconds(0);
    if (!due || left < *due) due = left;
  }
  return due;
}

void CaptureWriter::Loop() {
  // The longest the loop sleeps while table rows wait: the clock may be a fake one that
  // moves without waking anybody.
  constexpr std::chrono::milliseconds kPoll(100);
  ReleasableMutexLock lock(mu_);
  while (true) {
    while (queue_.empty() && !stop_ && !wake_) {
      auto due = NextDue();
      auto prune = NextPruneDue();
      if (!due && !prune) {
        cv_.Wait(mu_);
        continue;
      }
      if ((due && due->count() <= 0) || (prune && prune->count() <= 0)) break;
      // Rows' due times are polled; the prune (hours apart) is not.
      std::chrono::milliseconds wait = due ? std::min(*due, kPoll) : *prune;
      if (prune) wait = std::min(wait, *prune);
      cv_.WaitFor(mu_, wait);
    }
    wake_ = false;
    bool stopping = stop_;
    std::vector<CaptureRecord> batch(std::make_move_iterator(queue_.begin()),
                                     std::make_move_iterator(queue_.end()));
    queue_.clear();
    lock.Unlock();
    std::vector<bool> written;
    written.reserve(batch.size());
    for (const CaptureRecord& r : batch) written.push_back(Write(r));
    // Counted as soon as the lines are in the file, so that whoever reads the file and then
    // the counts sees them agree (the index and the table come after).
    lock.Lock();
    for (size_t i = 0; i < batch.size(); ++i) {
      auto& stats = stats_[batch[i].endpoint];
      ++(written[i] ? stats.captured : stats.dropped);
    }
    lock.Unlock();
    if (index_ != nullptr && !batch.empty()) {
      Status s = index_->Add(batch);
      if (!s.ok())
        spdlog::warn("request capture: the request index was not updated: {}", s.ToString());
    }
    for (const CaptureRecord& r : batch) {
      if (!r.capture_table.empty()) AddToBatch(r);
    }
    RetryBatches(stopping);
    FlushBatches(stopping);
    PruneIndexIfDue();
    lock.Lock();
    done_ += batch.size();
    flushed_cv_.NotifyAll();
    if (stopping && queue_.empty()) return;
  }
}

void CaptureWriter::AddToBatch(const CaptureRecord& r) {
  int64_t dropped = 0;
  auto it = pending_.find(r.endpoint);
  if (it != pending_.end() && it->second.table != r.capture_table && !it->second.rows.empty()) {
    // The endpoint's table changed: what waits goes to the table it was captured for.
    Pending old = std::move(it->second);
    pending_.erase(it);
    AppendBatch(r.endpoint, std::move(old));
  }
  Pending& p = pending_[r.endpoint];
  if (p.rows.empty()) p.first = clock_.MonotonicNow();
  p.table = r.capture_table;
  p.owner = r.owner;
  if (sink_ == nullptr) {
    dropped = 1;
  } else {
    p.rows.push_back(CaptureTableRow(r, options_.max_payload_bytes));
    p.request_ids.push_back(r.request_id);
    if (p.rows.size() > options_.max_table_pending) {
      // The table lags: the oldest rows go (the JSON lines keep them).
      size_t excess = p.rows.size() - options_.max_table_pending;
      p.rows.erase(p.rows.begin(), p.rows.begin() + static_cast<std::ptrdiff_t>(excess));
      p.request_ids.erase(p.request_ids.begin(),
                          p.request_ids.begin() + static_cast<std::ptrdiff_t>(excess));
      dropped = static_cast<int64_t>(excess);
    }
  }
  {
    MutexLock lock(mu_);
    auto& stats = stats_[r.endpoint];
    stats.table_dropped += dropped;
    stats.table_pending = static_cast<int64_t>(p.rows.size());
    if (sink_ == nullptr) stats.table_error = "this server writes no capture tables";
  }
  if (p.rows.size() >= options_.table_batch_rows) {
    Pending full = std::move(p);
    pending_.erase(r.endpoint);
    AppendBatch(r.endpoint, std::move(full));
  }
}

void CaptureWriter::FlushBatches(bool all) {
  auto now = clock_.MonotonicNow();
  for (auto it = pending_.begin(); it != pending_.end();) {
    Pending& p = it->second;
    bool due = !p.rows.empty() && (all || p.rows.size() >= options_.table_batch_rows ||
                                   now - p.first >= options_.table_flush_interval);
    if (!due) {
      ++it;
      continue;
    }
    std::string endpoint = it->first;
    Pending batch = std::move(p);
    it = pending_.erase(it);
    AppendBatch(endpoint, std::move(batch), 1, /*last=*/all);
  }
}

void CaptureWriter::RetryBatches(bool all) {
  auto now = clock_.MonotonicNow();
  std::deque<Retry> due;
  for (auto it = retries_.begin(); it != retries_.end();) {
    if (all || it->due <= now) {
      due.push_back(std::move(*it));
      it = retries_.erase(it);
    } else {
      ++it;
    }
  }
  for (Retry& r : due) {
    auto rows = static_cast<int64_t>(r.batch.rows.size());
    {
      MutexLock lock(mu_);
      stats_[r.endpoint].table_retrying -= rows;
    }
    AppendBatch(r.endpoint, std::move(r.batch), r.attempts + 1, all);
  }
}

void CaptureWriter::AppendBatch(const std::string& endpoint, Pending batch, int attempts,
                                bool last) {
  auto rows = static_cast<int64_t>(batch.rows.size());
  Result<int64_t> version = sink_->Append(endpoint, batch.owner, batch.table, batch.rows);
  if (version.ok() && index_ != nullptr) {
    Status s = index_->SetTableVersion(batch.request_ids, *version);
    if (!s.ok())
      spdlog::warn("request capture: the request index was not updated: {}", s.ToString());
  }
  // A bad row or table (InvalidArgument) fails the same way however long one waits.
  bool retry = !version.ok() && !last && attempts < options_.table_attempts &&
               version.status().code() != StatusCode::kInvalidArgument;
  int64_t dropped = 0;
  if (retry) {
    auto backoff = options_.table_retry_backoff;
    for (int i = 1; i < attempts && backoff < options_.table_retry_max_backoff; ++i) backoff *= 2;
    backoff = std::min(backoff, options_.table_retry_max_backoff);
    spdlog::warn(
        "request capture: {} rows of endpoint {} were not appended to {} (attempt {} of "
        "{}), trying again in {} ms: {}",
        rows, endpoint, batch.table, attempts, options_.table_attempts, backoff.count(),
        version.status().ToString());
    retries_.push_back(
        Retry{endpoint, std::move(batch), attempts, clock_.MonotonicNow() + backoff});
    // The endpoint's rows waiting for the table stay bounded: its oldest failed batches go.
    size_t waiting = 0;
    for (const Retry& r : retries_) waiting += r.endpoint == endpoint ? r.batch.rows.size() : 0;
    for (auto it = retries_.begin();
         waiting > options_.max_table_pending && it != retries_.end();) {
      if (it->endpoint != endpoint) {
        ++it;
        continue;
      }
      waiting -= it->batch.rows.size();
      dropped += static_cast<int64_t>(it->batch.rows.size());
      it = retries_.erase(it);
    }
  } else if (!version.ok()) {
    spdlog::warn(
        "request capture: {} rows of endpoint {} were not appended to {} after {} "
        "attempts, dropped from the table (its JSON lines keep them): {}",
        rows, endpoint, batch.table, attempts, version.status().ToString());
  }
  MutexLock lock(mu_);
  ++table_batches_;
  auto& stats = stats_[endpoint];
  auto it = pending_.find(endpoint);
  stats.table_pending = it == pending_.end() ? 0 : static_cast<int64_t>(it->second.rows.size());
  if (version.ok()) {
    stats.table_captured += rows;
    stats.table_version = *version;
    stats.table_error.clear();
  } else if (retry) {
    stats.table_retrying += rows - dropped;
    stats.table_dropped += dropped;
    stats.table_error = version.status().message();
  } else {
    stats.table_dropped += rows;
    stats.table_error = version.status().message();
  }
  flushed_cv_.NotifyAll();
}

bool CaptureWriter::Write(const CaptureRecord& r) {
  bool request_truncated = false, response_truncated = false;
  json::object o = RecordFields(r);
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
