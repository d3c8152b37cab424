#include "trainyard/cli/lineage_commands.h"

#include <CLI/CLI.hpp>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <vector>

#include "trainyard/cli/client.h"
#include "trainyard/cli/table.h"
#include "trainyard/common/strings.h"

namespace trainyard::cli {
namespace {

struct Options {
  CLI::App* cmd = nullptr;
  CLI::App* request = nullptr;
  std::string request_id;
  CLI::App* upstream = nullptr;
  CLI::App* downstream = nullptr;
  CLI::App* both = nullptr;
  std::string object;
  int depth = 10;
  int max_nodes = 500;
  bool json = false;
  // `trainyard lineage TABLE@VERSION --columns [--column C]`
  std::string table_version;
  bool columns = false;
  std::string column;
};

struct Link {
  std::string kind;
  std::string node;
};

std::string Label(const json::value& node) {
  if (node.is_null()) return "?";
  if (node.as_object().contains("redacted") && node.at("redacted").as_bool()) {
    return "<" + Str(node, "type") + ": not visible to you>";
  }
  std::string label = Str(node, "id");
  std::string display = Str(node, "display_name");
  if (!display.empty() && display != Str(node, "key")) label += "  (" + display + ")";
  return label;
}

struct Tree {
  std::map<std::string, json::value> nodes;
  std::map<std::string, std::vector<Link>> children;
  std::set<std::string> expanded;
  bool upstream = true;
  std::string out;

  void Print(const std::string& id, const std::string& prefix) {
    auto it = children.find(id);
    if (it == children.end()) return;
    const auto& links = it->second;
    for (size_t i = 0; i < links.size(); ++i) {
      bool last = i + 1 == links.size();
      const Link& l = links[i];
      std::string arrow = upstream ? " <- " : " -> ";
      // An edge that stopped holding (an endpoint that served this version before).
      auto node = nodes.find(l.node);
      std::string label = node == nodes.end() ? l.node : Label(node->second);
      bool again = !expanded.insert(l.node).second;
      out += prefix + (last ? "└─ " : "├─ ") + l.kind + arrow + label +
             (again && children.count(l.node) > 0 ? "  (see above)" : "") + "\n";
      if (!again) Print(l.node, prefix + (last ? "   " : "│  "));
    }
  }
};

int Run(Client& client, const Options& o, const std::string& direction) {
  json::object query{{"object", o.object},
                     {"direction", direction},
                     {"depth", std::to_string(o.depth)},
                     {"max_nodes", std::to_string(o.max_nodes)}};
  auto graph = client.Call("GET", "/api/trainyard/v1/lineage", query);
  if (!graph.ok()) return Fail(graph.status());
  if (o.json) {
    std::cout << json::serialize(*graph) << "\n";
    return 0;
  }
  if (direction != "downstream") std::cout << RenderLineageTree(*graph, true);
  if (direction == "both") std::cout << "\n";
  if (direction != "upstream") std::cout << RenderLineageTree(*graph, false);
  if (graph->at("truncated").as_bool()) {
    std::cout << "(more lineage exists beyond --depth " << o.depth << " or --max-nodes "
              << o.max_nodes << ")\n";
  }
  return 0;
}

int RunColumns(Client& client, const Options& o) {
  size_t at = o.table_version.rfind('@');
  if (at == std::string::npos || at == 0 || at + 1 == o.table_version.size()) {
    std::cerr << "error: name the table version as catalog.schema.table@VERSION, e.g. "
                 "main.support.train@1 (versions: 'trainyard tables history TABLE')\n";
    return 2;
  }
  json::object query{{"table", o.table_version.substr(0, at)},
                     {"version", o.table_version.substr(at + 1)}};
  if (!o.column.empty()) query["column"] = o.column;
  auto answer = client.Call("GET", "/api/trainyard/v1/lineage/columns", query);
  if (!answer.ok()) return Fail(answer.status());
  if (o.json) {
    std::cout << json::serialize(*answer) << "\n";
    return 0;
  }
  std::cout << RenderColumnLineage(*answer);
  return 0;
}

int RunRequest(Client& client, const Options& o) {
  auto r = client.Call("GET", "/api/trainyard/v1/lineage/requests/" + UrlEncode(o.request_id));
  if (!r.ok()) return Fail(r.status());
  if (o.json) {
    std::cout << json::serialize(*r) << "\n";
    return 0;
  }
  auto join = [](const json::array& items) {
    std::string out;
    for (const auto& v : items) {
      if (!out.empty()) out += ", ";
      out += v.is_string() ? std::string(v.as_string()) : Str(v, "table") + "@" + Str(v, "version");
    }
    return out.empty() ? std::string("(none recorded)") : out;
  };
  std::string capture = "(none)";
  if (r->as_object().contains("capture")) {
    const auto& c = r->at("capture");
    capture = Str(c, "table") +
              (Str(c, "version").empty() ? " (not yet appended)" : "@" + Str(c, "version"));
  }
  PrintTable(std::cout, {"FIELD", "VALUE"},
             {{"request", Str(*r, "request_id")},
              {"time", FormatTime(Int(*r, "timestamp_ms"))},
              {"status", Str(*r, "status") + " in " + Str(*r, "latency_ms") + " ms"},
              {"endpoint", Str(*r, "endpoint")},
              {"served entity", Str(*r, "served_entity")},
              {"model version", Str(*r, "model") + " v" + Str(*r, "model_version")},
              {"run", Str(*r, "run_id").empty() ? "(none recorded)" : Str(*r, "run_id")},
              {"job", Str(*r, "job_id").empty() ? "(none recorded)" : Str(*r, "job_id")},
              {"training tables", join(Arr(*r, "training_tables"))},
              {"upstream tables", join(Arr(*r, "upstream_tables"))},
              {"captured in", capture}},
             100);
  if (!Str(*r, "lineage_error").empty()) {
    std::cout << "\nlineage of the model version: " << Str(*r, "lineage_error") << "\n";
  } else if (!r->at("lineage").is_null()) {
    std::cout << "\n" << RenderLineageTree(r->at("lineage"), true);
  }
  return 0;
}

}  // namespace

std::string RenderColumnLineage(const json::value& answer) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& c : Arr(answer, "columns")) {
    std::string from;
    const json::value& source = c.at("source");
    std::string table =
        Str(source, "table") + "@" + std::to_string(source.at("version").as_int64());
    for (const auto& s : Arr(c, "source_columns")) {
      from += (from.empty() ? "" : ", ") + table + "." + std::string(s.as_string());
    }
    if (from.empty()) from = "(none: computed by the transform)";
    rows.push_back({Str(c, "column"), from, Str(c, "transform")});
  }
  std::string out = "columns of " + Str(answer, "table") + "@" +
                    std::to_string(answer.at("version").as_int64()) + "\n";
  if (rows.empty()) return out + "   (no column lineage recorded)\n";
  std::ostringstream table;
  PrintTable(table, {"COLUMN", "DERIVED FROM", "TRANSFORM"}, rows, 120);
  return out + table.str();
}

std::string RenderLineageTree(const json::value& graph, bool upstream) {
  Tree t;
  t.upstream = upstream;
  for (const auto& n : Arr(graph, "nodes")) t.nodes[Str(n, "id")] = n;
  for (const auto& e : Arr(graph, "edges")) {
    std::string from = Str(e, "from");
    std::string to = Str(e, "to");
    std::string kind = Str(e, "kind");
    const json::value* ended = e.as_object().if_contains("ended_at");
    if (ended != nullptr && ended->is_int64() && ended->as_int64() > 0)
      kind += " (until " + FormatTime(ended->as_int64()) + ")";
    if (upstream) {
      t.children[to].push_back({kind, from});
    } else {
      t.children[from].push_back({kind, to});
    }
  }
  std::string root = Str(graph, "root");
  auto node = t.nodes.find(root);
  t.out = (upstream ? "upstream of " : "downstream of ") +
          (node == t.nodes.end() ? root : Label(node->second)) + "\n";
  t.expanded.insert(root);
  t.Print(root, "");
  if (t.children[root].empty()) t.out += "   (none recorded)\n";
  return t.out;
}

std::function<std::optional<int>(Client&)> AddLineageCommands(
    CLI::App& app, const std::function<void(CLI::App*)>& add_client_options) {
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "lineage",
      "what an object came from, or what was made from it (tables, jobs, runs, ...); "
      "'trainyard lineage TABLE@VERSION --columns' shows where each column came from");
  o->cmd = cmd;
  cmd->require_subcommand(0, 1);
  cmd->add_option("table", o->table_version,
                  "with --columns: catalog.schema.table@VERSION, e.g. main.support.train@1");
  cmd->add_flag("--columns", o->columns,
                "each column of the table version, the columns it was derived from, and how");
  cmd->add_option("--column", o->column, "with --columns: only this column");
  cmd->add_flag("--json", o->json, "print the API's JSON");
  add_client_options(cmd);
  auto add = [&](const char* name, const char* help) {
    auto* sub = cmd->add_subcommand(name, help);
    sub->add_option("object", o->object,
                    "TYPE:KEY[@VERSION], e.g. table:main.support.train@7, "
                    "model_version:intent_model@3, job:j-1a2b, run:RUN_ID")
        ->required();
    sub->add_option("--depth", o->depth, "hops to follow (1-100)")->default_val(10);
    sub->add_option("--max-nodes", o->max_nodes, "most objects to show (1-5000)")->default_val(500);
    sub->add_flag("--json", o->json, "print the API's JSON instead of a tree");
    add_client_options(sub);
    return sub;
  };
  o->upstream = add("upstream", "what the object was made from, to any depth");
  o->downstream = add("downstream", "what was made from the object, to any depth");
  o->both = add("both", "both directions");
  o->request = cmd->add_subcommand(
      "request", "what served a request and what made it: endpoint, model version, run, job, data");
  o->request
      ->add_option("request_id", o->request_id,
                   "a response's x-request-id header or its OpenAI id (chatcmpl-...)")
      ->required();
  o->request->add_flag("--json", o->json, "print the API's JSON instead of a table");
  add_client_options(o->request);
  return [o](Client& client) -> std::optional<int> {
    if (o->request->parsed()) return RunRequest(client, *o);
    if (o->upstream->parsed()) return Run(client, *o, "upstream");
    if (o->downstream->parsed()) return Run(client, *o, "downstream");
    if (o->both->parsed()) return Run(client, *o, "both");
    if (!o->cmd->parsed()) return std::nullopt;
    if (!o->columns || o->table_version.empty()) {
      std::cerr << "error: say 'trainyard lineage upstream|downstream|both OBJECT', or "
                   "'trainyard lineage TABLE@VERSION --columns'\n";
      return 2;
    }
    return RunColumns(client, *o);
  };
}

}  // namespace trainyard::cli
