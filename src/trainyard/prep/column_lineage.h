// Column-level lineage of a pipeline's outputs: for each column prep writes, the source
// columns it derives from and how ("copy", "template", "tokenize", "redact", "doc_id", chained
// with '+' when several steps rewrite a column, e.g. "template+redact"). Sent with every
// commit of a catalog output (the tables import API's `column_lineage`), so lineage can say
// where each column of each table version came from (docs/prep.md, docs/lineage).
//
// Pure functions of the spec and the source's column names; safe from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainyard/prep/pipeline_spec.h"

namespace trainyard::prep {

struct DerivedColumn {
  std::string column;
  std::vector<std::string> from;  // source columns; empty when computed from none
  std::string transform;
};

// The columns of the data outputs (rows, or each split) over a source with `source_columns`:
// doc_id (from source.id_column, or the row's ordinal), every source column (copied, or as a
// redact/template step rewrote it), then the columns steps add (template outputs, token ids).
// Assumes a spec that compiled against that source (the engine checks it first).
std::vector<DerivedColumn> DeriveOutputColumns(const PipelineSpec& spec,
                                               const std::vector<std::string>& source_columns);
// The columns of the `dropped` output: doc_id and duplicate_of (doc ids), step and reason
// (prep's own).
std::vector<DerivedColumn> DroppedOutputColumns(const PipelineSpec& spec);
// The import API's column_lineage JSON for `columns` read from `table`@`version`.
std::string ColumnLineageJson(const std::string& table, int64_t version,
                              const std::vector<DerivedColumn>& columns);

}  // namespace trainyard::prep
