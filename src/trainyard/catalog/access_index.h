// AccessIndex: the catalog's tree (ids, parents, owners, full names) and grants held in
// memory, and the one access decision over them (UC's rule; see catalog_service.h).
// CatalogService loads it from CatalogStore once and applies every change to it after the
// store commits, so a decision never reads the store.
//
// Decide() costs a walk up at most four ancestors and a look-up of the subject's
// principals in each one's grants: no allocation on the allow path.
//
// Thread-safe: one Mutex guards the maps (decisions hold it briefly).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "trainyard/catalog/catalog_types.h"
#include "trainyard/catalog/permissions.h"
#include "trainyard/common/mutex.h"

namespace trainyard::catalog {

// Who asks: a user (or service principal), whether they are a metastore admin, and every
// group they are in (transitively).
struct Subject {
  std::string user;
  bool is_admin = false;
  std::shared_ptr<const std::vector<std::string>> groups;  // may be null (no groups)
};

struct Decision {
  bool allowed = false;
  std::string reason;  // why: "owner of catalog main", "SELECT granted on schema main.s to
                       // group analysts", or, for a deny, what is missing and where to grant it
};

struct IndexNode {
  SecurableType type = SecurableType::kCatalog;
  std::string parent_id;
  std::string owner;
  std::string full_name;
};

class AccessIndex {
 public:
  AccessIndex();

  // Replaces everything (the metastore node is implicit, owned by `metastore_owner`).
  void Reset(const std::vector<std::pair<std::string, IndexNode>>& nodes,
             const std::vector<std::tuple<std::string, std::string, PrivilegeSet>>& grants);
  void Put(const std::string& id, IndexNode node) TY_EXCLUDES(mu_);
  void Remove(const std::vector<std::string>& ids) TY_EXCLUDES(mu_);
  // Renames `id` and every node under it (full names only).
  void Rename(const std::string& id, const std::string& new_full_name) TY_EXCLUDES(mu_);
  // The principal's privileges on the securable (empty removes the entry).
  void SetGrants(const std::string& securable_id, const std::string& principal, PrivilegeSet set)
      TY_EXCLUDES(mu_);

  // The id of the object of `type` named `full_name` ("" names the metastore).
  std::optional<std::string> Find(SecurableType type, std::string_view full_name) const
      TY_EXCLUDES(mu_);
  std::optional<IndexNode> Node(const std::string& id) const TY_EXCLUDES(mu_);

  Decision Decide(const Subject& who, Privilege privilege, const std::string& id) const
      TY_EXCLUDES(mu_);

  // Grants on `id` and its ancestors, with where each comes from; `principal` "" = all.
  std::vector<EffectivePrivilegeAssignment> Effective(const std::string& id,
                                                      std::string_view principal) const
      TY_EXCLUDES(mu_);

 private:
  struct Entry {
    IndexNode node;
    std::vector<std::pair<std::string, PrivilegeSet>> grants;  // by principal
  };
  static std::string NameKey(SecurableType type, std::string_view full_name);
  // The node and its ancestors, nearest first; empty when `id` is unknown.
  std::vector<const Entry*> ChainLocked(const std::string& id) const TY_REQUIRES(mu_);

  mutable Mutex mu_;
  std::unordered_map<std::string, Entry> entries_ TY_GUARDED_BY(mu_);
  std::unordered_map<std::string, std::string> by_name_ TY_GUARDED_BY(mu_);
};

}  // namespace trainyard::catalog
