#include "trainyard/lineage/lineage_service.h"

#include <map>
#include <utility>

namespace trainyard::lineage {

LineageService::LineageService(store::Database& db, Clock& clock, identity::Authorizer& authz,
                               ObjectDirectory& directory)
    : store_(db), clock_(clock), authz_(authz), directory_(directory) {}

Result<std::vector<NewEdge>> LineageService::Rows(const identity::Principal& who,
                                                  std::vector<EdgeRecord> edges, int64_t now) {
  if (who.user.empty()) return Status::InvalidArgument("recorded_by: the caller has no user");
  std::vector<NewEdge> rows;
  for (EdgeRecord& r : edges) {
    Edge e{std::move(r.from),   std::move(r.to),      r.kind, std::move(r.job_id),
           std::move(r.run_id), std::move(r.columns), now,    who.user};
    TY_RETURN_IF_ERROR(ValidateEdge(e));
    for (const std::string* display : {&r.from_display, &r.to_display}) {
      if (display->size() > kMaxDisplayNameLength) {
        return Status::InvalidArgument("display name is longer than " +
                                       std::to_string(kMaxDisplayNameLength) + " bytes");
      }
    }
    rows.push_back({std::move(e), std::move(r.from_display), std::move(r.to_display)});
  }
  return rows;
}

Status LineageService::Store(const identity::Principal& who, std::vector<EdgeRecord> edges,
                             std::vector<StoredColumn> columns) {
  int64_t now = clock_.NowMillis();
  TY_ASSIGN_OR_RETURN(std::vector<NewEdge> rows, Rows(who, std::move(edges), now));
  for (StoredColumn& c : columns) {
    c.created_at = now;
    c.recorded_by = who.user;
  }
  return store_.RecordEdges(rows, columns).status();
}

Status LineageService::Record(const identity::Principal& who, const EdgeRecord& edge) {
  return Store(who, {edge});
}

Status LineageService::RecordTableRead(const identity::Principal& who,
                                       const TableReadRecord& read) {
  EdgeRecord e;
  e.from = {NodeType::kTable, read.table, read.version};
  e.to = read.reader;
  e.kind = EdgeKind::kRead;
  e.job_id = read.job_id;
  e.run_id = read.run_id;
  return Store(who, {std::move(e)});
}

Status LineageService::RecordTableWrite(const identity::Principal& who,
                                        const TableWriteRecord& write) {
  NodeRef table{NodeType::kTable, write.table, write.version};
  std::vector<EdgeRecord> edges;
  EdgeRecord wrote;
  wrote.from = write.writer;
  wrote.to = table;
  wrote.kind = EdgeKind::kWrote;
  wrote.job_id = write.job_id;
  wrote.run_id = write.run_id;
  edges.push_back(std::move(wrote));
  std::vector<StoredColumn> columns;
  std::vector<ColumnLineage> checked;
  for (const TableSource& s : write.sources) {
    for (const auto& [column, transform] : s.column_transforms) {
      ColumnLineage c{column, {NodeType::kTable, s.table, s.version}, {}, transform};
      if (auto it = s.columns.find(column); it != s.columns.end()) c.source_columns = it->second;
      checked.push_back(c);
      columns.push_back({table, std::move(c), write.job_id, write.run_id, 0, ""});
    }
    EdgeRecord derived;
    derived.from = {NodeType::kTable, s.table, s.version};
    derived.to = table;
    derived.kind = EdgeKind::kDerivedFrom;
    derived.job_id = write.job_id;
    derived.run_id = write.run_id;
    derived.columns = s.columns;
    edges.push_back(std::move(derived));
  }
  TY_RETURN_IF_ERROR(ValidateColumnLineage(table, checked));
  return Store(who, std::move(edges), std::move(columns));
}

Status LineageService::RecordServing(const identity::Principal& who, const std::string& endpoint,
                                     const std::vector<ServedVersion>& versions) {
  NodeRef to{NodeType::kEndpoint, endpoint, std::nullopt};
  TY_RETURN_IF_ERROR(ValidateNodeRef(to, "endpoint"));
  std::vector<EdgeRecord> edges;
  for (const ServedVersion& v : versions) {
    EdgeRecord e;
    e.from = {NodeType::kModelVersion, v.model, v.version};
    e.to = to;
    e.kind = EdgeKind::kServes;
    e.from_display = v.model + " v" + std::to_string(v.version);
    e.to_display = endpoint;
    edges.push_back(std::move(e));
  }
  int64_t now = clock_.NowMillis();
  TY_ASSIGN_OR_RETURN(std::vector<NewEdge> rows, Rows(who, std::move(edges), now));
  return store_.RecordServing(to, rows, now);
}

Result<std::vector<StoredColumn>> LineageService::Columns(const identity::Principal& who,
                                                          const ColumnLineageQuery& query) {
  NodeRef table{NodeType::kTable, query.table, query.version};
  TY_RETURN_IF_ERROR(ValidateNodeRef({NodeType::kTable, query.table, 0}, "table"));
  if (query.version < 0) {
    return Status::InvalidArgument("version must be a table version, 0 or more (got " +
                                   std::to_string(query.version) + ")");
  }
  // Seeing a table's columns' lineage is reading the table (SELECT on a catalog table).
  TY_RETURN_IF_ERROR(authz_.Authorize(who, identity::Action::kRead, {"table", query.table, ""}));
  TY_ASSIGN_OR_RETURN(std::vector<StoredColumn> all, store_.ColumnsOf(table));
  if (all.empty() && store_.GetNode(table).status().IsNotFound()) {
    return Status::NotFound("table: no lineage is recorded for " + query.table + " at version " +
                            std::to_string(query.version) +
                            "; check the name and version ('trainyard tables history " +
                            query.table + "')");
  }
  if (query.column.empty()) return all;
  std::vector<StoredColumn> out;
  for (auto& c : all) {
    if (c.lineage.column == query.column) out.push_back(std::move(c));
  }
  if (out.empty()) {
    return Status::NotFound("column: no lineage is recorded for column '" + query.column + "' of " +
                            query.table + "@" + std::to_string(query.version) +
                            "; leave column out to list the columns that have some");
  }
  return out;
}

Status LineageService::MayRead(const identity::Principal& who, const NodeRef& node,
                               std::string* display) {
  auto found = directory_.Find(node);
  if (found.ok()) {
    if (display != nullptr && display->empty()) *display = found->display_name;
    if (found->authorize) return found->authorize(who);
    return authz_.Authorize(who, identity::Action::kRead, found->governing, found->accessed);
  }
  if (!found.status().IsNotFound()) return found.status();
  identity::Securable generic{std::string(NodeTypeName(node.type)), FormatNodeRef(node), ""};
  return authz_.Authorize(who, identity::Action::kRead, generic);
}

Status LineageService::AuthorizeStart(const identity::Principal& who, const NodeRef& start) {
  auto found = directory_.Find(start);
  if (found.ok()) {
    if (found->authorize) return found->authorize(who);
    return authz_.Authorize(who, identity::Action::kRead, found->governing, found->accessed);
  }
  if (!found.status().IsNotFound()) return found.status();
  auto stored = store_.GetNode(start);
  if (!stored.ok()) {
    if (!stored.status().IsNotFound()) return stored.status();
    return Status::NotFound("no " + std::string(NodeTypeName(start.type)) + " " +
                            FormatNodeRef(start) +
                            " is known and no lineage is recorded for it; check the name and "
                            "version");
  }
  return MayRead(who, start, nullptr);
}

Result<LineageGraph> LineageService::Query(const identity::Principal& who,
                                           const LineageQuery& query) {
  TY_RETURN_IF_ERROR(ValidateNodeRef(query.start, "object"));
  TY_RETURN_IF_ERROR(ValidateLimits(query.limits));
  TY_RETURN_IF_ERROR(AuthorizeStart(who, query.start));
  EdgeSource edges = [this](const std::vector<std::string>& ids, Direction direction,
                            size_t limit) { return store_.EdgesOf(ids, direction, limit); };
  TY_ASSIGN_OR_RETURN(Traversal walk, Traverse(query.start, query.direction, query.limits, edges));
  TY_ASSIGN_OR_RETURN(LineageGraph graph, Redact(who, query.start, std::move(walk)));
  graph.direction = query.direction;
  return graph;
}

Result<LineageGraph> LineageService::Redact(const identity::Principal& who, const NodeRef& start,
                                            Traversal walk) {
  std::vector<NodeRef> refs;
  for (const auto& n : walk.nodes) refs.push_back(n.ref);
  TY_ASSIGN_OR_RETURN(std::vector<StoredNode> stored, store_.GetNodes(refs));
  std::map<std::string, StoredNode> by_id;
  for (auto& s : stored) by_id[FormatNodeRef(s.ref)] = std::move(s);
  LineageGraph graph;
  graph.root = FormatNodeRef(start);
  graph.truncated = walk.truncated;
  std::map<std::string, std::string> shown_id;  // canonical id → id in the answer
  for (const VisitedNode& v : walk.nodes) {
    std::string id = FormatNodeRef(v.ref);
    GraphNode node;
    node.depth = v.depth;
    if (auto it = by_id.find(id); it != by_id.end()) {
      node.display_name = it->second.display_name;
      node.created_at = it->second.created_at;
    }
    bool readable = v.depth == 0 || MayRead(who, v.ref, &node.display_name).ok();
    if (readable) {
      node.id = id;
      node.ref = v.ref;
    } else {
      node = GraphNode{"redacted:" + std::to_string(graph.nodes.size()),
                       true,
                       NodeRef{v.ref.type, "", std::nullopt},
                       "",
                       0,
                       v.depth};
    }
    shown_id[id] = node.id;
    graph.nodes.push_back(std::move(node));
  }
  for (Edge& e : walk.edges) {
    GraphEdge out;
    out.from = shown_id[FormatNodeRef(e.from)];
    out.to = shown_id[FormatNodeRef(e.to)];
    out.kind = e.kind;
    out.created_at = e.created_at;
    out.ended_at = e.ended_at;
    if (out.from.rfind("redacted:", 0) != 0 && out.to.rfind("redacted:", 0) != 0) {
      out.job_id = std::move(e.job_id);
      out.run_id = std::move(e.run_id);
      out.columns = std::move(e.columns);
      out.recorded_by = std::move(e.recorded_by);
    }
    graph.edges.push_back(std::move(out));
  }
  return graph;
}

Result<LineageGraph> LineageService::Upstream(const identity::Principal& who, const NodeRef& node,
                                              const TraversalLimits& limits) {
  return Query(who, {node, Direction::kUpstream, limits});
}

Result<LineageGraph> LineageService::Downstream(const identity::Principal& who, const NodeRef& node,
                                                const TraversalLimits& limits) {
  return Query(who, {node, Direction::kDownstream, limits});
}

}  // namespace trainyard::lineage
