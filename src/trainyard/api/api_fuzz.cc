// libFuzzer target for the request decoders: every MLflow and Trainyard endpoint, fed
// arbitrary bodies and query strings through the real router, API layer and services
// (in-memory SQLite, a temporary artifact directory). The first input byte picks the
// endpoint; the rest is the body (or, for GET, also the query string).
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "trainyard/api/api.h"
#include "trainyard/api/identity_api.h"
#include "trainyard/api/mlflow_artifacts_api.h"
#include "trainyard/api/mlflow_registry_api.h"
#include "trainyard/api/mlflow_tracking_api.h"
#include "trainyard/blob/blob_store.h"
#include "trainyard/registry/registry_service.h"

namespace {

using namespace trainyard;

struct Stack {
  FakeClock clock;
  SeededRandom random{42};
  std::unique_ptr<store::Database> db;
  std::unique_ptr<blob::BlobStore> blobs;
  std::unique_ptr<identity::IdentityService> identity;
  std::unique_ptr<tracking::TrackingService> tracking;
  std::unique_ptr<registry::RegistryService> registry;
  http::Router router;
  std::unique_ptr<api::Api> api;
  std::string token;
  std::vector<std::pair<http::Method, std::string>> endpoints;

  Stack() {
    std::string dir = std::filesystem::temp_directory_path() / "trainyard-api-fuzz";
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    db = std::move(store::OpenDatabase({.url = ":memory:"})).value();
    auto migrations = identity::IdentityService::Migrations();
    for (auto& m : tracking::TrackingService::Migrations()) migrations.push_back(m);
    for (auto& m : registry::RegistryService::Migrations()) migrations.push_back(m);
    if (!store::ApplyMigrations(*db, migrations).ok()) std::abort();
    blobs = std::move(blob::OpenLocalBlobStore(dir + "/artifacts")).value();
    identity = std::make_unique<identity::IdentityService>(*db, clock, random);
    if (!identity->Bootstrap(dir).ok()) std::abort();
    std::ifstream(dir + "/admin.token") >> token;
    tracking = std::make_unique<tracking::TrackingService>(*db, clock, random, *identity,
                                                           "mlflow-artifacts:");
    if (!tracking->Init("admin").ok()) std::abort();
    registry = std::make_unique<registry::RegistryService>(*db, clock, *identity, *tracking);
    api = std::make_unique<api::Api>(router, *identity, clock);
    api::RegisterIdentityRoutes(*api);
    api::RegisterTrackingRoutes(*api, *tracking);
    api::RegisterArtifactRoutes(*api, *blobs, *tracking);
    api::RegisterRegistryRoutes(*api, *registry);
    using M = http::Method;
    const std::string p = "/api/2.0/mlflow";
    for (const char* path : {"/experiments/create",
                             "/experiments/search",
                             "/experiments/update",
                             "/experiments/delete",
                             "/experiments/restore",
                             "/experiments/set-experiment-tag",
                             "/runs/create",
                             "/runs/update",
                             "/runs/delete",
                             "/runs/log-metric",
                             "/runs/log-parameter",
                             "/runs/set-tag",
                             "/runs/delete-tag",
                             "/runs/log-batch",
                             "/runs/log-inputs",
                             "/runs/outputs",
                             "/runs/search",
                             "/runs/log-model",
                             "/logged-models",
                             "/logged-models/search",
                             "/registered-models/create",
                             "/registered-models/rename",
                             "/registered-models/set-tag",
                             "/registered-models/alias",
                             "/model-versions/create",
                             "/model-versions/transition-stage",
                             "/model-versions/set-tag"}) {
      endpoints.emplace_back(M::kPost, p + path);
    }
    for (const char* path :
         {"/experiments/get", "/experiments/get-by-name", "/runs/get", "/metrics/get-history",
          "/metrics/get-history-bulk-interval", "/artifacts/list", "/registered-models/get",
          "/registered-models/search", "/registered-models/alias", "/model-versions/get",
          "/model-versions/search", "/model-versions/get-download-uri", "/logged-models/m-1"}) {
      endpoints.emplace_back(M::kGet, p + path);
    }
    endpoints.emplace_back(M::kPatch, p + "/registered-models/update");
    endpoints.emplace_back(M::kPatch, p + "/model-versions/update");
    endpoints.emplace_back(M::kPatch, p + "/logged-models/m-1");
    endpoints.emplace_back(M::kDelete, p + "/registered-models/delete");
    endpoints.emplace_back(M::kDelete, p + "/model-versions/delete");
    endpoints.emplace_back(M::kGet, "/api/2.0/mlflow-artifacts/artifacts");
    endpoints.emplace_back(M::kPut, "/api/2.0/mlflow-artifacts/artifacts/1/x");
    endpoints.emplace_back(M::kGet, "/api/trainyard/v1/metrics/downsample");
    endpoints.emplace_back(M::kGet, "/api/trainyard/v1/metrics/downsample-bulk");
    endpoints.emplace_back(M::kPost, "/api/trainyard/v1/tokens");
    endpoints.emplace_back(M::kPost, "/api/trainyard/v1/users");
    // Seed objects for the decoders to find.
    (void)tracking->CreateExperiment(identity::Principal::System(), "fuzz", "", {});
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Stack* stack = new Stack();
  if (size == 0) return 0;
  const auto& [method, path] = stack->endpoints[data[0] % stack->endpoints.size()];
  std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  http::Request request;
  request.method = method;
  request.path = path;
  request.target = path;
  request.headers["authorization"] = "Bearer " + stack->token;
  if (method == http::Method::kGet && (data[0] & 0x80)) {
    request.query = http::ParseQueryString(body);
  } else {
    request.headers["content-type"] = "application/json";
    request.body = std::move(body);
  }
  http::Response response = stack->router.Dispatch(request);
  // Bad input must never be blamed on the server.
  if (response.status >= 500 && response.status != 501) {
    fprintf(stderr, "5xx for %s: %s\n", path.c_str(), response.body.c_str());
    std::abort();
  }
  return 0;
}
