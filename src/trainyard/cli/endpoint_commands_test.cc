// ParseRateLimitFlags: `--rate-limit` values as an endpoint's rate_limits.
#include "trainyard/cli/endpoint_commands.h"

#include <gtest/gtest.h>

namespace trainyard::cli {
namespace {

std::string Parsed(const std::vector<std::string>& flags) {
  auto r = ParseRateLimitFlags(flags);
  return r.ok() ? json::serialize(*r) : "error: " + r.status().message();
}

TEST(ParseRateLimitFlagsTest, KeysPrincipalsAndKindsMerge) {
  EXPECT_EQ(Parsed({"user:100/min"}), R"([{"key":"user","queries_per_minute":100}])");
  EXPECT_EQ(Parsed({"endpoint:10/min", "user:alice:5/min", "group:team:5000tokens/min",
                    "group:team:20/min"}),
            R"([{"key":"endpoint","queries_per_minute":10},)"
            R"({"key":"user","principal":"alice","queries_per_minute":5},)"
            R"({"key":"group","principal":"team","tokens_per_minute":5000,)"
            R"("queries_per_minute":20}])");
  EXPECT_EQ(Parsed({"none"}), "[]");
}

TEST(ParseRateLimitFlagsTest, BadFlagsSayTheForm) {
  for (std::string bad : {"user", "team:10/min", "user:10", "user:ten/min", "user:a:b:10/min",
                          "user:10tokens/hour"}) {
    std::string r = Parsed({bad});
    EXPECT_NE(r.find("error: --rate-limit '" + bad + "'"), std::string::npos) << r;
    EXPECT_NE(r.find("KEY[:PRINCIPAL]:N/min"), std::string::npos) << r;
  }
  EXPECT_NE(Parsed({"user:1/min", "user:2/min"}).find("queries_per_minute twice"),
            std::string::npos);
  EXPECT_NE(Parsed({"none", "user:1/min"}).find("give it alone"), std::string::npos);
}

}  // namespace
}  // namespace trainyard::cli
