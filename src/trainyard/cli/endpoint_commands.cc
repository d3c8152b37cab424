#include "trainyard/cli/endpoint_commands.h"

#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>

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
  std::string name;
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
  std::string privilege = "QUERY";
  std::string principal;
};

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
  if (o.capture_table) body["capture"] = json::object{{"table", *o.capture_table}};
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

int ReadyReplicas(const json::value& e) {
  int n = 0;
  for (const auto& r : Arr(e, "replicas")) n += Str(r, "state") == "READY";
  return n;
}

// "T@V (N captured, M dropped, P pending): error", "" without a capture table.
std::string CaptureTableSummary(const json::value& c) {
  if (Str(c, "table").empty()) return "";
  std::string out = Str(c, "table");
  if (!Str(c, "table_version").empty()) out += "@" + Str(c, "table_version");
  out += " (" + Str(c, "table_captured") + " captured, " + Str(c, "table_dropped") + " dropped, " +
         Str(c, "table_pending") + " pending)";
  if (!Str(c, "table_error").empty()) out += ": " + Str(c, "table_error");
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
              {"created", FormatTime(Int(e, "created_at"))},
              {"capture", Str(e.as_object().at("capture"), "path") + " (" +
                              Str(e.as_object().at("capture"), "captured") + " captured, " +
                              Str(e.as_object().at("capture"), "dropped") + " dropped)"},
              {"capture table", CaptureTableSummary(e.as_object().at("capture"))}},
             100);
  std::vector<std::vector<std::string>> rows;
  for (const auto& r : Arr(e, "replicas")) {
    rows.push_back({Str(r, "id"), Str(r, "served_entity"), Str(r, "model_version"),
                    Str(r, "flavor"), Str(r, "state"), Str(r, "url"), Str(r, "outstanding"),
                    Str(r, "served")});
  }
  if (!rows.empty()) {
    std::cout << "\n";
    PrintTable(std::cout,
               {"REPLICA", "ENTITY", "VERSION", "FLAVOR", "STATE", "URL", "IN FLIGHT", "SERVED"},
               rows);
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

  return [o](Client& client) -> std::optional<int> {
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
