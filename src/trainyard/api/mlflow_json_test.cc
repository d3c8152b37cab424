#include "trainyard/api/mlflow_json.h"

#include <gtest/gtest.h>

#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

namespace trainyard::api {
namespace {

std::string ToChars(double v) {
  char buf[64];
  return std::string(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
}

std::string Shortest(double v) {
  char buf[64];
  return std::string(buf, WriteShortestDouble(buf, v));
}

// WriteShortestDouble must write exactly what std::to_chars writes (metric histories were
// written with it before, and clients compare answers byte for byte).
TEST(WriteShortestDoubleTest, WritesWhatToCharsWrites) {
  std::vector<double> values = {0.0,
                                -0.0,
                                1.0,
                                -1.0,
                                0.1,
                                0.5,
                                100,
                                1e15,
                                1e16,
                                123456789012345680000.0,
                                0.001,
                                0.0001,
                                1e-5,
                                1.5e-7,
                                1e21,
                                1e22,
                                1e23,
                                1e100,
                                1e-100,
                                1e300,
                                std::numeric_limits<double>::max(),
                                std::numeric_limits<double>::min(),
                                std::numeric_limits<double>::denorm_min(),
                                std::numeric_limits<double>::epsilon(),
                                9007199254740993.0,
                                0.999900009999,
                                5e-324,
                                2.2250738585072011e-308};
  for (int e = -320; e <= 308; ++e) {
    values.push_back(std::pow(10.0, e));
    values.push_back(1.25 * std::pow(10.0, e));
    values.push_back(-7.0 / 3 * std::pow(10.0, e));
  }
  for (int i = 0; i < 100000; ++i) values.push_back(1.0 / (1.0 + i * 1e-4));
  for (int i = -2000; i < 2000; ++i) values.push_back(i / 8.0);
  std::mt19937_64 rng(42);
  for (int i = 0; i < 1'000'000; ++i) {
    uint64_t bits = rng();
    double v;
    std::memcpy(&v, &bits, sizeof v);
    if (std::isfinite(v)) values.push_back(v);
  }
  std::uniform_int_distribution<int64_t> digits(0, 99'999'999);
  std::uniform_int_distribution<int> scale(-12, 12);
  for (int i = 0; i < 200'000; ++i) {
    values.push_back(static_cast<double>(digits(rng)) * std::pow(10.0, scale(rng)));
  }
  int mismatches = 0;
  for (double v : values) {
    if (!std::isfinite(v)) continue;
    if (Shortest(v) != ToChars(v) && ++mismatches <= 10) {
      ADD_FAILURE() << "WriteShortestDouble(" << ToChars(v) << ") wrote " << Shortest(v);
    }
  }
  EXPECT_EQ(mismatches, 0);
}

}  // namespace
}  // namespace trainyard::api
