// Serving endpoints' value types and their pure rules: what an endpoint is (served
// entities, traffic routes, replica bounds, scale to zero), the validation that names the
// field at fault, the JSON form they are stored and sent in, and the traffic split.
//
// A served entity is one registered model version, named by number or by alias; an alias
// is resolved each time a replica starts. Its flavor says which program serves it:
// `llm` (a Hugging Face directory, served by trainyard-serve-model) or `pyfunc` (an MLflow
// model, served by its own `mlflow models serve`); "" = decided from the version's files.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "trainyard/common/json.h"
#include "trainyard/common/status.h"

namespace trainyard::serving {

enum class Flavor { kLlm, kPyfunc };
std::string_view FlavorName(Flavor f);  // "llm", "pyfunc"
Result<Flavor> ParseFlavor(std::string_view text, std::string_view field);

struct ServedEntity {
  std::string name;   // unique within its endpoint; default "<model>-<version|alias>"
  std::string model;  // registered model name
  std::optional<int64_t> version;
  std::string alias;   // exactly one of version and alias
  std::string flavor;  // "llm", "pyfunc" or "" (decided from the files)
};

struct TrafficRoute {
  std::string served_entity;
  int percent = 0;
};

// A rate limit (Databricks AI Gateway's): queries and/or tokens (prompt + completion, from
// the replica's `usage`) per minute. `key` says whom it counts: the endpoint as a whole, each
// user (every user with their own budget, or one named user), or one named group (one
// budget shared by all its members). Every limit that applies to a request is checked, so
// the most restrictive one refuses it. 0 = no limit of that kind.
enum class RateLimitKey { kEndpoint, kUser, kGroup };
std::string_view RateLimitKeyName(RateLimitKey k);  // "endpoint", "user", "group"

struct RateLimit {
  RateLimitKey key = RateLimitKey::kEndpoint;
  std::string principal;  // kUser: one user ("" = each user); kGroup: the group (required)
  int64_t queries_per_minute = 0;
  int64_t tokens_per_minute = 0;
};

// What each replica of an endpoint asks the job scheduler for (every replica of every served
// entity asks the same): it is placed on the training pool and counts against the same
// capacity, quotas and fair share as a training job.
struct ReplicaResources {
  int gpus = 0;
  int cpus = 1;
  int64_t memory_bytes = 0;  // 0 = no requirement
};

struct EndpointConfig {
  std::vector<ServedEntity> served_entities;
  std::vector<TrafficRoute> routes;  // percents sum to 100
  int min_replicas = 0;              // per served entity
  int max_replicas = 1;
  int64_t scale_to_zero_seconds = 600;  // idle time before the last replica stops; 0 = never
  // Requests in flight per replica above which another replica is started (up to max).
  int target_concurrency = 4;
  std::vector<RateLimit> rate_limits;
  // Request capture into a catalog table ("inference tables"): "catalog.schema.table", or ""
  // for the JSON lines only. Written as the endpoint's owner (CREATE TABLE on the schema
  // while it does not exist, MODIFY on it once it does).
  std::string capture_table;
  ReplicaResources resources;
  // The project the replicas count against (quotas, fair share, priority ceiling), as a
  // training job's `project`: the owner must be allowed to submit to it.
  std::string project = "default";
};

struct Endpoint {
  std::string name;
  std::string owner;
  int64_t created_at = 0;
  int64_t updated_at = 0;
  EndpointConfig config;
};

struct EndpointLimits {
  size_t max_served_entities = 10;
  int max_replicas = 16;
  int64_t max_scale_to_zero_seconds = 7 * 24 * 3600;
  size_t max_rate_limits = 20;
  int64_t max_queries_per_minute = 1'000'000;
  int64_t max_tokens_per_minute = 1'000'000'000;
  int max_replica_gpus = 64;
  int max_replica_cpus = 1024;
};

// Endpoint names: 1-63 of [A-Za-z0-9_-], starting with a letter or digit.
Status ValidateEndpointName(std::string_view name);

// Decodes the fields of a create or update body into `config`; fields absent are left as
// they are (an update changes only what it names). Fills default entity names and, for a
// single entity without routes, a route of 100. InvalidArgument naming the field otherwise.
Status DecodeEndpointConfig(const json::object& body, EndpointConfig& config,
                            const EndpointLimits& limits = {});
// `resources`: {"gpus": 1, "cpus": 4, "memory": "16Gi"} (memory: bytes, or a number with
// Ki/Mi/Gi/Ti or K/M/G/T); fields absent keep their values. InvalidArgument naming
// resources.<field>. Called by DecodeEndpointConfig.
Status DecodeReplicaResources(const json::object& body, ReplicaResources& resources,
                              const EndpointLimits& limits = {});
// Checks the whole configuration (routes name entities, sum to 100, bounds).
Status ValidateEndpointConfig(const EndpointConfig& config, const EndpointLimits& limits = {});

// `capture`: {"table": "catalog.schema.table"} (null, {} or a "" table: capture into no
// table). InvalidArgument naming capture.table for a name that is not three-level.
Status DecodeCaptureConfig(const json::object& body, EndpointConfig& config);

json::object EndpointConfigToJson(const EndpointConfig& config);
json::object RateLimitToJson(const RateLimit& limit);
// "user:alice 100 queries/min" (for messages and the CLI).
std::string DescribeRateLimit(const RateLimit& limit);

// Which served entity a request goes to: `draw` is uniform in [0, 100). Routes of 0% are
// never chosen. Returns the index of the route.
size_t PickRoute(const std::vector<TrafficRoute>& routes, double draw);

}  // namespace trainyard::serving
