#include "trainyard/server/capture_table_sink.h"

#include <arrow/api.h>
#include <spdlog/spdlog.h>

#include "trainyard/catalog/names.h"
#include "trainyard/lineage/lineage_recorder.h"
#include "trainyard/serving/capture.h"

namespace trainyard::server {
namespace {

std::shared_ptr<arrow::Schema> CaptureSchema() {
  arrow::FieldVector fields;
  for (const auto& [name, type] : serving::CaptureTableColumns()) {
    std::shared_ptr<arrow::DataType> t = type == "bigint"    ? arrow::int64()
                                         : type == "boolean" ? arrow::boolean()
                                                             : arrow::utf8();
    fields.push_back(arrow::field(name, t, true));
  }
  return arrow::schema(fields);
}

// The table's privilege error as an endpoint's: the field, whose privilege, what to do.
Status AsCaptureError(const Status& s, const std::string& owner) {
  if (s.ok()) return s;
  std::string message = (s.message().rfind("capture.table", 0) == 0 ? "" : "capture.table: ") +
                        s.message() + " (the endpoint's owner " + owner +
                        " writes its capture table)";
  if (s.code() == StatusCode::kPermissionDenied) return Status::PermissionDenied(message);
  if (s.code() == StatusCode::kNotFound) return Status::InvalidArgument(message);
  if (s.code() == StatusCode::kInvalidArgument) return Status::InvalidArgument(message);
  return Status(s.code(), message);
}

Result<identity::Principal> PrincipalOf(identity::IdentityService& identity,
                                        const std::string& owner) {
  TY_ASSIGN_OR_RETURN(identity::User user, identity.GetUser(owner));
  return identity::Principal{user.name, user.is_admin, "", ""};
}

class CatalogCaptureSink : public serving::CaptureTableSink {
 public:
  CatalogCaptureSink(identity::IdentityService& identity, catalog::CatalogService& catalog,
                     catalog::TableService& tables, lineage::LineageRecorder* lineage)
      : identity_(identity), catalog_(catalog), tables_(tables), lineage_(lineage) {}

  Result<int64_t> Append(const std::string& endpoint, const std::string& owner,
                         const std::string& table, const std::vector<json::object>& rows) override;

 private:
  identity::IdentityService& identity_;
  catalog::CatalogService& catalog_;
  catalog::TableService& tables_;
  lineage::LineageRecorder* lineage_;
};

}  // namespace

std::unique_ptr<serving::CaptureTableSink> MakeCatalogCaptureSink(
    identity::IdentityService& identity, catalog::CatalogService& catalog,
    catalog::TableService& tables, lineage::LineageRecorder* lineage) {
  return std::make_unique<CatalogCaptureSink>(identity, catalog, tables, lineage);
}

Status CheckCaptureTable(identity::IdentityService& identity, catalog::CatalogService& catalog_,
                         const std::string& owner, const std::string& table) {
  auto name = catalog::ParseFullName("capture.table", table, 3);
  if (!name.ok()) return AsCaptureError(name.status(), owner);
  auto who = PrincipalOf(identity, owner);
  if (!who.ok()) return AsCaptureError(who.status(), owner);
  std::string full = name->ToString();
  Status exists =
      catalog_.Authorize(*who, catalog::Privilege::kModify, catalog::SecurableType::kTable, full);
  if (!exists.IsNotFound()) return AsCaptureError(exists, owner);
  // No such table yet: the first batch creates it.
  return AsCaptureError(
      catalog_.Authorize(*who, catalog::Privilege::kCreateTable, catalog::SecurableType::kSchema,
                         name->catalog() + "." + name->schema()),
      owner);
}

Result<int64_t> CatalogCaptureSink::Append(const std::string& endpoint, const std::string& owner,
                                           const std::string& table,
                                           const std::vector<json::object>& rows) {
  TY_ASSIGN_OR_RETURN(identity::Principal who, PrincipalOf(identity_, owner));
  TY_ASSIGN_OR_RETURN(catalog::FullName name, catalog::ParseFullName("capture.table", table, 3));
  auto existing = catalog_.GetTable(who, name.ToString());
  if (!existing.ok() && existing.status().IsNotFound()) {
    catalog::CreateTableRequest create;
    create.catalog_name = name.catalog();
    create.schema_name = name.schema();
    create.name = name.object();
    create.comment = "requests captured by serving endpoint " + endpoint;
    auto created = tables_.CreateManagedTable(who, create, CaptureSchema());
    // Another endpoint's batch may have created it meanwhile.
    if (!created.ok() && !created.status().IsAlreadyExists()) return created.status();
  } else if (!existing.ok()) {
    return existing.status();
  }
  catalog::ImportTableRequest import;
  import.full_name = name.ToString();
  import.format = tables::ImportFormat::kJsonl;
  import.mode = catalog::ImportMode::kAppend;
  import.source_name = "capture of endpoint " + endpoint;
  for (const json::object& row : rows) {
    import.data += json::serialize(row);
    import.data += '\n';
  }
  TY_ASSIGN_OR_RETURN(catalog::ImportTableResult result, tables_.Import(who, import));
  if (lineage_ != nullptr) {
    lineage::TableWriteRecord write;
    write.table = name.ToString();
    write.version = result.version;
    write.writer = {lineage::NodeType::kEndpoint, endpoint, std::nullopt};
    Status s = lineage_->RecordTableWrite(who, write);
    if (!s.ok()) {
      spdlog::warn("lineage of endpoint {}'s capture into {}@{} was not recorded: {}", endpoint,
                   write.table, write.version, s.ToString());
    }
  }
  return result.version;
}

}  // namespace trainyard::server
