// The model registry's value types: registered models, their numbered versions,
// tags, aliases and stages. Plain structs; the MLflow wire format lives in api/.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "trainyard/common/status.h"
#include "trainyard/common/strings.h"
#include "trainyard/tracking/types.h"

namespace trainyard::registry {

using tracking::KeyValue;
using tracking::Page;

// MLflow's (deprecated, still used) model version stages.
enum class Stage { kNone, kStaging, kProduction, kArchived };

// The canonical spelling: "None", "Staging", "Production", "Archived".
inline std::string_view StageName(Stage stage) {
  switch (stage) {
    case Stage::kNone:
      return "None";
    case Stage::kStaging:
      return "Staging";
    case Stage::kProduction:
      return "Production";
    case Stage::kArchived:
      return "Archived";
  }
  return "None";
}

// Case-insensitive ("production" is Production). InvalidArgument naming `field` otherwise.
inline Result<Stage> ParseStage(std::string_view text, std::string_view field = "stage") {
  std::string lower = ToLower(text);
  for (Stage s : {Stage::kNone, Stage::kStaging, Stage::kProduction, Stage::kArchived}) {
    if (lower == ToLower(StageName(s))) return s;
  }
  return Status::InvalidArgument(std::string(field) + " must be one of None, Staging, " +
                                 "Production, Archived (got '" + Abbreviate(text) + "')");
}

enum class ModelVersionStatus { kPendingRegistration, kFailedRegistration, kReady };

// "PENDING_REGISTRATION", "FAILED_REGISTRATION", "READY".
inline std::string_view ModelVersionStatusName(ModelVersionStatus status) {
  switch (status) {
    case ModelVersionStatus::kPendingRegistration:
      return "PENDING_REGISTRATION";
    case ModelVersionStatus::kFailedRegistration:
      return "FAILED_REGISTRATION";
    case ModelVersionStatus::kReady:
      return "READY";
  }
  return "READY";
}

struct ModelVersion {
  std::string name;
  int64_t version = 0;  // 1, 2, 3, ... per registered model; never reused
  int64_t creation_timestamp = 0;
  int64_t last_updated_timestamp = 0;
  std::string user_id;  // who created it
  Stage current_stage = Stage::kNone;
  std::string description;
  std::string source;            // as given (e.g. "models:/m-abc", "runs:/<run>/model")
  std::string storage_location;  // where the files are: what get-download-uri returns
  std::string run_id;            // "" when none
  std::string run_link;
  ModelVersionStatus status = ModelVersionStatus::kReady;
  std::string status_message;
  std::string model_id;              // the MLflow 3 logged model, "" when none
  std::vector<KeyValue> tags;        // sorted by key
  std::vector<std::string> aliases;  // sorted
};

struct ModelAlias {
  std::string alias;
  int64_t version = 0;
};

struct RegisteredModel {
  std::string name;
  int64_t creation_timestamp = 0;
  int64_t last_updated_timestamp = 0;
  std::string user_id;  // the owner: who created it
  std::string description;
  std::string deployment_job_id;
  // The highest version in each stage that has versions, ordered by version.
  std::vector<ModelVersion> latest_versions;
  std::vector<KeyValue> tags;       // sorted by key
  std::vector<ModelAlias> aliases;  // sorted by alias
};

}  // namespace trainyard::registry
