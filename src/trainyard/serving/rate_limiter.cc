#include "trainyard/serving/rate_limiter.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "trainyard/common/json.h"

namespace trainyard::serving {
namespace {

// The token count of a `usage` object, or -1 when `o` has none.
int64_t UsageTokens(const json::object& o) {
  auto it = o.find("usage");
  if (it == o.end() || !it->value().is_object()) return -1;
  const json::object& u = it->value().as_object();
  auto count = [&u](std::string_view k) -> int64_t {
    auto f = u.find(k);
    if (f == u.end() || !f->value().is_int64()) return -1;
    return std::max<int64_t>(0, f->value().as_int64());
  };
  if (int64_t total = count("total_tokens"); total >= 0) return total;
  return std::max<int64_t>(0, count("prompt_tokens")) +
         std::max<int64_t>(0, count("completion_tokens"));
}

}  // namespace

int64_t AnswerTokens(std::string_view body) {
  if (auto whole = ParseJsonObject(body); whole.ok())
    return std::max<int64_t>(0, UsageTokens(*whole));
  // Server-sent events: "data: {...}" lines.
  int64_t events_with_content = 0;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find('\n', pos);
    if (end == std::string_view::npos) end = body.size();
    std::string_view line = body.substr(pos, end - pos);
    pos = end + 1;
    if (line.substr(0, 6) != "data: " || line.size() < 8 || line[6] != '{') continue;
    auto event = ParseJsonObject(line.substr(6));
    if (!event.ok()) continue;
    if (int64_t tokens = UsageTokens(*event); tokens >= 0) return tokens;
    if (line.find("\"content\"") != std::string_view::npos ||
        line.find("\"text\"") != std::string_view::npos) {
      ++events_with_content;
    }
  }
  return events_with_content;
}

struct RateCharge::Shared {
  struct Bucket {
    double level = 0;
    double capacity = 0;  // a minute's budget
    Clock::MonotonicTime updated{};
  };

  explicit Shared(Clock& c) : clock(c) {}

  // The bucket `key` brought up to `now` (created full).
  Bucket& RefilledLocked(const std::string& key, int64_t per_minute, Clock::MonotonicTime now)
      TY_REQUIRES(mu) {
    auto [it, added] = buckets.try_emplace(key);
    Bucket& b = it->second;
    if (added) {
      b.capacity = static_cast<double>(per_minute);
      b.level = b.capacity;
      b.updated = now;
      return b;
    }
    double elapsed_ms = std::chrono::duration<double, std::milli>(
                            std::max(now - b.updated, Clock::MonotonicTime::duration::zero()))
                            .count();
    b.level = std::min(b.capacity, b.level + elapsed_ms * b.capacity / 60'000.0);
    b.updated = now;
    return b;
  }

  void PruneLocked(Clock::MonotonicTime now) TY_REQUIRES(mu) {
    for (auto it = buckets.begin(); it != buckets.end();) {
      Bucket& b = it->second;
      double elapsed_ms = std::chrono::duration<double, std::milli>(now - b.updated).count();
      if (b.level + elapsed_ms * b.capacity / 60'000.0 >= b.capacity) {
        it = buckets.erase(it);
      } else {
        ++it;
      }
    }
  }

  Clock& clock;
  Mutex mu;
  std::map<std::string, Bucket> buckets TY_GUARDED_BY(mu);
  std::set<std::string> changed TY_GUARDED_BY(mu);  // charged since the last TakeChanged
};

void RateCharge::ChargeTokens(int64_t tokens) {
  if (!shared_ || !charged_ || tokens <= 0 || charged_->exchange(true)) return;
  auto now = shared_->clock.MonotonicNow();
  MutexLock lock(shared_->mu);
  for (const auto& [key, per_minute] : token_buckets_) {
    shared_->RefilledLocked(key, per_minute, now).level -= static_cast<double>(tokens);
    shared_->changed.insert(key);
  }
}

RateLimiter::RateLimiter(Clock& clock) : shared_(std::make_shared<RateCharge::Shared>(clock)) {}

RateDecision RateLimiter::Admit(const std::string& endpoint, const std::vector<RateLimit>& limits,
                                const std::string& user, const std::vector<std::string>& groups) {
  RateDecision decision;
  if (limits.empty()) return decision;
  struct Applied {
    std::string key;
    int64_t per_minute;
    bool tokens;
    const RateLimit* limit;
  };
  std::vector<Applied> applied;
  for (const RateLimit& l : limits) {
    std::string subject;
    switch (l.key) {
      case RateLimitKey::kEndpoint:
        break;
      case RateLimitKey::kUser:
        if (!l.principal.empty() && l.principal != user) continue;
        subject = user;
        break;
      case RateLimitKey::kGroup:
        if (!std::binary_search(groups.begin(), groups.end(), l.principal)) continue;
        subject = l.principal;
        break;
    }
    // The limit's description is in the key: a changed limit starts with a full bucket.
    std::string key = endpoint + '\n' + DescribeRateLimit(l) + '\n' + subject;
    if (l.queries_per_minute > 0) applied.push_back({key + "\nq", l.queries_per_minute, false, &l});
    if (l.tokens_per_minute > 0) applied.push_back({key + "\nt", l.tokens_per_minute, true, &l});
  }
  if (applied.empty()) return decision;

  auto now = shared_->clock.MonotonicNow();
  MutexLock lock(shared_->mu);
  double worst_wait_ms = -1;
  const Applied* worst = nullptr;
  std::vector<RateCharge::Shared::Bucket*> query_buckets;
  for (const Applied& a : applied) {
    auto& b = shared_->RefilledLocked(a.key, a.per_minute, now);
    double per_ms = b.capacity / 60'000.0;
    double wait_ms = -1;
    if (a.tokens) {
      if (b.level <= 0) wait_ms = -b.level / per_ms + 1;  // until it is above zero
    } else if (b.level < 1) {
      wait_ms = (1 - b.level) / per_ms;
    } else {
      query_buckets.push_back(&b);
    }
    if (wait_ms >= 0 && wait_ms > worst_wait_ms) {
      worst_wait_ms = wait_ms;
      worst = &a;
    }
  }
  if (worst) {
    decision.allowed = false;
    decision.limit = DescribeRateLimit(*worst->limit);
    if (worst->limit->key == RateLimitKey::kUser && worst->limit->principal.empty()) {
      decision.limit += " (" + user + ")";
    }
    decision.tokens = worst->tokens;
    decision.retry_after_seconds =
        std::max<int64_t>(1, static_cast<int64_t>(std::ceil(worst_wait_ms / 1000.0)));
    return decision;
  }
  for (auto* b : query_buckets) b->level -= 1;
  for (const Applied& a : applied) {
    if (!a.tokens) shared_->changed.insert(a.key);
  }
  decision.charge.shared_ = shared_;
  decision.charge.charged_ = std::make_shared<std::atomic<bool>>(false);
  for (const Applied& a : applied) {
    if (a.tokens) decision.charge.token_buckets_.emplace_back(a.key, a.per_minute);
  }
  if (shared_->buckets.size() > kPruneAbove) shared_->PruneLocked(now);
  return decision;
}

std::vector<SavedRateBucket> RateLimiter::TakeChanged() {
  std::vector<SavedRateBucket> out;
  auto now = shared_->clock.MonotonicNow();
  int64_t now_ms = shared_->clock.NowMillis();
  MutexLock lock(shared_->mu);
  for (const auto& key : shared_->changed) {
    auto it = shared_->buckets.find(key);
    if (it == shared_->buckets.end()) continue;
    double per_minute = it->second.capacity;
    auto& b = shared_->RefilledLocked(key, static_cast<int64_t>(per_minute), now);
    out.push_back({key, b.level, b.capacity, now_ms});
  }
  shared_->changed.clear();
  return out;
}

std::vector<std::string> RateLimiter::Restore(const std::vector<SavedRateBucket>& saved) {
  std::vector<std::string> full;
  auto now = shared_->clock.MonotonicNow();
  int64_t now_ms = shared_->clock.NowMillis();
  MutexLock lock(shared_->mu);
  for (const auto& s : saved) {
    if (!(s.capacity > 0) || !std::isfinite(s.level)) {
      full.push_back(s.key);  // not a bucket: forget it
      continue;
    }
    double elapsed_ms = static_cast<double>(std::max<int64_t>(0, now_ms - s.at_ms));
    double level = std::min(s.capacity, s.level + elapsed_ms * s.capacity / 60'000.0);
    if (level >= s.capacity) {
      full.push_back(s.key);
      continue;
    }
    auto& b = shared_->buckets[s.key];
    b.capacity = s.capacity;
    b.level = level;
    b.updated = now;
  }
  return full;
}

std::vector<store::Migration> RateBucketStore::Migrations() {
  return {{"serving_rate_buckets",
           1,
           {"CREATE TABLE serving_rate_buckets (bucket TEXT PRIMARY KEY, level DOUBLE PRECISION "
            "NOT NULL, capacity DOUBLE PRECISION NOT NULL, updated_ms BIGINT NOT NULL)"}}};
}

Status RateBucketStore::Save(const std::vector<SavedRateBucket>& buckets) {
  if (buckets.empty()) return Status::Ok();
  return db_.Write([&](store::Transaction& tx) -> Status {
    for (const auto& b : buckets) {
      TY_RETURN_IF_ERROR(
          tx.Exec("INSERT INTO serving_rate_buckets (bucket, level, capacity, updated_ms) "
                  "VALUES (?, ?, ?, ?) ON CONFLICT (bucket) DO UPDATE SET level = "
                  "excluded.level, capacity = excluded.capacity, updated_ms = "
                  "excluded.updated_ms",
                  {b.key, b.level, b.capacity, b.at_ms})
              .status());
    }
    return Status::Ok();
  });
}

Result<std::vector<SavedRateBucket>> RateBucketStore::Load() {
  std::vector<SavedRateBucket> out;
  TY_RETURN_IF_ERROR(db_.Read([&](store::Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(
        auto rows,
        tx.Query("SELECT bucket, level, capacity, updated_ms FROM serving_rate_buckets"));
    for (const auto& row : rows) {
      out.push_back({row.Text(0), row.Double(1), row.Double(2), row.Int(3)});
    }
    return Status::Ok();
  }));
  return out;
}

Status RateBucketStore::Delete(const std::vector<std::string>& keys) {
  if (keys.empty()) return Status::Ok();
  return db_.Write([&](store::Transaction& tx) -> Status {
    for (const auto& key : keys) {
      TY_RETURN_IF_ERROR(
          tx.Exec("DELETE FROM serving_rate_buckets WHERE bucket = ?", {key}).status());
    }
    return Status::Ok();
  });
}

size_t RateLimiter::BucketCountForTest() {
  MutexLock lock(shared_->mu);
  return shared_->buckets.size();
}

}  // namespace trainyard::serving
