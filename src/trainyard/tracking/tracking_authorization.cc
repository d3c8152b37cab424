// TrackingService's authorization: what each object's permissions are, asked of the
// Authorizer. Kept apart from tracking_service.cc so that the catalog's grants change
// one small file.
#include <vector>

#include "trainyard/common/strings.h"
#include "trainyard/tracking/tracking_service.h"

namespace trainyard::tracking {

using identity::Action;
using identity::Principal;

Status TrackingService::AuthorizeExperiment(const Principal& who, const std::string& experiment_id,
                                            Action action) {
  TY_ASSIGN_OR_RETURN(std::string owner, ExperimentOwner(experiment_id));
  return authz_.Authorize(who, action, {"experiment", experiment_id, owner});
}

Status TrackingService::AuthorizeRun(const Principal& who, const std::string& run_id,
                                     Action action) {
  TY_ASSIGN_OR_RETURN(std::string experiment_id, RunExperiment(run_id));
  TY_ASSIGN_OR_RETURN(std::string owner, ExperimentOwner(experiment_id));
  return authz_.Authorize(who, action, {"experiment", experiment_id, owner},
                          {"run", run_id, owner});
}

Status TrackingService::AuthorizeLoggedModel(const Principal& who, const std::string& model_id,
                                             Action action) {
  if (!who.scope.empty()) {
    TY_ASSIGN_OR_RETURN(auto model, GetLoggedModel(model_id));
    if (!model.source_run_id.empty()) return AuthorizeRun(who, model.source_run_id, action);
  }
  TY_ASSIGN_OR_RETURN(std::string experiment_id, LoggedModelExperiment(model_id));
  return AuthorizeExperiment(who, experiment_id, action);
}

Status TrackingService::AuthorizeNewLoggedModel(const Principal& who,
                                                const std::string& experiment_id,
                                                const std::string& source_run_id) {
  if (who.scope.empty() || source_run_id.empty()) {
    return AuthorizeExperiment(who, experiment_id, Action::kEdit);
  }
  TY_ASSIGN_OR_RETURN(std::string run_experiment, RunExperiment(source_run_id));
  if (run_experiment != experiment_id) {
    return Status::InvalidArgument("source_run_id " + source_run_id + " is not in experiment " +
                                   experiment_id);
  }
  return AuthorizeRun(who, source_run_id, Action::kEdit);
}

Status TrackingService::AuthorizeArtifactPath(const Principal& who, const std::string& path,
                                              Action action) {
  std::string first = path.substr(0, path.find('/'));
  auto id = ParseInt64(first);
  if (id && *id >= 0) {
    auto owner = ExperimentOwner(first);
    if (owner.ok()) {
      return authz_.Authorize(who, action, {"experiment", first, *owner},
                              {"run", RunOfArtifactPath(path), *owner});
    }
  }
  if (action == Action::kRead || who.is_admin) return Status::Ok();
  return Status::PermissionDenied("artifact path '" + Abbreviate(path) +
                                  "' is outside any experiment; only admins may write there");
}

std::string TrackingService::RunOfArtifactPath(const std::string& path) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (parts.size() < 3) {
    size_t slash = path.find('/', start);
    parts.push_back(path.substr(start, slash == std::string::npos ? slash : slash - start));
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  if (parts.size() < 2) return "";
  if (parts[1] != "models") return parts[1];
  if (parts.size() < 3) return "";
  auto model = GetLoggedModel(parts[2]);
  return model.ok() ? model->source_run_id : "";
}

}  // namespace trainyard::tracking
