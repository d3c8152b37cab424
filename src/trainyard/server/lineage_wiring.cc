#include "trainyard/server/lineage_wiring.h"

#include <spdlog/spdlog.h>

#include <optional>
#include <string>

#include "trainyard/checkpoints/checkpoint_service.h"
#include "trainyard/jobs/job_service.h"
#include "trainyard/lineage/lineage_service.h"
#include "trainyard/registry/registry_service.h"
#include "trainyard/serving/serving_service.h"
#include "trainyard/tracking/tracking_service.h"

namespace trainyard::server {
namespace {

using lineage::EdgeKind;
using lineage::NodeRef;
using lineage::NodeType;

// Which securable governs a node, from the component that owns it.
class ServiceDirectory : public lineage::ObjectDirectory {
 public:
  explicit ServiceDirectory(const LineageSources& sources) : s_(sources) {}

  Result<lineage::ObjectAccess> Find(const NodeRef& node) override {
    std::string id = lineage::FormatNodeRef(node);
    switch (node.type) {
      case NodeType::kRun: {
        TY_ASSIGN_OR_RETURN(std::string experiment, s_.tracking.RunExperiment(node.key));
        TY_ASSIGN_OR_RETURN(std::string owner, s_.tracking.ExperimentOwner(experiment));
        // The run's name as the graph's label (the web UI keeps the id in the tooltip).
        TY_ASSIGN_OR_RETURN(std::string name, s_.tracking.RunName(node.key));
        return lineage::ObjectAccess{
            {"experiment", experiment, owner}, {"run", node.key, owner}, name, nullptr};
      }
      case NodeType::kModelVersion: {
        TY_ASSIGN_OR_RETURN(registry::ModelVersion v,
                            s_.registry.GetModelVersion(node.key, *node.version));
        TY_ASSIGN_OR_RETURN(std::string owner, s_.registry.RegisteredModelOwner(node.key));
        return lineage::ObjectAccess{{"registered_model", node.key, owner},
                                     {"model_version", id, owner},
                                     v.name + " v" + std::to_string(v.version),
                                     nullptr};
      }
      case NodeType::kJob:
      case NodeType::kCheckpoint: {
        TY_ASSIGN_OR_RETURN(jobs::JobInfo job, s_.jobs.GetJob(node.key));
        identity::Securable governing{"job", job.job_id, job.owner};
        identity::Securable accessed = governing;
        if (node.type == NodeType::kCheckpoint) accessed = {"checkpoint", id, job.owner};
        return lineage::ObjectAccess{governing, accessed, job.spec.name, nullptr};
      }
      case NodeType::kEndpoint: {
        // Its grants are serving's own (QUERY, MANAGE): serving decides who may see it.
        TY_ASSIGN_OR_RETURN(serving::EndpointState state,
                            s_.serving.Get(identity::Principal::System(), node.key));
        serving::ServingService* serving = &s_.serving;
        std::string name = node.key;
        identity::Securable endpoint{"endpoint", name, state.endpoint.owner};
        return lineage::ObjectAccess{endpoint, endpoint, name,
                                     [serving, name](const identity::Principal& who) {
                                       return serving->Get(who, name).status();
                                     }};
      }
      case NodeType::kTable:
        break;
    }
    return Status::NotFound("no component owns " + id + " yet");
  }

 private:
  LineageSources s_;
};

void Warn(const Status& s, const std::string& what) {
  if (!s.ok()) spdlog::warn("lineage of {} was not recorded: {}", what, s.ToString());
}

// The job a run belongs to (its trainyard.job_id tag), "" when none.
std::string JobOfRun(tracking::TrackingService& tracking, const std::string& run_id) {
  auto run = tracking.GetRun(run_id);
  if (!run.ok()) return "";
  for (const auto& t : run->tags) {
    if (t.key == "trainyard.job_id") return t.value;
  }
  return "";
}

}  // namespace

LineageWiring::LineageWiring(store::Database& db, Clock& clock, identity::Authorizer& authz,
                             const LineageSources& sources)
    : sources_(sources),
      directory_(std::make_unique<ServiceDirectory>(sources)),
      service_(std::make_unique<lineage::LineageService>(db, clock, authz, *directory_)) {}

LineageWiring::~LineageWiring() = default;

void LineageWiring::Connect() {
  lineage::LineageService* lineage = service_.get();
  tracking::TrackingService* tracking = &sources_.tracking;
  sources_.tracking.SetInputsListener([lineage, tracking](
                                          const identity::Principal& who, const std::string& run_id,
                                          const std::vector<tracking::DatasetInput>& datasets) {
    std::optional<std::string> job_id;  // looked up once, when a dataset names a table
    for (const auto& d : datasets) {
      auto table =
          lineage::TableVersionOfDataset(d.dataset.source_type, d.dataset.source, d.dataset.digest);
      if (!table) continue;
      if (!job_id) job_id = JobOfRun(*tracking, run_id);
      lineage::TableReadRecord read{
          table->key, *table->version, {NodeType::kRun, run_id, std::nullopt}, *job_id, run_id};
      Warn(lineage->RecordTableRead(who, read), "run " + run_id + "'s dataset input");
    }
  });
  sources_.registry.SetVersionListener(
      [lineage](const identity::Principal& who, const registry::ModelVersion& v) {
        if (v.run_id.empty()) return;
        lineage::EdgeRecord e;
        e.from = {NodeType::kRun, v.run_id, std::nullopt};
        e.to = {NodeType::kModelVersion, v.name, v.version};
        e.kind = EdgeKind::kProduced;
        e.run_id = v.run_id;
        e.to_display = v.name + " v" + std::to_string(v.version);
        Warn(lineage->Record(who, e), "model version " + lineage::FormatNodeRef(e.to));
      });
  sources_.jobs.SetSubmitListener(
      [lineage](const identity::Principal& who, const jobs::JobInfo& job) {
        lineage::EdgeRecord e;
        e.from = {NodeType::kJob, job.job_id, std::nullopt};
        e.to = {NodeType::kRun, job.run_id, std::nullopt};
        e.kind = EdgeKind::kLoggedTo;
        e.job_id = job.job_id;
        e.run_id = job.run_id;
        e.from_display = job.spec.name;
        e.to_display = job.spec.name;
        Warn(lineage->Record(who, e), "job " + job.job_id);
      });
  sources_.serving.SetServesListener(
      [lineage](const identity::Principal& who, const std::string& endpoint,
                const std::vector<serving::ServedModelVersion>& versions) {
        std::vector<lineage::ServedVersion> served;
        for (const auto& [model, version] : versions) served.push_back({model, version});
        Warn(lineage->RecordServing(who, endpoint, served), "endpoint " + endpoint);
      });
  sources_.checkpoints.SetCompleteListener([lineage](const identity::Principal& who,
                                                     const std::string& job_id, int64_t step,
                                                     const std::string& uri) {
    lineage::EdgeRecord e;
    e.from = {NodeType::kJob, job_id, std::nullopt};
    e.to = {NodeType::kCheckpoint, job_id, step};
    e.kind = EdgeKind::kCheckpointed;
    e.job_id = job_id;
    e.to_display = uri;
    Warn(lineage->Record(who, e), "checkpoint " + uri);
  });
}

}  // namespace trainyard::server
