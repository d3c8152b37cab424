#include "trainyard/api/log_batch_decoder.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

namespace trainyard::api {
namespace {

// The DOM path's answer for a body: what the server answered before the fast decoder.
Result<LogBatchRequest> Dom(std::string_view body) {
  TY_ASSIGN_OR_RETURN(json::object o, ParseJsonObject(body));
  return DecodeLogBatch(o);
}

bool SameDouble(double a, double b) {
  return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, sizeof a) == 0;
}

void ExpectSame(const LogBatchRequest& a, const LogBatchRequest& b) {
  EXPECT_EQ(a.run_id, b.run_id);
  ASSERT_EQ(a.metrics.size(), b.metrics.size());
  for (size_t i = 0; i < a.metrics.size(); ++i) {
    const auto &x = a.metrics[i], &y = b.metrics[i];
    EXPECT_EQ(x.key, y.key) << i;
    EXPECT_TRUE(SameDouble(x.value, y.value)) << i << ": " << x.value << " vs " << y.value;
    EXPECT_EQ(x.timestamp, y.timestamp) << i;
    EXPECT_EQ(x.step, y.step) << i;
    EXPECT_EQ(x.model_id, y.model_id) << i;
    EXPECT_EQ(x.dataset_name, y.dataset_name) << i;
    EXPECT_EQ(x.dataset_digest, y.dataset_digest) << i;
  }
  ASSERT_EQ(a.params.size(), b.params.size());
  for (size_t i = 0; i < a.params.size(); ++i) {
    EXPECT_EQ(a.params[i].key, b.params[i].key);
    EXPECT_EQ(a.params[i].value, b.params[i].value);
  }
  ASSERT_EQ(a.tags.size(), b.tags.size());
  for (size_t i = 0; i < a.tags.size(); ++i) {
    EXPECT_EQ(a.tags[i].key, b.tags[i].key);
    EXPECT_EQ(a.tags[i].value, b.tags[i].value);
  }
}

// Bodies the fast decoder must take, giving what the DOM path gives.
TEST(LogBatchDecoderTest, FastMatchesDomOnWellFormedBodies) {
  const char* bodies[] = {
      R"({"run_id":"r1","metrics":[{"key":"loss","value":0.25,"timestamp":1700000000000,"step":3}]})",
      R"({"run_id":"r1","metrics":[{"key":"a","value":1,"timestamp":"17","step":"-4"},
          {"step":null,"timestamp":2.0,"value":"NaN","key":"b"},
          {"key":"c","value":"-Infinity","timestamp":18446744073709551,"model_id":"m-1",
           "dataset_name":"train","dataset_digest":null}]})",
      // Doubles correctly rounded from their text, as ParseJsonExact does.
      R"({"run_id":"r","metrics":[{"key":"x","value":0.1000000000000000055511151231257827,
          "timestamp":1},{"key":"x","value":2.2250738585072011e-308,"timestamp":1},
          {"key":"x","value":1e400,"timestamp":1},{"key":"x","value":-0.0,"timestamp":1},
          {"key":"x","value":123456789012345678901234567890,"timestamp":1}]})",
      R"({"run_uuid":"old","metrics":[]})",
      R"({"run_id":"","run_uuid":"old"})",
      R"({"run_id":"r","metrics":null,"params":[{"key":"lr","value":"0.1"},{"key":"e"},
          {"key":"n","value":null}],"tags":[{"value":"v","key":"mlflow.runName"}]})",
      // Unknown fields are ignored, nested or not.
      R"({"experiment_id":"0","run_id":"r","extra":{"a":[1,{"b":[]}]},"metrics":[
          {"key":"k","value":1.5,"timestamp":2,"run_id":"r","more":[[{}]],"x":null}],
          "params":[{"key":"p","value":"v","z":{"key":1}}]})",
      // Escapes and long strings.
      R"({"run_id":"r\u0031","metrics":[{"key":"a\/b \"q\" \u00e9","value":1,"timestamp":1}]})",
      " \n{\"run_id\" : \"r\" , \"metrics\" : [ ] }\n ",
  };
  for (const char* body : bodies) {
    SCOPED_TRACE(body);
    auto dom = Dom(body);
    ASSERT_TRUE(dom.ok()) << dom.status().ToString();
    auto fast = DecodeLogBatchFast(body);
    ASSERT_TRUE(fast.has_value());
    ExpectSame(*fast, *dom);
  }
}

TEST(LogBatchDecoderTest, FastTakesLongStringsAndManyMetrics) {
  std::string key(5000, 'k');
  key[17] = '"';
  std::string body = R"({"run_id":"r","metrics":[)";
  for (int i = 0; i < 1000; ++i) {
    if (i) body += ',';
    body += R"({"key":")" + json::serialize(json::string(key)).substr(1);
    body.pop_back();
    body += R"(","value":)" + std::to_string(i * 0.37) + R"(,"timestamp":)" + std::to_string(i) +
            R"(,"step":)" + std::to_string(i) + "}";
  }
  body += "]}";
  auto dom = Dom(body);
  ASSERT_TRUE(dom.ok()) << dom.status().ToString();
  auto fast = DecodeLogBatchFast(body);
  ASSERT_TRUE(fast.has_value());
  ASSERT_EQ(fast->metrics.size(), 1000u);
  EXPECT_EQ(fast->metrics[5].key, key);
  ExpectSame(*fast, *dom);
}

// Bodies the fast decoder must leave to the DOM path: every error and every case whose
// answer it does not reproduce itself.
TEST(LogBatchDecoderTest, FastDeclinesWhatTheDomPathMustAnswer) {
  const char* bodies[] = {
      "",
      "not json",
      "[]",
      "\"r\"",
      R"({"run_id":"r","metrics":[]} x)",
      R"({"run_id":"r","metrics":[{"key":"a","value":1,"timestamp":1}])",  // truncated
      R"({"metrics":[]})",                                                 // no run id
      R"({"run_id":"","metrics":[]})",
      R"({"run_id":7})",
      R"({"run_id":"r","run_uuid":5})",
      R"({"run_id":"r","metrics":{}})",
      R"({"run_id":"r","metrics":"x"})",
      R"({"run_id":"r","metrics":[1]})",
      R"({"run_id":"r","metrics":[[]]})",
      R"({"run_id":"r","metrics":[{"value":1,"timestamp":1}]})",
      R"({"run_id":"r","metrics":[{"key":"a","timestamp":1}]})",
      R"({"run_id":"r","metrics":[{"key":"a","value":1}]})",
      R"({"run_id":"r","metrics":[{"key":"a","value":null,"timestamp":1}]})",
      R"({"run_id":"r","metrics":[{"key":"a","value":"abc","timestamp":1}]})",
      R"({"run_id":"r","metrics":[{"key":"a","value":true,"timestamp":1}]})",
      R"({"run_id":"r","metrics":[{"key":"a","value":1,"timestamp":1.5}]})",
      R"({"run_id":"r","metrics":[{"key":"a","value":1,"timestamp":18446744073709551615}]})",
      R"({"run_id":"r","metrics":[{"key":"a","value":1,"timestamp":"x"}]})",
      R"({"run_id":"r","metrics":[{"key":"a","value":1,"timestamp":1,"step":[]}]})",
      R"({"run_id":"r","metrics":[{"key":1,"value":1,"timestamp":1}]})",
      R"({"run_id":"r","metrics":[{"key":"a","value":1,"timestamp":1,"model_id":3}]})",
      R"({"run_id":"r","metrics":[{"key":"a","key":"b","value":1,"timestamp":1}]})",
      R"({"run_id":"r","run_id":"s"})",
      R"({"run_id":"r","params":[{"value":"v"}]})",
      R"({"run_id":"r","params":[{"key":"k","value":1}]})",
      R"({"run_id":"r","tags":["k"]})",
      R"({"run_id":"r","tags":{"k":"v"}})",
  };
  for (const char* body : bodies) {
    SCOPED_TRACE(body);
    EXPECT_FALSE(DecodeLogBatchFast(body).has_value());
  }
}

// Random edits of valid bodies: whatever the fast decoder takes, the DOM path takes too and
// reads the same way (it declines the rest, which the DOM path then answers).
TEST(LogBatchDecoderTest, FastAgreesWithDomOnMutatedBodies) {
  const std::string seeds[] = {
      R"({"run_id":"r1","metrics":[{"key":"loss","value":0.25,"timestamp":1700000000000,)"
      R"("step":3},{"key":"acc","value":"NaN","timestamp":"17","step":null,"model_id":"m"}],)"
      R"("params":[{"key":"lr","value":"0.1"}],"tags":[{"key":"t","value":null}]})",
      R"({"run_uuid":"u","run_id":"","metrics":[{"step":-1,"timestamp":2.0,"value":-1e-7,)"
      R"("key":"k\u00e9","extra":{"a":[1,2,{}]}}],"other":[true,false,null]})",
  };
  const std::string tokens[] = {"{",
                                "}",
                                "[",
                                "]",
                                ",",
                                ":",
                                "\"",
                                "null",
                                "1",
                                "-0.5e3",
                                "\"x\"",
                                "true",
                                "key",
                                "value",
                                "step",
                                "run_id",
                                "metrics",
                                "\"NaN\"",
                                "18446744073709551616",
                                " "};
  std::mt19937 rng(7);
  int taken = 0;
  for (int i = 0; i < 40000; ++i) {
    std::string body = seeds[static_cast<size_t>(i) % std::size(seeds)];
    int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      size_t at = rng() % (body.size() + 1);
      switch (rng() % 3) {
        case 0:  // delete a few bytes
          body.erase(at, 1 + rng() % 4);
          break;
        case 1:  // insert a token
          body.insert(at, tokens[rng() % std::size(tokens)]);
          break;
        default:  // replace a byte
          if (at < body.size()) body[at] = static_cast<char>(32 + rng() % 95);
      }
    }
    auto fast = DecodeLogBatchFast(body);
    if (!fast) continue;
    ++taken;
    SCOPED_TRACE(body);
    auto dom = Dom(body);
    ASSERT_TRUE(dom.ok()) << dom.status().ToString();
    ExpectSame(*fast, *dom);
  }
  EXPECT_GT(taken, 1000);  // the edits leave many bodies valid: the comparison ran
}

}  // namespace
}  // namespace trainyard::api
