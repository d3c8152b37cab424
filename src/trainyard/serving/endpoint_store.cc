#include "trainyard/serving/endpoint_store.h"

namespace trainyard::serving {
namespace {

Result<Endpoint> FromRow(const store::Row& row) {
  Endpoint e;
  e.name = row.Text(0);
  e.owner = row.Text(1);
  e.created_at = row.Int(3);
  e.updated_at = row.Int(4);
  TY_ASSIGN_OR_RETURN(json::object config, ParseJsonObject(row.Text(2)));
  Status s = DecodeEndpointConfig(config, e.config);
  if (!s.ok()) {
    return Status::Internal("stored configuration of endpoint " + e.name +
                            " is invalid: " + s.message());
  }
  return e;
}

constexpr char kColumns[] = "name, owner, config, created_at, updated_at";

}  // namespace

std::vector<store::Migration> EndpointStore::Migrations() {
  return {{"serving",
           1,
           {"CREATE TABLE serving_endpoints (name TEXT PRIMARY KEY, owner TEXT NOT NULL, "
            "config TEXT NOT NULL, created_at BIGINT NOT NULL, updated_at BIGINT NOT NULL)",
            "CREATE TABLE serving_endpoint_grants (endpoint TEXT NOT NULL, principal TEXT NOT "
            "NULL, privilege TEXT NOT NULL, PRIMARY KEY (endpoint, principal, privilege))"}}};
}

Status EndpointStore::Create(const Endpoint& e) {
  return db_.Write([&](store::Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(auto rows,
                        tx.Query("SELECT name FROM serving_endpoints WHERE name = ?", {e.name}));
    if (!rows.empty()) {
      return Status::AlreadyExists("name: endpoint '" + e.name +
                                   "' already exists; change it with 'trainyard endpoints "
                                   "update' or pick another name");
    }
    return tx
        .Exec(
            "INSERT INTO serving_endpoints (" + std::string(kColumns) + ") VALUES (?, ?, ?, ?, ?)",
            {e.name, e.owner, json::serialize(EndpointConfigToJson(e.config)), e.created_at,
             e.updated_at})
        .status();
  });
}

Result<Endpoint> EndpointStore::Get(const std::string& name) {
  Result<Endpoint> out = Status::NotFound("endpoint '" + name +
                                          "' does not exist; list endpoints with 'trainyard "
                                          "endpoints list'");
  TY_RETURN_IF_ERROR(db_.Read([&](store::Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(auto rows, tx.Query("SELECT " + std::string(kColumns) +
                                                " FROM serving_endpoints WHERE name = ?",
                                            {name}));
    if (!rows.empty()) out = FromRow(rows[0]);
    return Status::Ok();
  }));
  return out;
}

Result<std::vector<Endpoint>> EndpointStore::List() {
  std::vector<Endpoint> out;
  TY_RETURN_IF_ERROR(db_.Read([&](store::Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(auto rows, tx.Query("SELECT " + std::string(kColumns) +
                                            " FROM serving_endpoints ORDER BY name"));
    for (const auto& row : rows) {
      TY_ASSIGN_OR_RETURN(Endpoint e, FromRow(row));
      out.push_back(std::move(e));
    }
    return Status::Ok();
  }));
  return out;
}

Status EndpointStore::Update(const Endpoint& e) {
  return db_.Write([&](store::Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(
        int64_t n,
        tx.Exec("UPDATE serving_endpoints SET config = ?, updated_at = ? WHERE "
                "name = ?",
                {json::serialize(EndpointConfigToJson(e.config)), e.updated_at, e.name}));
    if (n == 0) return Status::NotFound("endpoint '" + e.name + "' does not exist");
    return Status::Ok();
  });
}

Status EndpointStore::Delete(const std::string& name) {
  return db_.Write([&](store::Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(int64_t n, tx.Exec("DELETE FROM serving_endpoints WHERE name = ?", {name}));
    if (n == 0) return Status::NotFound("endpoint '" + name + "' does not exist");
    return tx.Exec("DELETE FROM serving_endpoint_grants WHERE endpoint = ?", {name}).status();
  });
}

Status EndpointStore::Grant(const std::string& endpoint, const EndpointGrant& g) {
  return db_.Write([&](store::Transaction& tx) -> Status {
    return tx
        .Exec(
            "INSERT INTO serving_endpoint_grants (endpoint, principal, privilege) VALUES (?, "
            "?, ?) ON CONFLICT (endpoint, principal, privilege) DO NOTHING",
            {endpoint, g.principal, g.privilege})
        .status();
  });
}

Status EndpointStore::Revoke(const std::string& endpoint, const EndpointGrant& g) {
  return db_.Write([&](store::Transaction& tx) -> Status {
    return tx
        .Exec(
            "DELETE FROM serving_endpoint_grants WHERE endpoint = ? AND principal = ? AND "
            "privilege = ?",
            {endpoint, g.principal, g.privilege})
        .status();
  });
}

Result<std::vector<EndpointGrant>> EndpointStore::Grants(const std::string& endpoint) {
  std::vector<EndpointGrant> out;
  TY_RETURN_IF_ERROR(db_.Read([&](store::Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(auto rows, tx.Query("SELECT principal, privilege FROM "
                                            "serving_endpoint_grants WHERE endpoint = ? ORDER "
                                            "BY principal, privilege",
                                            {endpoint}));
    for (const auto& row : rows) out.push_back({row.Text(0), row.Text(1)});
    return Status::Ok();
  }));
  return out;
}

}  // namespace trainyard::serving
