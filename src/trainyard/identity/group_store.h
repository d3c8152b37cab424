// GroupStore: the group tables (principal_groups, group_members): schema, rows and queries.
// No authorization and no caching: IdentityService does those.
//
// Thread-safe (the Database is); keeps a reference to `db`.
#pragma once

#include <string>
#include <vector>

#include "trainyard/common/status.h"
#include "trainyard/identity/group_closure.h"
#include "trainyard/store/database.h"

namespace trainyard::identity {

struct GroupRow {
  std::string name;
  int64_t created_at = 0;
  std::string created_by;
};

class GroupStore {
 public:
  explicit GroupStore(store::Database& db) : db_(db) {}

  // Part of IdentityService::Migrations() (component "identity").
  static std::vector<std::string> CreateStatements();

  // Inside a write transaction of the caller's.
  static Status Insert(store::Transaction& tx, const GroupRow& row);
  // NotFound when there is no such group; removes its memberships in both directions.
  static Status Delete(store::Transaction& tx, const std::string& name);
  static Result<bool> Exists(store::Transaction& tx, const std::string& name);
  // AlreadyExists when `member` is in `group` already.
  static Status AddMember(store::Transaction& tx, const std::string& group,
                          const std::string& member);
  // NotFound when `member` is not a direct member of `group`.
  static Status RemoveMember(store::Transaction& tx, const std::string& group,
                             const std::string& member);
  static Status RemoveMemberEverywhere(store::Transaction& tx, const std::string& member);
  static Result<MembershipGraph> LoadGraph(store::Transaction& tx);

  Result<std::vector<GroupRow>> List();
  Result<std::vector<std::string>> Members(const std::string& group);
  Result<MembershipGraph> LoadGraph();

 private:
  store::Database& db_;
};

}  // namespace trainyard::identity
