#include "trainyard/api/web_ui_api.h"

#include <utility>

namespace trainyard::api {

void RegisterWebUiRoutes(Api& api, std::shared_ptr<const http::StaticFiles> files) {
  api.PublicRawRoute(http::Method::kGet, "/",
                     [files](http::Request&) { return files->ServeIndex(); });
  api.PublicRawRoute(http::Method::kGet, "/index.html",
                     [files](http::Request&) { return files->ServeIndex(); });
  api.PublicRawRoute(http::Method::kGet, "/assets/{path...}", [files](http::Request& r) {
    return files->Serve("assets/" + r.path_params["path"]);
  });
}

}  // namespace trainyard::api
