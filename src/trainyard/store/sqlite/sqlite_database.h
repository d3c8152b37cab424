// The SQLite backend of Database: one writer connection and a pool of reader
// connections, in WAL mode so readers never block the writer. Writers are serialized and
// group-committed: concurrent Write() calls share one transaction (each callback in its own
// savepoint, so it commits or rolls back alone) and each returns after that commit.
// Prepared statements are cached per connection.
#pragma once

#include <memory>
#include <string>

#include "trainyard/store/database.h"

namespace trainyard::store {

// `path` is a file path, or ":memory:" (then reads share the writer connection).
Result<std::unique_ptr<Database>> OpenSqliteDatabase(const std::string& path, bool sync_full);

}  // namespace trainyard::store
