#include "trainyard/api/jobs_api.h"

#include <gtest/gtest.h>

namespace trainyard::api {
namespace {

TEST(RedactSecretsTest, ReplacesValuesAndNeverSplitsOneAcrossReads) {
  std::vector<std::string> values = {"hf_secret", "p4ss"};
  int64_t consumed = -1;
  EXPECT_EQ(RedactSecrets("token=hf_secret pw=p4ss!", "", values, consumed), "token=*** pw=***!");
  EXPECT_EQ(consumed, 24);
  // A value that starts in this read and ends in the next is replaced whole; the next read
  // starts after it.
  std::string file = "abc hf_secret tail";
  consumed = -1;
  std::string first = RedactSecrets(file.substr(0, 7), file.substr(7, 9), values, consumed);
  EXPECT_EQ(first, "abc ***");
  EXPECT_EQ(consumed, 13);
  std::string second = RedactSecrets(file.substr(13), "", values, consumed);
  EXPECT_EQ(second, " tail");
  // At the end of the file, what may be the start of a value is held back.
  consumed = -1;
  EXPECT_EQ(RedactSecrets("done hf_se", "", values, consumed), "done ");
  EXPECT_EQ(consumed, 5);
  consumed = -1;
  EXPECT_EQ(RedactSecrets("no secrets", "", {}, consumed), "no secrets");
  EXPECT_EQ(consumed, -1);
}

TEST(ScopedTokenRoutesTest, OnlyTheJobsOwnWritesAndReadsAreOpen) {
  using http::Method;
  EXPECT_TRUE(ScopedTokenMayCall(Method::kGet, "/users"));
  EXPECT_TRUE(ScopedTokenMayCall(Method::kPost, "/runs/log-batch"));
  EXPECT_TRUE(ScopedTokenMayCall(Method::kPost, "/jobs/{job_id}/heartbeat"));
  EXPECT_TRUE(ScopedTokenMayCall(Method::kPut, "/artifacts/{path...}"));
  EXPECT_TRUE(ScopedTokenMayCall(Method::kPost, "/runs/search"));
  // Table data the job's principal may modify (the catalog checks MODIFY per table).
  EXPECT_TRUE(ScopedTokenMayCall(Method::kPost, "/tables/{full_name}/import"));
  for (auto [m, p] : std::vector<std::pair<Method, std::string>>{
           {Method::kPost, "/tokens"},
           {Method::kDelete, "/tokens/{token_id}"},
           {Method::kPost, "/grants/experiment"},
           {Method::kPost, "/users"},
           {Method::kPost, "/users/{name}/disable"},
           {Method::kPost, "/experiments/delete"},
           {Method::kPost, "/experiments/create"},
           {Method::kPost, "/runs/create"},
           {Method::kPost, "/runs/delete"},
           {Method::kPost, "/jobs"},
           {Method::kPost, "/jobs/{job_id}/cancel"},
           {Method::kPost, "/secrets"},
           {Method::kPost, "/projects"},
           {Method::kPost, "/registered-models/create"},
           {Method::kDelete, "/artifacts/{path...}"},
           {Method::kPost, "/tables/{full_name}/delete"},
           {Method::kPut, "/tables/{full_name}/row-filter"},
           {Method::kPost, "/tables"},
       }) {
    EXPECT_FALSE(ScopedTokenMayCall(m, p)) << p;
  }
}

}  // namespace
}  // namespace trainyard::api
