#include "trainyard/api/request_lineage_api.h"

#include <map>
#include <string>

#include "trainyard/api/lineage_api.h"

namespace trainyard::api {

Result<std::string> RequestIdFromResponseId(std::string_view id) {
  for (std::string_view prefix : {"chatcmpl-", "cmpl-"}) {
    if (id.substr(0, prefix.size()) == prefix) {
      id.remove_prefix(prefix.size());
      break;
    }
  }
  bool ok = !id.empty() && id.size() <= 64;
  for (char c : id) {
    if (!std::isxdigit(static_cast<unsigned char>(c))) ok = false;
  }
  if (!ok) {
    return Status::InvalidArgument(
        "request_id: '" + std::string(id.substr(0, 80)) +
        "' is not a request id; use a response's x-request-id header or its \"id\"");
  }
  return std::string(id);
}

namespace {

json::object RequestLineageToJson(const serving::IndexedRequest& r,
                                  const Result<lineage::LineageGraph>& graph) {
  json::object o{{"request_id", r.request_id},       {"endpoint", r.endpoint},
                 {"served_entity", r.served_entity}, {"model", r.model},
                 {"model_version", r.model_version}, {"timestamp_ms", r.timestamp_ms},
                 {"latency_ms", r.latency_ms},       {"status", r.status}};
  if (!r.capture_table.empty()) {
    json::object capture{{"table", r.capture_table}};
    if (r.capture_table_version >= 0) capture["version"] = r.capture_table_version;
    o["capture"] = std::move(capture);
  }
  // The run that produced the version, that run's job, the table versions that run read;
  // everything else upstream (a prep job's run and its raw tables) is in `lineage`.
  std::string run_node, run_id, job_id;
  json::array training, upstream;
  if (graph.ok()) {
    std::map<std::string, const lineage::GraphNode*> nodes;
    for (const auto& n : graph->nodes) {
      if (!n.redacted) nodes[n.id] = &n;
    }
    for (const auto& e : graph->edges) {
      if (e.kind == lineage::EdgeKind::kProduced && e.to == graph->root && nodes.count(e.from)) {
        run_node = e.from;
        run_id = nodes[e.from]->ref.key;
      }
    }
    for (const auto& e : graph->edges) {
      if (run_node.empty() || e.to != run_node || !nodes.count(e.from)) continue;
      const lineage::GraphNode& from = *nodes[e.from];
      if (e.kind == lineage::EdgeKind::kLoggedTo && from.ref.type == lineage::NodeType::kJob) {
        job_id = from.ref.key;
      }
      if (e.kind == lineage::EdgeKind::kRead && from.ref.type == lineage::NodeType::kTable) {
        training.emplace_back(
            json::object{{"table", from.ref.key}, {"version", *from.ref.version}});
      }
    }
    for (const auto& [id, n] : nodes) {
      if (n->ref.type == lineage::NodeType::kTable) {
        upstream.emplace_back(json::object{{"table", n->ref.key}, {"version", *n->ref.version}});
      }
    }
    o["lineage"] = LineageGraphToJson(*graph);
  } else {
    o["lineage"] = nullptr;
    o["lineage_error"] = graph.status().message();
  }
  if (!run_id.empty()) o["run_id"] = run_id;
  if (!job_id.empty()) o["job_id"] = job_id;
  o["training_tables"] = std::move(training);
  o["upstream_tables"] = std::move(upstream);
  return o;
}

}  // namespace

void RegisterRequestLineageRoute(Api& api, serving::ServingService& serving,
                                 lineage::LineageService& lineage) {
  api.Route(http::Method::kGet, kTrainyardPrefixes, "/lineage/requests/{request_id}",
            [&serving, &lineage](Call& c) -> Result<json::value> {
              TY_ASSIGN_OR_RETURN(std::string id,
                                  RequestIdFromResponseId(c.request.path_params.at("request_id")));
              TY_ASSIGN_OR_RETURN(serving::IndexedRequest r, serving.FindRequest(c.principal, id));
              lineage::NodeRef version{lineage::NodeType::kModelVersion, r.model, r.model_version};
              Result<lineage::LineageGraph> graph = lineage.Upstream(c.principal, version);
              if (!graph.ok() && graph.status().IsNotFound()) {
                // No lineage recorded for the version (registered without a run).
                graph = lineage::LineageGraph{
                    lineage::FormatNodeRef(version), lineage::Direction::kUpstream, {}, {}, false};
              }
              return RequestLineageToJson(r, graph);
            });
}

}  // namespace trainyard::api
