#include "trainyard/serving/rate_limiter.h"

#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "trainyard/testing/status_matchers.h"
#include "trainyard/testing/test_database.h"

namespace trainyard::serving {
namespace {

RateLimit Limit(RateLimitKey key, std::string principal, int64_t qpm, int64_t tpm = 0) {
  return RateLimit{key, std::move(principal), qpm, tpm};
}

class RateLimiterTest : public ::testing::Test {
 protected:
  FakeClock clock_;
  RateLimiter limiter_{clock_};
};

TEST_F(RateLimiterTest, NoLimitsAdmitsEverything) {
  for (int i = 0; i < 1000; ++i) EXPECT_TRUE(limiter_.Admit("e", {}, "alice", {}).allowed);
  EXPECT_EQ(limiter_.BucketCountForTest(), 0u);
}

TEST_F(RateLimiterTest, EndpointQueriesPerMinuteRefillOverTime) {
  std::vector<RateLimit> limits{Limit(RateLimitKey::kEndpoint, "", 3)};
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(limiter_.Admit("e", limits, "alice", {}).allowed) << i;
  // The endpoint's budget is everyone's: bob is refused too.
  RateDecision d = limiter_.Admit("e", limits, "bob", {});
  EXPECT_FALSE(d.allowed);
  EXPECT_FALSE(d.tokens);
  EXPECT_EQ(d.limit, "endpoint: 3 queries/min");
  EXPECT_EQ(d.retry_after_seconds, 20);  // one query refills in 60 s / 3
  clock_.AdvanceMillis(19'000);
  EXPECT_FALSE(limiter_.Admit("e", limits, "bob", {}).allowed);
  clock_.AdvanceMillis(1'000);
  EXPECT_TRUE(limiter_.Admit("e", limits, "bob", {}).allowed);
  EXPECT_FALSE(limiter_.Admit("e", limits, "bob", {}).allowed);
  // Another endpoint has its own buckets.
  EXPECT_TRUE(limiter_.Admit("other", limits, "bob", {}).allowed);
}

TEST_F(RateLimiterTest, PerUserLimitGivesEachUserTheirOwnBudget) {
  std::vector<RateLimit> limits{Limit(RateLimitKey::kUser, "", 2)};
  EXPECT_TRUE(limiter_.Admit("e", limits, "alice", {}).allowed);
  EXPECT_TRUE(limiter_.Admit("e", limits, "alice", {}).allowed);
  RateDecision d = limiter_.Admit("e", limits, "alice", {});
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.limit, "per user: 2 queries/min (alice)");
  EXPECT_EQ(d.retry_after_seconds, 30);
  EXPECT_TRUE(limiter_.Admit("e", limits, "bob", {}).allowed);
}

TEST_F(RateLimiterTest, NamedUserLimitAppliesOnlyToThatUser) {
  std::vector<RateLimit> limits{Limit(RateLimitKey::kUser, "alice", 1)};
  EXPECT_TRUE(limiter_.Admit("e", limits, "alice", {}).allowed);
  EXPECT_FALSE(limiter_.Admit("e", limits, "alice", {}).allowed);
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(limiter_.Admit("e", limits, "bob", {}).allowed);
}

TEST_F(RateLimiterTest, GroupLimitIsSharedByItsMembers) {
  std::vector<RateLimit> limits{Limit(RateLimitKey::kGroup, "team", 2)};
  std::vector<std::string> team{"all-users", "team"};
  EXPECT_TRUE(limiter_.Admit("e", limits, "alice", team).allowed);
  EXPECT_TRUE(limiter_.Admit("e", limits, "bob", team).allowed);
  RateDecision d = limiter_.Admit("e", limits, "carol", team);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.limit, "group team: 2 queries/min");
  // Not a member: the limit does not apply.
  EXPECT_TRUE(limiter_.Admit("e", limits, "dave", {"other"}).allowed);
}

TEST_F(RateLimiterTest, MostRestrictiveLimitWinsAndRefusalChargesNothing) {
  std::vector<RateLimit> limits{Limit(RateLimitKey::kEndpoint, "", 100),
                                Limit(RateLimitKey::kUser, "", 1),
                                Limit(RateLimitKey::kGroup, "team", 50)};
  EXPECT_TRUE(limiter_.Admit("e", limits, "alice", {"team"}).allowed);
  for (int i = 0; i < 5; ++i) {
    RateDecision d = limiter_.Admit("e", limits, "alice", {"team"});
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.limit, "per user: 1 queries/min (alice)");
    EXPECT_EQ(d.retry_after_seconds, 60);
  }
  // alice's refusals took nothing from the endpoint's or the group's budget: 49 more members'
  // requests fit the group's budget, the 50th does not.
  for (int i = 0; i < 49; ++i) {
    EXPECT_TRUE(limiter_.Admit("e", limits, "u" + std::to_string(i), {"team"}).allowed) << i;
  }
  RateDecision d = limiter_.Admit("e", limits, "u-last", {"team"});
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.limit, "group team: 50 queries/min");
}

TEST_F(RateLimiterTest, TokensAreChargedAfterTheAnswerAndRefuseOnceSpent) {
  std::vector<RateLimit> limits{Limit(RateLimitKey::kUser, "", 0, 100)};
  RateDecision first = limiter_.Admit("e", limits, "alice", {});
  ASSERT_TRUE(first.allowed);
  // A second request admitted before the first one's tokens are known.
  RateDecision second = limiter_.Admit("e", limits, "alice", {});
  ASSERT_TRUE(second.allowed);
  first.charge.ChargeTokens(80);
  first.charge.ChargeTokens(80);  // charged once only
  EXPECT_TRUE(limiter_.Admit("e", limits, "alice", {}).allowed);
  second.charge.ChargeTokens(70);  // 100 - 80 - 70 = -50
  RateDecision d = limiter_.Admit("e", limits, "alice", {});
  EXPECT_FALSE(d.allowed);
  EXPECT_TRUE(d.tokens);
  EXPECT_EQ(d.limit, "per user: 100 tokens/min (alice)");
  EXPECT_EQ(d.retry_after_seconds, 31);  // 50 tokens at 100/min: 30 s, then above zero
  EXPECT_TRUE(limiter_.Admit("e", limits, "bob", {}).allowed);
  clock_.AdvanceMillis(30'000);
  EXPECT_FALSE(limiter_.Admit("e", limits, "alice", {}).allowed);
  clock_.AdvanceMillis(1'000);
  EXPECT_TRUE(limiter_.Admit("e", limits, "alice", {}).allowed);
}

TEST_F(RateLimiterTest, ChargeOutlivesTheLimiter) {
  RateCharge charge;
  {
    FakeClock clock;
    RateLimiter limiter(clock);
    RateDecision d = limiter.Admit("e", {Limit(RateLimitKey::kEndpoint, "", 0, 10)}, "a", {});
    ASSERT_TRUE(d.allowed);
    charge = d.charge;
  }
  RateCharge().ChargeTokens(5);  // a default charge does nothing
  SUCCEED();
}

TEST_F(RateLimiterTest, ChangedLimitStartsAFreshBucket) {
  std::vector<RateLimit> one{Limit(RateLimitKey::kEndpoint, "", 1)};
  EXPECT_TRUE(limiter_.Admit("e", one, "a", {}).allowed);
  EXPECT_FALSE(limiter_.Admit("e", one, "a", {}).allowed);
  std::vector<RateLimit> two{Limit(RateLimitKey::kEndpoint, "", 2)};
  EXPECT_TRUE(limiter_.Admit("e", two, "a", {}).allowed);
}

TEST_F(RateLimiterTest, FullBucketsArePrunedWhenThereAreMany) {
  std::vector<RateLimit> limits{Limit(RateLimitKey::kUser, "", 10)};
  for (size_t i = 0; i <= RateLimiter::kPruneAbove; ++i) {
    ASSERT_TRUE(limiter_.Admit("e", limits, "u" + std::to_string(i), {}).allowed);
  }
  EXPECT_GT(limiter_.BucketCountForTest(), RateLimiter::kPruneAbove);
  clock_.AdvanceMillis(60'000);  // every bucket refilled
  ASSERT_TRUE(limiter_.Admit("e", limits, "fresh", {}).allowed);
  EXPECT_LE(limiter_.BucketCountForTest(), 1u);
}

TEST_F(RateLimiterTest, ConcurrentAdmissionsNeverExceedTheBudget) {
  std::vector<RateLimit> limits{Limit(RateLimitKey::kEndpoint, "", 1000)};
  std::atomic<int> admitted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 500; ++i) {
        if (limiter_.Admit("e", limits, "u", {}).allowed) ++admitted;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(admitted.load(), 1000);  // the fake clock does not move: no refill
}

// A restart keeps spent budgets: the buckets charged are saved (TakeChanged, RateBucketStore) and
// restored, refilled for the wall-clock time in between.
class RateBucketPersistenceTest : public ::testing::TestWithParam<const char*> {};

TEST_P(RateBucketPersistenceTest, ABucketSavedAndRestoredStaysSpentAndRefillsForTheTimeBetween) {
  TY_ASSERT_OK_AND_ASSIGN(auto db,
                          store::OpenTestDatabase(GetParam(), RateBucketStore::Migrations()));
  RateBucketStore store(*db);
  FakeClock clock;
  std::vector<RateLimit> limits{Limit(RateLimitKey::kUser, "", 2, 100)};
  {
    RateLimiter limiter(clock);
    RateDecision first = limiter.Admit("e", limits, "alice", {});
    ASSERT_TRUE(first.allowed);
    first.charge.ChargeTokens(150);  // the token bucket goes to -50
    EXPECT_TRUE(limiter.Admit("e", limits, "bob", {}).allowed);
    auto changed = limiter.TakeChanged();
    EXPECT_EQ(changed.size(), 3u);  // alice's query and token buckets, bob's query bucket
    TY_ASSERT_OK(store.Save(changed));
    EXPECT_TRUE(limiter.TakeChanged().empty());  // nothing charged since
    // A later charge is saved over the first (one row per bucket).
    ASSERT_FALSE(limiter.Admit("e", limits, "alice", {}).allowed);  // tokens <= 0: no charge
    RateDecision bob2 = limiter.Admit("e", limits, "bob", {});
    ASSERT_TRUE(bob2.allowed);
    changed = limiter.TakeChanged();
    ASSERT_EQ(changed.size(), 1u);  // bob's query bucket
    TY_ASSERT_OK(store.Save(changed));
  }
  TY_ASSERT_OK_AND_ASSIGN(auto saved, store.Load());
  EXPECT_EQ(saved.size(), 3u);

  // The server was down 12 s: alice's tokens refilled 12 s * 100/60 s = 20 (to -30), bob's
  // queries 0.4 (to 0.4): both still refused, not given full buckets.
  clock.AdvanceMillis(12'000);
  RateLimiter restarted(clock);
  EXPECT_TRUE(restarted.Restore(saved).empty());
  RateDecision alice = restarted.Admit("e", limits, "alice", {});
  EXPECT_FALSE(alice.allowed);
  EXPECT_TRUE(alice.tokens);
  EXPECT_EQ(alice.retry_after_seconds, 19);  // 30 tokens at 100/min, and one more
  RateDecision bob = restarted.Admit("e", limits, "bob", {});
  EXPECT_FALSE(bob.allowed);
  EXPECT_FALSE(bob.tokens);
  EXPECT_EQ(bob.retry_after_seconds, 18);  // 0.6 of a query at 2/min
  // Carol was never charged: a full bucket.
  EXPECT_TRUE(restarted.Admit("e", limits, "carol", {}).allowed);

  // Long enough down, every bucket is full again: Restore says which to forget.
  clock.AdvanceMillis(120'000);
  RateLimiter later(clock);
  auto full = later.Restore(saved);
  EXPECT_EQ(full.size(), 3u);
  TY_ASSERT_OK(store.Delete(full));
  TY_ASSERT_OK_AND_ASSIGN(auto none, store.Load());
  EXPECT_TRUE(none.empty());
  EXPECT_TRUE(later.Admit("e", limits, "alice", {}).allowed);
}

TEST_F(RateLimiterTest, ARestoreWithTheClockGoneBackRefillsNothingAndIgnoresNonsense) {
  std::vector<RateLimit> limits{Limit(RateLimitKey::kEndpoint, "", 1)};
  std::string key = "e\nendpoint: 1 queries/min\n\nq";
  ASSERT_TRUE(limiter_.Admit("e", limits, "alice", {}).allowed);
  auto changed = limiter_.TakeChanged();
  ASSERT_EQ(changed.size(), 1u);
  EXPECT_EQ(changed[0].key, key);
  EXPECT_EQ(changed[0].level, 0);
  clock_.AdvanceMillis(-3'600'000);  // wall time only
  RateLimiter restarted(clock_);
  std::vector<SavedRateBucket> saved = changed;
  saved.push_back({"bad", 1, 0, 0});
  saved.push_back({"nan", std::nan(""), 5, 0});
  EXPECT_EQ(restarted.Restore(saved), (std::vector<std::string>{"bad", "nan"}));
  RateDecision d = restarted.Admit("e", limits, "bob", {});
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after_seconds, 60);
}

INSTANTIATE_TEST_SUITE_P(Backends, RateBucketPersistenceTest,
                         ::testing::Values("sqlite", "postgres"),
                         [](const auto& param_info) { return std::string(param_info.param); });

}  // namespace
}  // namespace trainyard::serving
