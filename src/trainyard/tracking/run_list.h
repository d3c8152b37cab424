// run_list: the pure parts of the runs listing (TrackingService::ListRuns, the web UI's runs
// table): its keyset cursor and the condition that resumes after it.
//
// A listing pages through runs in the order of CompileRunOrderTerms (MLflow's order_by with
// its tie-breakers, so the order is total). The cursor holds the last row's value of every
// term, and the next page is the rows after those values in that order: unlike an offset it
// stays right while runs are added or deleted, and costs the same on every page. The cursor
// also holds a fingerprint of the query (experiment, filter, order, view), so a cursor used
// with another query is refused rather than silently misread.
//
// All functions are pure and thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "trainyard/common/status.h"
#include "trainyard/store/database.h"
#include "trainyard/tracking/search_filter.h"

namespace trainyard::tracking {

inline constexpr size_t kMaxRunCursorBytes = 64 * 1024;

// A stable 64-bit fingerprint (FNV-1a) of the parts of a query, each length-prefixed.
uint64_t QueryFingerprint(const std::vector<std::string_view>& parts);

// base64url of a JSON array: [fingerprint as hex, term values...]; a value is null, an
// integer, a double or a string.
std::string EncodeRunCursor(uint64_t fingerprint, const std::vector<store::Value>& values);
// The values of a cursor from EncodeRunCursor with the same fingerprint and `terms` values.
// Anything else (not base64url, not our JSON, another query's cursor, too long) is
// InvalidArgument naming `cursor` and saying to start again without it.
Result<std::vector<store::Value>> DecodeRunCursor(std::string_view cursor, uint64_t fingerprint,
                                                  size_t terms);

// The condition "the row comes after `after`" in the order of `terms` (one value per term):
//   (t0 > v0) OR (t0 = v0 AND t1 > v1) OR ...   with < for descending terms.
// A NULL value means the row's term is NULL too (see OrderTerm): it ties with IS NULL and
// nothing comes after it within that term. Every key and value is a bound parameter.
SqlFragment KeysetCondition(const std::vector<OrderTerm>& terms,
                            const std::vector<store::Value>& after);

}  // namespace trainyard::tracking
