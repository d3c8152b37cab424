#include "trainyard/catalog/access_index.h"

#include <algorithm>

namespace trainyard::catalog {
namespace {

bool InSubject(const Subject& who, const std::string& principal) {
  if (principal == who.user) return true;
  return who.groups && std::binary_search(who.groups->begin(), who.groups->end(), principal);
}

std::string Describe(const IndexNode& n) {
  if (n.type == SecurableType::kMetastore) return "the metastore";
  return std::string(SecurableTypeName(n.type)) + " " + n.full_name;
}

// The USE privilege a container asks of whoever reaches inside it.
std::optional<Privilege> UsePrivilegeOf(SecurableType t) {
  if (t == SecurableType::kCatalog) return Privilege::kUseCatalog;
  if (t == SecurableType::kSchema) return Privilege::kUseSchema;
  return std::nullopt;
}

}  // namespace

AccessIndex::AccessIndex() { Reset({}, {}); }

std::string AccessIndex::NameKey(SecurableType type, std::string_view full_name) {
  std::string key(SecurableTypeName(type));
  key += ':';
  key += full_name;
  return key;
}

void AccessIndex::Reset(
    const std::vector<std::pair<std::string, IndexNode>>& nodes,
    const std::vector<std::tuple<std::string, std::string, PrivilegeSet>>& grants) {
  MutexLock lock(mu_);
  entries_.clear();
  by_name_.clear();
  entries_[kMetastoreId] = Entry{IndexNode{SecurableType::kMetastore, "", "", ""}, {}};
  by_name_[NameKey(SecurableType::kMetastore, "")] = kMetastoreId;
  for (const auto& [id, node] : nodes) {
    by_name_[NameKey(node.type, node.full_name)] = id;
    entries_[id].node = node;
  }
  for (const auto& [id, principal, set] : grants) {
    auto it = entries_.find(id);
    if (it != entries_.end() && !set.empty()) it->second.grants.emplace_back(principal, set);
  }
}

void AccessIndex::Put(const std::string& id, IndexNode node) {
  MutexLock lock(mu_);
  Entry& e = entries_[id];
  if (!e.node.full_name.empty()) by_name_.erase(NameKey(e.node.type, e.node.full_name));
  by_name_[NameKey(node.type, node.full_name)] = id;
  e.node = std::move(node);
}

void AccessIndex::Remove(const std::vector<std::string>& ids) {
  MutexLock lock(mu_);
  for (const auto& id : ids) {
    auto it = entries_.find(id);
    if (it == entries_.end() || id == kMetastoreId) continue;
    by_name_.erase(NameKey(it->second.node.type, it->second.node.full_name));
    entries_.erase(it);
  }
}

void AccessIndex::Rename(const std::string& id, const std::string& new_full_name) {
  MutexLock lock(mu_);
  auto target = entries_.find(id);
  if (target == entries_.end()) return;
  const std::string old_prefix = target->second.node.full_name + ".";
  std::vector<std::pair<std::string, std::string>> renames{{id, new_full_name}};
  for (const auto& [other_id, e] : entries_) {
    if (e.node.full_name.compare(0, old_prefix.size(), old_prefix) == 0) {
      renames.emplace_back(other_id,
                           new_full_name + "." + e.node.full_name.substr(old_prefix.size()));
    }
  }
  for (auto& [renamed_id, name] : renames) {
    IndexNode& node = entries_[renamed_id].node;
    by_name_.erase(NameKey(node.type, node.full_name));
    node.full_name = std::move(name);
    by_name_[NameKey(node.type, node.full_name)] = renamed_id;
  }
}

void AccessIndex::SetGrants(const std::string& securable_id, const std::string& principal,
                            PrivilegeSet set) {
  MutexLock lock(mu_);
  auto it = entries_.find(securable_id);
  if (it == entries_.end()) return;
  auto& grants = it->second.grants;
  auto g = std::find_if(grants.begin(), grants.end(),
                        [&](const auto& entry) { return entry.first == principal; });
  if (set.empty()) {
    if (g != grants.end()) grants.erase(g);
  } else if (g != grants.end()) {
    g->second = set;
  } else {
    grants.emplace_back(principal, set);
  }
}

std::optional<std::string> AccessIndex::Find(SecurableType type, std::string_view full_name) const {
  MutexLock lock(mu_);
  auto it = by_name_.find(NameKey(type, full_name));
  if (it == by_name_.end()) return std::nullopt;
  return it->second;
}

std::optional<IndexNode> AccessIndex::Node(const std::string& id) const {
  MutexLock lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return std::nullopt;
  return it->second.node;
}

std::vector<const AccessIndex::Entry*> AccessIndex::ChainLocked(const std::string& id) const {
  std::vector<const Entry*> chain;
  const std::string* at = &id;
  // Depth is at most 4 (metastore, catalog, schema, object); the bound guards a damaged tree.
  while (chain.size() < 8) {
    auto it = entries_.find(*at);
    if (it == entries_.end()) break;
    chain.push_back(&it->second);
    if (it->second.node.type == SecurableType::kMetastore) break;
    at = &it->second.node.parent_id;
  }
  return chain;
}

Decision AccessIndex::Decide(const Subject& who, Privilege privilege, const std::string& id) const {
  if (who.is_admin) return Decision{true, "metastore admin"};
  MutexLock lock(mu_);
  auto chain = ChainLocked(id);
  if (chain.empty()) return Decision{false, "no such securable"};
  // What the subject holds on each level, and whether it owns one.
  PrivilegeSet held[8];
  for (size_t i = 0; i < chain.size(); ++i) {
    if (!chain[i]->node.owner.empty() && InSubject(who, chain[i]->node.owner)) {
      return Decision{true, "owner"};
    }
    uint32_t bits = 0;
    for (const auto& [principal, set] : chain[i]->grants) {
      if (InSubject(who, principal)) bits |= set.bits();
    }
    held[i] = PrivilegeSet::FromBits(bits);
  }
  auto held_at_or_above = [&](Privilege p, size_t from) {
    for (size_t i = from; i < chain.size(); ++i) {
      if (held[i].Grants(p)) return true;
    }
    return false;
  };
  const IndexNode& target = chain[0]->node;
  if (!held_at_or_above(privilege, 0)) {
    return Decision{false, "'" + who.user + "' lacks " + std::string(PrivilegeName(privilege)) +
                               " on " + Describe(target) +
                               "; its owner, a MANAGE holder or an admin can grant it there or "
                               "on a parent"};
  }
  // From the top down, so the first missing USE named is the outermost.
  for (size_t i = chain.size(); i-- > 0;) {
    auto use = UsePrivilegeOf(chain[i]->node.type);
    if (!use || (i == 0 && *use == privilege)) continue;
    if (!held_at_or_above(*use, i)) {
      return Decision{false, "'" + who.user + "' lacks " + std::string(PrivilegeName(*use)) +
                                 " on " + Describe(chain[i]->node) + ", needed for " +
                                 std::string(PrivilegeName(privilege)) + " on " + Describe(target)};
    }
  }
  return Decision{true, "granted"};
}

std::vector<EffectivePrivilegeAssignment> AccessIndex::Effective(const std::string& id,
                                                                 std::string_view principal) const {
  MutexLock lock(mu_);
  auto chain = ChainLocked(id);
  std::vector<EffectivePrivilegeAssignment> out;
  for (size_t i = 0; i < chain.size(); ++i) {
    for (const auto& [grantee, set] : chain[i]->grants) {
      if (!principal.empty() && grantee != principal) continue;
      const std::string& name = grantee;  // a structured binding cannot be captured (clang 14)
      auto it =
          std::find_if(out.begin(), out.end(), [&](const auto& a) { return a.principal == name; });
      if (it == out.end()) it = out.insert(out.end(), EffectivePrivilegeAssignment{grantee, {}});
      for (Privilege p : set.ToVector()) {
        EffectivePrivilege e{p, chain[i]->node.type, i == 0 ? "" : chain[i]->node.full_name,
                             i != 0};
        it->privileges.push_back(std::move(e));
      }
    }
  }
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.principal < b.principal; });
  return out;
}

}  // namespace trainyard::catalog
