// CatalogService's temporary credentials for volumes and paths (catalog_service.h).
// A path is authorized as the object whose storage it lies in, found by the object whose
// storage_location is the path's longest ancestor. S3 credentials come from blob/'s STS
// issuer, scoped to the location (docs/decisions/0014).
#include <algorithm>

#include "trainyard/blob/sts.h"
#include "trainyard/catalog/catalog_service.h"
#include "trainyard/catalog/catalog_service_impl.h"
#include "trainyard/catalog/table_policy.h"
#include "trainyard/common/strings.h"
#include "trainyard/store/sql.h"

namespace trainyard::catalog {
namespace {

using identity::Principal;

bool IsS3(std::string_view location) { return StartsWith(location, "s3://"); }

// A storage location in its one normalized form, without trailing '/' and empty segments:
// a local absolute path ("/a/b"; "/" for the root) or an S3 location ("s3://bucket/a/b";
// "s3://bucket" for the bucket).
struct Location {
  bool s3 = false;
  std::string path;
};

// file:///a, file:/a, /a or s3://bucket/a; nullopt for anything else, or a path with '.' or
// '..' segments.
std::optional<Location> ParseLocation(std::string_view location) {
  if (IsS3(location)) {
    auto s3 = blob::ParseS3Location(location);
    if (!s3.ok()) return std::nullopt;
    return Location{true, s3->Url()};
  }
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
  return Location{false, out.empty() ? std::string("/") : out};
}

// The spellings a stored storage_location equal to `path` may have.
void AddSpellings(const Location& location, const std::string& path,
                  std::vector<std::string>& out) {
  if (location.s3) {
    out.push_back(path);
    out.push_back(path + "/");
    return;
  }
  out.push_back(path);
  out.push_back("file://" + path);
  out.push_back("file:" + path);
}

// The location and its ancestors, deepest first, each in every spelling; nullopt when there
// are more than a query takes. Local: up to, not including, "/"; S3: up to the bucket.
std::optional<std::vector<std::string>> Ancestors(const Location& location) {
  std::vector<std::string> out;
  const size_t bucket_end = location.s3 ? location.path.find('/', 5) : std::string::npos;
  for (std::string p = location.path;;) {
    if (!location.s3 && p.size() <= 1) break;
    if (out.size() + 3 > store::kMaxListParams) return std::nullopt;
    AddSpellings(location, p, out);
    if (location.s3 && (bucket_end == std::string::npos || p.size() <= bucket_end)) break;
    p = p.substr(0, p.rfind('/'));
  }
  return out;
}

// The listing prefixes of what lies strictly inside `location`, in every spelling.
std::vector<std::string> Inside(const Location& location) {
  std::vector<std::string> out;
  if (location.s3) return {location.path + "/"};
  AddSpellings(location, location.path == "/" ? std::string() : location.path, out);
  for (auto& prefix : out) prefix += "/";
  return out;
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

Result<TemporaryCredential> CatalogService::StorageCredential(const Principal& who,
                                                              std::string_view location,
                                                              bool write) {
  if (IsS3(location)) {
    auto s3 = blob::ParseS3Location(location);
    if (!s3.ok()) {
      return Status::FailedPrecondition("no temporary credential can be issued for '" +
                                        Abbreviate(location) + "': " + s3.status().message());
    }
    if (!impl_->options.s3_credentials) {
      return Status::NotImplemented(
          "temporary credentials for S3 locations such as " + Abbreviate(location) +
          " are not issued by this server: its administrator can enable them with "
          "--s3-credentials-role-arn (docs/catalog.md); meanwhile read the data through "
          "Trainyard's API");
    }
    TY_ASSIGN_OR_RETURN(
        blob::TemporaryS3Credentials issued,
        impl_->options.s3_credentials->Issue(
            *s3, write ? blob::S3Access::kReadWrite : blob::S3Access::kRead, who.user));
    return TemporaryCredential{
        s3->Url(), issued.expiration_millis,
        AwsTemporaryCredentials{std::move(issued.credentials.access_key_id),
                                std::move(issued.credentials.secret_access_key),
                                std::move(issued.credentials.session_token)}};
  }
  if (!ParseLocation(location)) {
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
  return StorageCredential(who, volume.storage_location, operation == VolumeOperation::kWrite);
}

Result<TemporaryCredential> CatalogService::TemporaryPathCredential(const Principal& who,
                                                                    std::string_view url,
                                                                    PathOperation operation) {
  if (url.empty()) return Status::InvalidArgument("missing required field 'url'");
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("url " + why + " (got '" + Abbreviate(url) + "')");
  };
  if (url.size() > 4096) return bad("must be at most 4096 characters");
  for (char c : url) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return bad("has a control character");
  }
  std::optional<Location> path = ParseLocation(url);
  if (!path) {
    return bad(
        "must be an absolute local path (file:///path or /path, without '.' or '..') or "
        "s3://bucket/prefix");
  }
  std::optional<std::vector<std::string>> ancestors = Ancestors(*path);
  if (!ancestors) return bad("is too deep");
  TY_ASSIGN_OR_RETURN(auto holders, impl_->store.FindByLocations(*ancestors));
  // The object whose storage is the longest ancestor holds the path.
  std::optional<ObjectRow> holder;
  size_t holder_depth = 0;
  for (auto& row : holders) {
    auto location = ParseLocation(row.info.storage_location);
    if (location && location->s3 == path->s3 && (!holder || location->path.size() > holder_depth)) {
      holder_depth = location->path.size();
      holder = std::move(row);
    }
  }
  // Storage of other objects inside the path would be handed out with it.
  TY_ASSIGN_OR_RETURN(auto inner, impl_->store.FindUnderLocation(Inside(*path)));
  if (inner && (!holder || inner->info.id != holder->info.id)) {
    return Status::PermissionDenied("url '" + Abbreviate(url) + "' contains the storage of " +
                                    SecurableLabel(inner->type, inner->info.full_name) +
                                    "; ask for that object's credential, or a path inside it");
  }
  const std::string credential_url = path->s3 ? path->path : "file://" + path->path;
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
    return StorageCredential(who, credential_url, /*write=*/true);
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
  return StorageCredential(who, credential_url, operation == PathOperation::kReadWrite);
}

}  // namespace trainyard::catalog
