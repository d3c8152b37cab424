// IdentityService's principals beyond users: service principals and (nested) groups, and
// GroupsOf with its cache. The SQL is GroupStore's; the closure and cycle check are
// group_closure's.
#include <algorithm>

#include "trainyard/common/strings.h"
#include "trainyard/identity/identity_service.h"

namespace trainyard::identity {
namespace {

std::string JoinPath(const std::vector<std::string>& path) {
  std::string out;
  for (const auto& p : path) out += (out.empty() ? "" : " -> ") + p;
  return out;
}

}  // namespace

Status IdentityService::CheckGroupAdministration(const Principal& who, std::string_view verb) {
  if (!who.scope.empty()) {
    return Status::PermissionDenied("a token scoped to " + who.scope + " may not " +
                                    std::string(verb));
  }
  if (!who.is_admin) return Status::PermissionDenied("only admins may " + std::string(verb));
  return Status::Ok();
}

Result<PrincipalKind> IdentityService::PrincipalKindIn(store::Transaction& tx,
                                                       const std::string& name) {
  TY_ASSIGN_OR_RETURN(auto rows, tx.Query("SELECT kind FROM users WHERE name = ?", {name}));
  if (!rows.empty()) {
    bool sp = !rows[0].IsNull(0) &&
              rows[0].Text(0) == PrincipalKindName(PrincipalKind::kServicePrincipal);
    return sp ? PrincipalKind::kServicePrincipal : PrincipalKind::kUser;
  }
  TY_ASSIGN_OR_RETURN(bool is_group, GroupStore::Exists(tx, name));
  if (is_group) return PrincipalKind::kGroup;
  return Status::NotFound("'" + name +
                          "' is no user, service principal or group; see 'trainyard users "
                          "list' and 'trainyard groups list'");
}

Result<PrincipalKind> IdentityService::GetPrincipalKind(const std::string& name) {
  PrincipalKind kind = PrincipalKind::kUser;
  TY_RETURN_IF_ERROR(db_.Read([&](store::Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(kind, PrincipalKindIn(tx, name));
    return Status::Ok();
  }));
  return kind;
}

Result<User> IdentityService::CreateServicePrincipal(const Principal& who,
                                                     const std::string& name) {
  TY_RETURN_IF_ERROR(CheckGroupAdministration(who, "create service principals"));
  TY_ASSIGN_OR_RETURN(User u, CreateUser(who, {.name = name}));
  TY_RETURN_IF_ERROR(db_.Write([&](store::Transaction& tx) -> Status {
    return tx
        .Exec("UPDATE users SET kind = ? WHERE name = ?",
              {std::string(PrincipalKindName(PrincipalKind::kServicePrincipal)), name})
        .status();
  }));
  u.kind = PrincipalKind::kServicePrincipal;
  return u;
}

Status IdentityService::AuthorizeRunAs(const Principal& who, const std::string& sp) {
  if (!who.scope.empty()) {
    return Status::PermissionDenied("run_as: a token scoped to " + who.scope +
                                    " may not start jobs as another principal");
  }
  auto kind = GetPrincipalKind(sp);
  if (!kind.ok() && kind.status().IsNotFound()) {
    return Status::InvalidArgument("run_as: '" + sp +
                                   "' is no service principal; list them with 'trainyard "
                                   "service-principals list'");
  }
  TY_RETURN_IF_ERROR(kind.status());
  if (*kind != PrincipalKind::kServicePrincipal) {
    return Status::InvalidArgument(
        "run_as: '" + sp + "' is a " + std::string(PrincipalKindName(*kind)) +
        ", not a service principal (a job runs as its submitter unless run_as names one)");
  }
  TY_ASSIGN_OR_RETURN(User principal, GetUser(sp));
  if (principal.disabled) {
    return Status::FailedPrecondition("run_as: service principal '" + sp +
                                      "' is disabled; an admin enables it with 'trainyard users "
                                      "enable " +
                                      sp + "'");
  }
  if (who.user == sp) return Status::Ok();
  Status s = Authorize(who, Action::kEdit, {std::string(kServicePrincipalSecurable), sp, ""});
  if (s.code() == StatusCode::kPermissionDenied) {
    return Status::PermissionDenied("run_as: user '" + who.user +
                                    "' may not run jobs as service principal '" + sp +
                                    "'; an admin grants its use with 'trainyard "
                                    "service-principals grant-use " +
                                    sp + " " + who.user + "'");
  }
  return s;
}

Result<Group> IdentityService::CreateGroup(const Principal& who, const std::string& name) {
  TY_RETURN_IF_ERROR(CheckGroupAdministration(who, "create groups"));
  if (name.empty() || name.size() > 128 || !std::all_of(name.begin(), name.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' ||
               c == '@';
      })) {
    return Status::InvalidArgument(
        "group name must be 1-128 letters, digits, '_', '-', '.', '@' (got '" + Abbreviate(name) +
        "')");
  }
  GroupRow row{name, clock_.NowMillis(), who.user};
  TY_RETURN_IF_ERROR(db_.Write([&](store::Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(auto users, tx.Query("SELECT 1 FROM users WHERE name = ?", {name}));
    if (!users.empty()) return Status::AlreadyExists("'" + name + "' is a user's name already");
    return GroupStore::Insert(tx, row);
  }));
  return Group{row.name, row.created_at, row.created_by};
}

Status IdentityService::DeleteGroup(const Principal& who, const std::string& name) {
  TY_RETURN_IF_ERROR(CheckGroupAdministration(who, "delete groups"));
  TY_RETURN_IF_ERROR(
      db_.Write([&](store::Transaction& tx) -> Status { return GroupStore::Delete(tx, name); }));
  InvalidateGroups();
  return Status::Ok();
}

Result<std::vector<Group>> IdentityService::ListGroups() {
  TY_ASSIGN_OR_RETURN(auto rows, group_store_.List());
  std::vector<Group> out;
  for (auto& r : rows) out.push_back(Group{r.name, r.created_at, r.created_by});
  return out;
}

Status IdentityService::AddGroupMember(const Principal& who, const std::string& group,
                                       const std::string& member) {
  TY_RETURN_IF_ERROR(CheckGroupAdministration(who, "change group membership"));
  TY_RETURN_IF_ERROR(db_.Write([&](store::Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(bool exists, GroupStore::Exists(tx, group));
    if (!exists) return Status::NotFound("group '" + group + "' does not exist");
    TY_ASSIGN_OR_RETURN(PrincipalKind kind, PrincipalKindIn(tx, member));
    if (kind == PrincipalKind::kGroup) {
      TY_ASSIGN_OR_RETURN(MembershipGraph graph, GroupStore::LoadGraph(tx));
      if (auto cycle = CycleIfAdded(graph, group, member)) {
        return Status::InvalidArgument("member: adding group '" + member + "' to group '" + group +
                                       "' would make a cycle: " + JoinPath(*cycle) +
                                       " (each is a member of the next)");
      }
    }
    return GroupStore::AddMember(tx, group, member);
  }));
  InvalidateGroups();
  return Status::Ok();
}

Status IdentityService::RemoveGroupMember(const Principal& who, const std::string& group,
                                          const std::string& member) {
  TY_RETURN_IF_ERROR(CheckGroupAdministration(who, "change group membership"));
  TY_RETURN_IF_ERROR(db_.Write([&](store::Transaction& tx) -> Status {
    return GroupStore::RemoveMember(tx, group, member);
  }));
  InvalidateGroups();
  return Status::Ok();
}

Result<std::vector<GroupMember>> IdentityService::ListGroupMembers(const std::string& group) {
  TY_ASSIGN_OR_RETURN(auto names, group_store_.Members(group));
  std::vector<GroupMember> out;
  TY_RETURN_IF_ERROR(db_.Read([&](store::Transaction& tx) -> Status {
    for (auto& name : names) {
      TY_ASSIGN_OR_RETURN(PrincipalKind kind, PrincipalKindIn(tx, name));
      out.push_back(GroupMember{std::move(name), kind});
    }
    return Status::Ok();
  }));
  return out;
}

Result<std::shared_ptr<const std::vector<std::string>>> IdentityService::GroupsOf(
    const std::string& principal) {
  std::shared_ptr<const MembershipGraph> graph;
  uint64_t generation = 0;
  {
    MutexLock lock(groups_mu_);
    auto it = groups_of_.find(principal);
    if (it != groups_of_.end()) return it->second;
    graph = groups_graph_;
    generation = groups_generation_;
  }
  if (!graph) {
    TY_ASSIGN_OR_RETURN(MembershipGraph loaded, group_store_.LoadGraph());
    graph = std::make_shared<const MembershipGraph>(std::move(loaded));
  }
  auto groups =
      std::make_shared<const std::vector<std::string>>(TransitiveGroups(*graph, principal));
  MutexLock lock(groups_mu_);
  if (generation == groups_generation_) {
    groups_graph_ = graph;
    // Bounds memory against many distinct names: start over.
    if (groups_of_.size() > 100000) groups_of_.clear();
    groups_of_[principal] = groups;
  }
  return groups;
}

std::optional<std::shared_ptr<const std::vector<std::string>>> IdentityService::GroupsOfCached(
    const std::string& principal) {
  MutexLock lock(groups_mu_);
  auto it = groups_of_.find(principal);
  if (it != groups_of_.end()) return it->second;
  if (!groups_graph_) return std::nullopt;
  // A walk of the graph in memory, under the lock as GroupsOf's insertion is.
  auto groups =
      std::make_shared<const std::vector<std::string>>(TransitiveGroups(*groups_graph_, principal));
  if (groups_of_.size() > 100000) groups_of_.clear();
  groups_of_[principal] = groups;
  return groups;
}

void IdentityService::InvalidateGroups() {
  MutexLock lock(groups_mu_);
  ++groups_generation_;
  groups_graph_.reset();
  groups_of_.clear();
}

}  // namespace trainyard::identity
