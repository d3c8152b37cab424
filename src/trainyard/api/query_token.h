// The routes a query-only token (identity/query_scope.h) may call: the serving data plane
// (POST /serving-endpoints/{name}/invocations and the OpenAI routes under /serving-endpoints
// and /v1). Api::Serve refuses it everything else with a 403 that says so.
#pragma once

#include <string_view>

#include "trainyard/http/message.h"

namespace trainyard::api {

// `path` is a request's path, e.g. "/serving-endpoints/intent/invocations".
bool QueryOnlyTokenMayCall(http::Method method, std::string_view path);

}  // namespace trainyard::api
