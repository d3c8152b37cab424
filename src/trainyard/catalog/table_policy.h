// Table policies: a table's row filter and its columns' masks (catalog_types.h), checked when
// they are set and turned into what one reader sees. Pure functions (no store, no identity):
// CatalogService stores and authorizes, TableService enforces on every read.
//
// Who they apply to: everyone who reads, owners and metastore admins included (as Databricks
// does); a filter exempts readers through its own logic (`is_member('support-leads') OR ...`)
// and a mask through its `except` list.
//
// Thread-safe (no state).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "trainyard/catalog/catalog_types.h"
#include "trainyard/common/status.h"
#include "trainyard/tables/column_mask.h"
#include "trainyard/tables/predicate.h"

namespace trainyard::catalog {

inline constexpr size_t kMaxRowFilterLength = 16384;
inline constexpr size_t kMaxMaskExceptions = 100;

// What one reader sees of a table.
struct ReadPolicy {
  // The row filter bound to the reader; none when the table has none or it is TRUE for them.
  std::optional<tables::Predicate> row_filter{};
  // The columns masked for the reader, by name.
  std::map<std::string, tables::MaskKind> masks{};

  // Whether the reader sees less than the whole table.
  bool restricted() const { return row_filter.has_value() || !masks.empty(); }
};

// Whether the table has a row filter or a masked column.
bool HasPolicies(const TableInfo& table);

// The policy of `table` for `reader`. A stored filter that no longer parses fails closed
// (FailedPrecondition naming the table), never reads unfiltered.
Result<ReadPolicy> PolicyFor(const TableInfo& table, const tables::PredicateReader& reader);

// Direct access to a table's storage (temporary credentials, which hand out its location)
// would bypass its policies: PermissionDenied for a table with a row filter or column masks,
// whoever asks, saying to read through the tables API instead.
Status CheckDirectAccess(const TableInfo& table);

// `predicate` parsed and checked against the table's columns: InvalidArgument naming
// `predicate` (too long, empty, unparsable) or the column (unknown, wrong type).
Result<tables::Predicate> ValidateRowFilter(const std::vector<ColumnInfo>& columns,
                                            std::string_view predicate);

// The index of column `name` in `columns` (exact, else case-insensitive), checked that `kind`
// can mask its type: InvalidArgument naming `column` or `kind`.
Result<size_t> ValidateColumnMask(const std::vector<ColumnInfo>& columns, std::string_view name,
                                  tables::MaskKind kind);

// The API's body for a mask: {"kind": "last4", "except": ["pii-readers", "bob"]} (`except`
// optional, at most kMaxMaskExceptions names). InvalidArgument naming the field.
Result<ColumnMaskInfo> DecodeColumnMask(std::string_view body);

}  // namespace trainyard::catalog
