#include "trainyard/api/mlflow_json.h"

#include <gtest/gtest.h>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

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

template <class T>
std::string IntToChars(T v) {
  char buf[32];
  return std::string(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
}

// The integers of a metric point (steps and timestamps) as std::to_chars writes them, at
// every length and around every power of ten.
TEST(WriteIntegerTest, WritesWhatToCharsWrites) {
  std::vector<uint64_t> values = {0,
                                  1,
                                  9,
                                  10,
                                  99,
                                  100,
                                  UINT64_MAX,
                                  UINT64_MAX - 1,
                                  uint64_t{INT64_MAX},
                                  uint64_t{INT64_MAX} + 1};
  for (uint64_t p = 1; p <= UINT64_MAX / 10; p *= 10) {
    for (uint64_t d : {p * 10 - 1, p * 10, p * 10 + 1, p * 2, p * 5 + 3}) values.push_back(d);
  }
  std::mt19937_64 rng(7);
  for (int i = 0; i < 300'000; ++i) {
    values.push_back(rng() >> (rng() % 64));  // every length about equally often
  }
  int mismatches = 0;
  for (uint64_t v : values) {
    char buf[64];
    std::memset(buf, 'x', sizeof buf);
    std::string got(buf, WriteUnsigned(buf, v));
    if (got != IntToChars(v) && ++mismatches <= 10) {
      ADD_FAILURE() << "WriteUnsigned(" << IntToChars(v) << ") wrote " << got;
    }
    for (int64_t s : {static_cast<int64_t>(v), -static_cast<int64_t>(v >> 1), INT64_MIN}) {
      std::string signed_got(buf, WriteSigned(buf, s));
      if (signed_got != IntToChars(s) && ++mismatches <= 10) {
        ADD_FAILURE() << "WriteSigned(" << IntToChars(s) << ") wrote " << signed_got;
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
}

// The history hot path writes exactly what the general encoder (to_chars, to_string)
// writes for the same point: keys of every length (the prefix is copied 16 bytes at a
// time), values of every kind, negative and extreme integers, with and without a comma.
TEST(MetricPointJsonWriterTest, WritesWhatAppendMetricJsonWrites) {
  std::vector<std::string> keys = {"",
                                   "a",
                                   "loss",
                                   "train/loss",
                                   "a key with \"quotes\" and \\",
                                   std::string(15, 'k'),
                                   std::string(16, 'k'),
                                   std::string(17, 'k'),
                                   std::string(250, 'q')};
  std::vector<double> values = {0.0,
                                -0.0,
                                1.0,
                                2.5,
                                -12.75,
                                123456.789,
                                1e300,
                                -1e-300,
                                0.001234,
                                std::numeric_limits<double>::quiet_NaN(),
                                std::numeric_limits<double>::infinity(),
                                -std::numeric_limits<double>::infinity(),
                                std::numeric_limits<double>::max(),
                                std::numeric_limits<double>::denorm_min()};
  std::mt19937_64 rng(11);
  for (int i = 0; i < 2000; ++i) {
    uint64_t bits = rng();
    double v;
    std::memcpy(&v, &bits, sizeof v);
    values.push_back(v);
    values.push_back(static_cast<double>(rng() % 100'000'000) / std::pow(10.0, rng() % 12));
  }
  std::vector<int64_t> integers = {0, 1, -1, 1'700'000'000'000, INT64_MAX, INT64_MIN, 42};
  for (const std::string& key : keys) {
    const MetricPointJsonWriter writer(json::serialize(json::string(key)));
    JsonTextBuffer out;
    std::string want;
    for (size_t i = 0; i < values.size(); ++i) {
      tracking::Metric m;
      m.key = key;
      m.value = values[i];
      m.timestamp = integers[i % integers.size()];
      m.step = integers[(i / integers.size() + i) % integers.size()];
      const bool comma = i % 3 != 0;
      writer.Append(out, m.value, m.timestamp, m.step, comma);
      if (comma) want += ',';
      AppendMetricJson(want, m, false);
    }
    EXPECT_EQ(out.Take(), want) << "key " << key;
  }
}

}  // namespace
}  // namespace trainyard::api
