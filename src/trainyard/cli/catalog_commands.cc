#include "trainyard/cli/catalog_commands.h"

#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>

#include "trainyard/cli/client.h"
#include "trainyard/cli/grant_statement.h"
#include "trainyard/cli/table.h"
#include "trainyard/common/strings.h"

namespace trainyard::cli {
namespace {

const std::string kUc = "/api/2.1/unity-catalog";
const std::string kGroups = "/api/trainyard/v1/groups";
const std::string kServicePrincipals = "/api/trainyard/v1/service-principals";
// Pages fetched by a list command before it stops (100 items each).
constexpr int kMaxListPages = 1000;

// Every item of a paged UC list (`key`: "catalogs", "tables", ...).
Result<std::vector<json::value>> ListAll(Client& client, const std::string& path,
                                         json::object query, std::string_view key) {
  std::vector<json::value> out;
  query["max_results"] = 100;
  for (int page = 0; page < kMaxListPages; ++page) {
    TY_ASSIGN_OR_RETURN(json::value r, client.Call("GET", path, query));
    for (const auto& item : Arr(r, key)) out.push_back(item);
    std::string token = Str(r, "next_page_token");
    if (token.empty()) break;
    query["page_token"] = token;
  }
  return out;
}

// "registered_model" -> "REGISTERED MODEL", as SQL writes it.
std::string ToUpperType(std::string type) {
  for (char& c : type) c = c == '_' ? ' ' : static_cast<char>(std::toupper(c));
  return type;
}

int Done(const Result<json::value>& r, const std::string& message) {
  if (!r.ok()) return Fail(r.status());
  std::cout << message << "\n";
  return 0;
}

// --- grants

// The securables whose grants a securable inherits, itself first: a table's schema and
// catalog, a schema's catalog.
std::vector<std::pair<std::string, std::string>> WithAncestors(const GrantStatement& s) {
  std::vector<std::pair<std::string, std::string>> out = {{s.securable_type, s.full_name}};
  std::vector<std::string> parts = SplitString(s.full_name, '.');
  if (s.securable_type == "metastore" || s.securable_type == "external_location" ||
      s.securable_type == "credential" || parts.size() < 2) {
    return out;
  }
  if (parts.size() == 3) out.emplace_back("schema", parts[0] + "." + parts[1]);
  out.emplace_back("catalog", parts[0]);
  return out;
}

std::string PermissionsPath(const std::string& type, const std::string& full_name) {
  return kUc + "/permissions/" + type + "/" + UrlEncode(full_name);
}

int ShowGrants(Client& client, const GrantStatement& s) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& [type, name] : WithAncestors(s)) {
    json::object query;
    if (!s.principal.empty()) query["principal"] = s.principal;
    auto r = client.Call("GET", PermissionsPath(type, name), query);
    if (!r.ok()) return Fail(r.status());
    for (const auto& a : Arr(*r, "privilege_assignments")) {
      for (const auto& p : Arr(a, "privileges")) {
        std::string privilege = p.is_string() ? std::string(p.as_string()) : json::serialize(p);
        rows.push_back({Str(a, "principal"), privilege, ToUpperType(type), name});
      }
    }
  }
  if (rows.empty()) {
    std::cout << "No grants on " << s.full_name << " or what it inherits from"
              << (s.principal.empty() ? "" : " for " + s.principal) << ".\n";
    return 0;
  }
  PrintTable(std::cout, {"PRINCIPAL", "PRIVILEGE", "TYPE", "OBJECT"}, rows);
  return 0;
}

int RunStatement(Client& client, const std::vector<std::string>& words) {
  auto parsed = ParseGrantStatement(words);
  if (!parsed.ok()) return Fail(parsed.status());
  const GrantStatement& s = *parsed;
  if (s.verb == GrantVerb::kShow) return ShowGrants(client, s);
  json::array privileges;
  for (const auto& p : s.privileges) privileges.emplace_back(p);
  bool grant = s.verb == GrantVerb::kGrant;
  json::object change{{"principal", s.principal},
                      {"add", grant ? privileges : json::array()},
                      {"remove", grant ? json::array() : privileges}};
  json::object body{{"changes", json::array{change}}};
  auto r = client.Call("PATCH", PermissionsPath(s.securable_type, s.full_name), body);
  std::string what;
  for (const auto& p : s.privileges) what += (what.empty() ? "" : ", ") + p;
  return Done(r, std::string(grant ? "Granted " : "Revoked ") + what + " on " +
                     ToUpperType(s.securable_type) + " " + s.full_name +
                     (grant ? " to " : " from ") + s.principal);
}

// --- namespace: catalogs, schemas, tables

std::string Join(const json::value& v, std::string_view a, std::string_view b) {
  return Str(v, a) + "." + Str(v, b);
}

int PrintObject(const json::value& v) {
  std::cout << json::serialize(v) << "\n";
  return 0;
}

int ListNamespace(Client& client, const std::string& kind, const std::string& parent) {
  json::object query;
  std::vector<std::string> parts = SplitString(parent, '.');
  if (kind == "schemas") {
    if (parent.empty() || parts.size() != 1) {
      return Fail(Status::InvalidArgument("name the catalog: trainyard schemas list CATALOG"));
    }
    query["catalog_name"] = parent;
  } else if (kind == "tables") {
    if (parts.size() != 2 || parts[0].empty() || parts[1].empty()) {
      return Fail(Status::InvalidArgument(
          "name the schema as catalog.schema: trainyard tables list main.support"));
    }
    query["catalog_name"] = parts[0];
    query["schema_name"] = parts[1];
  }
  auto items = ListAll(client, kUc + "/" + kind, query, kind);
  if (!items.ok()) return Fail(items.status());
  std::vector<std::vector<std::string>> rows;
  for (const auto& v : *items) {
    std::string name = kind == "catalogs" ? Str(v, "name") : Str(v, "full_name");
    if (kind == "tables") name = Join(v, "catalog_name", "schema_name") + "." + Str(v, "name");
    std::vector<std::string> row = {name, Str(v, "owner"), FormatTime(Int(v, "created_at"))};
    if (kind == "tables") {
      row.push_back(Str(v, "table_type"));
      row.push_back(Str(v, "data_source_format"));
    }
    row.push_back(Str(v, "comment"));
    rows.push_back(std::move(row));
  }
  std::vector<std::string> header = {"NAME", "OWNER", "CREATED"};
  if (kind == "tables") header.insert(header.end(), {"TYPE", "FORMAT"});
  header.push_back("COMMENT");
  PrintTable(std::cout, header, rows);
  return 0;
}

// "id:LONG" -> a UC ColumnInfo (type_text and type_json as Spark writes them).
Result<json::object> ColumnFromSpec(const std::string& spec, int position) {
  struct Type {
    std::string_view name, text, json;
  };
  static const Type kTypes[] = {
      {"BOOLEAN", "boolean", "boolean"},
      {"BYTE", "tinyint", "byte"},
      {"SHORT", "smallint", "short"},
      {"INT", "int", "integer"},
      {"LONG", "bigint", "long"},
      {"FLOAT", "float", "float"},
      {"DOUBLE", "double", "double"},
      {"DATE", "date", "date"},
      {"TIMESTAMP", "timestamp", "timestamp"},
      {"STRING", "string", "string"},
      {"BINARY", "binary", "binary"},
  };
  size_t colon = spec.find(':');
  std::string name = colon == std::string::npos ? "" : spec.substr(0, colon);
  std::string type = colon == std::string::npos ? "" : spec.substr(colon + 1);
  for (char& c : type) c = static_cast<char>(std::toupper(c));
  for (const auto& t : kTypes) {
    if (name.empty() || t.name != type) continue;
    json::object type_json{
        {"name", name}, {"type", t.json}, {"nullable", true}, {"metadata", json::object()}};
    return json::object{{"name", name},         {"type_name", t.name},
                        {"type_text", t.text},  {"type_json", json::serialize(type_json)},
                        {"position", position}, {"nullable", true}};
  }
  return Status::InvalidArgument(
      "--column takes NAME:TYPE with TYPE one of BOOLEAN, BYTE, SHORT, INT, LONG, FLOAT, "
      "DOUBLE, DATE, TIMESTAMP, STRING, BINARY (got '" +
      spec + "')");
}

struct CreateArgs {
  std::string name, comment, location, format = "DELTA";
  std::vector<std::string> columns;
};

int CreateTable(Client& client, const CreateArgs& a) {
  std::vector<std::string> parts = SplitString(a.name, '.');
  if (parts.size() != 3) {
    return Fail(Status::InvalidArgument(
        "name the table as catalog.schema.table: trainyard tables create main.support.tickets"));
  }
  json::array columns;
  for (size_t i = 0; i < a.columns.size(); ++i) {
    auto c = ColumnFromSpec(a.columns[i], static_cast<int>(i));
    if (!c.ok()) return Fail(c.status());
    columns.emplace_back(std::move(*c));
  }
  json::object body{{"catalog_name", parts[0]},
                    {"schema_name", parts[1]},
                    {"name", parts[2]},
                    {"table_type", a.location.empty() ? "MANAGED" : "EXTERNAL"},
                    {"data_source_format", a.format},
                    {"columns", std::move(columns)}};
  if (!a.location.empty()) body["storage_location"] = a.location;
  if (!a.comment.empty()) body["comment"] = a.comment;
  return Done(client.Call("POST", kUc + "/tables", body), "Created table " + a.name);
}

int CreateNamespace(Client& client, const std::string& kind, const CreateArgs& a) {
  if (kind == "tables") return CreateTable(client, a);
  json::object body;
  if (kind == "schemas") {
    std::vector<std::string> parts = SplitString(a.name, '.');
    if (parts.size() != 2) {
      return Fail(Status::InvalidArgument(
          "name the schema as catalog.schema: trainyard schemas create main.support"));
    }
    body = {{"catalog_name", parts[0]}, {"name", parts[1]}};
  } else {
    body = {{"name", a.name}};
  }
  if (!a.comment.empty()) body["comment"] = a.comment;
  std::string singular = kind.substr(0, kind.size() - 1);
  return Done(client.Call("POST", kUc + "/" + kind, body), "Created " + singular + " " + a.name);
}

// --- groups, service principals, audit

int ListGroups(Client& client) {
  auto r = client.Call("GET", kGroups);
  if (!r.ok()) return Fail(r.status());
  std::vector<std::vector<std::string>> rows;
  for (const auto& g : Arr(*r, "groups")) {
    std::string members;
    for (const auto& m : Arr(g, "members")) {
      members += (members.empty() ? "" : ", ") +
                 (m.is_string() ? std::string(m.as_string()) : json::serialize(m));
    }
    rows.push_back(
        {Str(g, "name"), members.empty() ? "(none)" : members, FormatTime(Int(g, "created_at"))});
  }
  PrintTable(std::cout, {"GROUP", "MEMBERS", "CREATED"}, rows, 80);
  return 0;
}

int ListServicePrincipals(Client& client) {
  auto r = client.Call("GET", kServicePrincipals);
  if (!r.ok()) return Fail(r.status());
  std::vector<std::vector<std::string>> rows;
  for (const auto& s : Arr(*r, "service_principals")) {
    rows.push_back({Str(s, "name"), Str(s, "created_by"), FormatTime(Int(s, "created_at"))});
  }
  PrintTable(std::cout, {"SERVICE PRINCIPAL", "CREATED BY", "CREATED"}, rows);
  return 0;
}

struct AuditArgs {
  std::string user, securable, outcome;
  int max = 100;
};

int ShowAudit(Client& client, const AuditArgs& a) {
  json::object query{{"max_results", a.max}};
  if (!a.user.empty()) query["user"] = a.user;
  if (!a.securable.empty()) query["securable"] = a.securable;
  if (!a.outcome.empty()) query["outcome"] = a.outcome;
  auto r = client.Call("GET", "/api/trainyard/v1/catalog/audit", query);
  if (!r.ok()) return Fail(r.status());
  std::vector<std::vector<std::string>> rows;
  for (const auto& e : Arr(*r, "events")) {
    rows.push_back({FormatTime(Int(e, "timestamp")), Str(e, "user"), Str(e, "privilege"),
                    Str(e, "securable_type") + " " + Str(e, "securable"), Str(e, "outcome"),
                    Str(e, "reason")});
  }
  PrintTable(std::cout, {"TIME", "USER", "PRIVILEGE", "SECURABLE", "OUTCOME", "REASON"}, rows, 60);
  return 0;
}

// `name` as registered by another command group (the tables commands of issue 15 share
// `trainyard tables`), or a new subcommand.
CLI::App* ExistingOrNew(CLI::App& app, const std::string& name, const std::string& help) {
  auto found = app.get_subcommands([&name](CLI::App* c) { return c->get_name() == name; });
  CLI::App* group = found.empty() ? app.add_subcommand(name, help) : found.front();
  group->require_subcommand(1);
  return group;
}

struct Args {
  std::vector<std::string> words;
  CreateArgs create;
  std::string name, member;
  bool force = false;
  AuditArgs audit;
};
using Runner = std::function<std::optional<int>(Client&)>;

// Registers commands and remembers how to run each.
struct Registrar {
  std::shared_ptr<Args> a;
  const std::function<void(CLI::App*)>& add_client_options;
  std::vector<std::pair<CLI::App*, Runner>> commands;

  void Add(CLI::App* cmd, Runner run) {
    add_client_options(cmd);
    commands.emplace_back(cmd, std::move(run));
  }
};

void AddStatementCommands(CLI::App& app, Registrar& reg) {
  auto a = reg.a;
  for (std::string verb : {"grant", "revoke", "show"}) {
    std::string help = verb == "grant"    ? "grant privileges: trainyard grant SELECT ON TABLE "
                                            "main.support.tickets TO data-scientists"
                       : verb == "revoke" ? "revoke privileges: trainyard revoke SELECT ON TABLE "
                                            "main.support.tickets FROM data-scientists"
                                          : "show grants (inherited ones too): trainyard show "
                                            "grants ON TABLE main.support.tickets";
    auto* cmd = app.add_subcommand(verb, help);
    cmd->add_option("statement", a->words, "the rest of the statement")->required();
    reg.Add(cmd, [a, verb](Client& c) -> std::optional<int> {
      std::vector<std::string> words = {verb};
      words.insert(words.end(), a->words.begin(), a->words.end());
      return RunStatement(c, words);
    });
  }
}

void AddNamespaceCommands(CLI::App& app, Registrar& reg) {
  auto a = reg.a;
  for (std::string kind : {"catalogs", "schemas", "tables"}) {
    std::string one = kind.substr(0, kind.size() - 1);
    std::string example = kind == "catalogs"  ? "main"
                          : kind == "schemas" ? "main.support"
                                              : "main.support.tickets";
    auto* group = ExistingOrNew(app, kind, "the catalog's " + kind + ": list, get, create, delete");
    auto* list = group->add_subcommand("list", "list " + kind);
    if (kind != "catalogs") {
      list->add_option("parent", a->name, kind == "schemas" ? "catalog" : "catalog.schema")
          ->required();
    }
    reg.Add(list,
            [a, kind](Client& c) -> std::optional<int> { return ListNamespace(c, kind, a->name); });
    auto* get = group->add_subcommand("get", "show a " + one + " as JSON");
    get->add_option("name", a->name, "full name, e.g. " + example)->required();
    reg.Add(get, [a, kind](Client& c) -> std::optional<int> {
      auto r = c.Call("GET", kUc + "/" + kind + "/" + UrlEncode(a->name));
      return r.ok() ? PrintObject(*r) : Fail(r.status());
    });
    auto* create = group->add_subcommand("create", "create a " + one);
    create->add_option("name", a->create.name, "full name, e.g. " + example)->required();
    create->add_option("--comment", a->create.comment, "a description");
    if (kind == "tables") {
      create->add_option("--column", a->create.columns, "NAME:TYPE (repeatable, in order)");
      create->add_option("--location", a->create.location,
                         "an EXTERNAL table's storage location (default: MANAGED)");
      create->add_option("--format", a->create.format, "data source format")->capture_default_str();
    }
    reg.Add(create, [a, kind](Client& c) -> std::optional<int> {
      return CreateNamespace(c, kind, a->create);
    });
    auto* del = group->add_subcommand("delete", "delete a " + one);
    del->add_option("name", a->name, "full name, e.g. " + example)->required();
    if (kind != "tables") del->add_flag("--force", a->force, "also delete what it contains");
    reg.Add(del, [a, kind, one](Client& c) -> std::optional<int> {
      std::string path = kUc + "/" + kind + "/" + UrlEncode(a->name);
      if (a->force) path += "?force=true";
      return Done(c.Call("DELETE", path), "Deleted " + one + " " + a->name);
    });
  }
}

void AddGroupCommands(CLI::App& app, Registrar& reg) {
  auto a = reg.a;
  auto* groups = app.add_subcommand("groups", "groups of users, service principals and groups");
  groups->require_subcommand(1);
  auto* g_create = groups->add_subcommand("create", "create a group (admins)");
  g_create->add_option("name", a->name, "group name")->required();
  reg.Add(g_create, [a](Client& c) -> std::optional<int> {
    return Done(c.Call("POST", kGroups, {{"name", a->name}}), "Created group " + a->name);
  });
  auto* g_list = groups->add_subcommand("list", "list groups and their members");
  reg.Add(g_list, [](Client& c) -> std::optional<int> { return ListGroups(c); });
  auto* g_add = groups->add_subcommand("add-member", "add a user, service principal or group");
  auto* g_remove = groups->add_subcommand("remove-member", "remove a member");
  for (auto* cmd : {g_add, g_remove}) {
    cmd->add_option("group", a->name, "group name")->required();
    cmd->add_option("member", a->member, "user, service principal or group")->required();
  }
  reg.Add(g_add, [a](Client& c) -> std::optional<int> {
    auto r =
        c.Call("POST", kGroups + "/" + UrlEncode(a->name) + "/members", {{"member", a->member}});
    return Done(r, "Added " + a->member + " to group " + a->name);
  });
  reg.Add(g_remove, [a](Client& c) -> std::optional<int> {
    auto r =
        c.Call("DELETE", kGroups + "/" + UrlEncode(a->name) + "/members/" + UrlEncode(a->member));
    return Done(r, "Removed " + a->member + " from group " + a->name);
  });

  auto* sps = app.add_subcommand("service-principals", "identities for workloads");
  sps->require_subcommand(1);
  auto* sp_create = sps->add_subcommand("create", "create a service principal (admins)");
  sp_create->add_option("name", a->name, "service principal name")->required();
  reg.Add(sp_create, [a](Client& c) -> std::optional<int> {
    return Done(c.Call("POST", kServicePrincipals, {{"name", a->name}}),
                "Created service principal " + a->name +
                    " (make it a token with 'trainyard token create --user " + a->name + "')");
  });
  auto* sp_use = sps->add_subcommand(
      "grant-use", "let a user run jobs as a service principal (run_as); admins or MANAGE");
  sp_use->add_option("name", a->name, "service principal name")->required();
  sp_use->add_option("user", a->member, "the user who may use it")->required();
  sp_use->add_flag("--manage", a->force, "also let the user grant its use to others");
  reg.Add(sp_use, [a](Client& c) -> std::optional<int> {
    std::string privilege = a->force ? "MANAGE" : "EDIT";
    return Done(c.Call("POST", "/api/trainyard/v1/grants/service_principal",
                       {{"id", a->name}, {"user", a->member}, {"privilege", privilege}}),
                "Granted " + a->member + " the use of service principal " + a->name +
                    (a->force ? " (and the right to grant it)" : "") +
                    ": jobs with 'run_as: " + a->name + "' may now be submitted by " + a->member);
  });
  auto* sp_list = sps->add_subcommand("list", "list service principals");
  reg.Add(sp_list, [](Client& c) -> std::optional<int> { return ListServicePrincipals(c); });
}

void AddAuditCommand(CLI::App& app, Registrar& reg) {
  auto a = reg.a;
  auto* audit = app.add_subcommand("audit", "who accessed which catalog object, allowed or denied");
  audit->add_option("--user", a->audit.user, "only this user's decisions");
  audit->add_option("--securable", a->audit.securable,
                    "only this object: '<type> <full name>', e.g. 'table main.a.b'");
  audit->add_option("--outcome", a->audit.outcome, "allow or deny")
      ->check(CLI::IsMember({"allow", "deny"}));
  audit->add_option("--max", a->audit.max, "at most this many, newest first")
      ->capture_default_str();
  reg.Add(audit, [a](Client& c) -> std::optional<int> { return ShowAudit(c, a->audit); });
}

}  // namespace

std::function<std::optional<int>(Client&)> AddCatalogCommands(
    CLI::App& app, const std::function<void(CLI::App*)>& add_client_options) {
  Registrar reg{std::make_shared<Args>(), add_client_options, {}};
  AddStatementCommands(app, reg);
  AddNamespaceCommands(app, reg);
  AddGroupCommands(app, reg);
  AddAuditCommand(app, reg);
  return [commands = std::move(reg.commands)](Client& client) -> std::optional<int> {
    for (const auto& [cmd, run] : commands) {
      if (cmd->parsed()) return run(client);
    }
    return std::nullopt;
  };
}

}  // namespace trainyard::cli
