#include "trainyard/cli/endpoint_commands.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <thread>

#include "trainyard/cli/client.h"
#include "trainyard/cli/table.h"
#include "trainyard/common/strings.h"

namespace trainyard::cli {
namespace {

struct Options {
  CLI::App* create = nullptr;
  CLI::App* list = nullptr;
  CLI::App* show = nullptr;
  CLI::App* update = nullptr;
  CLI::App* remove = nullptr;
  CLI::App* grant = nullptr;
  CLI::App* revoke = nullptr;
  CLI::App* serve = nullptr;
  std::string name;
  std::string serve_entity;
  bool no_wait = false;
  int64_t wait_timeout_s = 900;
  std::vector<std::string> rate_limits;
  std::string model;
  int64_t version = 0;
  std::string alias;
  std::string flavor;
  std::vector<std::string> entities;
  std::vector<std::string> routes;
  std::optional<int> min_replicas;
  std::optional<int> max_replicas;
  std::optional<int64_t> scale_to_zero_s;
  std::optional<int> target_concurrency;
  std::optional<std::string> capture_table;
  std::optional<int> gpus;
  std::optional<int> cpus;
  std::optional<std::string> memory;
  std::optional<std::string> project;
  std::string privilege = "QUERY";
  std::string principal;
};

}  // namespace

Result<json::array> ParseRateLimitFlags(const std::vector<std::string>& flags) {
  // One entry per key and principal, so "user:100/min" and "user:5000tokens/min" merge.
  std::vector<std::pair<std::string, json::object>> merged;
  for (const auto& text : flags) {
    if (text == "none") {
      if (flags.size() != 1) {
        return Status::InvalidArgument("--rate-limit none removes every limit: give it alone");
      }
      return json::array{};
    }
    auto bad = [&text](const std::string& why) {
      return Status::InvalidArgument(
          "--rate-limit '" + text + "': " + why +
          "; write KEY[:PRINCIPAL]:N/min or KEY[:PRINCIPAL]:Ntokens/min with KEY endpoint, user "
          "or group, e.g. user:100/min, user:alice:10/min, group:ml-team:50000tokens/min "
          "(or 'none' to remove them all)");
    };
    std::vector<std::string> parts = SplitString(text, ':');
    if (parts.size() < 2 || parts.size() > 3) return bad("expected 2 or 3 parts separated by ':'");
    const std::string& key = parts[0];
    if (key != "endpoint" && key != "user" && key != "group") {
      return bad("unknown key '" + key + "'");
    }
    std::string principal = parts.size() == 3 ? parts[1] : "";
    std::string amount = parts.back();
    const std::string per = "/min";
    if (amount.size() <= per.size() || amount.substr(amount.size() - per.size()) != per) {
      return bad("the amount must end in /min");
    }
    amount.resize(amount.size() - per.size());
    bool tokens = false;
    if (amount.size() > 6 && amount.substr(amount.size() - 6) == "tokens") {
      tokens = true;
      amount.resize(amount.size() - 6);
    }
    auto n = ParseInt64(amount);
    if (!n) return bad("'" + amount + "' is not a whole number");
    std::string id = key + ":" + principal;
    auto it =
        std::find_if(merged.begin(), merged.end(), [&id](const auto& e) { return e.first == id; });
    if (it == merged.end()) {
      json::object o{{"key", key}};
      if (!principal.empty()) o["principal"] = principal;
      merged.emplace_back(id, std::move(o));
      it = std::prev(merged.end());
    }
    const char* field = tokens ? "tokens_per_minute" : "queries_per_minute";
    if (it->second.contains(field)) return bad("gives " + std::string(field) + " twice");
    it->second[field] = *n;
  }
  json::array out;
  for (auto& [id, o] : merged) out.push_back(std::move(o));
  return out;
}

namespace {

std::string EndpointPath(const std::string& name, const std::string& tail = "") {
  return "/api/trainyard/v1/endpoints/" + UrlEncode(name) + tail;
}

// "model=M,version=3,name=a" (or "M@alias", "M/3") as a served entity.
Result<json::object> ParseEntity(const std::string& text) {
  json::object o;
  if (text.find('=') == std::string::npos) {
    if (size_t at = text.rfind('@'); at != std::string::npos) {
      o["model"] = text.substr(0, at);
      o["alias"] = text.substr(at + 1);
      return o;
    }
    if (size_t slash = text.rfind('/'); slash != std::string::npos) {
      auto v = ParseInt64(text.substr(slash + 1));
      if (v) {
        o["model"] = text.substr(0, slash);
        o["version"] = *v;
        return o;
      }
    }
    return Status::InvalidArgument("--entity '" + text +
                                   "': write MODEL@ALIAS, MODEL/VERSION or "
                                   "model=M,version=N[,name=E][,flavor=pyfunc|llm]");
  }
  for (const auto& part : SplitString(text, ',')) {
    size_t eq = part.find('=');
    if (eq == std::string::npos) {
      return Status::InvalidArgument("--entity '" + text + "': '" + part + "' is not key=value");
    }
    std::string key = Trim(part.substr(0, eq)), value = Trim(part.substr(eq + 1));
    if (key == "version") {
      auto v = ParseInt64(value);
      if (!v) return Status::InvalidArgument("--entity: version must be an integer");
      o["version"] = *v;
    } else {
      o[key] = value;
    }
  }
  return o;
}

Result<json::object> ConfigBody(const Options& o, bool create) {
  json::object body;
  json::array entities;
  if (!o.model.empty()) {
    json::object e{{"model", o.model}};
    if (o.version > 0) e["version"] = o.version;
    if (!o.alias.empty()) e["alias"] = o.alias;
    if (!o.flavor.empty()) e["flavor"] = o.flavor;
    entities.push_back(std::move(e));
  }
  for (const auto& text : o.entities) {
    TY_ASSIGN_OR_RETURN(json::object e, ParseEntity(text));
    entities.push_back(std::move(e));
  }
  if (!entities.empty()) body["served_entities"] = std::move(entities);
  if (create && !body.contains("served_entities")) {
    return Status::InvalidArgument(
        "say what to serve: --model NAME --version N (or --alias A), or --entity ...");
  }
  if (!o.routes.empty()) {
    json::array routes;
    for (const auto& text : o.routes) {
      size_t eq = text.rfind('=');
      auto pct = eq == std::string::npos ? std::nullopt : ParseInt64(text.substr(eq + 1));
      if (!pct) {
        return Status::InvalidArgument("--route '" + text + "': write ENTITY=PERCENT, e.g. a=90");
      }
      routes.push_back(json::object{{"served_entity", text.substr(0, eq)}, {"percent", *pct}});
    }
    body["routes"] = std::move(routes);
  }
  if (o.min_replicas) body["min_replicas"] = *o.min_replicas;
  if (o.max_replicas) body["max_replicas"] = *o.max_replicas;
  if (o.scale_to_zero_s) body["scale_to_zero_seconds"] = *o.scale_to_zero_s;
  if (o.target_concurrency) body["target_concurrency"] = *o.target_concurrency;
  if (!o.rate_limits.empty()) {
    TY_ASSIGN_OR_RETURN(body["rate_limits"], ParseRateLimitFlags(o.rate_limits));
  }
  if (o.capture_table) body["capture"] = json::object{{"table", *o.capture_table}};
  if (o.project) body["project"] = *o.project;
  if (o.gpus || o.cpus || o.memory) {
    json::object resources;
    if (o.gpus) resources["gpus"] = *o.gpus;
    if (o.cpus) resources["cpus"] = *o.cpus;
    if (o.memory) resources["memory"] = *o.memory;
    body["resources"] = std::move(resources);
  }
  return body;
}

std::string Entities(const json::value& e) {
  std::string out;
  for (const auto& s : Arr(e, "served_entities")) {
    std::string what =
        Str(s, "model") +
        (s.as_object().contains("version") ? " v" + Str(s, "version") : "@" + Str(s, "alias"));
    out += (out.empty() ? "" : ", ") + Str(s, "name") + "=" + what;
  }
  return out;
}

std::string Routes(const json::value& e) {
  std::string out;
  for (const auto& r : Arr(e, "routes")) {
    out += (out.empty() ? "" : " ") + Str(r, "served_entity") + ":" + Str(r, "percent") + "%";
  }
  return out;
}

std::string RateLimits(const json::value& e) {
  std::string out;
  for (const auto& l : Arr(e, "rate_limits")) {
    std::string who = Str(l, "key");
    if (!Str(l, "principal").empty()) who += " " + Str(l, "principal");
    if (Str(l, "key") == "user" && Str(l, "principal").empty()) who = "per user";
    std::string what;
    if (Int(l, "queries_per_minute") > 0) what += Str(l, "queries_per_minute") + " queries/min";
    if (Int(l, "tokens_per_minute") > 0) {
      what += (what.empty() ? "" : ", ") + Str(l, "tokens_per_minute") + " tokens/min";
    }
    out += (out.empty() ? "" : "; ") + who + ": " + what;
  }
  return out.empty() ? "none" : out;
}

int ReadyReplicas(const json::value& e) {
  int n = 0;
  for (const auto& r : Arr(e, "replicas")) n += Str(r, "state") == "READY";
  return n;
}

// "T@V (N captured, M dropped, P pending[, R retrying]): error", "" without a capture table.
std::string CaptureTableSummary(const json::value& c) {
  if (Str(c, "table").empty()) return "";
  std::string out = Str(c, "table");
  if (!Str(c, "table_version").empty()) out += "@" + Str(c, "table_version");
  out += " (" + Str(c, "table_captured") + " captured, " + Str(c, "table_dropped") + " dropped, " +
         Str(c, "table_pending") + " pending";
  if (Str(c, "table_retrying") != "0" && !Str(c, "table_retrying").empty()) {
    out += ", " + Str(c, "table_retrying") + " retrying";
  }
  out += ")";
  if (!Str(c, "table_error").empty()) out += ": " + Str(c, "table_error");
  return out;
}

// "1 GPU, 4 CPUs, 16.0 GiB" from the endpoint's resources.
std::string ReplicaResourcesSummary(const json::value& e) {
  const json::object& o = e.as_object();
  const json::value* r = o.if_contains("resources");
  if (!r || !r->is_object()) return "-";
  int64_t gpus = Int(*r, "gpus"), cpus = Int(*r, "cpus"), memory = Int(*r, "memory");
  std::string out = std::to_string(gpus) + (gpus == 1 ? " GPU, " : " GPUs, ") +
                    std::to_string(cpus) + (cpus == 1 ? " CPU" : " CPUs");
  if (memory > 0) {
    char buf[32];
    std::snprintf(buf, sizeof buf, ", %.1f GiB", static_cast<double>(memory) / (1 << 30));
    out += buf;
  }
  return out;
}

void PrintEndpoint(const json::value& e) {
  PrintTable(std::cout, {"FIELD", "VALUE"},
             {{"name", Str(e, "name")},
              {"owner", Str(e, "owner")},
              {"state", Str(e, "state")},
              {"served entities", Entities(e)},
              {"routes", Routes(e)},
              {"replicas", "min " + Str(e, "min_replicas") + ", max " + Str(e, "max_replicas") +
                               ", ready " + std::to_string(ReadyReplicas(e))},
              {"scale to zero", Int(e, "scale_to_zero_seconds") == 0
                                    ? std::string("never")
                                    : "after " + Str(e, "scale_to_zero_seconds") + " s idle"},
              {"rate limits", RateLimits(e)},
              {"per replica", ReplicaResourcesSummary(e)},
              {"project", Str(e, "project")},
              {"created", FormatTime(Int(e, "created_at"))},
              {"capture", Str(e.as_object().at("capture"), "path") + " (" +
                              Str(e.as_object().at("capture"), "captured") + " captured, " +
                              Str(e.as_object().at("capture"), "dropped") + " dropped)"},
              {"capture table", CaptureTableSummary(e.as_object().at("capture"))}},
             100);
  std::vector<std::vector<std::string>> rows;
  for (const auto& r : Arr(e, "replicas")) {
    rows.push_back({Str(r, "id"), Str(r, "job_id"), Str(r, "served_entity"),
                    Str(r, "model_version"), Str(r, "flavor"), Str(r, "state"), Str(r, "url"),
                    Str(r, "outstanding"), Str(r, "served")});
  }
  if (!rows.empty()) {
    std::cout << "\n";
    PrintTable(
        std::cout,
        {"REPLICA", "JOB", "ENTITY", "VERSION", "FLAVOR", "STATE", "URL", "IN FLIGHT", "SERVED"},
        rows);
  }
  for (const auto& r : Arr(e, "replicas")) {
    if (Str(r, "state") == "PENDING" && !Str(r, "pending_reason").empty()) {
      std::cout << "\n"
                << Str(r, "id") << " waits for resources: " << Str(r, "pending_reason") << "\n";
    }
  }
  for (const auto& s : Arr(e, "entity_states")) {
    if (!Str(s, "last_error").empty()) {
      std::cout << "\n" << Str(s, "name") << ": " << Str(s, "last_error") << "\n";
    }
  }
  std::vector<std::vector<std::string>> grants;
  for (const auto& g : Arr(e, "grants"))
    grants.push_back({Str(g, "principal"), Str(g, "privilege")});
  if (!grants.empty()) {
    std::cout << "\n";
    PrintTable(std::cout, {"PRINCIPAL", "PRIVILEGE"}, grants);
  }
  std::cout << "\nQuery it: POST /serving-endpoints/" << Str(e, "name")
            << "/invocations, or the openai client with base_url=<server>/serving-endpoints "
               "and model=\""
            << Str(e, "name") << "\"\n";
}

int List(Client& client) {
  auto r = client.Call("GET", "/api/trainyard/v1/endpoints");
  if (!r.ok()) return Fail(r.status());
  std::vector<std::vector<std::string>> rows;
  for (const auto& e : Arr(*r, "endpoints")) {
    rows.push_back({Str(e, "name"), Str(e, "state"), Entities(e), Routes(e),
                    std::to_string(ReadyReplicas(e)) + "/" + Str(e, "max_replicas"),
                    Str(e, "owner")});
  }
  if (rows.empty()) {
    std::cout << "No endpoints. Create one with 'trainyard endpoints create NAME --model M "
                 "--version N'.\n";
    return 0;
  }
  PrintTable(std::cout, {"NAME", "STATE", "SERVED ENTITIES", "ROUTES", "READY", "OWNER"}, rows, 60);
  return 0;
}

// The default endpoint name for a model: its last name part ("main.support.intent" ->
// "intent"), with characters an endpoint name may not have replaced by '-'.
std::string DefaultEndpointName(const std::string& model) {
  std::string name = model.substr(model.rfind('.') == std::string::npos ? 0 : model.rfind('.') + 1);
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') c = '-';
  }
  while (!name.empty() && !std::isalnum(static_cast<unsigned char>(name[0]))) name.erase(0, 1);
  if (name.size() > 63) name.resize(63);
  return name.empty() ? "endpoint" : name;
}

// A READY replica of served entity `entity`, or null.
const json::value* ReadyReplica(const json::value& e, const std::string& entity) {
  for (const auto& r : Arr(e, "replicas")) {
    if (Str(r, "state") == "READY" && Str(r, "served_entity") == entity) return &r;
  }
  return nullptr;
}

// `trainyard serve MODEL@ALIAS|MODEL/VERSION`: creates or updates the endpoint, waits for a
// ready replica (progress on a terminal), and prints how to query it.
int Serve(Client& client, const Options& o) {
  auto entity = ParseEntity(o.serve_entity);
  if (!entity.ok() || o.serve_entity.find('=') != std::string::npos) {
    return Fail(Status::InvalidArgument("'" + o.serve_entity +
                                        "' is not MODEL@ALIAS or MODEL/VERSION (e.g. "
                                        "support-intent-model@champion, support-intent-model/3)"));
  }
  if (!o.flavor.empty()) (*entity)["flavor"] = o.flavor;
  std::string name = o.name.empty() ? DefaultEndpointName(Str(*entity, "model")) : o.name;
  auto existing = client.Call("GET", EndpointPath(name));
  bool create = !existing.ok();
  if (!existing.ok() && existing.status().code() != StatusCode::kNotFound) {
    return Fail(existing.status());
  }
  Options config = o;
  config.model.clear();
  config.entities.clear();
  // A replica kept running, so that the endpoint is ready when this returns.
  if (create && !config.min_replicas) config.min_replicas = 1;
  auto body = ConfigBody(config, false);
  if (!body.ok()) return Fail(body.status());
  (*body)["served_entities"] = json::array{*entity};
  json::value state;
  if (create) {
    (*body)["name"] = name;
    auto r = client.Call("POST", "/api/trainyard/v1/endpoints", *body);
    if (!r.ok()) return Fail(r.status());
    state = std::move(*r);
  } else {
    auto r = client.Call("PATCH", EndpointPath(name), *body);
    if (!r.ok()) return Fail(r.status());
    state = std::move(*r);
  }
  std::string entity_name = Str(Arr(state, "served_entities").at(0), "name");
  std::cout << (create ? "Created" : "Updated") << " endpoint " << name << " serving "
            << o.serve_entity << ".\n";
  const json::value* ready = ReadyReplica(state, entity_name);
  if (!ready && !o.no_wait && Int(state, "min_replicas") == 0) {
    std::cout << "It has no replica until the first request arrives (min_replicas 0): the "
                 "first request waits while one starts.\n";
  } else if (!ready && !o.no_wait) {
    bool tty = ::isatty(STDERR_FILENO);
    auto start = std::chrono::steady_clock::now();
    auto deadline = start + std::chrono::seconds(o.wait_timeout_s);
    std::string last_error;
    while (true) {
      auto r = client.Call("GET", EndpointPath(name));
      if (!r.ok()) return Fail(r.status());
      state = std::move(*r);
      ready = ReadyReplica(state, entity_name);
      if (ready) break;
      std::string replica_state = "no replica yet";
      for (const auto& rep : Arr(state, "replicas")) {
        if (Str(rep, "served_entity") == entity_name) {
          replica_state = "replica " + Str(rep, "id") + " " + Str(rep, "state");
        }
      }
      for (const auto& es : Arr(state, "entity_states")) {
        if (Str(es, "name") == entity_name) last_error = Str(es, "last_error");
      }
      auto waited =
          std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - start)
              .count();
      if (tty) {
        std::cerr << "\r  waiting for " << name << ": " << replica_state << ", " << waited << " s"
                  << (last_error.empty() ? "" : " (last error: " + last_error + ")") << "\033[K"
                  << std::flush;
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        if (tty) std::cerr << "\n";
        return Fail(Status::Unavailable(
            "endpoint " + name + " has no ready replica after " + std::to_string(o.wait_timeout_s) +
            " s" + (last_error.empty() ? "" : " (last error: " + last_error + ")") +
            "; see 'trainyard endpoints show " + name + "' and the replica's log"));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    if (tty) std::cerr << "\r\033[K";
    std::cout << "Ready in "
              << std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() -
                                                                  start)
                     .count()
              << " s.\n";
  }
  std::string base = client.url() + "/serving-endpoints";
  std::cout << "\nBase URL: " << base << "\n\n";
  if (ready && Str(*ready, "flavor") == "pyfunc") {
    std::cout << "curl -H \"Authorization: Bearer $TRAINYARD_TOKEN\" " << base << "/" << name
              << "/invocations \\\n     -H 'Content-Type: application/json' -d "
                 "'{\"dataframe_records\": [{\"x\": 1}]}'\n";
  } else {
    std::cout << "from openai import OpenAI\n"
              << "client = OpenAI(base_url=\"" << base
              << "\", api_key=\"<token: trainyard token create --query-only --endpoint " << name
              << ">\")\n"
              << "print(client.chat.completions.create(model=\"" << name
              << "\", messages=[{\"role\": \"user\", \"content\": \"Hello\"}])"
                 ".choices[0].message.content)\n";
  }
  return 0;
}

}  // namespace

std::function<std::optional<int>(Client&)> AddEndpointCommands(
    CLI::App& app, const std::function<void(CLI::App*)>& add_client_options) {
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("endpoints",
                                 "serve registered models: create, list, show, "
                                 "update, delete endpoints");
  cmd->require_subcommand(1);
  auto config_options = [o](CLI::App* sub) {
    sub->add_option("--model", o->model, "registered model to serve");
    sub->add_option("--version", o->version, "its version")->check(CLI::PositiveNumber);
    sub->add_option("--alias", o->alias, "or its alias (e.g. champion)");
    sub->add_option("--flavor", o->flavor, "llm or pyfunc (default: from the model's files)")
        ->check(CLI::IsMember({"llm", "pyfunc"}));
    sub->add_option("--entity", o->entities,
                    "a served entity: MODEL@ALIAS, MODEL/VERSION or "
                    "model=M,version=N,name=E (repeatable)");
    sub->add_option("--route", o->routes, "traffic: ENTITY=PERCENT (repeatable; sum 100)");
    sub->add_option("--min-replicas", o->min_replicas, "replicas kept running (0: scale to zero)");
    sub->add_option("--max-replicas", o->max_replicas, "most replicas per served entity");
    sub->add_option("--scale-to-zero-s", o->scale_to_zero_s,
                    "idle seconds before the last replica stops (0: never)");
    sub->add_option("--target-concurrency", o->target_concurrency,
                    "requests in flight per replica before another starts");
    sub->add_option("--rate-limit", o->rate_limits,
                    "KEY[:PRINCIPAL]:N/min or :Ntokens/min, KEY endpoint|user|group, e.g. "
                    "user:100/min (repeatable; 'none' removes all)");
    sub->add_option("--gpus", o->gpus, "GPUs each replica takes from the pool (default 0)")
        ->check(CLI::NonNegativeNumber);
    sub->add_option("--cpus", o->cpus, "CPUs each replica takes from the pool (default 1)")
        ->check(CLI::PositiveNumber);
    sub->add_option("--memory", o->memory, "memory each replica asks for, e.g. 16Gi");
    sub->add_option("--project", o->project,
                    "project whose quotas and fair share the replicas count against "
                    "(default: default)");
    sub->add_option("--capture-table", o->capture_table,
                    "also capture requests into this catalog table (catalog.schema.table; "
                    "\"\" to stop)");
  };
  o->create = cmd->add_subcommand("create", "create an endpoint");
  o->create->add_option("name", o->name, "endpoint name")->required();
  config_options(o->create);
  add_client_options(o->create);
  o->list = cmd->add_subcommand("list", "endpoints you may query");
  add_client_options(o->list);
  o->show = cmd->add_subcommand("show", "one endpoint: entities, routes, replicas, capture");
  o->show->add_option("name", o->name, "endpoint name")->required();
  add_client_options(o->show);
  o->update = cmd->add_subcommand("update", "change an endpoint (only the options given)");
  o->update->add_option("name", o->name, "endpoint name")->required();
  config_options(o->update);
  add_client_options(o->update);
  o->remove = cmd->add_subcommand("delete", "delete an endpoint and stop its replicas");
  o->remove->add_option("name", o->name, "endpoint name")->required();
  add_client_options(o->remove);
  for (auto** sub : {&o->grant, &o->revoke}) {
    bool grant = sub == &o->grant;
    *sub = cmd->add_subcommand(grant ? "grant" : "revoke",
                               grant ? "let a user or group query (QUERY) or manage (MANAGE) "
                                       "an endpoint"
                                     : "take a grant back");
    (*sub)->add_option("name", o->name, "endpoint name")->required();
    (*sub)
        ->add_option("privilege", o->privilege, "QUERY or MANAGE")
        ->required()
        ->check(CLI::IsMember({"QUERY", "MANAGE"}, CLI::ignore_case));
    (*sub)->add_option("principal", o->principal, "user, service principal or group")->required();
    add_client_options(*sub);
  }

  o->serve = app.add_subcommand(
      "serve",
      "serve a registered model: create (or update) its endpoint, wait until it is ready and "
      "print how to query it");
  o->serve->add_option("model", o->serve_entity, "MODEL@ALIAS or MODEL/VERSION")->required();
  o->serve->add_option("--name", o->name, "endpoint name (default: the model's name)");
  o->serve->add_option("--flavor", o->flavor, "llm or pyfunc (default: from the model's files)")
      ->check(CLI::IsMember({"llm", "pyfunc"}));
  o->serve->add_option("--min-replicas", o->min_replicas,
                       "replicas kept running (default 1; 0: scale to zero)");
  o->serve->add_option("--max-replicas", o->max_replicas, "most replicas");
  o->serve->add_option("--scale-to-zero-s", o->scale_to_zero_s,
                       "idle seconds before replicas stop down to --min-replicas (0: never)");
  o->serve->add_option("--rate-limit", o->rate_limits,
                       "KEY[:PRINCIPAL]:N/min or :Ntokens/min, e.g. user:100/min (repeatable)");
  o->serve->add_flag("--no-wait", o->no_wait, "return once the endpoint is created");
  o->serve->add_option("--timeout-s", o->wait_timeout_s, "how long to wait for a ready replica")
      ->check(CLI::PositiveNumber);
  add_client_options(o->serve);

  return [o](Client& client) -> std::optional<int> {
    if (o->serve->parsed()) return Serve(client, *o);
    if (o->list->parsed()) return List(client);
    if (o->show->parsed()) {
      auto r = client.Call("GET", EndpointPath(o->name));
      if (!r.ok()) return Fail(r.status());
      PrintEndpoint(*r);
      return 0;
    }
    if (o->create->parsed() || o->update->parsed()) {
      bool create = o->create->parsed();
      auto body = ConfigBody(*o, create);
      if (!body.ok()) return Fail(body.status());
      if (create) (*body)["name"] = o->name;
      auto r = create ? client.Call("POST", "/api/trainyard/v1/endpoints", *body)
                      : client.Call("PATCH", EndpointPath(o->name), *body);
      if (!r.ok()) return Fail(r.status());
      std::cout << (create ? "Created" : "Updated") << " endpoint " << o->name << ".\n\n";
      PrintEndpoint(*r);
      return 0;
    }
    if (o->remove->parsed()) {
      auto r = client.Call("DELETE", EndpointPath(o->name));
      if (!r.ok()) return Fail(r.status());
      std::cout << "Deleted endpoint " << o->name << "; its replicas are stopping.\n";
      return 0;
    }
    if (o->grant->parsed() || o->revoke->parsed()) {
      bool grant = o->grant->parsed();
      auto r = client.Call(grant ? "POST" : "DELETE", EndpointPath(o->name, "/permissions"),
                           json::object{{"principal", o->principal}, {"privilege", o->privilege}});
      if (!r.ok()) return Fail(r.status());
      std::cout << (grant ? "Granted " : "Revoked ") << o->privilege << " on endpoint " << o->name
                << (grant ? " to " : " from ") << o->principal << ".\n";
      return 0;
    }
    return std::nullopt;
  };
}

}  // namespace trainyard::cli
