#include "trainyard/cli/lineage_commands.h"

#include <CLI/CLI.hpp>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "trainyard/cli/client.h"
#include "trainyard/cli/table.h"
#include "trainyard/common/strings.h"

namespace trainyard::cli {
namespace {

struct Options {
  CLI::App* request = nullptr;
  std::string request_id;
  CLI::App* upstream = nullptr;
  CLI::App* downstream = nullptr;
  CLI::App* both = nullptr;
  std::string object;
  int depth = 10;
  int max_nodes = 500;
  bool json = false;
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

std::string RenderLineageTree(const json::value& graph, bool upstream) {
  Tree t;
  t.upstream = upstream;
  for (const auto& n : Arr(graph, "nodes")) t.nodes[Str(n, "id")] = n;
  for (const auto& e : Arr(graph, "edges")) {
    std::string from = Str(e, "from");
    std::string to = Str(e, "to");
    if (upstream) {
      t.children[to].push_back({Str(e, "kind"), from});
    } else {
      t.children[from].push_back({Str(e, "kind"), to});
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
      "lineage", "what an object came from, or what was made from it (tables, jobs, runs, ...)");
  cmd->require_subcommand(1);
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
    return std::nullopt;
  };
}

}  // namespace trainyard::cli
