#include "trainyard/lineage/lineage_store.h"

#include <algorithm>

#include "trainyard/common/json.h"
#include "trainyard/store/sql.h"

namespace trainyard::lineage {
namespace {

using store::Row;
using store::Rows;
using store::Transaction;
using store::Value;

constexpr const char* kEdgeColumns =
    "from_node, to_node, kind, job_id, run_id, column_mapping, created_at, recorded_by, "
    "ended_at";
constexpr const char* kColumnColumns =
    "table_node, column_name, source_node, source_columns, transform, job_id, run_id, "
    "created_at, recorded_by";

Status UpsertNode(Transaction& tx, const NodeRef& ref, const std::string& display,
                  int64_t created_at) {
  TY_RETURN_IF_ERROR(store::Run(
      tx,
      "INSERT INTO lineage_nodes (node_id, type, node_key, version, display_name, created_at) "
      "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (node_id) DO NOTHING",
      {FormatNodeRef(ref), std::string(NodeTypeName(ref.type)), ref.key,
       store::NullIfUnset(ref.version), display, created_at}));
  if (display.empty()) return Status::Ok();
  return store::Run(tx,
                    "UPDATE lineage_nodes SET display_name = ? WHERE node_id = ? AND "
                    "display_name = ''",
                    {display, FormatNodeRef(ref)});
}

// One edge and its nodes; 1 when the edge was new, 0 when it was there.
Result<int64_t> InsertEdge(Transaction& tx, const NewEdge& e) {
  const Edge& edge = e.edge;
  TY_RETURN_IF_ERROR(UpsertNode(tx, edge.from, e.from_display, edge.created_at));
  TY_RETURN_IF_ERROR(UpsertNode(tx, edge.to, e.to_display, edge.created_at));
  return tx.Exec(
      std::string("INSERT INTO lineage_edges (") + kEdgeColumns +
          ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (from_node, to_node, kind) "
          "DO NOTHING",
      {FormatNodeRef(edge.from), FormatNodeRef(edge.to), std::string(EdgeKindName(edge.kind)),
       edge.job_id, edge.run_id, FormatColumnMapping(edge.columns), edge.created_at,
       edge.recorded_by, edge.ended_at});
}

Result<NodeRef> RefOf(const std::string& id) {
  auto ref = ParseNodeRef(id, "stored node");
  if (!ref.ok()) return Status::Internal("lineage store holds a damaged node id: " + id);
  return ref;
}

Result<Edge> EdgeOf(const Row& row) {
  Edge e;
  TY_ASSIGN_OR_RETURN(e.from, RefOf(row.Text(0)));
  TY_ASSIGN_OR_RETURN(e.to, RefOf(row.Text(1)));
  auto kind = ParseEdgeKind(row.Text(2));
  if (!kind.ok()) return Status::Internal("lineage store holds an unknown edge kind");
  e.kind = *kind;
  e.job_id = row.Text(3);
  e.run_id = row.Text(4);
  auto columns = ParseColumnMapping(row.Text(5));
  if (!columns.ok()) return Status::Internal("lineage store holds a damaged column mapping");
  e.columns = std::move(*columns);
  e.created_at = row.Int(6);
  e.recorded_by = row.Text(7);
  e.ended_at = row.Int(8);
  return e;
}

std::string FormatColumns(const std::vector<std::string>& columns) {
  json::array a;
  for (const auto& c : columns) a.emplace_back(c);
  return json::serialize(a);
}

Result<StoredColumn> ColumnOf(const Row& row) {
  StoredColumn c;
  TY_ASSIGN_OR_RETURN(NodeRef table, RefOf(row.Text(0)));
  c.table = std::move(table);
  c.lineage.column = row.Text(1);
  TY_ASSIGN_OR_RETURN(c.lineage.source, RefOf(row.Text(2)));
  auto columns = ParseJsonExact(row.Text(3));
  if (!columns.ok() || !columns->is_array()) {
    return Status::Internal("lineage store holds damaged source columns");
  }
  for (const auto& v : columns->as_array()) {
    if (!v.is_string()) return Status::Internal("lineage store holds damaged source columns");
    c.lineage.source_columns.emplace_back(v.as_string());
  }
  c.lineage.transform = row.Text(4);
  c.job_id = row.Text(5);
  c.run_id = row.Text(6);
  c.created_at = row.Int(7);
  c.recorded_by = row.Text(8);
  return c;
}

Result<StoredNode> NodeOf(const Row& row) {
  StoredNode n;
  TY_ASSIGN_OR_RETURN(n.ref, RefOf(row.Text(0)));
  n.display_name = row.Text(1);
  n.created_at = row.Int(2);
  return n;
}

}  // namespace

std::vector<store::Migration> LineageStore::Migrations() {
  return {{"lineage",
           1,
           {
               "CREATE TABLE lineage_nodes (node_id TEXT PRIMARY KEY, type TEXT NOT NULL, "
               "node_key TEXT NOT NULL, version BIGINT, display_name TEXT NOT NULL, created_at "
               "BIGINT NOT NULL)",
               "CREATE TABLE lineage_edges (from_node TEXT NOT NULL, to_node TEXT NOT NULL, kind "
               "TEXT NOT NULL, job_id TEXT NOT NULL, run_id TEXT NOT NULL, column_mapping TEXT NOT "
               "NULL, created_at BIGINT NOT NULL, recorded_by TEXT NOT NULL, PRIMARY KEY "
               "(from_node, to_node, kind))",
               "CREATE INDEX lineage_edges_by_to ON lineage_edges (to_node, from_node)",
           }},
          {"lineage",
           2,
           {
               // When an edge stopped holding (an endpoint stopped serving a version); 0 = holds.
               "ALTER TABLE lineage_edges ADD COLUMN ended_at BIGINT NOT NULL DEFAULT 0",
               // Column-level lineage: a table version's column, from a source table version.
               "CREATE TABLE lineage_columns (table_node TEXT NOT NULL, column_name TEXT NOT "
               "NULL, source_node TEXT NOT NULL, source_columns TEXT NOT NULL, transform TEXT NOT "
               "NULL, job_id TEXT NOT NULL, run_id TEXT NOT NULL, created_at BIGINT NOT NULL, "
               "recorded_by TEXT NOT NULL, PRIMARY KEY (table_node, column_name, source_node))",
           }}};
}

Result<int64_t> LineageStore::RecordEdges(const std::vector<NewEdge>& edges) {
  return RecordEdges(edges, {});
}

Result<int64_t> LineageStore::RecordEdges(const std::vector<NewEdge>& edges,
                                          const std::vector<StoredColumn>& columns) {
  int64_t added = 0;
  Status written = db_.Write([&](Transaction& tx) -> Status {
    added = 0;
    for (const NewEdge& e : edges) {
      TY_ASSIGN_OR_RETURN(int64_t n, InsertEdge(tx, e));
      added += n;
    }
    for (const StoredColumn& c : columns) {
      TY_RETURN_IF_ERROR(store::Run(
          tx,
          std::string("INSERT INTO lineage_columns (") + kColumnColumns +
              ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (table_node, column_name, "
              "source_node) DO NOTHING",
          {FormatNodeRef(c.table), c.lineage.column, FormatNodeRef(c.lineage.source),
           FormatColumns(c.lineage.source_columns), c.lineage.transform, c.job_id, c.run_id,
           c.created_at, c.recorded_by}));
    }
    return Status::Ok();
  });
  TY_RETURN_IF_ERROR(written);
  return added;
}

Status LineageStore::RecordServing(const NodeRef& endpoint, const std::vector<NewEdge>& serves,
                                   int64_t now) {
  return db_.Write([&](Transaction& tx) -> Status {
    std::vector<Value> keep{now, FormatNodeRef(endpoint)};
    for (const NewEdge& e : serves) {
      TY_RETURN_IF_ERROR(InsertEdge(tx, e).status());
      TY_RETURN_IF_ERROR(store::Run(tx,
                                    "UPDATE lineage_edges SET ended_at = 0 WHERE from_node = ? AND "
                                    "to_node = ? AND kind = 'serves'",
                                    {FormatNodeRef(e.edge.from), FormatNodeRef(e.edge.to)}));
      keep.emplace_back(FormatNodeRef(e.edge.from));
    }
    std::string sql =
        "UPDATE lineage_edges SET ended_at = ? WHERE to_node = ? AND kind = 'serves' AND "
        "ended_at = 0";
    if (keep.size() > 2) sql += " AND from_node NOT IN " + store::InList(keep.size() - 2);
    return store::Run(tx, sql, keep);
  });
}

Result<std::vector<StoredColumn>> LineageStore::ColumnsOf(const NodeRef& table) {
  std::vector<StoredColumn> out;
  TY_RETURN_IF_ERROR(db_.Read([&](Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(
        Rows rows, tx.Query(std::string("SELECT ") + kColumnColumns +
                                " FROM lineage_columns WHERE table_node = ? ORDER BY column_name, "
                                "source_node",
                            {FormatNodeRef(table)}));
    for (const Row& row : rows) {
      TY_ASSIGN_OR_RETURN(StoredColumn c, ColumnOf(row));
      out.push_back(std::move(c));
    }
    return Status::Ok();
  }));
  return out;
}

Result<StoredNode> LineageStore::GetNode(const NodeRef& ref) {
  TY_ASSIGN_OR_RETURN(std::vector<StoredNode> nodes, GetNodes({ref}));
  if (nodes.empty()) {
    return Status::NotFound("no lineage is recorded for " + FormatNodeRef(ref));
  }
  return std::move(nodes[0]);
}

Result<std::vector<StoredNode>> LineageStore::GetNodes(const std::vector<NodeRef>& refs) {
  std::vector<StoredNode> out;
  TY_RETURN_IF_ERROR(db_.Read([&](Transaction& tx) -> Status {
    for (size_t i = 0; i < refs.size(); i += store::kMaxListParams) {
      size_t n = std::min(store::kMaxListParams, refs.size() - i);
      std::vector<Value> ids;
      for (size_t j = i; j < i + n; ++j) ids.emplace_back(FormatNodeRef(refs[j]));
      TY_ASSIGN_OR_RETURN(Rows rows, tx.Query("SELECT node_id, display_name, created_at FROM "
                                              "lineage_nodes WHERE node_id IN " +
                                                  store::InList(n),
                                              ids));
      for (const Row& row : rows) {
        TY_ASSIGN_OR_RETURN(StoredNode node, NodeOf(row));
        out.push_back(std::move(node));
      }
    }
    return Status::Ok();
  }));
  return out;
}

Result<std::vector<Edge>> LineageStore::EdgesOf(const std::vector<std::string>& node_ids,
                                                Direction direction, size_t limit) {
  if (direction == Direction::kBoth) {
    return Status::InvalidArgument("EdgesOf takes one direction at a time");
  }
  const char* column = direction == Direction::kUpstream ? "to_node" : "from_node";
  std::vector<Edge> out;
  TY_RETURN_IF_ERROR(db_.Read([&](Transaction& tx) -> Status {
    for (size_t i = 0; i < node_ids.size() && out.size() < limit; i += store::kMaxListParams) {
      size_t n = std::min(store::kMaxListParams, node_ids.size() - i);
      std::vector<Value> params(node_ids.begin() + i, node_ids.begin() + i + n);
      params.emplace_back(static_cast<int64_t>(limit - out.size()));
      TY_ASSIGN_OR_RETURN(
          Rows rows, tx.Query(std::string("SELECT ") + kEdgeColumns + " FROM lineage_edges WHERE " +
                                  column + " IN " + store::InList(n) +
                                  " ORDER BY created_at, from_node, to_node, kind LIMIT ?",
                              params));
      for (const Row& row : rows) {
        TY_ASSIGN_OR_RETURN(Edge e, EdgeOf(row));
        out.push_back(std::move(e));
      }
    }
    return Status::Ok();
  }));
  return out;
}

}  // namespace trainyard::lineage
