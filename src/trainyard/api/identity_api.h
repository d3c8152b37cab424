// Trainyard's own identity endpoints (/api/trainyard/v1/{users,tokens,grants,whoami})
// and the unauthenticated health check (/health).
#pragma once

#include "trainyard/api/api.h"

namespace trainyard::api {

void RegisterIdentityRoutes(Api& api);

// POST /api/trainyard/v1/grants/<securable_type> {id, user, privilege}: lets the owner of
// an object (or an admin) grant EDIT or MANAGE on it. `owner_of` finds the owner.
void RegisterGrantRoute(Api& api, const std::string& securable_type,
                        std::function<Result<std::string>(const std::string& id)> owner_of);

}  // namespace trainyard::api
