// Column masks: what a reader who may not see a column's values sees instead, and a reader
// that applies masks (and a filter over the masked values) to a stream of record batches.
//
// Kinds, and the column types each keeps (a masked column keeps its Arrow type, so a reader's
// schema is the table's; a pair not listed is refused by CheckMaskable):
//   redact  every value becomes "***"                            string, large_string, binary,
//                                                                large_binary
//   hash    the lower-case hex SHA-256 of the value's bytes      string, large_string, binary,
//           (UTF-8 for strings): stable, so rows still join      large_binary
//   last4   the last 4 characters kept, each earlier one "*";    string, large_string
//           a value of 4 or fewer characters becomes all "*"
//   null    every value becomes null (the field turns nullable)  any type
// A null stays null under every kind: a mask hides values, not their absence. Characters are
// UTF-8 code points; bytes that are not valid UTF-8 count one each.
//
// Pure functions; thread-safe.
#pragma once

#include <arrow/api.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "trainyard/common/status.h"
#include "trainyard/tables/mask_kind.h"
#include "trainyard/tables/predicate.h"

namespace trainyard::tables {

inline constexpr std::string_view kRedactedValue = "***";

// Ok when `kind` can mask a column of `type` keeping the type; InvalidArgument naming the
// column and what to use instead otherwise.
Status CheckMaskable(MaskKind kind, const arrow::DataType& type, const std::string& column);

// `values` masked (same type and length). InvalidArgument for a pair CheckMaskable refuses.
Result<std::shared_ptr<arrow::Array>> MaskArray(MaskKind kind, const arrow::Array& values);

// The schema a masking reader returns: masked fields nullable where the kind is null.
std::shared_ptr<arrow::Schema> MaskedSchema(const arrow::Schema& schema,
                                            const std::map<std::string, MaskKind>& masks);

// `batch` with the columns named in `masks` masked (names absent from the batch are ignored).
Result<std::shared_ptr<arrow::RecordBatch>> MaskBatch(const arrow::RecordBatch& batch,
                                                      const std::map<std::string, MaskKind>& masks);

// Wraps `source`: each batch's `masks` columns are masked, then only rows where `filter` (if
// any; evaluated over the masked values) is TRUE are kept, then the batch is projected to
// `columns` (empty = all, in the source's order). Empty batches are skipped. InvalidArgument
// naming the column for a projection the source lacks.
Result<std::unique_ptr<arrow::RecordBatchReader>> MaskRows(
    std::unique_ptr<arrow::RecordBatchReader> source, std::map<std::string, MaskKind> masks,
    std::optional<Predicate> filter, std::vector<std::string> columns);

}  // namespace trainyard::tables
