// Lineage's vocabulary: the objects of the graph (NodeRef: a type, a key and, for versioned
// objects, a version), the kinds of edges between them, and the pure functions that parse,
// format and check them. No I/O; every function is safe to call from any thread.
//
// A node is written `<type>:<key>[@<version>]`:
//   table:main.support.train@7        a Delta table at a version (the version is required)
//   model_version:intent_model@3      a registered model's version (required, >= 1)
//   checkpoint:j-1a2b@1200            a job's checkpoint at a step (required)
//   job:j-1a2b   run:<run id>   endpoint:<name>   (no version)
// Edges point the way data flows (from the input to what was made from it); the kind says
// how: a table version is `read` by a run or job, a job `logged_to` its run, a run
// `produced` a model version, a job `checkpointed` a checkpoint, a model version `serves`
// an endpoint's traffic, a table version is `derived_from`-edged to the table version
// made from it (with an optional column mapping), a job or run `wrote` a table version.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "trainyard/common/status.h"

namespace trainyard::lineage {

enum class NodeType { kTable, kJob, kRun, kCheckpoint, kModelVersion, kEndpoint };
enum class EdgeKind { kRead, kWrote, kProduced, kLoggedTo, kCheckpointed, kServes, kDerivedFrom };
enum class Direction { kUpstream, kDownstream, kBoth };

std::string_view NodeTypeName(NodeType t);
std::string_view EdgeKindName(EdgeKind k);
std::string_view DirectionName(Direction d);
// InvalidArgument naming `field` for an unknown name.
Result<NodeType> ParseNodeType(std::string_view name, std::string_view field = "type");
Result<EdgeKind> ParseEdgeKind(std::string_view name, std::string_view field = "kind");
Result<Direction> ParseDirection(std::string_view name, std::string_view field = "direction");

// The longest key a node may have (a registered model name, a table's three-level name).
inline constexpr size_t kMaxNodeKeyLength = 512;
inline constexpr size_t kMaxDisplayNameLength = 512;

struct NodeRef {
  NodeType type = NodeType::kRun;
  std::string key;
  std::optional<int64_t> version;

  bool operator==(const NodeRef&) const = default;
};

// Whether nodes of this type carry a version (tables, model versions, checkpoints).
bool IsVersioned(NodeType t);
// Checks the key (non-empty, at most kMaxNodeKeyLength, no control characters, and for a
// table a three-level name `catalog.schema.table`) and the version's presence and range.
// Errors are InvalidArgument naming `field`.
Status ValidateNodeRef(const NodeRef& ref, std::string_view field = "object");
// Parses `<type>:<key>[@<version>]` (the version is what follows the last '@') and
// validates it. Errors are InvalidArgument naming `field`.
Result<NodeRef> ParseNodeRef(std::string_view text, std::string_view field = "object");
// The canonical text of a node, which is also its id in the store: ParseNodeRef's inverse.
std::string FormatNodeRef(const NodeRef& ref);

// Column-level lineage on a derived_from edge: each target column and the source columns
// it was computed from.
using ColumnMapping = std::map<std::string, std::vector<std::string>>;
// Parses {"target": ["source", ...], "other": "single_source"} ("" is the empty mapping).
Result<ColumnMapping> ParseColumnMapping(std::string_view json_text,
                                         std::string_view field = "column_mapping");
std::string FormatColumnMapping(const ColumnMapping& mapping);
Status ValidateColumnMapping(const ColumnMapping& mapping,
                             std::string_view field = "column_mapping");

// One edge as recorded: who recorded it and in which job/run context.
struct Edge {
  NodeRef from;
  NodeRef to;
  EdgeKind kind = EdgeKind::kRead;
  std::string job_id;  // the job the edge was recorded in, "" when none
  std::string run_id;  // the run the edge was recorded in, "" when none
  ColumnMapping columns;
  int64_t created_at = 0;
  std::string recorded_by;
  // When the edge stopped holding, 0 while it holds: a `serves` edge ends when its endpoint
  // stops serving that model version (history is kept; the current ones have 0).
  int64_t ended_at = 0;
};

// One output column of a table version and what it was computed from: columns of a source
// table version and the transform ("copy", "template", "tokenize", "redact", "doc_id", ...).
struct ColumnLineage {
  std::string column;
  NodeRef source;                           // a table version
  std::vector<std::string> source_columns;  // empty: computed from no source column
  std::string transform;
};

// The longest transform name, and the most derived columns one table version may record.
inline constexpr size_t kMaxTransformLength = 64;
inline constexpr size_t kMaxLineageColumns = 4096;

// Checks `lineage` as the columns of `table` (a table version): column names non-empty and
// without control characters, each (column, source) once, sources table versions other than
// `table`, transforms [a-z0-9_+]+ ("template+redact") of at most kMaxTransformLength bytes.
// InvalidArgument naming `field`.
Status ValidateColumnLineage(const NodeRef& table, const std::vector<ColumnLineage>& lineage,
                             std::string_view field = "column_lineage");
// The column lineage a writer sends with a table write (the tables import API's
// `column_lineage` parameter): {"source": "main.support.raw@3", "columns": [{"column":
// "text", "from": ["subject", "body"], "transform": "template"}, ...]} ("from" may be one
// name or a list; "" is no lineage). Every row gets the source. InvalidArgument naming
// `field` and the entry; ValidateColumnLineage then checks it against the table written.
Result<std::vector<ColumnLineage>> ParseColumnLineage(std::string_view json_text,
                                                      std::string_view field = "column_lineage");

// Whether an edge of `kind` may join these node types (a run cannot `serve` a table);
// InvalidArgument saying which pairs are allowed otherwise. Also checks both nodes and the
// column mapping (only derived_from edges carry one).
Status ValidateEdge(const Edge& edge);

// A dataset input of a run (MLflow log-inputs) that names a Trainyard table at a version:
// MLflow's Delta source (source_type "delta_table", source {"delta_table_name": "c.s.t",
// "delta_table_version": 7}), or source_type "trainyard_table" with the table's name (or
// {"table": name}) as the source; the version comes from the source or else from a numeric
// digest (the Delta version). nullopt for any other dataset (a file, a URL, a table name
// without a version).
std::optional<NodeRef> TableVersionOfDataset(std::string_view source_type, std::string_view source,
                                             std::string_view digest);

}  // namespace trainyard::lineage
