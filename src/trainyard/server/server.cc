#include "trainyard/server/server.h"

#include <spdlog/spdlog.h>

#include <filesystem>

#include "trainyard/api/identity_api.h"
#include "trainyard/api/mlflow_artifacts_api.h"
#include "trainyard/api/mlflow_registry_api.h"
#include "trainyard/api/mlflow_tracking_api.h"
#include "trainyard/registry/registry_service.h"

namespace trainyard::server {

Server::Server(ServerConfig config) : config_(std::move(config)) {}

Server::~Server() { Stop(); }

Status Server::InitStore() {
  std::error_code ec;
  std::filesystem::create_directories(config_.data_dir, ec);
  if (ec) {
    return Status::IOError("cannot create data directory " + config_.data_dir + ": " +
                           ec.message());
  }
  store::DatabaseOptions options;
  options.url = config_.db.empty() ? config_.data_dir + "/trainyard.db" : config_.db;
  options.sqlite_sync_full = config_.sqlite_sync_full;
  TY_ASSIGN_OR_RETURN(db_, store::OpenDatabase(options));
  std::vector<store::Migration> migrations = identity::IdentityService::Migrations();
  for (auto& m : tracking::TrackingService::Migrations()) migrations.push_back(std::move(m));
  for (auto& m : registry::RegistryService::Migrations()) migrations.push_back(std::move(m));
  TY_RETURN_IF_ERROR(store::ApplyMigrations(*db_, migrations));
  spdlog::info("metadata store: {} ({})", db_->Backend(),
               db_->Backend() == "sqlite" ? options.url : "postgresql");
  return Status::Ok();
}

Status Server::InitBlobs() {
  std::string root =
      config_.artifacts.empty() ? config_.data_dir + "/artifacts" : config_.artifacts;
  TY_ASSIGN_OR_RETURN(blobs_, blob::OpenLocalBlobStore(root));
  spdlog::info("artifact store: {}", root);
  return Status::Ok();
}

Status Server::InitServices() {
  identity_ = std::make_unique<identity::IdentityService>(*db_, clock_, random_);
  TY_RETURN_IF_ERROR(identity_->Bootstrap(config_.data_dir));
  tracking_ =
      std::make_unique<tracking::TrackingService>(*db_, clock_, random_, "mlflow-artifacts:");
  TY_RETURN_IF_ERROR(tracking_->Init("admin"));
  registry_ = std::make_unique<registry::RegistryService>(*db_, clock_, *tracking_);
  return Status::Ok();
}

void Server::InitApi() {
  api_ = std::make_unique<api::Api>(router_, *identity_, clock_);
  router_.SetErrorRenderer(api::TransportErrorResponse);
  api::RegisterIdentityRoutes(*api_);
  api::RegisterTrackingRoutes(*api_, *tracking_);
  api::RegisterArtifactRoutes(*api_, *blobs_, *tracking_);
  api::RegisterRegistryRoutes(*api_, *registry_);
  tracking::TrackingService* tracking = tracking_.get();
  api::RegisterGrantRoute(*api_, "experiment", [tracking](const std::string& id) {
    return tracking->ExperimentOwner(id);
  });
}

Status Server::Start() {
  TY_RETURN_IF_ERROR(InitStore());
  TY_RETURN_IF_ERROR(InitBlobs());
  TY_RETURN_IF_ERROR(InitServices());
  InitApi();
  http::ServerOptions options;
  options.host = config_.host;
  options.port = config_.port;
  options.io_threads = config_.io_threads;
  options.worker_threads = config_.worker_threads;
  options.max_body_bytes = config_.max_body_bytes;
  options.upload_dir = config_.data_dir + "/uploads";
  options.stream_body_to_file = api::IsArtifactUpload;
  options.render_error = api::TransportErrorResponse;
  http_ = std::make_unique<http::HttpServer>(
      options, [this](http::Request& r) { return router_.Dispatch(r); });
  TY_RETURN_IF_ERROR(http_->Start());
  spdlog::info("trainyard server listening on http://{}:{}", config_.host, http_->port());
  return Status::Ok();
}

void Server::Stop() {
  if (http_) {
    http_->Stop(std::chrono::seconds(10));
    http_.reset();
  }
}

int Server::port() const { return http_ ? http_->port() : 0; }

}  // namespace trainyard::server
