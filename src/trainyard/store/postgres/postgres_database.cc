#include "trainyard/store/postgres/postgres_database.h"

namespace trainyard::store {

Result<std::unique_ptr<Database>> OpenPostgresDatabase(const std::string& url, int pool_size) {
  return Status::NotImplemented("PostgreSQL backend is not built yet");
}

}  // namespace trainyard::store
