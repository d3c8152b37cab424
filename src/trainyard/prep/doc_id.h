// Stable document ids for data preparation (issue 18). Every row of a pipeline's source gets an
// id before any step runs, and every engine (the native one, Spark) computes the same id for
// the same row, so reports, the dropped-rows table and near-duplicate clusters name documents
// the same way wherever the pipeline ran.
//
// The id is the first 16 hex digits (64 bits) of SHA-256 over
//   "trainyard-prep-v1" NUL source NUL key
// where `source` names what was read (a catalog table as "catalog.schema.table@version", a file
// by its name) and `key` is the row's own id column when the spec names one, otherwise its
// ordinal in the source's read order, in decimal ("0", "1", ...).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace trainyard::prep {

std::string DocId(std::string_view source, std::string_view key);
std::string DocIdForOrdinal(std::string_view source, int64_t ordinal);

}  // namespace trainyard::prep
