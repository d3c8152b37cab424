// Small helpers for the portable SQL that services write against store::Transaction
// (see database.h for the dialect rules). Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "trainyard/common/status.h"
#include "trainyard/store/database.h"

namespace trainyard::store {

// Parameters per `IN (...)` list or OR chain: well under SQLite's bound-parameter limit
// (32766) and PostgreSQL's (65535), so callers split longer key lists into chunks.
inline constexpr size_t kMaxListParams = 200;

// "(?, ?, ?)": an IN list of `n` placeholders; n must be at least 1.
std::string InList(size_t n);

// SQL NULL for an empty string, else the string.
Value NullIfEmpty(std::string_view s);

// SQL NULL for an unset optional, else its value as BIGINT.
template <typename Int>
Value NullIfUnset(const std::optional<Int>& v) {
  return v ? Value(static_cast<int64_t>(*v)) : Value();
}

// A nullable BIGINT cell: nullopt for NULL.
std::optional<int64_t> OptionalInt(const Row& row, size_t i);

// Runs a statement whose row count the caller does not need.
Status Run(Transaction& tx, std::string_view sql, const std::vector<Value>& params = {});

}  // namespace trainyard::store
