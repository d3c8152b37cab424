// Query-only tokens: a token kind that may only query serving endpoints. Its scope is "query"
// (every endpoint its user may QUERY) or "query:a,b" (only endpoints a and b). The API lets
// such a token call the serving routes only (api/query_token.h), and never as an admin (like
// every scoped token, Principal::is_admin is false); the serving service checks the endpoint
// names (QueryTokenAllows). Pure functions of the scope string.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "trainyard/identity/authorizer.h"

namespace trainyard::identity {

inline constexpr std::string_view kQueryScope = "query";

bool IsQueryOnly(const Principal& who);
// The endpoints a "query:a,b" scope names (empty for "query": all of them).
std::vector<std::string> QueryScopeEndpoints(std::string_view scope);
// "query", or "query:a,b" for `endpoints`.
std::string QueryScope(const std::vector<std::string>& endpoints);
// Whether `who` may query endpoint `name` as far as its token's scope goes: true for every
// token but a query-only one limited to other endpoints.
bool QueryTokenAllows(const Principal& who, std::string_view name);

}  // namespace trainyard::identity
