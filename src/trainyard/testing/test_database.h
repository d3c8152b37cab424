// OpenTestDatabase: the metadata store a unit test runs against, on either backend.
//
// Thread-safe; each call returns a new, empty database.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "trainyard/common/status.h"
#include "trainyard/store/database.h"

namespace trainyard::store {

// "sqlite": an in-memory SQLite database; "postgres" or "postgresql": a fresh database on the
// throwaway PostgreSQL (test_postgres.h). `migrations` are applied before it is returned.
Result<std::unique_ptr<Database>> OpenTestDatabase(std::string_view backend,
                                                   const std::vector<Migration>& migrations);

}  // namespace trainyard::store
