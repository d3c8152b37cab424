// Query-only tokens (identity::IsQueryOnly): the routes they may call (the serving data plane
// only) and the scope's endpoint names. The real server's refusals are in
// tests/test_serving_ratelimit.py.
#include <gtest/gtest.h>

#include "trainyard/api/api.h"
#include "trainyard/api/query_token.h"
#include "trainyard/identity/query_scope.h"

namespace trainyard::api {
namespace {

TEST(QueryOnlyTokenRoutesTest, OnlyTheServingRoutesAreOpen) {
  using http::Method;
  for (auto [m, p] : std::vector<std::pair<Method, std::string>>{
           {Method::kPost, "/serving-endpoints/intent/invocations"},
           {Method::kPost, "/serving-endpoints/chat/completions"},
           {Method::kPost, "/serving-endpoints/completions"},
           {Method::kGet, "/serving-endpoints/models"},
           {Method::kPost, "/v1/chat/completions"},
           {Method::kPost, "/v1/completions"},
           {Method::kGet, "/v1/models"},
       }) {
    EXPECT_TRUE(QueryOnlyTokenMayCall(m, p)) << p;
  }
  // Everything else is closed, reads included (a job's token may read).
  for (auto [m, p] : std::vector<std::pair<Method, std::string>>{
           {Method::kGet, "/api/trainyard/v1/users"},
           {Method::kPost, "/api/2.0/mlflow/experiments/search"},
           {Method::kGet, "/api/2.0/mlflow/experiments/get"},
           {Method::kPost, "/api/2.0/mlflow/runs/log-batch"},
           {Method::kPost, "/api/trainyard/v1/tokens"},
           {Method::kGet, "/api/trainyard/v1/tokens"},
           {Method::kDelete, "/api/trainyard/v1/tokens/abc"},
           {Method::kGet, "/api/trainyard/v1/endpoints"},
           {Method::kGet, "/api/trainyard/v1/endpoints/intent"},
           {Method::kPost, "/api/trainyard/v1/endpoints"},
           {Method::kPatch, "/api/trainyard/v1/endpoints/intent"},
           {Method::kPost, "/api/trainyard/v1/endpoints/intent/permissions"},
           {Method::kPost, "/api/trainyard/v1/jobs"},
           {Method::kGet, "/api/trainyard/v1/jobs"},
           {Method::kGet, "/api/2.1/unity-catalog/catalogs"},
           {Method::kPost, "/api/2.0/mlflow/registered-models/search"},
           {Method::kGet, "/api/2.0/mlflow-artifacts/artifacts/x"},
           {Method::kGet, "/"},
           // Serving paths with the wrong method or shape.
           {Method::kGet, "/serving-endpoints/intent/invocations"},
           {Method::kPost, "/serving-endpoints/models"},
           {Method::kPost, "/serving-endpoints//invocations"},
           {Method::kPost, "/serving-endpoints/a/b/invocations"},
           {Method::kPost, "/serving-endpoints/invocations"},
           {Method::kPost, "/v1/chat/completions/x"},
       }) {
    EXPECT_FALSE(QueryOnlyTokenMayCall(m, p)) << p;
  }
  // A job's scoped token keeps its own table: it may read.
  EXPECT_TRUE(ScopedTokenMayCall(Method::kGet, "/users"));
}

TEST(QueryOnlyTokenRoutesTest, ScopeNamesItsEndpoints) {
  using identity::Principal;
  EXPECT_EQ(identity::QueryScope({}), "query");
  EXPECT_EQ(identity::QueryScope({"a", "b-2"}), "query:a,b-2");
  EXPECT_EQ(identity::QueryScopeEndpoints("query:a,b-2"), (std::vector<std::string>{"a", "b-2"}));
  EXPECT_TRUE(identity::QueryScopeEndpoints("query").empty());

  Principal any{"alice", false, "t1", "query"};
  Principal one{"alice", false, "t2", "query:intent"};
  Principal job{"alice", false, "t3", "job:j-1"};
  Principal user{"alice", false, "t4", ""};
  Principal lookalike{"alice", false, "t5", "queryx"};
  EXPECT_TRUE(identity::IsQueryOnly(any));
  EXPECT_TRUE(identity::IsQueryOnly(one));
  EXPECT_FALSE(identity::IsQueryOnly(job));
  EXPECT_FALSE(identity::IsQueryOnly(user));
  EXPECT_FALSE(identity::IsQueryOnly(lookalike));

  EXPECT_TRUE(identity::QueryTokenAllows(any, "intent"));
  EXPECT_TRUE(identity::QueryTokenAllows(any, "other"));
  EXPECT_TRUE(identity::QueryTokenAllows(one, "intent"));
  EXPECT_FALSE(identity::QueryTokenAllows(one, "other"));
  EXPECT_FALSE(identity::QueryTokenAllows(one, "inten"));
  EXPECT_TRUE(identity::QueryTokenAllows(user, "other"));
  EXPECT_TRUE(identity::QueryTokenAllows(job, "other"));
}

}  // namespace
}  // namespace trainyard::api
