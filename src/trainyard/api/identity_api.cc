#include "trainyard/api/identity_api.h"

#include "trainyard/common/strings.h"
#include "trainyard/identity/query_scope.h"
#include "trainyard/serving/endpoint.h"

namespace trainyard::api {
namespace {

using http::Method;
using identity::Action;

// Audit records per page when a request names no max_results.
constexpr int64_t kDefaultAuditRecordsPerPage = 100;

json::value TokenToJson(const identity::TokenInfo& t) {
  json::object o;
  o["token_id"] = t.token_id;
  o["user"] = t.user;
  o["description"] = t.description;
  o["created_at"] = t.created_at;
  if (t.expires_at) o["expires_at"] = *t.expires_at;
  if (t.revoked_at) o["revoked_at"] = *t.revoked_at;
  if (!t.scope.empty()) o["scope"] = t.scope;
  if (identity::IsQueryOnly(identity::Principal{t.user, false, t.token_id, t.scope})) {
    o["query_only"] = true;
    json::array endpoints;
    for (const auto& e : identity::QueryScopeEndpoints(t.scope)) endpoints.emplace_back(e);
    o["endpoints"] = std::move(endpoints);
  }
  return o;
}

json::object UserToJson(const identity::User& u) {
  return json::object{{"name", u.name},
                      {"is_admin", u.is_admin},
                      {"created_at", u.created_at},
                      {"os_user", u.os_user}};
}

Result<Action> PrivilegeField(const json::object& body) {
  TY_ASSIGN_OR_RETURN(std::string p, RequiredString(body, "privilege"));
  if (p == "EDIT") return Action::kEdit;
  if (p == "MANAGE") return Action::kManage;
  return Status::InvalidArgument("privilege must be EDIT or MANAGE (got '" + p + "')");
}

Result<json::value> CreateUser(identity::IdentityService& ids, Call& c) {
  TY_ASSIGN_OR_RETURN(std::string name, RequiredString(c.body, "name"));
  TY_ASSIGN_OR_RETURN(auto admin, OptionalBool(c.body, "is_admin"));
  TY_ASSIGN_OR_RETURN(auto os_user, OptionalString(c.body, "os_user"));
  TY_ASSIGN_OR_RETURN(auto user, ids.CreateUser(c.principal, {.name = name,
                                                              .is_admin = admin.value_or(false),
                                                              .os_user = os_user.value_or("")}));
  return json::object{{"user", UserToJson(user)}};
}

// Updates a user's OS account mapping (admins only). Separate from the enable/disable and
// delete routes on purpose: each changes one thing.
Result<json::value> SetOsUser(identity::IdentityService& ids, Call& c) {
  TY_ASSIGN_OR_RETURN(auto os_user, OptionalString(c.body, "os_user"));
  if (!os_user) {
    return Status::InvalidArgument(
        "os_user is required (the OS account the user's jobs run as; \"\" "
        "removes the mapping)");
  }
  TY_ASSIGN_OR_RETURN(auto user,
                      ids.SetOsUser(c.principal, c.request.path_params["name"], *os_user));
  return json::object{{"user", UserToJson(user)}};
}

Result<json::value> ListUsers(identity::IdentityService& ids) {
  TY_ASSIGN_OR_RETURN(auto users, ids.ListUsers());
  json::array out;
  for (const auto& u : users) {
    out.emplace_back(UserToJson(u));
    out.back().as_object()["disabled"] = u.disabled;
  }
  return json::object{{"users", std::move(out)}};
}

void RegisterUserRoutes(Api& api, identity::IdentityService& ids) {
  api.Route(Method::kPost, kTrainyardPrefixes, "/users",
            [&ids](Call& c) { return CreateUser(ids, c); });
  api.Route(Method::kPatch, kTrainyardPrefixes, "/users/{name}",
            [&ids](Call& c) { return SetOsUser(ids, c); });
  api.Route(Method::kGet, kTrainyardPrefixes, "/users", [&ids](Call&) { return ListUsers(ids); });
  for (bool disable : {true, false}) {
    api.Route(Method::kPost, kTrainyardPrefixes,
              std::string("/users/{name}/") + (disable ? "disable" : "enable"),
              [&ids, disable](Call& c) -> Result<json::value> {
                const std::string& name = c.request.path_params["name"];
                TY_RETURN_IF_ERROR(ids.SetUserDisabled(c.principal, name, disable));
                return json::object{{"user", json::object{{"name", name}, {"disabled", disable}}}};
              });
  }
  api.Route(Method::kDelete, kTrainyardPrefixes, "/users/{name}",
            [&ids](Call& c) -> Result<json::value> {
              TY_RETURN_IF_ERROR(ids.DeleteUser(c.principal, c.request.path_params["name"]));
              return json::object();
            });
}

constexpr size_t kMaxQueryTokenEndpoints = 20;

Result<json::value> CreateToken(identity::IdentityService& ids, Call& c) {
  TY_ASSIGN_OR_RETURN(auto user, OptionalString(c.body, "user"));
  TY_ASSIGN_OR_RETURN(auto description, OptionalString(c.body, "description"));
  TY_ASSIGN_OR_RETURN(auto ttl, OptionalInt64(c.body, "expires_in_seconds"));
  TY_ASSIGN_OR_RETURN(auto query_only, OptionalBool(c.body, "query_only"));
  TY_ASSIGN_OR_RETURN(auto endpoints, StringList(c.body, "endpoints"));
  std::string scope;
  if (query_only.value_or(false)) {
    if (endpoints.size() > kMaxQueryTokenEndpoints) {
      return Status::InvalidArgument("endpoints must name at most " +
                                     std::to_string(kMaxQueryTokenEndpoints) + " endpoints (got " +
                                     std::to_string(endpoints.size()) + ")");
    }
    for (size_t i = 0; i < endpoints.size(); ++i) {
      if (!serving::ValidateEndpointName(endpoints[i]).ok()) {
        return Status::InvalidArgument("endpoints[" + std::to_string(i) + "]: '" +
                                       Abbreviate(endpoints[i]) +
                                       "' is not an endpoint name (1-63 letters, digits, '-' "
                                       "or '_')");
      }
    }
    scope = identity::QueryScope(endpoints);
  } else if (!endpoints.empty()) {
    return Status::InvalidArgument(
        "endpoints limits a query-only token: set \"query_only\": true with it");
  }
  TY_ASSIGN_OR_RETURN(auto created,
                      ids.CreateToken(c.principal, {.user = user.value_or(c.principal.user),
                                                    .description = description.value_or(""),
                                                    .ttl_seconds = ttl,
                                                    .scope = scope}));
  return json::object{{"token", created.first}, {"info", TokenToJson(created.second)}};
}

Result<json::value> ReadAudit(identity::IdentityService& ids, Call& c) {
  TY_ASSIGN_OR_RETURN(auto before, OptionalInt64(c.body, "before"));
  TY_ASSIGN_OR_RETURN(auto max_results, OptionalInt64(c.body, "max_results"));
  TY_ASSIGN_OR_RETURN(auto user, OptionalString(c.body, "user"));
  TY_ASSIGN_OR_RETURN(auto records, ids.ReadAudit(c.principal, before.value_or(0),
                                                  max_results.value_or(kDefaultAuditRecordsPerPage),
                                                  user.value_or("")));
  json::array out;
  for (const auto& r : records) {
    json::object o{{"timestamp", r.timestamp}, {"user", r.user},     {"method", r.method},
                   {"path", r.path},           {"status", r.status}, {"remote", r.remote}};
    if (!r.detail.empty()) o["detail"] = r.detail;
    out.emplace_back(std::move(o));
  }
  return json::object{{"records", std::move(out)}};
}

// Access decisions on catalog objects: GET /catalog/audit?user=&securable=&outcome=allow|deny
// (securable: "table main.support.tickets"), newest first; admins only.
Result<json::value> ReadCatalogAudit(identity::IdentityService& ids, Call& c) {
  identity::AuditQuery query;
  TY_ASSIGN_OR_RETURN(auto before, OptionalInt64(c.body, "before"));
  TY_ASSIGN_OR_RETURN(auto max_results, OptionalInt64(c.body, "max_results"));
  TY_ASSIGN_OR_RETURN(auto user, OptionalString(c.body, "user"));
  TY_ASSIGN_OR_RETURN(auto securable, OptionalString(c.body, "securable"));
  TY_ASSIGN_OR_RETURN(auto outcome, OptionalString(c.body, "outcome"));
  query.before = before.value_or(0);
  query.limit = max_results.value_or(kDefaultAuditRecordsPerPage);
  query.user = user.value_or("");
  if (securable && !securable->empty()) {
    size_t space = securable->find(' ');
    if (space == std::string::npos) {
      return Status::InvalidArgument(
          "securable must be '<type> <full name>', e.g. 'table main.support.tickets' (got '" +
          Abbreviate(*securable) + "')");
    }
    query.securable = ToLower(securable->substr(0, space)) + securable->substr(space);
  }
  std::string wanted = ToLower(outcome.value_or(""));
  if (!wanted.empty() && wanted != "allow" && wanted != "deny") {
    return Status::InvalidArgument("outcome must be allow or deny (got '" + Abbreviate(wanted) +
                                   "')");
  }
  query.outcome = wanted == "allow" ? "ALLOW" : wanted == "deny" ? "DENY" : "";
  TY_ASSIGN_OR_RETURN(auto records, ids.ReadAudit(c.principal, query));
  json::array out;
  for (const auto& r : records) {
    if (r.outcome.empty()) continue;  // a request record, not an access decision
    size_t space = r.securable.find(' ');
    out.emplace_back(json::object{
        {"timestamp", r.timestamp},
        {"user", r.user},
        {"securable_type", space == std::string::npos ? "" : r.securable.substr(0, space)},
        {"securable", space == std::string::npos ? r.securable : r.securable.substr(space + 1)},
        {"privilege", r.privilege},
        {"outcome", r.outcome},
        {"reason", r.detail}});
  }
  return json::object{{"events", std::move(out)}};
}

// The audit route sits between the token routes to keep the registration order unchanged.
void RegisterTokenAndAuditRoutes(Api& api, identity::IdentityService& ids) {
  api.Route(Method::kPost, kTrainyardPrefixes, "/tokens",
            [&ids](Call& c) { return CreateToken(ids, c); });
  api.Route(Method::kGet, kTrainyardPrefixes, "/tokens", [&ids](Call& c) -> Result<json::value> {
    TY_ASSIGN_OR_RETURN(auto tokens, ids.ListTokens(c.principal));
    json::array out;
    for (const auto& t : tokens) out.emplace_back(TokenToJson(t));
    return json::object{{"tokens", std::move(out)}};
  });
  api.Route(Method::kGet, kTrainyardPrefixes, "/audit",
            [&ids](Call& c) { return ReadAudit(ids, c); });
  api.Route(Method::kDelete, kTrainyardPrefixes, "/tokens/{token_id}",
            [&ids](Call& c) -> Result<json::value> {
              TY_RETURN_IF_ERROR(ids.RevokeToken(c.principal, c.request.path_params["token_id"]));
              return json::object();
            });
}

json::object GroupToJson(const identity::Group& g,
                         const std::vector<identity::GroupMember>& members) {
  json::array names, kinds;
  for (const auto& m : members) {
    names.emplace_back(m.name);
    kinds.emplace_back(
        json::object{{"name", m.name}, {"kind", identity::PrincipalKindName(m.kind)}});
  }
  return json::object{{"name", g.name},
                      {"created_at", g.created_at},
                      {"created_by", g.created_by},
                      {"members", std::move(names)},
                      {"member_kinds", std::move(kinds)}};
}

Result<json::value> ListGroups(identity::IdentityService& ids) {
  TY_ASSIGN_OR_RETURN(auto groups, ids.ListGroups());
  json::array out;
  for (const auto& g : groups) {
    TY_ASSIGN_OR_RETURN(auto members, ids.ListGroupMembers(g.name));
    out.emplace_back(GroupToJson(g, members));
  }
  return json::object{{"groups", std::move(out)}};
}

// Groups (of users, service principals and groups) and service principals, for the
// catalog's grants. Changes are for admins (IdentityService checks).
void RegisterGroupRoutes(Api& api, identity::IdentityService& ids) {
  api.Route(Method::kPost, kTrainyardPrefixes, "/groups", [&ids](Call& c) -> Result<json::value> {
    TY_ASSIGN_OR_RETURN(std::string name, RequiredString(c.body, "name"));
    TY_ASSIGN_OR_RETURN(auto group, ids.CreateGroup(c.principal, name));
    return json::object{{"group", GroupToJson(group, {})}};
  });
  api.Route(Method::kGet, kTrainyardPrefixes, "/groups", [&ids](Call&) { return ListGroups(ids); });
  api.Route(Method::kDelete, kTrainyardPrefixes, "/groups/{name}",
            [&ids](Call& c) -> Result<json::value> {
              TY_RETURN_IF_ERROR(ids.DeleteGroup(c.principal, c.request.path_params["name"]));
              return json::object();
            });
  api.Route(
      Method::kPost, kTrainyardPrefixes, "/groups/{name}/members",
      [&ids](Call& c) -> Result<json::value> {
        TY_ASSIGN_OR_RETURN(std::string member, RequiredString(c.body, "member"));
        TY_RETURN_IF_ERROR(ids.AddGroupMember(c.principal, c.request.path_params["name"], member));
        return json::object();
      });
  api.Route(Method::kDelete, kTrainyardPrefixes, "/groups/{name}/members/{member}",
            [&ids](Call& c) -> Result<json::value> {
              TY_RETURN_IF_ERROR(ids.RemoveGroupMember(c.principal, c.request.path_params["name"],
                                                       c.request.path_params["member"]));
              return json::object();
            });
  api.Route(Method::kPost, kTrainyardPrefixes, "/service-principals",
            [&ids](Call& c) -> Result<json::value> {
              TY_ASSIGN_OR_RETURN(std::string name, RequiredString(c.body, "name"));
              TY_ASSIGN_OR_RETURN(auto sp, ids.CreateServicePrincipal(c.principal, name));
              return json::object{{"service_principal", UserToJson(sp)}};
            });
  api.Route(Method::kGet, kTrainyardPrefixes, "/service-principals",
            [&ids](Call&) -> Result<json::value> {
              TY_ASSIGN_OR_RETURN(auto users, ids.ListUsers());
              json::array out;
              for (const auto& u : users) {
                if (u.kind == identity::PrincipalKind::kServicePrincipal) {
                  out.emplace_back(UserToJson(u));
                }
              }
              return json::object{{"service_principals", std::move(out)}};
            });
}

}  // namespace

void RegisterIdentityRoutes(Api& api) {
  identity::IdentityService& ids = api.identity();
  api.PublicRoute(Method::kGet, "/health", [](Call&) -> Result<json::value> {
    return json::object{{"status", "ok"}};
  });
  api.Route(Method::kGet, kTrainyardPrefixes, "/whoami", [](Call& c) -> Result<json::value> {
    return json::object{{"user", c.principal.user}, {"is_admin", c.principal.is_admin}};
  });
  RegisterUserRoutes(api, ids);
  RegisterTokenAndAuditRoutes(api, ids);
  RegisterGroupRoutes(api, ids);
  api.Route(Method::kGet, kTrainyardPrefixes, "/catalog/audit",
            [&ids](Call& c) { return ReadCatalogAudit(ids, c); });
}

// Grants need the securable's owner, which the owning service knows; they are
// registered beside each service's routes (see RegisterGrantRoute).
void RegisterGrantRoute(Api& api, const std::string& securable_type,
                        std::function<Result<std::string>(const std::string& id)> owner_of) {
  identity::IdentityService& ids = api.identity();
  api.Route(
      Method::kPost, kTrainyardPrefixes, "/grants/" + securable_type,
      [&ids, securable_type, owner_of](Call& c) -> Result<json::value> {
        TY_ASSIGN_OR_RETURN(std::string id, RequiredString(c.body, "id"));
        TY_ASSIGN_OR_RETURN(std::string user, RequiredString(c.body, "user"));
        TY_ASSIGN_OR_RETURN(Action privilege, PrivilegeField(c.body));
        TY_ASSIGN_OR_RETURN(std::string owner, owner_of(id));
        TY_RETURN_IF_ERROR(ids.Grant(c.principal, {securable_type, id, owner}, user, privilege));
        return json::object();
      });
}

}  // namespace trainyard::api
