// EndpointStore: the serving tables (component "serving"): endpoints with their
// configuration (as JSON text) and the grants on them. Rows only; no policy.
// Thread-safe (the Database is).
#pragma once

#include <string>
#include <vector>

#include "trainyard/common/status.h"
#include "trainyard/serving/endpoint.h"
#include "trainyard/store/database.h"

namespace trainyard::serving {

struct EndpointGrant {
  std::string principal;  // a user, service principal or group
  std::string privilege;  // "QUERY" or "MANAGE"
};

class EndpointStore {
 public:
  explicit EndpointStore(store::Database& db) : db_(db) {}

  static std::vector<store::Migration> Migrations();

  // AlreadyExists when the name is taken.
  Status Create(const Endpoint& endpoint);
  // NotFound when there is none.
  Result<Endpoint> Get(const std::string& name);
  Result<std::vector<Endpoint>> List();
  Status Update(const Endpoint& endpoint);
  // Also removes its grants. NotFound when there is none.
  Status Delete(const std::string& name);

  Status Grant(const std::string& endpoint, const EndpointGrant& grant);
  Status Revoke(const std::string& endpoint, const EndpointGrant& grant);
  Result<std::vector<EndpointGrant>> Grants(const std::string& endpoint);

 private:
  store::Database& db_;
};

}  // namespace trainyard::serving
