#include "trainyard/identity/group_store.h"

namespace trainyard::identity {

std::vector<std::string> GroupStore::CreateStatements() {
  return {
      "CREATE TABLE principal_groups (name TEXT PRIMARY KEY, created_at BIGINT NOT NULL,"
      " created_by TEXT NOT NULL)",
      "CREATE TABLE group_members (group_name TEXT NOT NULL, member TEXT NOT NULL,"
      " PRIMARY KEY (group_name, member))",
      "CREATE INDEX group_members_by_member ON group_members (member)",
  };
}

Status GroupStore::Insert(store::Transaction& tx, const GroupRow& row) {
  auto r = tx.Exec("INSERT INTO principal_groups (name, created_at, created_by) VALUES (?, ?, ?)",
                   {row.name, row.created_at, row.created_by});
  if (!r.ok() && r.status().IsAlreadyExists()) {
    return Status::AlreadyExists("group '" + row.name + "' already exists");
  }
  return r.status();
}

Status GroupStore::Delete(store::Transaction& tx, const std::string& name) {
  TY_ASSIGN_OR_RETURN(int64_t n, tx.Exec("DELETE FROM principal_groups WHERE name = ?", {name}));
  if (n == 0) {
    return Status::NotFound("group '" + name + "' does not exist; see 'trainyard groups list'");
  }
  TY_RETURN_IF_ERROR(tx.Exec("DELETE FROM group_members WHERE group_name = ?", {name}).status());
  return tx.Exec("DELETE FROM group_members WHERE member = ?", {name}).status();
}

Result<bool> GroupStore::Exists(store::Transaction& tx, const std::string& name) {
  TY_ASSIGN_OR_RETURN(auto rows, tx.Query("SELECT 1 FROM principal_groups WHERE name = ?", {name}));
  return !rows.empty();
}

Status GroupStore::AddMember(store::Transaction& tx, const std::string& group,
                             const std::string& member) {
  TY_ASSIGN_OR_RETURN(int64_t n, tx.Exec("INSERT INTO group_members (group_name, member) VALUES "
                                         "(?, ?) ON CONFLICT (group_name, member) DO NOTHING",
                                         {group, member}));
  if (n == 0) {
    return Status::AlreadyExists("'" + member + "' is a member of group '" + group + "' already");
  }
  return Status::Ok();
}

Status GroupStore::RemoveMember(store::Transaction& tx, const std::string& group,
                                const std::string& member) {
  TY_ASSIGN_OR_RETURN(
      int64_t n,
      tx.Exec("DELETE FROM group_members WHERE group_name = ? AND member = ?", {group, member}));
  if (n == 0) {
    return Status::NotFound("'" + member + "' is not a direct member of group '" + group + "'");
  }
  return Status::Ok();
}

Status GroupStore::RemoveMemberEverywhere(store::Transaction& tx, const std::string& member) {
  return tx.Exec("DELETE FROM group_members WHERE member = ?", {member}).status();
}

Result<MembershipGraph> GroupStore::LoadGraph(store::Transaction& tx) {
  MembershipGraph graph;
  TY_RETURN_IF_ERROR(tx.QueryEach("SELECT member, group_name FROM group_members", {},
                                  [&](const store::RowView& r) -> Status {
                                    graph[std::string(r.Text(0))].emplace_back(r.Text(1));
                                    return Status::Ok();
                                  }));
  return graph;
}

Result<std::vector<GroupRow>> GroupStore::List() {
  std::vector<GroupRow> out;
  TY_RETURN_IF_ERROR(db_.Read([&](store::Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(
        auto rows,
        tx.Query("SELECT name, created_at, created_by FROM principal_groups ORDER BY name"));
    for (const auto& r : rows) out.push_back(GroupRow{r.Text(0), r.Int(1), r.Text(2)});
    return Status::Ok();
  }));
  return out;
}

Result<std::vector<std::string>> GroupStore::Members(const std::string& group) {
  std::vector<std::string> out;
  TY_RETURN_IF_ERROR(db_.Read([&](store::Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(bool exists, Exists(tx, group));
    if (!exists) return Status::NotFound("group '" + group + "' does not exist");
    TY_ASSIGN_OR_RETURN(auto rows, tx.Query("SELECT member FROM group_members WHERE group_name = "
                                            "? ORDER BY member",
                                            {group}));
    for (const auto& r : rows) out.push_back(r.Text(0));
    return Status::Ok();
  }));
  return out;
}

Result<MembershipGraph> GroupStore::LoadGraph() {
  MembershipGraph graph;
  TY_RETURN_IF_ERROR(db_.Read([&](store::Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(graph, LoadGraph(tx));
    return Status::Ok();
  }));
  return graph;
}

}  // namespace trainyard::identity
