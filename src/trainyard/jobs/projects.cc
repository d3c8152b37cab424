#include "trainyard/jobs/projects.h"

#include "trainyard/common/strings.h"

namespace trainyard::jobs {
namespace {

// The longest project name (as for job names in specs).
constexpr size_t kMaxProjectNameBytes = 128;

bool ValidProjectName(std::string_view name) {
  if (name.empty() || name.size() > kMaxProjectNameBytes) return false;
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) {
      return false;
    }
  }
  return true;
}

Status CheckCeiling(int ceiling) {
  if (ceiling < -ProjectService::kMaxPriority || ceiling > ProjectService::kMaxPriority) {
    return Status::InvalidArgument("priority_ceiling must be between " +
                                   std::to_string(-ProjectService::kMaxPriority) + " and " +
                                   std::to_string(ProjectService::kMaxPriority) + " (got " +
                                   std::to_string(ceiling) + ")");
  }
  return Status::Ok();
}

Status ProjectNotFound(const std::string& name) {
  return Status::NotFound("project '" + name +
                          "' does not exist; list projects with 'trainyard projects list'");
}

}  // namespace

std::vector<store::Migration> ProjectService::Migrations() {
  return {{"projects",
           1,
           {"CREATE TABLE projects (name TEXT PRIMARY KEY, priority_ceiling INTEGER NOT NULL, "
            "open INTEGER NOT NULL, created_at BIGINT NOT NULL)",
            "CREATE TABLE project_members (project TEXT NOT NULL, user_name TEXT NOT NULL, "
            "PRIMARY KEY (project, user_name))",
            "INSERT INTO projects (name, priority_ceiling, open, created_at) VALUES ('default', "
            "0, 1, 0)"}}};
}

Status ProjectService::CheckAdmin(const identity::Principal& who, std::string_view what) {
  if (!who.scope.empty()) {
    return Status::PermissionDenied("a token scoped to " + who.scope + " may not " +
                                    std::string(what));
  }
  if (!who.is_admin) return Status::PermissionDenied("only admins may " + std::string(what));
  return Status::Ok();
}

Result<Project> ProjectService::Create(const identity::Principal& who, const std::string& name,
                                       int priority_ceiling) {
  TY_RETURN_IF_ERROR(CheckAdmin(who, "create projects"));
  if (!ValidProjectName(name)) {
    return Status::InvalidArgument("name must be 1-" + std::to_string(kMaxProjectNameBytes) +
                                   " letters, digits, '_', '-', '.' (got '" + Abbreviate(name) +
                                   "')");
  }
  TY_RETURN_IF_ERROR(CheckCeiling(priority_ceiling));
  Project p{name, priority_ceiling, false, clock_.NowMillis(), {}};
  TY_RETURN_IF_ERROR(db_.Write([&](store::Transaction& tx) -> Status {
    auto r = tx.Exec(
        "INSERT INTO projects (name, priority_ceiling, open, created_at) VALUES (?, ?, 0, ?)",
        {name, int64_t{priority_ceiling}, p.created_at});
    if (!r.ok() && r.status().IsAlreadyExists()) {
      return Status::AlreadyExists("project '" + name + "' already exists");
    }
    return r.status();
  }));
  return p;
}

Result<std::vector<Project>> ProjectService::List() {
  std::vector<Project> out;
  TY_RETURN_IF_ERROR(db_.Read([&](store::Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(auto rows, tx.Query("SELECT name, priority_ceiling, open, created_at FROM "
                                            "projects ORDER BY name"));
    TY_ASSIGN_OR_RETURN(auto members, tx.Query("SELECT project, user_name FROM project_members "
                                               "ORDER BY project, user_name"));
    for (const auto& r : rows) {
      Project p{r.Text(0), static_cast<int>(r.Int(1)), r.Int(2) != 0, r.Int(3), {}};
      for (const auto& m : members) {
        if (m.Text(0) == p.name) p.members.push_back(m.Text(1));
      }
      out.push_back(std::move(p));
    }
    return Status::Ok();
  }));
  return out;
}

Result<Project> ProjectService::Get(const std::string& name) {
  Project p;
  TY_RETURN_IF_ERROR(db_.Read([&](store::Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(auto rows, tx.Query("SELECT name, priority_ceiling, open, created_at FROM "
                                            "projects WHERE name = ?",
                                            {name}));
    if (rows.empty()) return ProjectNotFound(name);
    p = Project{
        rows[0].Text(0), static_cast<int>(rows[0].Int(1)), rows[0].Int(2) != 0, rows[0].Int(3), {}};
    TY_ASSIGN_OR_RETURN(auto members, tx.Query("SELECT user_name FROM project_members WHERE "
                                               "project = ? ORDER BY user_name",
                                               {name}));
    for (const auto& m : members) p.members.push_back(m.Text(0));
    return Status::Ok();
  }));
  return p;
}

Status ProjectService::AddMember(const identity::Principal& who, const std::string& project,
                                 const std::string& user) {
  TY_RETURN_IF_ERROR(CheckAdmin(who, "change project members"));
  return db_.Write([&](store::Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(auto p, tx.Query("SELECT 1 FROM projects WHERE name = ?", {project}));
    if (p.empty()) return ProjectNotFound(project);
    TY_ASSIGN_OR_RETURN(auto u, tx.Query("SELECT 1 FROM users WHERE name = ?", {user}));
    if (u.empty()) return Status::NotFound("user '" + user + "' does not exist");
    return tx
        .Exec(
            "INSERT INTO project_members (project, user_name) VALUES (?, ?) ON CONFLICT "
            "(project, user_name) DO NOTHING",
            {project, user})
        .status();
  });
}

Status ProjectService::RemoveMember(const identity::Principal& who, const std::string& project,
                                    const std::string& user) {
  TY_RETURN_IF_ERROR(CheckAdmin(who, "change project members"));
  return db_.Write([&](store::Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(auto p, tx.Query("SELECT 1 FROM projects WHERE name = ?", {project}));
    if (p.empty()) return ProjectNotFound(project);
    TY_ASSIGN_OR_RETURN(int64_t n,
                        tx.Exec("DELETE FROM project_members WHERE project = ? AND user_name = ?",
                                {project, user}));
    if (n == 0) {
      return Status::NotFound("user '" + user + "' is not a member of project '" + project + "'");
    }
    return Status::Ok();
  });
}

Status ProjectService::ForgetUser(const std::string& user) {
  return db_.Write([&](store::Transaction& tx) -> Status {
    return tx.Exec("DELETE FROM project_members WHERE user_name = ?", {user}).status();
  });
}

Status ProjectService::SetCeiling(const identity::Principal& who, const std::string& project,
                                  int ceiling) {
  TY_RETURN_IF_ERROR(CheckAdmin(who, "set a project's priority ceiling"));
  TY_RETURN_IF_ERROR(CheckCeiling(ceiling));
  return db_.Write([&](store::Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(int64_t n,
                        tx.Exec("UPDATE projects SET priority_ceiling = ? WHERE name = ?",
                                {int64_t{ceiling}, project}));
    return n == 0 ? ProjectNotFound(project) : Status::Ok();
  });
}

Result<bool> ProjectService::IsMember(const std::string& user, const std::string& project) {
  bool member = false;
  TY_RETURN_IF_ERROR(db_.Read([&](store::Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(auto rows,
                        tx.Query("SELECT p.open, m.user_name FROM projects p LEFT JOIN "
                                 "project_members m ON m.project = p.name AND m.user_name = ? "
                                 "WHERE p.name = ?",
                                 {user, project}));
    member = !rows.empty() && (rows[0].Int(0) != 0 || !rows[0].IsNull(1));
    return Status::Ok();
  }));
  return member;
}

Status ProjectService::AuthorizeSubmit(const identity::Principal& who, const std::string& project,
                                       int priority) {
  if (!who.scope.empty()) {
    return Status::PermissionDenied("a token scoped to " + who.scope + " may not submit jobs");
  }
  auto found = Get(project);
  if (!found.ok() && !found.status().IsNotFound()) return found.status();
  if (who.is_admin) {
    if (found.ok()) return Status::Ok();
    // Before projects existed any project name was accepted; an admin's submit keeps working.
    return db_.Write([&](store::Transaction& tx) -> Status {
      TY_RETURN_IF_ERROR(tx.Exec("INSERT INTO projects (name, priority_ceiling, open, created_at) "
                                 "VALUES (?, ?, 0, ?) ON CONFLICT (name) DO NOTHING",
                                 {project, int64_t{kMaxPriority}, clock_.NowMillis()})
                             .status());
      return tx
          .Exec(
              "INSERT INTO project_members (project, user_name) VALUES (?, ?) ON CONFLICT "
              "(project, user_name) DO NOTHING",
              {project, who.user})
          .status();
    });
  }
  const std::string ask = "ask an admin: trainyard projects add-member " + project + " " + who.user;
  if (!found.ok()) {
    return Status::PermissionDenied("project '" + project + "' does not exist; " + ask);
  }
  const Project& p = *found;
  bool member = p.open;
  for (const auto& m : p.members) member = member || m == who.user;
  if (!member) {
    return Status::PermissionDenied("user '" + who.user + "' is not a member of project '" +
                                    project + "'; " + ask);
  }
  if (priority > p.priority_ceiling) {
    return Status::PermissionDenied(
        "priority " + std::to_string(priority) + " is above project '" + project +
        "''s ceiling of " + std::to_string(p.priority_ceiling) +
        "; use priority <= " + std::to_string(p.priority_ceiling) +
        " or ask an admin: trainyard projects set-ceiling " + project + " N");
  }
  return Status::Ok();
}

}  // namespace trainyard::jobs
