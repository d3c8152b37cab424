#include "trainyard/api/request_lineage_api.h"

#include <set>
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
  json::array runs, jobs, tables;
  if (graph.ok()) {
    std::set<std::string> run_ids;
    for (const auto& n : graph->nodes) {
      if (n.redacted) continue;
      if (n.ref.type == lineage::NodeType::kRun) {
        runs.emplace_back(n.ref.key);
        run_ids.insert(n.id);
      }
      if (n.ref.type == lineage::NodeType::kJob) jobs.emplace_back(n.ref.key);
    }
    // The training data: the table versions a run upstream of the model version read.
    std::set<std::string> seen;
    for (const auto& e : graph->edges) {
      if (e.kind != lineage::EdgeKind::kRead || !run_ids.count(e.to)) continue;
      for (const auto& n : graph->nodes) {
        if (n.id != e.from || n.redacted || n.ref.type != lineage::NodeType::kTable) continue;
        if (!seen.insert(n.id).second) continue;
        tables.emplace_back(json::object{{"table", n.ref.key}, {"version", *n.ref.version}});
      }
    }
    o["lineage"] = LineageGraphToJson(*graph);
  } else {
    o["lineage"] = nullptr;
    o["lineage_error"] = graph.status().message();
  }
  o["runs"] = std::move(runs);
  o["jobs"] = std::move(jobs);
  o["training_tables"] = std::move(tables);
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
