// The PostgreSQL backend of Database (libpq): a pool of connections; `?`
// placeholders are rewritten to $n; results come back as text and Row converts.
//
// Dialect notes beyond database.h:
//   - int64 parameters are sent typed as BIGINT and doubles as DOUBLE PRECISION;
//     strings and NULLs are sent untyped, so the server infers their type from
//     context. A parameter with no context (`? IS NULL`) needs a CAST(? AS TEXT).
//   - Boolean results (`SELECT a = b`) come back as int64 0/1, as on SQLite.
//   - A failed statement aborts the transaction: the callback must return the
//     error. If it returns ok anyway, Write rolls back and returns Internal.
//   - Strings must be valid UTF-8 without NUL bytes.
#pragma once

#include <memory>
#include <string>

#include "trainyard/store/database.h"

namespace trainyard::store {

// `url` is a libpq connection URI (postgresql://user@host:port/dbname?...).
// Connects once to check the URL and the server; at most `pool_size`
// connections are open at a time.
Result<std::unique_ptr<Database>> OpenPostgresDatabase(const std::string& url, int pool_size);

}  // namespace trainyard::store
