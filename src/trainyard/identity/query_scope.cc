#include "trainyard/identity/query_scope.h"

#include "trainyard/common/strings.h"

namespace trainyard::identity {

bool IsQueryOnly(const Principal& who) {
  std::string_view scope = who.scope;
  return scope == kQueryScope ||
         (StartsWith(scope, kQueryScope) && scope.size() > kQueryScope.size() &&
          scope[kQueryScope.size()] == ':');
}

std::vector<std::string> QueryScopeEndpoints(std::string_view scope) {
  std::vector<std::string> out;
  if (scope.size() <= kQueryScope.size() + 1) return out;
  std::string_view rest = scope.substr(kQueryScope.size() + 1);
  while (!rest.empty()) {
    size_t comma = rest.find(',');
    out.emplace_back(rest.substr(0, comma));
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return out;
}

std::string QueryScope(const std::vector<std::string>& endpoints) {
  std::string scope(kQueryScope);
  for (size_t i = 0; i < endpoints.size(); ++i) scope += (i == 0 ? ":" : ",") + endpoints[i];
  return scope;
}

bool QueryTokenAllows(const Principal& who, std::string_view name) {
  if (!IsQueryOnly(who) || who.scope == kQueryScope) return true;
  for (const auto& e : QueryScopeEndpoints(who.scope)) {
    if (e == name) return true;
  }
  return false;
}

}  // namespace trainyard::identity
