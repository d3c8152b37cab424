// LineageStore: the lineage tables (schema, SQL, row mapping) on store::Database, SQLite or
// PostgreSQL. A node's id is its canonical text (FormatNodeRef); an edge is keyed by
// (from, to, kind), so recording the same edge twice leaves one edge (the first record's
// context, time and recorder are kept).
//
// Thread-safe (the Database is); holds no state of its own. The Database must outlive it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "trainyard/common/status.h"
#include "trainyard/lineage/types.h"
#include "trainyard/store/database.h"

namespace trainyard::lineage {

struct StoredNode {
  NodeRef ref;
  std::string display_name;
  int64_t created_at = 0;
};

// One column of a table version and what it derives from, as recorded.
struct StoredColumn {
  NodeRef table;
  ColumnLineage lineage;
  std::string job_id;
  std::string run_id;
  int64_t created_at = 0;
  std::string recorded_by;
};

struct NewEdge {
  Edge edge;
  std::string from_display;
  std::string to_display;
};

class LineageStore {
 public:
  explicit LineageStore(store::Database& db) : db_(db) {}
  LineageStore(const LineageStore&) = delete;
  LineageStore& operator=(const LineageStore&) = delete;

  // Component "lineage": lineage_nodes, lineage_edges, lineage_columns.
  static std::vector<store::Migration> Migrations();

  // Adds, for each edge, both nodes (when absent; a display name fills one left empty) and
  // the edge (when absent), all in one transaction. Returns how many edges were new. Edges
  // must be valid (ValidateEdge); created_at and recorded_by are stored as given.
  Result<int64_t> RecordEdges(const std::vector<NewEdge>& edges);
  // The same, with column lineage rows (a (table, column, source) recorded twice keeps the
  // first), in the same transaction.
  Result<int64_t> RecordEdges(const std::vector<NewEdge>& edges,
                              const std::vector<StoredColumn>& columns);
  // What `endpoint` serves now: adds the `serves` edges (model version -> endpoint) not there
  // yet, reopens ended ones among them, and ends (ended_at = now) every other serves edge
  // into the endpoint still open. `serves` empty: the endpoint serves nothing (deleted).
  Status RecordServing(const NodeRef& endpoint, const std::vector<NewEdge>& serves, int64_t now);
  // The column lineage recorded for a table version, by column then source.
  Result<std::vector<StoredColumn>> ColumnsOf(const NodeRef& table);
  // NotFound when the graph has no such node.
  Result<StoredNode> GetNode(const NodeRef& ref);
  // The stored nodes among `refs` (missing ones are left out), in no particular order.
  Result<std::vector<StoredNode>> GetNodes(const std::vector<NodeRef>& refs);
  // Edges ending at (upstream) or starting from (downstream) any of `node_ids`, at most
  // `limit`, oldest first. `direction` must not be kBoth.
  Result<std::vector<Edge>> EdgesOf(const std::vector<std::string>& node_ids, Direction direction,
                                    size_t limit);

 private:
  store::Database& db_;
};

}  // namespace trainyard::lineage
