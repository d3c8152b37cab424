#include "trainyard/lineage/lineage_store.h"

#include <algorithm>

#include "trainyard/store/sql.h"

namespace trainyard::lineage {
namespace {

using store::Row;
using store::Rows;
using store::Transaction;
using store::Value;

constexpr const char* kEdgeColumns =
    "from_node, to_node, kind, job_id, run_id, column_mapping, created_at, recorded_by";

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
  return tx.Exec(std::string("INSERT INTO lineage_edges (") + kEdgeColumns +
                     ") VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (from_node, to_node, kind) DO "
                     "NOTHING",
                 {FormatNodeRef(edge.from), FormatNodeRef(edge.to),
                  std::string(EdgeKindName(edge.kind)), edge.job_id, edge.run_id,
                  FormatColumnMapping(edge.columns), edge.created_at, edge.recorded_by});
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
  return e;
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
           }}};
}

Result<int64_t> LineageStore::RecordEdges(const std::vector<NewEdge>& edges) {
  int64_t added = 0;
  TY_RETURN_IF_ERROR(db_.Write([&](Transaction& tx) -> Status {
    added = 0;
    for (const NewEdge& e : edges) {
      TY_ASSIGN_OR_RETURN(int64_t n, InsertEdge(tx, e));
      added += n;
    }
    return Status::Ok();
  }));
  return added;
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
