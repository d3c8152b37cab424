#include "trainyard/serving/endpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "trainyard/common/clock.h"
#include "trainyard/testing/status_matchers.h"

namespace trainyard::serving {
namespace {

using ::testing::HasSubstr;

Status Decode(std::string_view text, EndpointConfig& config) {
  auto body = ParseJsonObject(text);
  if (!body.ok()) return body.status();
  return DecodeEndpointConfig(*body, config);
}

std::string ErrorOf(std::string_view text) {
  EndpointConfig config;
  Status s = Decode(text, config);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << text;
  return s.message();
}

TEST(EndpointConfigTest, OneEntityGetsAllTheTrafficAndADefaultName) {
  EndpointConfig c;
  TY_ASSERT_OK(
      Decode(R"({"served_entities": [{"model": "main.s.intent", "alias": "champion"}]})", c));
  ASSERT_EQ(c.served_entities.size(), 1u);
  EXPECT_EQ(c.served_entities[0].name, "main-s-intent-champion");
  ASSERT_EQ(c.routes.size(), 1u);
  EXPECT_EQ(c.routes[0].served_entity, "main-s-intent-champion");
  EXPECT_EQ(c.routes[0].percent, 100);
}

TEST(EndpointConfigTest, DatabricksSpellingsAreAccepted) {
  EndpointConfig c;
  TY_ASSERT_OK(Decode(R"({"served_entities": [
      {"name": "a", "entity_name": "m", "entity_version": "1"},
      {"name": "b", "entity_name": "m", "entity_version": 2}],
    "traffic_config": {"routes": [{"served_model_name": "a", "traffic_percentage": 80},
                                  {"served_model_name": "b", "traffic_percentage": 20}]}})",
                      c));
  EXPECT_EQ(*c.served_entities[0].version, 1);
  EXPECT_EQ(c.routes[1].percent, 20);
}

TEST(EndpointConfigTest, ErrorsNameTheField) {
  EXPECT_THAT(ErrorOf(R"({"served_entities": []})"), HasSubstr("served_entities"));
  EXPECT_THAT(ErrorOf(R"({"served_entities": [{"version": 1}]})"),
              HasSubstr("served_entities[0].model"));
  EXPECT_THAT(ErrorOf(R"({"served_entities": [{"model": "m"}]})"), HasSubstr("alias"));
  EXPECT_THAT(ErrorOf(R"({"served_entities": [{"model": "m", "version": 1, "alias": "a"}]})"),
              HasSubstr("both"));
  EXPECT_THAT(ErrorOf(R"({"served_entities": [{"model": "m", "version": 0}]})"),
              HasSubstr("served_entities[0].version"));
  EXPECT_THAT(ErrorOf(R"({"served_entities": [{"model": "m", "version": 1, "flavor": "onnx"}]})"),
              HasSubstr("served_entities[0].flavor"));
  EXPECT_THAT(ErrorOf(R"({"served_entities": [{"model": "m", "version": 1, "nme": "x"}]})"),
              HasSubstr("served_entities[0].nme"));
  EXPECT_THAT(ErrorOf(R"({"served_entities": [{"name": "a", "model": "m", "version": 1},
                                              {"name": "a", "model": "m", "version": 2}]})"),
              HasSubstr("twice"));
  const char* two = R"({"served_entities": [{"name": "a", "model": "m", "version": 1},
                                             {"name": "b", "model": "m", "version": 2}], )";
  EXPECT_THAT(ErrorOf(std::string(two) + R"("routes": []})"), HasSubstr("routes"));
  EXPECT_THAT(ErrorOf(std::string(two) + R"("routes": [{"served_entity": "a", "percent": 60},
                                                       {"served_entity": "b", "percent": 30}]})"),
              HasSubstr("sum to 100 (got 90)"));
  EXPECT_THAT(ErrorOf(std::string(two) + R"("routes": [{"served_entity": "c", "percent": 100}]})"),
              HasSubstr("routes[0].served_entity"));
  EXPECT_THAT(ErrorOf(std::string(two) + R"("routes": [{"served_entity": "a", "percent": 101}]})"),
              HasSubstr("routes[0].percent"));
  EXPECT_THAT(ErrorOf(std::string(two) + R"("routes": [{"served_entity": "a", "percent": 50},
                                                       {"served_entity": "a", "percent": 50}]})"),
              HasSubstr("two routes"));
  EXPECT_THAT(ErrorOf(std::string(two) + R"("routes": [{"served_entity": "a"}]})"),
              HasSubstr("routes[0].percent"));
  const char* one = R"({"served_entities": [{"model": "m", "version": 1}], )";
  EXPECT_THAT(ErrorOf(std::string(one) + R"("min_replicas": 3, "max_replicas": 2})"),
              HasSubstr("min_replicas"));
  EXPECT_THAT(ErrorOf(std::string(one) + R"("max_replicas": 0})"), HasSubstr("max_replicas"));
  EXPECT_THAT(ErrorOf(std::string(one) + R"("scale_to_zero_seconds": -1})"),
              HasSubstr("scale_to_zero_seconds"));
  EXPECT_THAT(ErrorOf(std::string(one) + R"("min_replicas": "many"})"), HasSubstr("min_replicas"));
}

TEST(EndpointConfigTest, UpdateChangesOnlyWhatItNames) {
  EndpointConfig c;
  TY_ASSERT_OK(Decode(R"({"served_entities": [{"model": "m", "version": 1}],
                          "max_replicas": 3, "scale_to_zero_seconds": 30})",
                      c));
  TY_ASSERT_OK(Decode(R"({"min_replicas": 1})", c));
  EXPECT_EQ(c.min_replicas, 1);
  EXPECT_EQ(c.max_replicas, 3);
  EXPECT_EQ(c.scale_to_zero_seconds, 30);
  EXPECT_EQ(c.served_entities[0].name, "m-1");
  // New entities without routes get the default route again.
  TY_ASSERT_OK(Decode(R"({"served_entities": [{"model": "m", "version": 2}]})", c));
  ASSERT_EQ(c.routes.size(), 1u);
  EXPECT_EQ(c.routes[0].served_entity, "m-2");
}

TEST(EndpointConfigTest, JsonRoundTrip) {
  EndpointConfig c;
  TY_ASSERT_OK(Decode(R"({"served_entities": [{"name": "a", "model": "m", "version": 1},
                                              {"name": "b", "model": "m", "alias": "new",
                                               "flavor": "llm"}],
                          "routes": [{"served_entity": "a", "percent": 70},
                                     {"served_entity": "b", "percent": 30}],
                          "min_replicas": 1, "max_replicas": 4, "target_concurrency": 8})",
                      c));
  EndpointConfig again;
  TY_ASSERT_OK(DecodeEndpointConfig(EndpointConfigToJson(c), again));
  EXPECT_EQ(json::serialize(EndpointConfigToJson(again)), json::serialize(EndpointConfigToJson(c)));
}

TEST(EndpointNameTest, Rules) {
  TY_EXPECT_OK(ValidateEndpointName("intent-v2_a"));
  EXPECT_FALSE(ValidateEndpointName("").ok());
  EXPECT_FALSE(ValidateEndpointName("-lead").ok());
  EXPECT_FALSE(ValidateEndpointName("a b").ok());
  EXPECT_FALSE(ValidateEndpointName("a/b").ok());
  EXPECT_FALSE(ValidateEndpointName(std::string(64, 'a')).ok());
}

TEST(PickRouteTest, SplitsByPercentAndSkipsZero) {
  std::vector<TrafficRoute> routes = {{"a", 70}, {"off", 0}, {"b", 30}};
  EXPECT_EQ(PickRoute(routes, 0.0), 0u);
  EXPECT_EQ(PickRoute(routes, 69.99), 0u);
  EXPECT_EQ(PickRoute(routes, 70.0), 2u);
  EXPECT_EQ(PickRoute(routes, 99.99), 2u);
  SeededRandom random(7);
  std::map<size_t, int> counts;
  const int n = 100000;
  for (int i = 0; i < n; ++i) {
    double draw = static_cast<double>(random.Next64() >> 11) * 0x1.0p-53 * 100.0;
    ++counts[PickRoute(routes, draw)];
  }
  EXPECT_EQ(counts.count(1), 0u);
  EXPECT_NEAR(counts[0] / static_cast<double>(n), 0.7, 0.01);
}

TEST(EndpointConfigTest, RateLimitsDecodeRoundTripAndAreReplacedWhole) {
  EndpointConfig c;
  TY_ASSERT_OK(Decode(R"({"served_entities": [{"model": "m", "version": 1}],
      "rate_limits": [{"key": "endpoint", "queries_per_minute": 1000},
                      {"key": "user", "queries_per_minute": 10, "tokens_per_minute": 5000},
                      {"key": "user", "principal": "alice", "queries_per_minute": 2},
                      {"key": "group", "principal": "team", "tokens_per_minute": 100}]})",
                      c));
  ASSERT_EQ(c.rate_limits.size(), 4u);
  EXPECT_EQ(c.rate_limits[1].key, RateLimitKey::kUser);
  EXPECT_EQ(c.rate_limits[1].tokens_per_minute, 5000);
  EXPECT_EQ(DescribeRateLimit(c.rate_limits[1]), "per user: 10 queries/min, 5000 tokens/min");
  EXPECT_EQ(DescribeRateLimit(c.rate_limits[3]), "group team: 100 tokens/min");
  EndpointConfig again;
  TY_ASSERT_OK(DecodeEndpointConfig(EndpointConfigToJson(c), again));
  EXPECT_EQ(json::serialize(EndpointConfigToJson(again)), json::serialize(EndpointConfigToJson(c)));
  // An update without rate_limits keeps them; an empty list removes them.
  TY_ASSERT_OK(Decode(R"({"min_replicas": 1})", c));
  EXPECT_EQ(c.rate_limits.size(), 4u);
  TY_ASSERT_OK(Decode(R"({"rate_limits": []})", c));
  EXPECT_TRUE(c.rate_limits.empty());
}

TEST(EndpointConfigTest, BadRateLimitsNameTheField) {
  auto with = [](const std::string& limits) {
    return ErrorOf(R"({"served_entities": [{"model": "m", "version": 1}], "rate_limits": )" +
                   limits + "}");
  };
  EXPECT_THAT(with(R"([{"key": "user", "calls": 3}])"),
              HasSubstr("rate_limits[0].calls is not a field of a rate limit"));
  EXPECT_THAT(with(R"([{"key": "org", "queries_per_minute": 3}])"),
              HasSubstr("rate_limits[0].key must be endpoint, user or group"));
  EXPECT_THAT(with(R"([{"queries_per_minute": 3}])"), HasSubstr("rate_limits[0].key is required"));
  EXPECT_THAT(with(R"([{"key": "user", "queries_per_minute": 0}])"),
              HasSubstr("rate_limits[0].queries_per_minute must be between 1 and 1000000"));
  EXPECT_THAT(with(R"([{"key": "user", "tokens_per_minute": -5}])"),
              HasSubstr("rate_limits[0].tokens_per_minute must be between 1 and 1000000000"));
  EXPECT_THAT(with(R"([{"key": "user", "queries_per_minute": 1e30}])"),
              HasSubstr("rate_limits[0].queries_per_minute"));
  EXPECT_THAT(with(R"([{"key": "user", "queries_per_minute": 99999999999}])"),
              HasSubstr("rate_limits[0].queries_per_minute must be between"));
  EXPECT_THAT(with(R"([{"key": "user"}])"),
              HasSubstr("rate_limits[0] needs queries_per_minute or tokens_per_minute"));
  EXPECT_THAT(with(R"([{"key": "group", "queries_per_minute": 3}])"),
              HasSubstr("rate_limits[0].principal is required for a group limit"));
  EXPECT_THAT(with(R"([{"key": "endpoint", "principal": "a", "queries_per_minute": 3}])"),
              HasSubstr("rate_limits[0].principal is not taken by an endpoint limit"));
  EXPECT_THAT(
      with(
          R"([{"key": "user", "queries_per_minute": 3}, {"key": "user", "tokens_per_minute": 3}])"),
      HasSubstr("rate_limits[1] repeats the limit for user"));
  EXPECT_THAT(with(R"({"key": "user"})"), HasSubstr("rate_limits"));
  EXPECT_THAT(with(R"([7])"), HasSubstr("rate_limits[0] must be an object"));
}

TEST(EndpointConfigTest, ReplicaResourcesDecodeRoundTripAndKeepWhatAnUpdateOmits) {
  EndpointConfig c;
  EXPECT_EQ(c.resources.gpus, 0);
  EXPECT_EQ(c.resources.cpus, 1);
  TY_ASSERT_OK(Decode(R"({"served_entities": [{"model": "m", "version": 1}],
                          "resources": {"gpus": 2, "cpus": 8, "memory": "16Gi"}})",
                      c));
  EXPECT_EQ(c.resources.gpus, 2);
  EXPECT_EQ(c.resources.cpus, 8);
  EXPECT_EQ(c.resources.memory_bytes, int64_t{16} << 30);
  EndpointConfig back;
  TY_ASSERT_OK(DecodeEndpointConfig(EndpointConfigToJson(c), back));
  EXPECT_EQ(back.resources.gpus, 2);
  EXPECT_EQ(back.resources.memory_bytes, int64_t{16} << 30);
  TY_ASSERT_OK(Decode(R"({"resources": {"cpus": 2}})", back));
  EXPECT_EQ(back.resources.gpus, 2);
  EXPECT_EQ(back.resources.cpus, 2);
  TY_ASSERT_OK(Decode(R"({"resources": {"memory": 1000}})", back));
  EXPECT_EQ(back.resources.memory_bytes, 1000);
  TY_ASSERT_OK(Decode(R"({"resources": {"memory": "2G"}})", back));
  EXPECT_EQ(back.resources.memory_bytes, 2'000'000'000);
}

TEST(EndpointConfigTest, BadReplicaResourcesNameTheField) {
  auto with = [](const std::string& resources) {
    EndpointConfig c;
    return Decode(R"({"served_entities": [{"model": "m", "version": 1}], "resources": )" +
                      resources + "}",
                  c)
        .message();
  };
  EXPECT_THAT(with(R"({"gpus": -1})"),
              HasSubstr("resources.gpus must be an integer between 0 and 64"));
  EXPECT_THAT(with(R"({"gpus": "two"})"), HasSubstr("gpus"));
  EXPECT_THAT(with(R"({"cpus": 0})"), HasSubstr("resources.cpus must be an integer between 1"));
  EXPECT_THAT(with(R"({"memory": "lots"})"), HasSubstr("resources.memory must be a size"));
  EXPECT_THAT(with(R"({"memory": "99999999999999999Gi"})"), HasSubstr("resources.memory"));
  EXPECT_THAT(with(R"({"memory": -5})"), HasSubstr("resources.memory"));
  EXPECT_THAT(with(R"({"gpu": 1})"), HasSubstr("resources.gpu is not a field of resources"));
  EXPECT_THAT(with(R"(4)"), HasSubstr("resources must be an object"));
}

TEST(EndpointConfigTest, ProjectDefaultsRoundTripsAndIsCheckedForShape) {
  EndpointConfig c;
  EXPECT_EQ(c.project, "default");
  TY_ASSERT_OK(Decode(R"({"served_entities": [{"model": "m", "version": 1}],
                          "project": "nlp.team-1"})",
                      c));
  EXPECT_EQ(c.project, "nlp.team-1");
  EndpointConfig back;
  TY_ASSERT_OK(DecodeEndpointConfig(EndpointConfigToJson(c), back));
  EXPECT_EQ(back.project, "nlp.team-1");
  TY_ASSERT_OK(Decode(R"({"min_replicas": 1})", back));  // an update that omits it keeps it
  EXPECT_EQ(back.project, "nlp.team-1");
  EXPECT_THAT(ErrorOf(R"({"project": ""})"), HasSubstr("project must be 1-128"));
  EXPECT_THAT(ErrorOf(R"({"project": "a b"})"), HasSubstr("project must be"));
  EXPECT_THAT(ErrorOf(R"({"project": "../x"})"), HasSubstr("project must be"));
  EXPECT_THAT(ErrorOf(R"({"project": 7})"), HasSubstr("project"));
}

TEST(EndpointConfigTest, CaptureTableIsDecodedKeptAndCleared) {
  EndpointConfig c;
  TY_ASSERT_OK(Decode(R"({"served_entities": [{"model": "m", "version": 1}],
                          "capture": {"table": "main.serving.requests"}})",
                      c));
  EXPECT_EQ(c.capture_table, "main.serving.requests");
  json::object stored = EndpointConfigToJson(c);
  EXPECT_EQ(stored.at("capture").as_object().at("table").as_string(), "main.serving.requests");
  // Stored and read back; an update that does not name it keeps it.
  EndpointConfig back;
  TY_ASSERT_OK(DecodeEndpointConfig(stored, back));
  EXPECT_EQ(back.capture_table, "main.serving.requests");
  TY_ASSERT_OK(Decode(R"({"min_replicas": 0})", back));
  EXPECT_EQ(back.capture_table, "main.serving.requests");
  TY_ASSERT_OK(Decode(R"({"capture": null})", back));
  EXPECT_EQ(back.capture_table, "");
  EXPECT_FALSE(EndpointConfigToJson(back).contains("capture"));
}

TEST(EndpointConfigTest, BadCaptureTablesNameTheField) {
  const char* entities = R"("served_entities": [{"model": "m", "version": 1}])";
  auto with = [&](const std::string& capture) {
    return ErrorOf("{" + std::string(entities) + ", \"capture\": " + capture + "}");
  };
  EXPECT_THAT(with(R"({"table": "main.requests"})"), HasSubstr("capture.table"));
  EXPECT_THAT(with(R"({"table": "a..b"})"), HasSubstr("capture.table"));
  EXPECT_THAT(with(R"({"table": "a.b.c.d"})"), HasSubstr("capture.table"));
  EXPECT_THAT(with(R"({"table": "a.b/x.c"})"), HasSubstr("capture.table"));
  EXPECT_THAT(with(R"({"table": 3})"), HasSubstr("capture.table"));
  EXPECT_THAT(with(R"({"tabel": "a.b.c"})"), HasSubstr("capture.tabel"));
  EXPECT_THAT(with(R"("a.b.c")"), HasSubstr("capture"));
}

}  // namespace
}  // namespace trainyard::serving
