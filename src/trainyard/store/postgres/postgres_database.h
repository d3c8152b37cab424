// The PostgreSQL backend of Database (libpq): a pool of connections; `?`
// placeholders are rewritten to $n; results come back as text and Row converts.
#pragma once

#include <memory>
#include <string>

#include "trainyard/store/database.h"

namespace trainyard::store {

// `url` is a libpq connection URI (postgresql://user@host:port/dbname?...).
Result<std::unique_ptr<Database>> OpenPostgresDatabase(const std::string& url, int pool_size);

}  // namespace trainyard::store
