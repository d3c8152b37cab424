// LineageRecorder: what the components that read and write objects call to record lineage
// (the tables/catalog layer for table reads and writes; the server's wiring for jobs, runs,
// checkpoints and model versions). Light on purpose: it includes only the lineage vocabulary
// and the Principal, so a component can take one without depending on the lineage service.
//
// Callers authorize the operation they record themselves (a reader may read the table);
// recording is idempotent (the same edge twice is one edge). Implementations are
// thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "trainyard/common/status.h"
#include "trainyard/identity/authorizer.h"
#include "trainyard/lineage/types.h"

namespace trainyard::lineage {

// One edge to record, with the display names of its ends when the caller knows them.
struct EdgeRecord {
  NodeRef from;
  NodeRef to;
  EdgeKind kind = EdgeKind::kRead;
  std::string job_id;  // the job context, "" when none
  std::string run_id;  // the run context, "" when none
  ColumnMapping columns;
  std::string from_display;
  std::string to_display;
};

// `reader` (a job or run) read `table` at `version`.
struct TableReadRecord {
  std::string table;  // catalog.schema.table
  int64_t version = 0;
  NodeRef reader;
  std::string job_id;
  std::string run_id;
};

// One source of a table write: a table version and, per target column, the source columns
// it was computed from (empty when unknown), and how (column_transforms: target column ->
// transform, e.g. "template"; a column named there is recorded as column lineage, with its
// source columns from `columns`, or none).
struct TableSource {
  std::string table;
  int64_t version = 0;
  ColumnMapping columns;
  std::map<std::string, std::string> column_transforms;
};

// `writer` (a job or run) wrote `table` at `version`, computing it from `sources`.
struct TableWriteRecord {
  std::string table;
  int64_t version = 0;
  NodeRef writer;
  std::vector<TableSource> sources;
  std::string job_id;
  std::string run_id;
};

class LineageRecorder {
 public:
  virtual ~LineageRecorder() = default;
  // Records one edge; InvalidArgument naming the field for a malformed one (ValidateEdge).
  virtual Status Record(const identity::Principal& who, const EdgeRecord& edge) = 0;
  // table@version -read-> reader.
  virtual Status RecordTableRead(const identity::Principal& who, const TableReadRecord& read) = 0;
  // writer -wrote-> table@version, and source@v -derived_from-> table@version per source
  // (with its column mapping) and its column lineage, all or nothing. InvalidArgument naming
  // column_lineage for malformed column lineage.
  virtual Status RecordTableWrite(const identity::Principal& who,
                                  const TableWriteRecord& write) = 0;
};

}  // namespace trainyard::lineage
