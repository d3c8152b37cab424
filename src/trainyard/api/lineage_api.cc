#include "trainyard/api/lineage_api.h"

#include "trainyard/common/strings.h"

namespace trainyard::api {
namespace {

using lineage::Direction;
using lineage::LineageQuery;

Result<LineageQuery> DecodeQuery(const json::object& q) {
  LineageQuery query;
  TY_ASSIGN_OR_RETURN(std::string object, RequiredString(q, "object"));
  TY_ASSIGN_OR_RETURN(query.start, lineage::ParseNodeRef(object, "object"));
  TY_ASSIGN_OR_RETURN(auto direction, OptionalString(q, "direction"));
  query.direction = Direction::kBoth;
  if (direction) {
    TY_ASSIGN_OR_RETURN(query.direction, lineage::ParseDirection(*direction));
  }
  TY_ASSIGN_OR_RETURN(auto depth, OptionalInt64(q, "depth"));
  if (depth) {
    if (*depth < 1 || *depth > lineage::kMaxDepth) {
      return Status::InvalidArgument("depth must be between 1 and " +
                                     std::to_string(lineage::kMaxDepth) + " (got " +
                                     std::to_string(*depth) + ")");
    }
    query.limits.max_depth = static_cast<int>(*depth);
  }
  TY_ASSIGN_OR_RETURN(auto max_nodes, OptionalInt64(q, "max_nodes"));
  if (max_nodes) {
    if (*max_nodes < 1 || *max_nodes > static_cast<int64_t>(lineage::kMaxNodes)) {
      return Status::InvalidArgument("max_nodes must be between 1 and " +
                                     std::to_string(lineage::kMaxNodes) + " (got " +
                                     std::to_string(*max_nodes) + ")");
    }
    query.limits.max_nodes = static_cast<size_t>(*max_nodes);
  }
  TY_ASSIGN_OR_RETURN(auto kinds, OptionalString(q, "kinds"));
  if (kinds && !kinds->empty()) {
    for (const std::string& k : SplitString(*kinds, ',')) {
      TY_ASSIGN_OR_RETURN(lineage::EdgeKind kind, lineage::ParseEdgeKind(k, "kinds"));
      query.limits.kinds.insert(kind);
    }
  }
  return query;
}

json::object NodeToJson(const lineage::GraphNode& n) {
  json::object o{{"id", n.id},
                 {"type", lineage::NodeTypeName(n.ref.type)},
                 {"depth", n.depth},
                 {"redacted", n.redacted}};
  if (n.redacted) return o;
  o["key"] = n.ref.key;
  if (n.ref.version) o["version"] = *n.ref.version;
  o["display_name"] = n.display_name;
  o["created_at"] = n.created_at;
  return o;
}

json::object EdgeToJson(const lineage::GraphEdge& e) {
  json::object columns;
  for (const auto& [target, sources] : e.columns) {
    json::array a;
    for (const auto& s : sources) a.emplace_back(s);
    columns[target] = std::move(a);
  }
  return json::object{{"from", e.from},
                      {"to", e.to},
                      {"kind", lineage::EdgeKindName(e.kind)},
                      {"job_id", e.job_id},
                      {"run_id", e.run_id},
                      {"column_mapping", std::move(columns)},
                      {"created_at", e.created_at},
                      {"recorded_by", e.recorded_by}};
}

}  // namespace

json::object LineageGraphToJson(const lineage::LineageGraph& graph) {
  json::array nodes;
  for (const auto& n : graph.nodes) nodes.emplace_back(NodeToJson(n));
  json::array edges;
  for (const auto& e : graph.edges) edges.emplace_back(EdgeToJson(e));
  return json::object{{"root", graph.root},
                      {"direction", lineage::DirectionName(graph.direction)},
                      {"nodes", std::move(nodes)},
                      {"edges", std::move(edges)},
                      {"truncated", graph.truncated}};
}

void RegisterLineageRoutes(Api& api, lineage::LineageService& lineage) {
  api.Route(http::Method::kGet, kTrainyardPrefixes, "/lineage",
            [&lineage](Call& c) -> Result<json::value> {
              TY_ASSIGN_OR_RETURN(LineageQuery query, DecodeQuery(c.body));
              TY_ASSIGN_OR_RETURN(lineage::LineageGraph graph, lineage.Query(c.principal, query));
              return LineageGraphToJson(graph);
            });
}

}  // namespace trainyard::api
