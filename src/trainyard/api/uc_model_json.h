// The Unity Catalog API's codecs for registered models, model versions and temporary
// credentials (volumes, paths, model versions): UC OSS's shapes (api/all.yaml) and what
// MLflow's UC OSS client sends (int64 fields as numbers or decimal strings, enums by
// name). Pure functions; thread-safe. Errors are InvalidArgument naming the field.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "trainyard/catalog/catalog_types.h"
#include "trainyard/catalog/model_service.h"
#include "trainyard/common/json.h"
#include "trainyard/common/status.h"

namespace trainyard::api {

// UC's RegisteredModelInfo, ModelVersionInfo and TemporaryCredentials.
json::object RegisteredModelToJson(const catalog::RegisteredModelInfo& m);
json::object ModelVersionToJson(const catalog::ModelVersionInfo& v);
json::object TemporaryCredentialToJson(const catalog::TemporaryCredential& c);

// UC's CreateRegisteredModel: name, catalog_name, schema_name required; comment.
Result<catalog::CreateRegisteredModelRequest> DecodeCreateRegisteredModel(const json::object& body);
// UC's CreateModelVersion: model_name, catalog_name, schema_name, source required; run_id,
// comment.
Result<catalog::CreateModelVersionRequest> DecodeCreateModelVersion(const json::object& body);
// A version number from a path ("3") or a body field (3 or "3"): a positive integer.
Result<int64_t> ParseModelVersionNumber(std::string_view field, std::string_view text);
Result<int64_t> ReadModelVersionNumber(const json::object& body, std::string_view field);
// UC's UpdateModelVersion: comment.
Result<std::optional<std::string>> DecodeUpdateModelVersion(const json::object& body);

struct ModelVersionCredentialRequest {
  std::string full_name;  // catalog.schema.model, from its three fields
  int64_t version = 0;
  catalog::ModelVersionOperation operation = catalog::ModelVersionOperation::kRead;
};
// UC's GenerateTemporaryModelVersionCredential: catalog_name, schema_name, model_name,
// version, operation (READ_MODEL_VERSION | READ_WRITE_MODEL_VERSION).
Result<ModelVersionCredentialRequest> DecodeModelVersionCredentialRequest(const json::object& body);

struct VolumeCredentialRequest {
  std::string volume_id;
  catalog::VolumeOperation operation = catalog::VolumeOperation::kRead;
};
// UC's GenerateTemporaryVolumeCredential: volume_id, operation (READ_VOLUME | WRITE_VOLUME).
Result<VolumeCredentialRequest> DecodeVolumeCredentialRequest(const json::object& body);

struct PathCredentialRequest {
  std::string url;
  catalog::PathOperation operation = catalog::PathOperation::kRead;
};
// UC's GenerateTemporaryPathCredential: url, operation (PATH_READ | PATH_READ_WRITE |
// PATH_CREATE_TABLE).
Result<PathCredentialRequest> DecodePathCredentialRequest(const json::object& body);

}  // namespace trainyard::api
