#include "trainyard/identity/group_closure.h"

#include <algorithm>
#include <deque>
#include <unordered_set>

namespace trainyard::identity {

std::vector<std::string> TransitiveGroups(const MembershipGraph& graph, const std::string& member) {
  std::unordered_set<std::string> seen;
  std::deque<const std::string*> queue{&member};
  while (!queue.empty()) {
    const std::string* current = queue.front();
    queue.pop_front();
    auto it = graph.find(*current);
    if (it == graph.end()) continue;
    for (const auto& parent : it->second) {
      if (parent != member && seen.insert(parent).second) queue.push_back(&parent);
    }
  }
  std::vector<std::string> out(seen.begin(), seen.end());
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<std::vector<std::string>> CycleIfAdded(const MembershipGraph& graph,
                                                     const std::string& group,
                                                     const std::string& member) {
  if (group == member) return std::vector<std::string>{group, group};
  // Walk up from `group` through the groups it is in; reaching `member` means group is
  // already inside member. Remember each step's predecessor to print the path.
  std::unordered_map<std::string, std::string> came_from;
  std::deque<std::string> queue{group};
  came_from[group] = "";
  while (!queue.empty()) {
    std::string current = queue.front();
    queue.pop_front();
    if (current == member) {
      std::vector<std::string> path;
      for (std::string at = member; !at.empty(); at = came_from[at]) path.push_back(at);
      // path is member <- ... <- group; the cycle reads group -> ... -> member -> group.
      std::reverse(path.begin(), path.end());
      path.push_back(group);
      return path;
    }
    auto it = graph.find(current);
    if (it == graph.end()) continue;
    for (const auto& parent : it->second) {
      if (came_from.emplace(parent, current).second) queue.push_back(parent);
    }
  }
  return std::nullopt;
}

}  // namespace trainyard::identity
