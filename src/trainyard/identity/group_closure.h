// Group membership as a graph, and the pure functions over it (no I/O; thread-safe on
// const data): the transitive closure behind GroupsOf, and the cycle check behind
// AddGroupMember.
#pragma once

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace trainyard::identity {

// member -> the groups it is a direct member of.
using MembershipGraph = std::unordered_map<std::string, std::vector<std::string>>;

// Every group `member` is in, directly or through other groups, sorted, without `member`.
// Terminates on a graph with cycles too.
std::vector<std::string> TransitiveGroups(const MembershipGraph& graph, const std::string& member);

// The cycle that adding `member` to `group` would make, as the path
// {group, ..., member, group} (group is inside member, which would be inside group); nullopt
// when it makes none.
std::optional<std::vector<std::string>> CycleIfAdded(const MembershipGraph& graph,
                                                     const std::string& group,
                                                     const std::string& member);

}  // namespace trainyard::identity
