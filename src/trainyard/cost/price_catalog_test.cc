#include "trainyard/cost/price_catalog.h"

#include <gtest/gtest.h>

namespace trainyard::cost {
namespace {

TEST(PriceCatalogTest, PricesAttempts) {
  auto c = PriceCatalog::Parse(R"(
pools:
  local:
    provider: lambda
    gpu_type: H100-80GB
    gpu_hour_on_demand: 2.99
    gpu_hour_spot: 1.50
    cpu_hour: 0.04
)",
                               "prices.yaml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_DOUBLE_EQ(c->Cost("local", 8, 64, 3600, false), 8 * 2.99);
  EXPECT_DOUBLE_EQ(c->Cost("local", 8, 64, 1800, true), 4 * 1.50);
  EXPECT_DOUBLE_EQ(c->Cost("local", 0, 2, 3600, false), 0.08);
  EXPECT_DOUBLE_EQ(c->Cost("elsewhere", 8, 0, 3600, false), 0);
}

TEST(PriceCatalogTest, ErrorsNameTheKey) {
  auto c = PriceCatalog::Parse("pools:\n  a:\n    gpu_hour_on_demand: cheap\n", "p.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(),
            "p.yaml:3: pools.a.gpu_hour_on_demand must be a non-negative number of dollars");
  c = PriceCatalog::Parse("pools:\n  a:\n    price: 1\n", "p.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("pools.a.price is not a known key"), std::string::npos);
}

}  // namespace
}  // namespace trainyard::cost
