// LineageWiring: lineage's part of the composition root. It builds the ObjectDirectory that
// tells lineage which securable governs a run, job, checkpoint or model version (through
// tracking, registry and jobs; tables and endpoints are governed by their type and name
// until the catalog owns them), the LineageService, and the listeners through which
// tracking (dataset inputs naming a table version), registry (a model version from a run),
// jobs (a job and the run its attempts log to) and checkpoints (a job's complete
// checkpoints) record lineage, without any of them depending on lineage (decision 0012).
//
// Recording is best effort: a lineage write that fails is logged and does not fail the
// operation that caused it. Construct after the services it connects, before serving; the
// services must outlive it, except that listeners only run while they are serving.
#pragma once

#include <memory>

#include "trainyard/common/clock.h"
#include "trainyard/identity/authorizer.h"
#include "trainyard/store/database.h"

namespace trainyard::lineage {
class LineageService;
class ObjectDirectory;
}  // namespace trainyard::lineage

namespace trainyard::tracking {
class TrackingService;
}
namespace trainyard::registry {
class RegistryService;
}
namespace trainyard::jobs {
class JobService;
}
namespace trainyard::checkpoints {
class CheckpointService;
}

namespace trainyard::server {

struct LineageSources {
  tracking::TrackingService& tracking;
  registry::RegistryService& registry;
  jobs::JobService& jobs;
  checkpoints::CheckpointService& checkpoints;
};

class LineageWiring {
 public:
  LineageWiring(store::Database& db, Clock& clock, identity::Authorizer& authz,
                const LineageSources& sources);
  ~LineageWiring();
  LineageWiring(const LineageWiring&) = delete;
  LineageWiring& operator=(const LineageWiring&) = delete;

  // Sets the listeners of the sources' services (each takes one listener: call once).
  void Connect();
  lineage::LineageService& service() { return *service_; }

 private:
  LineageSources sources_;
  std::unique_ptr<lineage::ObjectDirectory> directory_;
  std::unique_ptr<lineage::LineageService> service_;
};

}  // namespace trainyard::server
