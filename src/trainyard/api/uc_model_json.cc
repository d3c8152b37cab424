#include "trainyard/api/uc_model_json.h"

#include <initializer_list>
#include <utility>

#include "trainyard/common/strings.h"

namespace trainyard::api {
namespace {

void PutIfSet(json::object& o, std::string_view key, const std::string& value) {
  if (!value.empty()) o[key] = value;
}

Result<std::string> Optional(const json::object& body, std::string_view field) {
  TY_ASSIGN_OR_RETURN(auto v, OptionalString(body, field));
  return v.value_or("");
}

// An enum field by name; InvalidArgument naming the field and listing the names otherwise.
template <typename E>
Result<E> ReadOperation(const json::object& body, std::string_view field,
                        std::initializer_list<std::pair<std::string_view, E>> names) {
  std::string list;
  for (const auto& [name, value] : names) list += (list.empty() ? "" : ", ") + std::string(name);
  auto v = OptionalString(body, field);
  if (!v.ok()) {
    return Status::InvalidArgument(std::string(field) + " must be one of " + list + " (got " +
                                   DescribeJson(body.at(field)) + ")");
  }
  if (!v->has_value()) {
    return Status::InvalidArgument("missing required field '" + std::string(field) + "' (one of " +
                                   list + ")");
  }
  for (const auto& [name, value] : names) {
    if (**v == name) return value;
  }
  return Status::InvalidArgument(std::string(field) + " must be one of " + list + " (got '" +
                                 Abbreviate(**v, 60) + "')");
}

}  // namespace

json::object RegisteredModelToJson(const catalog::RegisteredModelInfo& m) {
  json::object o{{"name", m.name},
                 {"catalog_name", m.catalog_name},
                 {"schema_name", m.schema_name},
                 {"full_name", m.full_name},
                 {"owner", m.owner},
                 {"created_at", m.created_at},
                 {"created_by", m.created_by},
                 {"id", m.id}};
  PutIfSet(o, "comment", m.comment);
  PutIfSet(o, "storage_location", m.storage_location);
  if (m.updated_at != 0) o["updated_at"] = m.updated_at;
  PutIfSet(o, "updated_by", m.updated_by);
  return o;
}

json::object ModelVersionToJson(const catalog::ModelVersionInfo& v) {
  json::object o{
      {"model_name", v.model_name},   {"catalog_name", v.catalog_name},
      {"schema_name", v.schema_name}, {"version", v.version},
      {"source", v.source},           {"status", registry::ModelVersionStatusName(v.status)},
      {"created_at", v.created_at},   {"id", v.id}};
  PutIfSet(o, "run_id", v.run_id);
  PutIfSet(o, "storage_location", v.storage_location);
  PutIfSet(o, "comment", v.comment);
  PutIfSet(o, "created_by", v.created_by);
  if (v.updated_at != 0) o["updated_at"] = v.updated_at;
  PutIfSet(o, "updated_by", v.updated_by);
  return o;
}

json::object TemporaryCredentialToJson(const catalog::TemporaryCredential& c) {
  json::object o{{"url", c.url}, {"expiration_time", c.expiration_time}};
  if (c.aws_temp_credentials) {
    o["aws_temp_credentials"] =
        json::object{{"access_key_id", c.aws_temp_credentials->access_key_id},
                     {"secret_access_key", c.aws_temp_credentials->secret_access_key},
                     {"session_token", c.aws_temp_credentials->session_token}};
  }
  return o;
}

Result<catalog::CreateRegisteredModelRequest> DecodeCreateRegisteredModel(
    const json::object& body) {
  catalog::CreateRegisteredModelRequest r;
  TY_ASSIGN_OR_RETURN(r.name, RequiredString(body, "name"));
  TY_ASSIGN_OR_RETURN(r.catalog_name, RequiredString(body, "catalog_name"));
  TY_ASSIGN_OR_RETURN(r.schema_name, RequiredString(body, "schema_name"));
  TY_ASSIGN_OR_RETURN(r.comment, Optional(body, "comment"));
  return r;
}

Result<catalog::CreateModelVersionRequest> DecodeCreateModelVersion(const json::object& body) {
  catalog::CreateModelVersionRequest r;
  TY_ASSIGN_OR_RETURN(r.model_name, RequiredString(body, "model_name"));
  TY_ASSIGN_OR_RETURN(r.catalog_name, RequiredString(body, "catalog_name"));
  TY_ASSIGN_OR_RETURN(r.schema_name, RequiredString(body, "schema_name"));
  TY_ASSIGN_OR_RETURN(r.source, RequiredString(body, "source"));
  TY_ASSIGN_OR_RETURN(r.run_id, Optional(body, "run_id"));
  TY_ASSIGN_OR_RETURN(r.comment, Optional(body, "comment"));
  return r;
}

Result<int64_t> ParseModelVersionNumber(std::string_view field, std::string_view text) {
  auto n = ParseInt64(text);
  if (!n || *n < 1) {
    return Status::InvalidArgument(std::string(field) + " must be a positive integer (got '" +
                                   Abbreviate(text, 60) + "')");
  }
  return *n;
}

Result<int64_t> ReadModelVersionNumber(const json::object& body, std::string_view field) {
  const json::value* v = body.if_contains(field);
  if (v == nullptr || v->is_null()) {
    return Status::InvalidArgument("missing required field '" + std::string(field) + "'");
  }
  if (v->is_string()) return ParseModelVersionNumber(field, v->get_string());
  auto n = AsInt64(*v, field);
  if (!n.ok() || *n < 1) {
    return Status::InvalidArgument(std::string(field) + " must be a positive integer (got " +
                                   DescribeJson(*v) + ")");
  }
  return *n;
}

Result<std::optional<std::string>> DecodeUpdateModelVersion(const json::object& body) {
  return OptionalString(body, "comment");
}

Result<ModelVersionCredentialRequest> DecodeModelVersionCredentialRequest(
    const json::object& body) {
  ModelVersionCredentialRequest r;
  TY_ASSIGN_OR_RETURN(std::string catalog_name, RequiredString(body, "catalog_name"));
  TY_ASSIGN_OR_RETURN(std::string schema_name, RequiredString(body, "schema_name"));
  TY_ASSIGN_OR_RETURN(std::string model_name, RequiredString(body, "model_name"));
  for (auto [field, level] : {std::pair{"catalog_name", &catalog_name},
                              {"schema_name", &schema_name},
                              {"model_name", &model_name}}) {
    if (level->find('.') != std::string::npos || level->empty()) {
      return Status::InvalidArgument(std::string(field) + " must be one level, without '.' (got '" +
                                     Abbreviate(*level, 60) + "')");
    }
  }
  r.full_name = catalog_name + "." + schema_name + "." + model_name;
  TY_ASSIGN_OR_RETURN(r.version, ReadModelVersionNumber(body, "version"));
  TY_ASSIGN_OR_RETURN(
      r.operation, ReadOperation<catalog::ModelVersionOperation>(
                       body, "operation",
                       {{"READ_MODEL_VERSION", catalog::ModelVersionOperation::kRead},
                        {"READ_WRITE_MODEL_VERSION", catalog::ModelVersionOperation::kReadWrite}}));
  return r;
}

Result<VolumeCredentialRequest> DecodeVolumeCredentialRequest(const json::object& body) {
  VolumeCredentialRequest r;
  TY_ASSIGN_OR_RETURN(r.volume_id, RequiredString(body, "volume_id"));
  TY_ASSIGN_OR_RETURN(r.operation, ReadOperation<catalog::VolumeOperation>(
                                       body, "operation",
                                       {{"READ_VOLUME", catalog::VolumeOperation::kRead},
                                        {"WRITE_VOLUME", catalog::VolumeOperation::kWrite}}));
  return r;
}

Result<PathCredentialRequest> DecodePathCredentialRequest(const json::object& body) {
  PathCredentialRequest r;
  TY_ASSIGN_OR_RETURN(r.url, RequiredString(body, "url"));
  TY_ASSIGN_OR_RETURN(r.operation,
                      ReadOperation<catalog::PathOperation>(
                          body, "operation",
                          {{"PATH_READ", catalog::PathOperation::kRead},
                           {"PATH_READ_WRITE", catalog::PathOperation::kReadWrite},
                           {"PATH_CREATE_TABLE", catalog::PathOperation::kCreateTable}}));
  return r;
}

}  // namespace trainyard::api
