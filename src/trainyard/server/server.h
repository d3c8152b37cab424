// Server: the composition root. A plain config struct, one Init step per subsystem,
// members declared in dependency order (store → blob → services → api → http).
// This is the only place that constructs services.
#pragma once

#include <memory>
#include <string>

#include "trainyard/api/api.h"
#include "trainyard/blob/blob_store.h"
#include "trainyard/common/clock.h"
#include "trainyard/common/status.h"
#include "trainyard/http/router.h"
#include "trainyard/http/server.h"
#include "trainyard/identity/identity_service.h"
#include "trainyard/store/database.h"
#include "trainyard/tracking/tracking_service.h"

namespace trainyard::registry {
class RegistryService;
}

namespace trainyard::server {

struct ServerConfig {
  std::string data_dir = ".trainyard";
  std::string host = "127.0.0.1";
  int port = 5000;
  std::string db;         // "" → SQLite at <data_dir>/trainyard.db
  std::string artifacts;  // "" → <data_dir>/artifacts
  bool sqlite_sync_full = false;
  int io_threads = 2;
  int worker_threads = 16;
  size_t max_body_bytes = 16 << 20;
};

class Server {
 public:
  explicit Server(ServerConfig config);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Opens the store (applying migrations), the blob store and the services, and
  // starts serving.
  Status Start();
  void Stop();
  int port() const;

 private:
  Status InitStore();
  Status InitBlobs();
  Status InitServices();
  void InitApi();

  ServerConfig config_;
  SystemClock clock_;
  SecureRandom random_;
  std::unique_ptr<store::Database> db_;
  std::unique_ptr<blob::BlobStore> blobs_;
  std::unique_ptr<identity::IdentityService> identity_;
  std::unique_ptr<tracking::TrackingService> tracking_;
  std::unique_ptr<registry::RegistryService> registry_;
  http::Router router_;
  std::unique_ptr<api::Api> api_;
  std::unique_ptr<http::HttpServer> http_;
};

}  // namespace trainyard::server
