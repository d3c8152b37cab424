// LineageService: records lineage edges (as the LineageRecorder the other components are
// given) and answers upstream/downstream queries from any object, bounded and cycle safe.
//
// Orchestration only: the SQL is LineageStore's, the walk is Traverse's (pure), and which
// securable governs an object is the ObjectDirectory's (the server implements it over
// tracking, registry and jobs; the catalog adds tables and endpoints later).
//
// Authorization: a query needs READ on the object it starts from (through the Authorizer,
// as every service); every other node of the answer the caller may not read is redacted:
// it keeps its type and place in the graph, but not its key, version, name or the context
// of its edges. Recording trusts its in-process caller, which authorized the operation it
// records; no HTTP route records edges.
//
// Thread-safe. The Database, Clock, Authorizer and ObjectDirectory must outlive it.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "trainyard/common/clock.h"
#include "trainyard/common/status.h"
#include "trainyard/identity/authorizer.h"
#include "trainyard/lineage/lineage_recorder.h"
#include "trainyard/lineage/lineage_store.h"
#include "trainyard/lineage/traversal.h"
#include "trainyard/lineage/types.h"
#include "trainyard/store/database.h"

namespace trainyard::lineage {

// Who governs an object: the securable whose ownership and grants decide (a run's
// experiment), and the object itself (a scoped token's limits are checked against it).
struct ObjectAccess {
  identity::Securable governing;
  identity::Securable accessed;
  std::string display_name;
  // Set for objects whose component keeps their grants itself (an endpoint's QUERY and
  // MANAGE): it decides who may read the object instead of the Authorizer.
  std::function<Status(const identity::Principal&)> authorize;
};

class ObjectDirectory {
 public:
  virtual ~ObjectDirectory() = default;
  // NotFound when the component owning nodes of this type has no such object, or when no
  // component owns the type yet (tables and endpoints until the catalog lands): lineage then
  // governs the node by its type and key with no owner. Thread-safe.
  virtual Result<ObjectAccess> Find(const NodeRef& node) = 0;
};

struct LineageQuery {
  NodeRef start;
  Direction direction = Direction::kUpstream;
  TraversalLimits limits;
};

struct GraphNode {
  std::string id;  // FormatNodeRef(ref), or "redacted:N" for a node the caller may not read
  bool redacted = false;
  NodeRef ref;  // only its type when redacted
  std::string display_name;
  int64_t created_at = 0;
  int depth = 0;
};

struct GraphEdge {
  std::string from;  // GraphNode ids
  std::string to;
  EdgeKind kind = EdgeKind::kRead;
  std::string job_id;  // "" when an end is redacted
  std::string run_id;
  ColumnMapping columns;
  int64_t created_at = 0;
  std::string recorded_by;
  int64_t ended_at = 0;  // 0 while the edge holds (see Edge::ended_at)
};

struct LineageGraph {
  std::string root;  // the start node's id
  Direction direction = Direction::kUpstream;
  std::vector<GraphNode> nodes;  // the root first
  std::vector<GraphEdge> edges;
  bool truncated = false;  // the depth or node bound left lineage out
};

// One model version an endpoint serves.
struct ServedVersion {
  std::string model;
  int64_t version = 0;
};

// A column of a table version and where it came from (ColumnLineage), with the context it was
// recorded in.
struct ColumnLineageQuery {
  std::string table;  // catalog.schema.table
  int64_t version = 0;
  std::string column;  // "" = every column
};

class LineageService : public LineageRecorder {
 public:
  LineageService(store::Database& db, Clock& clock, identity::Authorizer& authz,
                 ObjectDirectory& directory);
  LineageService(const LineageService&) = delete;
  LineageService& operator=(const LineageService&) = delete;

  static std::vector<store::Migration> Migrations() { return LineageStore::Migrations(); }

  Status Record(const identity::Principal& who, const EdgeRecord& edge) override;
  Status RecordTableRead(const identity::Principal& who, const TableReadRecord& read) override;
  Status RecordTableWrite(const identity::Principal& who, const TableWriteRecord& write) override;
  // What `endpoint` serves now (LineageStore::RecordServing): model version -serves-> endpoint
  // for each of `versions`, every other open serves edge into it ended. Empty: it serves
  // nothing any more (deleted).
  Status RecordServing(const identity::Principal& who, const std::string& endpoint,
                       const std::vector<ServedVersion>& versions);

  // The column lineage of a table version (optionally one column). InvalidArgument naming
  // table/version/column for malformed ones; PermissionDenied unless `who` may read the table
  // (SELECT through the Authorizer); NotFound naming `table` when no lineage is recorded for
  // that table version, naming `column` when that column has none.
  Result<std::vector<StoredColumn>> Columns(const identity::Principal& who,
                                            const ColumnLineageQuery& query);

  // The graph around `query.start`. NotFound when neither its component nor the lineage
  // graph knows the object; PermissionDenied when `who` may not read it; InvalidArgument
  // naming the field for limits out of range.
  Result<LineageGraph> Query(const identity::Principal& who, const LineageQuery& query);
  Result<LineageGraph> Upstream(const identity::Principal& who, const NodeRef& node,
                                const TraversalLimits& limits = {});
  Result<LineageGraph> Downstream(const identity::Principal& who, const NodeRef& node,
                                  const TraversalLimits& limits = {});

 private:
  Status AuthorizeStart(const identity::Principal& who, const NodeRef& start);
  // Ok when `who` may read `node` (unknown objects are governed by their type and id).
  Status MayRead(const identity::Principal& who, const NodeRef& node, std::string* display);
  Result<LineageGraph> Redact(const identity::Principal& who, const NodeRef& start, Traversal walk);
  // Validated rows for `edges`, recorded by `who` at `now`.
  Result<std::vector<NewEdge>> Rows(const identity::Principal& who, std::vector<EdgeRecord> edges,
                                    int64_t now);
  Status Store(const identity::Principal& who, std::vector<EdgeRecord> edges,
               std::vector<StoredColumn> columns = {});

  LineageStore store_;
  Clock& clock_;
  identity::Authorizer& authz_;
  ObjectDirectory& directory_;
};

}  // namespace trainyard::lineage
