// The SQLite backend of Database: one writer connection (writers serialized by a
// mutex) and a pool of reader connections, in WAL mode so readers never block the
// writer. Prepared statements are cached per connection.
#pragma once

#include <memory>
#include <string>

#include "trainyard/store/database.h"

namespace trainyard::store {

// `path` is a file path, or ":memory:" (then reads share the writer connection).
Result<std::unique_ptr<Database>> OpenSqliteDatabase(const std::string& path, bool sync_full);

}  // namespace trainyard::store
