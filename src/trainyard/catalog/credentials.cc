// CatalogService's temporary credentials for volumes and paths (catalog_service.h).
// A path is authorized as the object whose storage it lies in, found by the object whose
// storage_location is the path's longest ancestor.
#include <algorithm>

#include "trainyard/catalog/catalog_service.h"
#include "trainyard/catalog/catalog_service_impl.h"
#include "trainyard/catalog/table_policy.h"
#include "trainyard/common/strings.h"
#include "trainyard/store/sql.h"

namespace trainyard::catalog {
namespace {

using identity::Principal;

// How deep a path may be: each ancestor is looked up in three spellings.
constexpr size_t kMaxPathDepth = store::kMaxListParams / 3;

bool IsS3(std::string_view location) { return StartsWith(location, "s3://"); }

// The absolute local path of a location (file:///a, file:/a, /a), without trailing '/'
// and empty segments; nullopt for anything else, or a path with '.' or '..' segments.
std::optional<std::string> LocalPath(std::string_view location) {
  std::string_view path = location;
  if (StartsWith(path, "file://")) {
    path.remove_prefix(7);
  } else if (StartsWith(path, "file:")) {
    path.remove_prefix(5);
  }
  if (path.empty() || path.front() != '/') return std::nullopt;
  std::string out;
  for (const auto& segment : SplitString(path, '/')) {
    if (segment.empty()) continue;
    if (segment == "." || segment == "..") return std::nullopt;
    out += "/" + segment;
  }
  return out.empty() ? std::string("/") : out;
}

// The spellings a stored storage_location of local path `path` may have.
void AddSpellings(const std::string& path, std::vector<std::string>& out) {
  out.push_back(path);
  out.push_back("file://" + path);
  out.push_back("file:" + path);
}

// The privilege a path operation needs on an object of `type` whose storage holds the path;
// nullopt where that object's storage cannot be handed out.
std::optional<Privilege> PathPrivilege(SecurableType type, bool write) {
  switch (type) {
    case SecurableType::kTable:
      return write ? Privilege::kModify : Privilege::kSelect;
    case SecurableType::kVolume:
      return write ? Privilege::kWriteFiles : Privilege::kReadVolume;
    case SecurableType::kRegisteredModel:
      return write ? Privilege::kManage : Privilege::kExecute;
    case SecurableType::kCatalog:
    case SecurableType::kSchema:
      return write ? Privilege::kWriteFiles : Privilege::kReadFiles;
    case SecurableType::kMetastore:
    case SecurableType::kFunction:
      return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace

Result<TemporaryCredential> CatalogService::LocalCredential(std::string_view location) {
  if (IsS3(location)) {
    return Status::NotImplemented(
        "temporary credentials for " + std::string(location) +
        " are not issued yet: S3-scoped credentials are not served, only storage on the "
        "server's local file system; read the data through Trainyard's API instead");
  }
  if (!LocalPath(location)) {
    return Status::FailedPrecondition(
        "no temporary credential can be issued for '" + Abbreviate(location) +
        "': it is neither the server's local storage nor S3 (files in MLflow's artifact store "
        "are read through the MLflow API)");
  }
  return TemporaryCredential{std::string(location),
                             impl_->clock.NowMillis() + kTemporaryCredentialMillis};
}

Result<TemporaryCredential> CatalogService::TemporaryVolumeCredential(const Principal& who,
                                                                      std::string_view volume_id,
                                                                      VolumeOperation operation) {
  if (volume_id.empty()) return Status::InvalidArgument("missing required field 'volume_id'");
  TY_ASSIGN_OR_RETURN(VolumeInfo volume, GetVolumeById(who, volume_id));
  if (operation == VolumeOperation::kWrite) {
    TY_RETURN_IF_ERROR(
        Authorize(who, Privilege::kWriteFiles, SecurableType::kVolume, volume.full_name));
  }
  return LocalCredential(volume.storage_location);
}

Result<TemporaryCredential> CatalogService::TemporaryPathCredential(const Principal& who,
                                                                    std::string_view url,
                                                                    PathOperation operation) {
  if (url.empty()) return Status::InvalidArgument("missing required field 'url'");
  if (IsS3(url)) return LocalCredential(url);
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("url " + why + " (got '" + Abbreviate(url) + "')");
  };
  if (url.size() > 4096) return bad("must be at most 4096 characters");
  for (char c : url) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return bad("has a control character");
  }
  std::optional<std::string> path = LocalPath(url);
  if (!path) {
    return bad(
        "must be an absolute local path (file:///path or /path, without '.' or '..') or "
        "s3://bucket/prefix");
  }
  // The path and its ancestors, deepest first, each in every spelling.
  std::vector<std::string> ancestors;
  for (std::string p = *path; p.size() > 1; p = p.substr(0, p.rfind('/'))) {
    if (ancestors.size() / 3 >= kMaxPathDepth) return bad("is too deep");
    AddSpellings(p, ancestors);
  }
  TY_ASSIGN_OR_RETURN(auto holders, impl_->store.FindByLocations(ancestors));
  // The object whose storage is the longest ancestor holds the path.
  std::optional<ObjectRow> holder;
  size_t holder_depth = 0;
  for (auto& row : holders) {
    auto location = LocalPath(row.info.storage_location);
    if (location && (!holder || location->size() > holder_depth)) {
      holder_depth = location->size();
      holder = std::move(row);
    }
  }
  // Storage of other objects inside the path would be handed out with it.
  std::vector<std::string> below;
  AddSpellings(*path == "/" ? std::string() : *path, below);
  for (auto& prefix : below) prefix += "/";
  TY_ASSIGN_OR_RETURN(auto inner, impl_->store.FindUnderLocation(below));
  if (inner && (!holder || inner->info.id != holder->info.id)) {
    return Status::PermissionDenied("url '" + Abbreviate(url) + "' contains the storage of " +
                                    SecurableLabel(inner->type, inner->info.full_name) +
                                    "; ask for that object's credential, or a path inside it");
  }
  const std::string credential_url = "file://" + *path;
  if (operation == PathOperation::kCreateTable) {
    if (holder && holder->type != SecurableType::kCatalog &&
        holder->type != SecurableType::kSchema) {
      return Status::PermissionDenied(
          "url '" + Abbreviate(url) + "' lies in the storage of " +
          SecurableLabel(holder->type, holder->info.full_name) +
          "; a new table needs a path outside every table, volume and model");
    }
    TY_ASSIGN_OR_RETURN(Subject subject, impl_->SubjectOf(who));
    TY_RETURN_IF_ERROR(
        impl_->Check(who, subject, Privilege::kCreateExternalTable, std::string(kMetastoreId)));
    if (holder && holder->type == SecurableType::kSchema) {
      TY_RETURN_IF_ERROR(impl_->Check(who, subject, Privilege::kCreateTable, holder->info.id));
    }
    return LocalCredential(credential_url);
  }
  if (!holder) {
    return Status::PermissionDenied(
        "url '" + Abbreviate(url) +
        "' lies in no catalog object's storage; ask for the credential of the table, volume "
        "or model that holds it");
  }
  std::optional<Privilege> privilege =
      PathPrivilege(holder->type, operation == PathOperation::kReadWrite);
  if (!privilege) {
    return Status::PermissionDenied("url '" + Abbreviate(url) + "' lies in the storage of " +
                                    SecurableLabel(holder->type, holder->info.full_name) +
                                    ", which has no files to hand out");
  }
  TY_RETURN_IF_ERROR(impl_->Check(who, *privilege, holder->info.id));
  if (holder->type == SecurableType::kTable) {
    // A path inside a table's storage reaches its files as the table's own credential would:
    // refused for a table with a row filter or column masks (table_policy.h).
    TY_ASSIGN_OR_RETURN(TableInfo table, GetTableById(who, holder->info.id));
    TY_RETURN_IF_ERROR(CheckDirectAccess(table));
  }
  return LocalCredential(credential_url);
}

}  // namespace trainyard::catalog
