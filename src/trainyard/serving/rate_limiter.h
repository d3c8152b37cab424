// RateLimiter: enforces endpoints' rate limits (endpoint.h's RateLimit) with token buckets.
//
// Each limit that applies to a request has a bucket per subject: one for the endpoint, one per
// user for a per-user limit, one for a named user, one shared by a named group's members. A
// bucket holds up to a minute's budget and refills continuously (budget / 60 s), so a burst
// of a whole minute's budget is allowed after a quiet minute and the steady rate is the limit.
//
// Queries are charged when the request is admitted: it is refused unless every applicable
// query bucket holds a whole query. Tokens are known only after the answer (the replica's
// `usage`, for a stream its last event), so they are charged then, through the RateCharge the
// admission returned, and may take a bucket below zero; a request is refused while any
// applicable token bucket is at or below zero, until the refill lifts it. The most
// restrictive limit therefore wins, and a refusal says which limit and when to retry.
//
// Time comes from the injected Clock's monotonic time (tests use FakeClock; no sleeps).
// Buckets of limits that are no longer configured, or full ones, are dropped when there are
// many. Thread-safe; a RateCharge may outlive its RateLimiter (it charges nothing then).
//
// A restart does not refill the buckets: the serving service saves the buckets charged since
// the last save (TakeChanged) to the database every few seconds and when it stops
// (RateBucketStore), and puts them back when it starts (Restore), refilled for the wall-clock
// time in between. A crash loses at most the charges of the last few seconds.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "trainyard/common/clock.h"
#include "trainyard/common/mutex.h"
#include "trainyard/serving/endpoint.h"
#include "trainyard/store/database.h"

namespace trainyard::serving {

// Charges a request's tokens to the token buckets that applied to it; copyable, and a
// default-constructed one charges nothing.
class RateCharge {
 public:
  RateCharge() = default;
  // Charges `tokens` (prompt + completion) once; later calls do nothing.
  void ChargeTokens(int64_t tokens);
  // Whether any token limit applied (else counting the answer's tokens is not needed).
  bool charges_tokens() const { return !token_buckets_.empty(); }

 private:
  friend class RateLimiter;
  struct Shared;
  std::shared_ptr<Shared> shared_;
  std::vector<std::pair<std::string, int64_t>> token_buckets_;  // key, tokens per minute
  std::shared_ptr<std::atomic<bool>> charged_;
};

struct RateDecision {
  bool allowed = true;
  // When refused: which limit ("user alice: 2 queries/min"), whether tokens or queries ran out,
  // and the whole seconds until the refusing bucket(s) allow a request again (at least 1).
  std::string limit;
  bool tokens = false;
  int64_t retry_after_seconds = 0;
  RateCharge charge;  // when allowed
};

// The tokens an answer used, for token limits: the OpenAI `usage` of a JSON answer
// (total_tokens, or prompt_tokens + completion_tokens), or of a streamed answer's event that
// carries it; a stream without usage (the client did not ask for stream_options.include_usage)
// counts one token per event with content. 0 for anything else (an MLflow pyfunc answer).
int64_t AnswerTokens(std::string_view body);

// A bucket's level at a wall-clock time, as saved in the database.
struct SavedRateBucket {
  std::string key;
  double level = 0;
  double capacity = 0;
  int64_t at_ms = 0;  // wall clock (ms since the epoch)
};

class RateLimiter {
 public:
  explicit RateLimiter(Clock& clock);
  RateLimiter(const RateLimiter&) = delete;
  RateLimiter& operator=(const RateLimiter&) = delete;

  // Admits (and charges one query to) a request of `user`, who is in `groups` (sorted), to
  // `endpoint` with `limits`, or refuses it with the limit that has no budget left.
  RateDecision Admit(const std::string& endpoint, const std::vector<RateLimit>& limits,
                     const std::string& user, const std::vector<std::string>& groups);

  // The buckets charged since the last call, at their levels now (a bucket dropped since, being
  // full, is left out: its saved level refills to full by the time it is restored).
  std::vector<SavedRateBucket> TakeChanged();
  // Puts `saved` buckets back, refilled for the wall-clock time since they were saved (a
  // clock that went back refills nothing). Returns the keys of those that are full by now:
  // they hold no state and need not stay saved.
  std::vector<std::string> Restore(const std::vector<SavedRateBucket>& saved);

  // When more buckets than this exist, full ones are dropped (they hold no state).
  static constexpr size_t kPruneAbove = 10'000;
  size_t BucketCountForTest();

 private:
  std::shared_ptr<RateCharge::Shared> shared_;
};

// The saved buckets: table serving_rate_buckets. Thread-safe (the Database is).
class RateBucketStore {
 public:
  explicit RateBucketStore(store::Database& db) : db_(db) {}
  static std::vector<store::Migration> Migrations();
  // Writes `buckets` (replacing the saved ones of the same keys), in one transaction.
  Status Save(const std::vector<SavedRateBucket>& buckets);
  Result<std::vector<SavedRateBucket>> Load();
  Status Delete(const std::vector<std::string>& keys);

 private:
  store::Database& db_;
};

}  // namespace trainyard::serving
