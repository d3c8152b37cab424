// The web UI's routes: `/` is the single-page app's index.html and `/assets/...` its hashed
// files, both public (the page loads before the user signs in; every API call it then makes
// carries the user's token). Registered after every API route, so API paths keep precedence.
#pragma once

#include <memory>

#include "trainyard/api/api.h"
#include "trainyard/http/static_files.h"

namespace trainyard::api {

void RegisterWebUiRoutes(Api& api, std::shared_ptr<const http::StaticFiles> files);

}  // namespace trainyard::api
