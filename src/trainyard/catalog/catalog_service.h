// CatalogService: the Unity Catalog namespace and its grants, with one authorization
// decision that every catalog operation goes through.
//
// The hierarchy is metastore (one, implicit) -> catalogs -> schemas -> tables, volumes,
// functions, registered models. Every object has an owner (its creator, until ownership is
// transferred), grants of privileges (permissions.h) to users, groups and service
// principals, and inherits the grants of its ancestors.
//
// Authorize() applies UC's access rule: to exercise privilege P on object O the caller
// needs P (or ALL PRIVILEGES; MANAGE only as itself) granted on O or an ancestor to them or
// a group they are in (transitively), AND USE CATALOG on O's catalog and USE SCHEMA on O's
// schema (where O lies inside them; for a catalog or schema itself too, except when P is
// that USE privilege). Metastore admins, and the owner of O or of an ancestor, pass
// without grants. A token with a scope (a job's) is never an admin and acts with its
// user's grants only. Each decision, allow or deny, is queued to identity's audit log with
// who, the securable's type and full name, the privilege and the outcome (and why, for a
// deny); queuing does not wait for the store.
//
// What each operation needs:
//   create catalog: CREATE CATALOG on the metastore; create schema: CREATE SCHEMA on the
//   catalog; create table/volume/function/model: CREATE TABLE/VOLUME/FUNCTION/MODEL on
//   the schema (an external table or volume also CREATE EXTERNAL TABLE/VOLUME on the
//   metastore); get (and seeing an object in a list): USE CATALOG (catalog), USE SCHEMA
//   (schema), SELECT or MODIFY (table), READ VOLUME (volume), EXECUTE (function,
//   registered model); update of comment/properties/name and delete: owner or MANAGE;
//   ownership transfer: owner or admin; grant/revoke: owner or MANAGE; reading grants:
//   anyone who may get the object.
//
// Names follow names.h: stored lower-case; a duplicate is AlreadyExists; an unknown name is
// NotFound; deleting a non-empty catalog or schema is FailedPrecondition unless `force`.
//
// Group membership comes from IdentityService::GroupsOf (cached there, invalidated on any
// membership change); the tree and the grants are held in memory (AccessIndex) and updated
// with each change, so a revocation takes effect on the next call. Tables, once read, are
// held in memory too (TableCache: the row with its row filter and masks), and each change
// of one (or of its parents' names) drops it before the change is answered. Both assume
// this service is the only writer of the catalog's tables: a second server sharing the
// PostgreSQL metastore would not see this one's changes (nor today's index), so the catalog
// is served by one server per metastore.
//
// Thread-safe. The service keeps references to `db`, `identity`, `clock` and `random`,
// which must outlive it.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "trainyard/catalog/catalog_types.h"
#include "trainyard/catalog/permissions.h"
#include "trainyard/common/clock.h"
#include "trainyard/common/status.h"
#include "trainyard/identity/authorizer.h"
#include "trainyard/store/database.h"
#include "trainyard/tables/predicate_reader.h"

namespace trainyard::identity {
class IdentityService;
}
namespace trainyard::blob {
class S3CredentialIssuer;
}

namespace trainyard::catalog {

class AccessIndex;
class CatalogStore;

struct CatalogServiceOptions {
  // The metastore's managed storage root: a local directory or an s3:// prefix. A catalog
  // without its own root keeps managed data under `<root>/<catalog id>`.
  std::string metastore_root;
  // Issues the scoped S3 credentials of temporary credentials for s3:// locations; not
  // owned; nullptr: such credentials are not served (the server was started without
  // --s3-credentials-role-arn).
  blob::S3CredentialIssuer* s3_credentials = nullptr;
};

class CatalogService {
 public:
  CatalogService(store::Database& db, identity::IdentityService& identity, Clock& clock,
                 Random& random, CatalogServiceOptions options);
  ~CatalogService();
  CatalogService(const CatalogService&) = delete;
  CatalogService& operator=(const CatalogService&) = delete;

  // The catalog's tables (catalog_objects, catalog_grants), for ApplyMigrations.
  static std::vector<store::Migration> Migrations();
  // Loads the tree and the grants into memory; call once before serving requests.
  Status Init();

  // The one decision (see above). Ok, PermissionDenied saying what is missing and where to
  // grant it, or NotFound when `full_name` names no object of `type`.
  Status Authorize(const identity::Principal& who, Privilege privilege, SecurableType type,
                   std::string_view full_name);

  // Catalogs.
  Result<CatalogInfo> CreateCatalog(const identity::Principal& who,
                                    const CreateCatalogRequest& request);
  Result<CatalogInfo> GetCatalog(const identity::Principal& who, std::string_view name);
  Result<Page<CatalogInfo>> ListCatalogs(const identity::Principal& who, const PageRequest& page);
  Result<CatalogInfo> UpdateCatalog(const identity::Principal& who, std::string_view name,
                                    const UpdateObjectRequest& request);
  Status DeleteCatalog(const identity::Principal& who, std::string_view name, bool force);

  // Schemas, named "catalog.schema".
  Result<SchemaInfo> CreateSchema(const identity::Principal& who,
                                  const CreateSchemaRequest& request);
  Result<SchemaInfo> GetSchema(const identity::Principal& who, std::string_view full_name);
  Result<Page<SchemaInfo>> ListSchemas(const identity::Principal& who,
                                       std::string_view catalog_name, const PageRequest& page);
  Result<SchemaInfo> UpdateSchema(const identity::Principal& who, std::string_view full_name,
                                  const UpdateObjectRequest& request);
  Status DeleteSchema(const identity::Principal& who, std::string_view full_name, bool force);

  // Tables, named "catalog.schema.table". A table comes with its row filter and column masks;
  // where they restrict the caller (table_policy.h), its storage_location is left empty, so
  // the location is no way around them.
  Result<TableInfo> CreateTable(const identity::Principal& who, const CreateTableRequest& request);
  Result<TableInfo> GetTable(const identity::Principal& who, std::string_view full_name);
  // GetTable answered from memory only, for a caller that must not block (an HTTP I/O
  // thread): nullopt when the answer needs the store (the table not read since its last
  // change, or the caller's groups not loaded). The decision is audited as GetTable's.
  std::optional<Result<TableInfo>> GetTableIfCached(const identity::Principal& who,
                                                    std::string_view full_name);
  // For temporary credentials, which name a table by id; the same check as GetTable.
  Result<TableInfo> GetTableById(const identity::Principal& who, std::string_view table_id);
  Result<Page<TableInfo>> ListTables(const identity::Principal& who, std::string_view catalog_name,
                                     std::string_view schema_name, const PageRequest& page);
  Result<TableInfo> UpdateTable(const identity::Principal& who, std::string_view full_name,
                                const UpdateObjectRequest& request);
  Status DeleteTable(const identity::Principal& who, std::string_view full_name);
  // The table's row with its policies and storage location, without an access check: for
  // TableService, which has authorized the caller already.
  Result<TableInfo> LoadTable(std::string_view full_name);

  // Row filters and column masks (table_policy.h; not in UC OSS). Setting or clearing one
  // needs the table's owner or MANAGE, like other changes of its metadata, and is audited
  // with what was set. InvalidArgument naming `predicate`, `column`, `kind` or `except[i]`
  // for a filter that does not parse or names no column, an unknown column, a mask kind the
  // column's type cannot keep, or an exemption that is no user, service principal or group.
  // Clearing what is not set is Ok. Each returns the table as GetTable does.
  Result<TableInfo> SetRowFilter(const identity::Principal& who, std::string_view full_name,
                                 std::string_view predicate);
  Result<TableInfo> ClearRowFilter(const identity::Principal& who, std::string_view full_name);
  Result<TableInfo> SetColumnMask(const identity::Principal& who, std::string_view full_name,
                                  std::string_view column, const ColumnMaskInfo& mask);
  Result<TableInfo> ClearColumnMask(const identity::Principal& who, std::string_view full_name,
                                    std::string_view column);
  // Who reads, for row filters and masks: the user and their groups (transitively, sorted).
  Result<tables::PredicateReader> ReaderOf(const identity::Principal& who);

  // Volumes, named "catalog.schema.volume".
  Result<VolumeInfo> CreateVolume(const identity::Principal& who,
                                  const CreateVolumeRequest& request);
  Result<VolumeInfo> GetVolume(const identity::Principal& who, std::string_view full_name);
  Result<VolumeInfo> GetVolumeById(const identity::Principal& who, std::string_view volume_id);
  Result<Page<VolumeInfo>> ListVolumes(const identity::Principal& who,
                                       std::string_view catalog_name, std::string_view schema_name,
                                       const PageRequest& page);
  Result<VolumeInfo> UpdateVolume(const identity::Principal& who, std::string_view full_name,
                                  const UpdateObjectRequest& request);
  Status DeleteVolume(const identity::Principal& who, std::string_view full_name);

  // Functions (metadata only), named "catalog.schema.function".
  Result<FunctionInfo> CreateFunction(const identity::Principal& who,
                                      const CreateFunctionRequest& request);
  Result<FunctionInfo> GetFunction(const identity::Principal& who, std::string_view full_name);
  Result<Page<FunctionInfo>> ListFunctions(const identity::Principal& who,
                                           std::string_view catalog_name,
                                           std::string_view schema_name, const PageRequest& page);
  Status DeleteFunction(const identity::Principal& who, std::string_view full_name);

  // Registered models, named "catalog.schema.model". The seam for the model registry: a
  // registered model's securable (owner, grants, storage_location) lives here; its versions
  // live in registry/, keyed by this full name, and are authorized with Authorize() on it
  // (EXECUTE to read/load, owner or MANAGE to change).
  Result<RegisteredModelInfo> CreateRegisteredModel(const identity::Principal& who,
                                                    const CreateRegisteredModelRequest& request);
  Result<RegisteredModelInfo> GetRegisteredModel(const identity::Principal& who,
                                                 std::string_view full_name);
  // With catalog_name and schema_name both empty: every model the caller may see, by
  // full name (UC's list without a parent); one without the other is InvalidArgument.
  Result<Page<RegisteredModelInfo>> ListRegisteredModels(const identity::Principal& who,
                                                         std::string_view catalog_name,
                                                         std::string_view schema_name,
                                                         const PageRequest& page);
  Result<RegisteredModelInfo> UpdateRegisteredModel(const identity::Principal& who,
                                                    std::string_view full_name,
                                                    const UpdateObjectRequest& request);
  Status DeleteRegisteredModel(const identity::Principal& who, std::string_view full_name);

  // Temporary credentials (UC's /temporary-volume-credentials and
  // /temporary-path-credentials): the URL and an expiry. Local storage: the expiry is
  // kTemporaryCredentialMillis on. S3: an STS credential scoped to the location (read, or
  // read and write) with STS's expiry; NotImplemented when no S3CredentialIssuer is
  // configured. A volume: READ VOLUME to read, and WRITE FILES (granted on it or inherited)
  // to write.
  Result<TemporaryCredential> TemporaryVolumeCredential(const identity::Principal& who,
                                                        std::string_view volume_id,
                                                        VolumeOperation operation);
  // A path (file:///abs, file:/abs, /abs or s3://bucket/prefix) is checked as the object
  // whose storage it lies in: a table (SELECT to read, MODIFY to write), volume (READ
  // VOLUME, WRITE FILES), registered model (EXECUTE, MANAGE), schema or catalog root (READ
  // FILES, WRITE FILES); a path that contains another object's storage, lies in no object's
  // storage or in a function's is PermissionDenied. PATH_CREATE_TABLE needs CREATE EXTERNAL
  // TABLE on the metastore (and CREATE TABLE on the schema whose root it lies in) and a path
  // outside every table, volume and model. InvalidArgument naming `url` for a relative or
  // malformed URL.
  Result<TemporaryCredential> TemporaryPathCredential(const identity::Principal& who,
                                                      std::string_view url,
                                                      PathOperation operation);
  // The credential for `location` once `who` has been authorized for it: local → the URL
  // and expiry; s3:// → an STS credential for reading (or, with `write`, also writing) that
  // location only, its session named after `who`.
  Result<TemporaryCredential> StorageCredential(const identity::Principal& who,
                                                std::string_view location, bool write);

  // Permissions. `full_name` is "" for the metastore. `principal` "" = every principal.
  // Direct grants on the securable (UC's getPermissions).
  Result<std::vector<PrivilegeAssignment>> GetPermissions(const identity::Principal& who,
                                                          SecurableType type,
                                                          std::string_view full_name,
                                                          std::string_view principal = "");
  // Applies the changes atomically (all or none) and returns the securable's grants after
  // them. Each change's principal must be a user, group or service principal
  // (InvalidArgument naming changes[i].principal otherwise).
  Result<std::vector<PrivilegeAssignment>> UpdatePermissions(
      const identity::Principal& who, SecurableType type, std::string_view full_name,
      const std::vector<PermissionChange>& changes);
  // Grants on the securable and its ancestors, each with where it comes from.
  Result<std::vector<EffectivePrivilegeAssignment>> GetEffectivePermissions(
      const identity::Principal& who, SecurableType type, std::string_view full_name,
      std::string_view principal = "");

  // Drops every grant to `principal` (a user, service principal or group that was deleted),
  // so a later principal of the same name does not inherit them. The server calls it from
  // IdentityService's user-deleted listener and after DeleteGroup. Objects it owns keep it
  // as their owner's name (as identity does).
  Status DropGrantsOf(const std::string& principal);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainyard::catalog
