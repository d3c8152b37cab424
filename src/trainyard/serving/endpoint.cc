#include "trainyard/serving/endpoint.h"

#include <cctype>
#include <limits>
#include <optional>
#include <set>
#include <tuple>

#include "trainyard/common/strings.h"

namespace trainyard::serving {
namespace {

Status Invalid(const std::string& field, const std::string& what) {
  return Status::InvalidArgument(field + " " + what);
}

// The shape of a project name, as jobs' specs take it (whether the owner may use the project
// is the server's check_project).
Status ValidateProjectField(const std::string& project) {
  constexpr size_t kMaxBytes = 128;
  bool ok = !project.empty() && project.size() <= kMaxBytes;
  for (char c : project) {
    ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.');
  }
  if (ok) return Status::Ok();
  return Invalid("project", "must be 1-" + std::to_string(kMaxBytes) +
                                " letters, digits, '_', '-' or '.' (a project from "
                                "'trainyard projects list')");
}

Result<int> BoundedInt(const json::object& o, std::string_view field, int64_t lo, int64_t hi,
                       int fallback) {
  TY_ASSIGN_OR_RETURN(auto v, OptionalInt64(o, field));
  if (!v) return fallback;
  if (*v < lo || *v > hi) {
    return Invalid(std::string(field), "must be between " + std::to_string(lo) + " and " +
                                           std::to_string(hi) + " (got " + std::to_string(*v) +
                                           ")");
  }
  return static_cast<int>(*v);
}

// "16Gi", "512Mi", "2G", "1000000": bytes; nullopt when it is not such a size.
std::optional<int64_t> ParseSize(std::string_view text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  if (digits == 0 || digits > 15) return std::nullopt;
  int64_t n = std::stoll(std::string(text.substr(0, digits)));
  std::string_view unit = text.substr(digits);
  static constexpr std::pair<std::string_view, int64_t> kUnits[] = {
      {"", 1},
      {"K", 1000},
      {"M", 1000 * 1000},
      {"G", 1000 * 1000 * 1000},
      {"T", int64_t{1000} * 1000 * 1000 * 1000},
      {"Ki", 1024},
      {"Mi", 1024 * 1024},
      {"Gi", 1024 * 1024 * 1024},
      {"Ti", int64_t{1024} * 1024 * 1024 * 1024}};
  for (const auto& [name, factor] : kUnits) {
    if (unit != name) continue;
    if (n > std::numeric_limits<int64_t>::max() / factor) return std::nullopt;
    return n * factor;
  }
  return std::nullopt;
}

Result<ServedEntity> DecodeEntity(const json::value& v, size_t i) {
  std::string field = "served_entities[" + std::to_string(i) + "]";
  if (!v.is_object()) return Invalid(field, "must be an object (got " + DescribeJson(v) + ")");
  const json::object& o = v.as_object();
  for (const auto& kv : o) {
    std::string_view k = kv.key();
    if (k != "name" && k != "model" && k != "version" && k != "alias" && k != "flavor" &&
        k != "entity_name" && k != "entity_version") {
      return Invalid(field + "." + std::string(k),
                     "is not a field of a served entity (name, model, version, alias, flavor)");
    }
  }
  ServedEntity e;
  TY_ASSIGN_OR_RETURN(auto model, OptionalString(o, "model"));
  if (!model) {
    // Databricks' spelling.
    TY_ASSIGN_OR_RETURN(auto entity_name, OptionalString(o, "entity_name"));
    model = entity_name;
  }
  if (!model || model->empty()) {
    return Invalid(field + ".model", "is required: the registered model's name");
  }
  e.model = *model;
  auto version_field = o.contains("version") ? "version" : "entity_version";
  if (o.contains(version_field) && !o.at(version_field).is_null()) {
    auto version = AsInt64(o.at(version_field), field + "." + version_field);
    if (!version.ok()) return version.status();
    if (*version < 1) return Invalid(field + ".version", "must be a positive integer");
    e.version = *version;
  }
  TY_ASSIGN_OR_RETURN(auto alias, OptionalString(o, "alias"));
  if (alias) e.alias = *alias;
  if (e.version && !e.alias.empty()) {
    return Invalid(field, "names both a version and an alias: give one of them");
  }
  if (!e.version && e.alias.empty()) {
    return Invalid(field,
                   "needs a version (e.g. \"version\": 1) or an alias (\"alias\": "
                   "\"champion\")");
  }
  TY_ASSIGN_OR_RETURN(auto flavor, OptionalString(o, "flavor"));
  if (flavor && !flavor->empty()) {
    TY_RETURN_IF_ERROR(ParseFlavor(*flavor, field + ".flavor").status());
    e.flavor = *flavor;
  }
  TY_ASSIGN_OR_RETURN(auto name, OptionalString(o, "name"));
  if (name) {
    e.name = *name;
  } else {
    std::string model_part = e.model;
    for (char& c : model_part) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') c = '-';
    }
    e.name = model_part + "-" + (e.version ? std::to_string(*e.version) : e.alias);
  }
  if (Status s = ValidateEndpointName(e.name); !s.ok()) {
    return Invalid(field + ".name", "'" + Abbreviate(e.name) +
                                        "' is not a valid served entity name: use 1-63 letters, "
                                        "digits, '-' or '_'");
  }
  return e;
}

Result<int64_t> PerMinute(const json::object& o, std::string_view key, const std::string& field,
                          int64_t max) {
  auto it = o.find(key);
  if (it == o.end() || it->value().is_null()) return int64_t{0};
  std::string f = field + "." + std::string(key);
  TY_ASSIGN_OR_RETURN(int64_t v, AsInt64(it->value(), f));
  if (v < 1 || v > max) {
    return Invalid(f, "must be between 1 and " + std::to_string(max) + " per minute (got " +
                          std::to_string(v) + "); leave it out for no limit");
  }
  return v;
}

Result<RateLimit> DecodeRateLimit(const json::value& v, size_t i, const EndpointLimits& limits) {
  std::string field = "rate_limits[" + std::to_string(i) + "]";
  if (!v.is_object()) return Invalid(field, "must be an object (got " + DescribeJson(v) + ")");
  const json::object& o = v.as_object();
  for (const auto& kv : o) {
    std::string_view k = kv.key();
    if (k != "key" && k != "principal" && k != "queries_per_minute" && k != "tokens_per_minute") {
      return Invalid(field + "." + std::string(k),
                     "is not a field of a rate limit (key, principal, queries_per_minute, "
                     "tokens_per_minute)");
    }
  }
  RateLimit r;
  TY_ASSIGN_OR_RETURN(auto key, OptionalString(o, "key"));
  if (!key) return Invalid(field + ".key", "is required: endpoint, user or group");
  if (*key == "endpoint") {
    r.key = RateLimitKey::kEndpoint;
  } else if (*key == "user") {
    r.key = RateLimitKey::kUser;
  } else if (*key == "group") {
    r.key = RateLimitKey::kGroup;
  } else {
    return Invalid(field + ".key",
                   "must be endpoint, user or group (got '" + Abbreviate(*key) + "')");
  }
  TY_ASSIGN_OR_RETURN(auto principal, OptionalString(o, "principal"));
  if (principal) r.principal = *principal;
  if (r.key == RateLimitKey::kEndpoint && !r.principal.empty()) {
    return Invalid(field + ".principal", "is not taken by an endpoint limit (it counts everyone)");
  }
  if (r.key == RateLimitKey::kGroup && r.principal.empty()) {
    return Invalid(field + ".principal", "is required for a group limit: the group's name");
  }
  if (r.principal.size() > 255) return Invalid(field + ".principal", "is too long");
  TY_ASSIGN_OR_RETURN(r.queries_per_minute,
                      PerMinute(o, "queries_per_minute", field, limits.max_queries_per_minute));
  TY_ASSIGN_OR_RETURN(r.tokens_per_minute,
                      PerMinute(o, "tokens_per_minute", field, limits.max_tokens_per_minute));
  if (r.queries_per_minute == 0 && r.tokens_per_minute == 0) {
    return Invalid(field, "needs queries_per_minute or tokens_per_minute (or both)");
  }
  return r;
}

}  // namespace

std::string_view RateLimitKeyName(RateLimitKey k) {
  switch (k) {
    case RateLimitKey::kEndpoint:
      return "endpoint";
    case RateLimitKey::kUser:
      return "user";
    case RateLimitKey::kGroup:
      return "group";
  }
  return "endpoint";
}

json::object RateLimitToJson(const RateLimit& limit) {
  json::object o{{"key", RateLimitKeyName(limit.key)}};
  if (!limit.principal.empty()) o["principal"] = limit.principal;
  if (limit.queries_per_minute > 0) o["queries_per_minute"] = limit.queries_per_minute;
  if (limit.tokens_per_minute > 0) o["tokens_per_minute"] = limit.tokens_per_minute;
  return o;
}

std::string DescribeRateLimit(const RateLimit& limit) {
  std::string who;
  switch (limit.key) {
    case RateLimitKey::kEndpoint:
      who = "endpoint";
      break;
    case RateLimitKey::kUser:
      who = limit.principal.empty() ? "per user" : "user " + limit.principal;
      break;
    case RateLimitKey::kGroup:
      who = "group " + limit.principal;
      break;
  }
  std::string what;
  if (limit.queries_per_minute > 0) {
    what += std::to_string(limit.queries_per_minute) + " queries/min";
  }
  if (limit.tokens_per_minute > 0) {
    if (!what.empty()) what += ", ";
    what += std::to_string(limit.tokens_per_minute) + " tokens/min";
  }
  return who + ": " + what;
}

std::string_view FlavorName(Flavor f) { return f == Flavor::kLlm ? "llm" : "pyfunc"; }

Result<Flavor> ParseFlavor(std::string_view text, std::string_view field) {
  if (text == "llm") return Flavor::kLlm;
  if (text == "pyfunc") return Flavor::kPyfunc;
  return Status::InvalidArgument(std::string(field) + " must be llm or pyfunc (got '" +
                                 Abbreviate(text) + "')");
}

Status ValidateEndpointName(std::string_view name) {
  bool ok = !name.empty() && name.size() <= 63 && std::isalnum(static_cast<unsigned char>(name[0]));
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') ok = false;
  }
  if (ok) return Status::Ok();
  return Status::InvalidArgument("name '" + Abbreviate(name) +
                                 "' is not a valid endpoint name: use 1-63 letters, digits, '-' "
                                 "or '_', starting with a letter or digit");
}

Status DecodeReplicaResources(const json::object& body, ReplicaResources& resources,
                              const EndpointLimits& limits) {
  auto it = body.find("resources");
  if (it == body.end()) return Status::Ok();
  if (!it->value().is_object()) {
    return Invalid("resources",
                   "must be an object like {\"gpus\": 1, \"cpus\": 4, \"memory\": "
                   "\"16Gi\"} (got " +
                       DescribeJson(it->value()) + ")");
  }
  const json::object& o = it->value().as_object();
  for (const auto& kv : o) {
    std::string_view k = kv.key();
    if (k != "gpus" && k != "cpus" && k != "memory") {
      return Invalid("resources." + std::string(k),
                     "is not a field of resources (gpus, cpus, memory)");
    }
  }
  for (auto [field, lo, hi, out] :
       {std::tuple{"gpus", 0, limits.max_replica_gpus, &resources.gpus},
        std::tuple{"cpus", 1, limits.max_replica_cpus, &resources.cpus}}) {
    auto v = o.find(field);
    if (v == o.end()) continue;
    std::string name = "resources." + std::string(field);
    if (!v->value().is_int64() || v->value().as_int64() < lo || v->value().as_int64() > hi) {
      return Invalid(name, "must be an integer between " + std::to_string(lo) + " and " +
                               std::to_string(hi) + " (got " + DescribeJson(v->value()) + ")");
    }
    *out = static_cast<int>(v->value().as_int64());
  }
  if (auto m = o.find("memory"); m != o.end()) {
    const json::value& v = m->value();
    std::optional<int64_t> bytes;
    if (v.is_int64() && v.as_int64() >= 0) bytes = v.as_int64();
    if (v.is_uint64() && v.as_uint64() <= static_cast<uint64_t>(INT64_MAX)) {
      bytes = static_cast<int64_t>(v.as_uint64());
    }
    if (v.is_string()) bytes = ParseSize(std::string_view(v.as_string()));
    if (!bytes) {
      return Invalid(
          "resources.memory",
          "must be a size in bytes, or like \"512Mi\" or \"16Gi\" (got " + DescribeJson(v) + ")");
    }
    resources.memory_bytes = *bytes;
  }
  return Status::Ok();
}

Status DecodeEndpointConfig(const json::object& body, EndpointConfig& config,
                            const EndpointLimits& limits) {
  TY_RETURN_IF_ERROR(DecodeReplicaResources(body, config.resources, limits));
  TY_ASSIGN_OR_RETURN(const json::array* entities, OptionalArray(body, "served_entities"));
  if (entities) {
    if (entities->empty() || entities->size() > limits.max_served_entities) {
      return Invalid("served_entities",
                     "must list 1 to " + std::to_string(limits.max_served_entities) +
                         " served entities (got " + std::to_string(entities->size()) + ")");
    }
    config.served_entities.clear();
    for (size_t i = 0; i < entities->size(); ++i) {
      TY_ASSIGN_OR_RETURN(ServedEntity e, DecodeEntity((*entities)[i], i));
      config.served_entities.push_back(std::move(e));
    }
    // The routes named the old entities: a new list without routes gets the default.
    if (!body.contains("routes") && !body.contains("traffic_config")) config.routes.clear();
  }
  const json::array* routes = nullptr;
  std::string routes_field = "routes";
  if (body.contains("traffic_config")) {
    // Databricks' shape: {"traffic_config": {"routes": [{"served_model_name", ...}]}}.
    TY_ASSIGN_OR_RETURN(const json::object* traffic, OptionalObject(body, "traffic_config"));
    if (traffic) {
      TY_ASSIGN_OR_RETURN(routes, OptionalArray(*traffic, "routes"));
      routes_field = "traffic_config.routes";
    }
  } else {
    TY_ASSIGN_OR_RETURN(routes, OptionalArray(body, "routes"));
  }
  if (routes) {
    config.routes.clear();
    for (size_t i = 0; i < routes->size(); ++i) {
      std::string field = routes_field + "[" + std::to_string(i) + "]";
      const json::value& v = (*routes)[i];
      if (!v.is_object()) return Invalid(field, "must be an object (got " + DescribeJson(v) + ")");
      const json::object& o = v.as_object();
      TrafficRoute r;
      TY_ASSIGN_OR_RETURN(auto entity, OptionalString(o, "served_entity"));
      for (const char* alt : {"served_entity_name", "served_model_name"}) {
        if (entity) break;
        TY_ASSIGN_OR_RETURN(entity, OptionalString(o, alt));
      }
      if (!entity || entity->empty()) {
        return Invalid(field + ".served_entity", "is required: the served entity's name");
      }
      r.served_entity = *entity;
      if (!o.contains("percent") && !o.contains("traffic_percentage")) {
        return Invalid(field + ".percent", "is required: an integer from 0 to 100");
      }
      auto pct = AsInt64(o.contains("percent") ? o.at("percent") : o.at("traffic_percentage"),
                         field + ".percent");
      if (!pct.ok()) return pct.status();
      if (*pct < 0 || *pct > 100) {
        return Invalid(field + ".percent",
                       "must be between 0 and 100 (got " + std::to_string(*pct) + ")");
      }
      r.percent = static_cast<int>(*pct);
      config.routes.push_back(std::move(r));
    }
  }
  TY_ASSIGN_OR_RETURN(config.min_replicas, BoundedInt(body, "min_replicas", 0, limits.max_replicas,
                                                      config.min_replicas));
  TY_ASSIGN_OR_RETURN(config.max_replicas, BoundedInt(body, "max_replicas", 1, limits.max_replicas,
                                                      config.max_replicas));
  TY_ASSIGN_OR_RETURN(config.target_concurrency,
                      BoundedInt(body, "target_concurrency", 1, 1024, config.target_concurrency));
  TY_ASSIGN_OR_RETURN(auto project, OptionalString(body, "project"));
  if (project) {
    TY_RETURN_IF_ERROR(ValidateProjectField(*project));
    config.project = *project;
  }
  TY_ASSIGN_OR_RETURN(auto idle, OptionalInt64(body, "scale_to_zero_seconds"));
  if (idle) {
    if (*idle < 0 || *idle > limits.max_scale_to_zero_seconds) {
      return Invalid("scale_to_zero_seconds", "must be between 0 (never) and " +
                                                  std::to_string(limits.max_scale_to_zero_seconds) +
                                                  " (got " + std::to_string(*idle) + ")");
    }
    config.scale_to_zero_seconds = *idle;
  }
  TY_ASSIGN_OR_RETURN(const json::array* rate_limits, OptionalArray(body, "rate_limits"));
  if (rate_limits) {
    if (rate_limits->size() > limits.max_rate_limits) {
      return Invalid("rate_limits", "must list at most " + std::to_string(limits.max_rate_limits) +
                                        " limits (got " + std::to_string(rate_limits->size()) +
                                        ")");
    }
    config.rate_limits.clear();
    std::set<std::pair<RateLimitKey, std::string>> seen;
    for (size_t i = 0; i < rate_limits->size(); ++i) {
      TY_ASSIGN_OR_RETURN(RateLimit r, DecodeRateLimit((*rate_limits)[i], i, limits));
      if (!seen.insert({r.key, r.principal}).second) {
        return Invalid("rate_limits[" + std::to_string(i) + "]",
                       "repeats the limit for " + std::string(RateLimitKeyName(r.key)) +
                           (r.principal.empty() ? "" : " " + r.principal) +
                           ": give each one queries_per_minute and tokens_per_minute together");
      }
      config.rate_limits.push_back(std::move(r));
    }
  }
  TY_RETURN_IF_ERROR(DecodeCaptureConfig(body, config));
  if (config.routes.empty() && config.served_entities.size() == 1) {
    config.routes.push_back({config.served_entities[0].name, 100});
  }
  return ValidateEndpointConfig(config, limits);
}

Status ValidateEndpointConfig(const EndpointConfig& config, const EndpointLimits& limits) {
  if (config.served_entities.empty()) {
    return Invalid("served_entities", "is required: at least one registered model version");
  }
  std::set<std::string> names;
  for (const auto& e : config.served_entities) {
    if (!names.insert(e.name).second) {
      return Invalid("served_entities",
                     "names '" + e.name + "' twice: give each entity its own \"name\"");
    }
  }
  if (config.routes.empty()) {
    return Invalid("routes",
                   "is required with several served entities: e.g. [{\"served_entity\": "
                   "\"a\", \"percent\": 90}, {\"served_entity\": \"b\", \"percent\": "
                   "10}]");
  }
  int sum = 0;
  std::set<std::string> routed;
  for (size_t i = 0; i < config.routes.size(); ++i) {
    const auto& r = config.routes[i];
    std::string field = "routes[" + std::to_string(i) + "].served_entity";
    if (!names.count(r.served_entity)) {
      return Invalid(field, "'" + Abbreviate(r.served_entity) +
                                "' is no served entity of this "
                                "endpoint");
    }
    if (!routed.insert(r.served_entity).second) {
      return Invalid(field, "'" + r.served_entity + "' has two routes: give it one");
    }
    sum += r.percent;
  }
  if (sum != 100) {
    return Invalid("routes", "percentages must sum to 100 (got " + std::to_string(sum) + ")");
  }
  if (config.min_replicas > config.max_replicas) {
    return Invalid("min_replicas", "(" + std::to_string(config.min_replicas) +
                                       ") must not exceed max_replicas (" +
                                       std::to_string(config.max_replicas) + ")");
  }
  if (config.max_replicas > limits.max_replicas) {
    return Invalid("max_replicas", "must be at most " + std::to_string(limits.max_replicas));
  }
  return Status::Ok();
}

json::object EndpointConfigToJson(const EndpointConfig& config) {
  json::array entities;
  for (const auto& e : config.served_entities) {
    json::object o{{"name", e.name}, {"model", e.model}};
    if (e.version) o["version"] = *e.version;
    if (!e.alias.empty()) o["alias"] = e.alias;
    if (!e.flavor.empty()) o["flavor"] = e.flavor;
    entities.push_back(std::move(o));
  }
  json::array routes;
  for (const auto& r : config.routes) {
    routes.push_back(json::object{{"served_entity", r.served_entity}, {"percent", r.percent}});
  }
  json::array limits;
  for (const auto& l : config.rate_limits) limits.push_back(RateLimitToJson(l));
  json::object out{{"served_entities", std::move(entities)},
                   {"routes", std::move(routes)},
                   {"min_replicas", config.min_replicas},
                   {"max_replicas", config.max_replicas},
                   {"scale_to_zero_seconds", config.scale_to_zero_seconds},
                   {"target_concurrency", config.target_concurrency},
                   {"project", config.project},
                   {"rate_limits", std::move(limits)},
                   {"resources", json::object{{"gpus", config.resources.gpus},
                                              {"cpus", config.resources.cpus},
                                              {"memory", config.resources.memory_bytes}}}};
  if (!config.capture_table.empty()) out["capture"] = json::object{{"table", config.capture_table}};
  return out;
}

Status DecodeCaptureConfig(const json::object& body, EndpointConfig& config) {
  auto it = body.find("capture");
  if (it == body.end()) return Status::Ok();
  if (it->value().is_null()) {
    config.capture_table.clear();
    return Status::Ok();
  }
  if (!it->value().is_object()) {
    return Invalid("capture",
                   "must be an object like {\"table\": \"main.serving.requests\"} (got " +
                       DescribeJson(it->value()) + ")");
  }
  const json::object& capture = it->value().as_object();
  for (const auto& kv : capture) {
    if (kv.key() != "table") {
      return Invalid("capture." + std::string(kv.key()),
                     "is not a field of capture: use \"table\"");
    }
  }
  std::optional<std::string> table;
  if (auto t = capture.find("table"); t != capture.end() && !t->value().is_null()) {
    if (!t->value().is_string()) {
      return Invalid("capture.table", "must be a string like \"main.serving.requests\" (got " +
                                          DescribeJson(t->value()) + ")");
    }
    table = std::string(t->value().as_string());
  }
  if (!table || table->empty()) {
    config.capture_table.clear();
    return Status::Ok();
  }
  // The catalog checks the name's characters; here only its shape, so that a mistake is
  // named before any privilege is looked up.
  size_t parts = 1;
  bool ok = table->size() <= 768 && table->front() != '.' && table->back() != '.' &&
            table->find("..") == std::string::npos;
  for (char c : *table) {
    if (c == '.') ++parts;
    if (static_cast<unsigned char>(c) < 0x20 || c == '/' || c == ' ' || c == '`') ok = false;
  }
  if (!ok || parts != 3) {
    return Invalid("capture.table", "'" + Abbreviate(*table) +
                                        "' is not a table name: use catalog.schema.table, "
                                        "e.g. main.serving.requests");
  }
  config.capture_table = *table;
  return Status::Ok();
}

size_t PickRoute(const std::vector<TrafficRoute>& routes, double draw) {
  double acc = 0;
  size_t last = 0;
  for (size_t i = 0; i < routes.size(); ++i) {
    if (routes[i].percent == 0) continue;
    last = i;
    acc += routes[i].percent;
    if (draw < acc) return i;
  }
  return last;
}

}  // namespace trainyard::serving
