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
                      {"ended_at", e.ended_at},
                      {"recorded_by", e.recorded_by}};
}

Result<lineage::ColumnLineageQuery> DecodeColumnsQuery(const json::object& q) {
  lineage::ColumnLineageQuery query;
  TY_ASSIGN_OR_RETURN(auto table, OptionalString(q, "table"));
  if (!table || table->empty()) {
    return Status::InvalidArgument(
        "table is required: catalog.schema.table, e.g. "
        "table=main.support.train&version=1");
  }
  query.table = *table;
  TY_ASSIGN_OR_RETURN(auto version, OptionalString(q, "version"));
  if (!version || version->empty()) {
    return Status::InvalidArgument(
        "version is required: the table version (see 'trainyard "
        "tables history " +
        query.table + "')");
  }
  auto parsed = ParseInt64(*version);
  if (!parsed || *parsed < 0) {
    return Status::InvalidArgument("version must be a table version, 0 or more (got '" +
                                   Abbreviate(*version) + "')");
  }
  query.version = *parsed;
  TY_ASSIGN_OR_RETURN(auto column, OptionalString(q, "column"));
  query.column = column.value_or("");
  for (const auto& kv : q) {
    if (kv.key() != "table" && kv.key() != "version" && kv.key() != "column") {
      return Status::InvalidArgument(std::string(kv.key()) +
                                     " is not a parameter of lineage/columns (table, version, "
                                     "column)");
    }
  }
  return query;
}

json::object ColumnToJson(const lineage::StoredColumn& c) {
  json::array from;
  for (const auto& s : c.lineage.source_columns) from.emplace_back(s);
  json::object source{{"table", c.lineage.source.key}};
  if (c.lineage.source.version) source["version"] = *c.lineage.source.version;
  return json::object{{"column", c.lineage.column},
                      {"source", std::move(source)},
                      {"source_columns", std::move(from)},
                      {"transform", c.lineage.transform},
                      {"job_id", c.job_id},
                      {"run_id", c.run_id},
                      {"created_at", c.created_at},
                      {"recorded_by", c.recorded_by}};
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
  api.Route(http::Method::kGet, kTrainyardPrefixes, "/lineage/columns",
            [&lineage](Call& c) -> Result<json::value> {
              TY_ASSIGN_OR_RETURN(lineage::ColumnLineageQuery query, DecodeColumnsQuery(c.body));
              TY_ASSIGN_OR_RETURN(auto columns, lineage.Columns(c.principal, query));
              json::array out;
              for (const auto& col : columns) out.emplace_back(ColumnToJson(col));
              return json::object{
                  {"table", query.table}, {"version", query.version}, {"columns", std::move(out)}};
            });
}

}  // namespace trainyard::api
