// LineageWiring: lineage's part of the composition root. It builds the ObjectDirectory that
// tells lineage which securable governs a run, job, checkpoint, model version or endpoint
// (through tracking, registry, jobs and serving: an endpoint is visible to whoever may query
// it, its owner, admins and holders of QUERY or MANAGE; tables are governed by their name
// through the catalog's authorizer, and a deleted endpoint by its type and name, admins
// only), the LineageService, and the listeners through which tracking (dataset inputs naming
// a table version), registry (a model version from a run), jobs (a job and the run its
// attempts log to), checkpoints (a job's complete checkpoints) and serving (the model
// versions an endpoint serves, as they change) record lineage, without any of them
// depending on lineage (decision 0012).
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
namespace trainyard::serving {
class ServingService;
}

namespace trainyard::server {

struct LineageSources {
  tracking::TrackingService& tracking;
  registry::RegistryService& registry;
  jobs::JobService& jobs;
  checkpoints::CheckpointService& checkpoints;
  serving::ServingService& serving;
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
