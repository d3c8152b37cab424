#include "trainyard/testing/test_database.h"

#include <string>

#include "trainyard/testing/test_postgres.h"

namespace trainyard::store {

Result<std::unique_ptr<Database>> OpenTestDatabase(std::string_view backend,
                                                   const std::vector<Migration>& migrations) {
  std::string url = ":memory:";
  if (backend == "postgres" || backend == "postgresql") {
    auto pg = PostgresUrlForTest();
    if (!pg.ok()) return pg.status().WithContext("PostgreSQL for tests");
    url = *pg;
  } else if (backend != "sqlite") {
    return Status::InvalidArgument("unknown test backend '" + std::string(backend) + "'");
  }
  TY_ASSIGN_OR_RETURN(std::unique_ptr<Database> db, OpenDatabase({.url = url}));
  TY_RETURN_IF_ERROR(ApplyMigrations(*db, migrations));
  return db;
}

}  // namespace trainyard::store
