// ProjectService: projects, their members and their priority ceiling.
//
// A job is submitted into a project (spec `project`, "default" when unset). Only
// admins create projects, change members and set the ceiling. Submitting needs
// membership (admins always may); a priority above the ceiling is refused for
// non-admins. The "default" project exists from the first start, is open to every
// user and has ceiling 0, so nobody but an admin queues ahead of the others there.
//
// A project that does not exist yet: an admin's submit creates it (with the admin
// as its member and the highest ceiling, as before projects existed); anyone
// else is refused with what to ask an admin.
//
// Thread-safe (all state is in the database).
#pragma once

#include <string>
#include <vector>

#include "trainyard/common/clock.h"
#include "trainyard/common/status.h"
#include "trainyard/identity/identity_service.h"
#include "trainyard/store/database.h"

namespace trainyard::jobs {

struct Project {
  std::string name;
  int priority_ceiling = 0;
  bool open = false;  // every user is a member
  int64_t created_at = 0;
  std::vector<std::string> members;
};

class ProjectService {
 public:
  static constexpr int kMaxPriority = 1000;
  static constexpr int kDefaultCeiling = 0;

  ProjectService(store::Database& db, Clock& clock) : db_(db), clock_(clock) {}
  ProjectService(const ProjectService&) = delete;
  ProjectService& operator=(const ProjectService&) = delete;

  static std::vector<store::Migration> Migrations();

  Result<Project> Create(const identity::Principal& who, const std::string& name,
                         int priority_ceiling);
  Result<std::vector<Project>> List();
  Result<Project> Get(const std::string& name);
  Status AddMember(const identity::Principal& who, const std::string& project,
                   const std::string& user);
  Status RemoveMember(const identity::Principal& who, const std::string& project,
                      const std::string& user);
  Status SetCeiling(const identity::Principal& who, const std::string& project, int ceiling);

  // Whether `who` may submit a job at `priority` into `project`; creates a missing
  // project for an admin (see above).
  Status AuthorizeSubmit(const identity::Principal& who, const std::string& project, int priority);
  // Members (and everyone, for an open project) see a project's jobs' env and logs.
  Result<bool> IsMember(const std::string& user, const std::string& project);
  // Removes `user` from every project (the user was deleted).
  Status ForgetUser(const std::string& user);

 private:
  Status CheckAdmin(const identity::Principal& who, std::string_view what);

  store::Database& db_;
  Clock& clock_;
};

}  // namespace trainyard::jobs
