#include "trainyard/catalog/catalog_service.h"

#include <algorithm>

#include "trainyard/catalog/catalog_service_impl.h"
#include "trainyard/catalog/names.h"
#include "trainyard/common/page_token.h"
#include "trainyard/common/strings.h"

namespace trainyard::catalog {
namespace {

constexpr size_t kMaxCommentLength = 65536;
constexpr size_t kMaxProperties = 256;
constexpr size_t kMaxPropertyLength = 4096;
constexpr std::string_view kPageTokenPrefix = "after:";

Status ValidateCommentAndProperties(const std::string& comment,
                                    const std::map<std::string, std::string>& properties) {
  if (comment.size() > kMaxCommentLength) {
    return Status::InvalidArgument("comment must be at most 65536 bytes");
  }
  if (properties.size() > kMaxProperties) {
    return Status::InvalidArgument("properties: at most 256 entries (got " +
                                   std::to_string(properties.size()) + ")");
  }
  for (const auto& [k, v] : properties) {
    if (k.empty() || k.size() > kMaxPropertyLength || v.size() > kMaxPropertyLength) {
      return Status::InvalidArgument(
          "properties: keys must be 1-4096 bytes and values at most "
          "4096 bytes (key '" +
          Abbreviate(k) + "')");
    }
  }
  return Status::Ok();
}

std::string JoinLocation(const std::string& root, const std::string& kind, const std::string& id) {
  std::string out = root;
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return out + "/" + kind + "/" + id;
}

Result<std::pair<int, std::string>> DecodePage(const PageRequest& page) {
  if (page.max_results < 0) {
    return Status::InvalidArgument("max_results must be 0 (the default, 100) or more (got " +
                                   std::to_string(page.max_results) + ")");
  }
  int limit =
      page.max_results == 0 ? kDefaultMaxResults : std::min(page.max_results, kMaxMaxResults);
  if (page.page_token.empty()) return std::make_pair(limit, std::string());
  auto decoded = Base64Decode(page.page_token);
  if (!decoded.ok() || !StartsWith(*decoded, kPageTokenPrefix)) {
    return Status::InvalidArgument("page_token is not one this server gave out");
  }
  return std::make_pair(limit, decoded->substr(kPageTokenPrefix.size()));
}

}  // namespace

Privilege ReadPrivilege(SecurableType type) {
  switch (type) {
    case SecurableType::kMetastore:
    case SecurableType::kCatalog:
      return Privilege::kUseCatalog;
    case SecurableType::kSchema:
      return Privilege::kUseSchema;
    case SecurableType::kTable:
      return Privilege::kSelect;
    case SecurableType::kVolume:
      return Privilege::kReadVolume;
    case SecurableType::kFunction:
    case SecurableType::kRegisteredModel:
      return Privilege::kExecute;
  }
  return Privilege::kSelect;
}

std::string SecurableLabel(SecurableType type, std::string_view full_name) {
  if (type == SecurableType::kMetastore) return "metastore";
  return std::string(SecurableTypeName(type)) + " " + std::string(full_name);
}

Status ValidateStorageLocation(std::string_view field, std::string_view location) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument(std::string(field) + " " + why + " (got '" +
                                   Abbreviate(location) + "')");
  };
  if (location.size() > 4096) return bad("must be at most 4096 characters");
  for (char c : location) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return bad("has a control character");
  }
  std::string_view path = location;
  if (StartsWith(location, "s3://")) {
    path = location.substr(5);
    if (path.empty() || path.front() == '/') return bad("must name a bucket: s3://bucket/prefix");
  } else if (StartsWith(location, "file://")) {
    path = location.substr(7);
    if (path.empty() || path.front() != '/') return bad("must be file:///absolute/path");
  } else if (location.empty() || location.front() != '/') {
    return bad("must be an absolute local path, file:///path or s3://bucket/prefix");
  }
  for (const auto& segment : SplitString(path, '/')) {
    if (segment == "..") return bad("must not contain '..'");
  }
  return Status::Ok();
}

CatalogService::CatalogService(store::Database& db, identity::IdentityService& identity,
                               Clock& clock, Random& random, CatalogServiceOptions options)
    : impl_(std::make_unique<Impl>(db, identity, clock, random, std::move(options))) {}

CatalogService::~CatalogService() = default;

std::vector<store::Migration> CatalogService::Migrations() { return CatalogStore::Migrations(); }

Status CatalogService::Init() {
  std::vector<ObjectRow> objects;
  std::vector<GrantRow> grants;
  TY_RETURN_IF_ERROR(impl_->store.LoadAll(objects, grants));
  std::vector<std::pair<std::string, IndexNode>> nodes;
  for (auto& o : objects) {
    nodes.emplace_back(o.info.id, IndexNode{o.type, o.parent_id, o.info.owner, o.info.full_name});
  }
  std::vector<std::tuple<std::string, std::string, PrivilegeSet>> grant_tuples;
  for (auto& g : grants) grant_tuples.emplace_back(g.securable_id, g.principal, g.privileges);
  impl_->index.Reset(nodes, grant_tuples);
  impl_->table_cache.InvalidateAll();
  return Status::Ok();
}

Status CatalogService::Authorize(const identity::Principal& who, Privilege privilege,
                                 SecurableType type, std::string_view full_name) {
  TY_ASSIGN_OR_RETURN(std::string id, impl_->Resolve(type, full_name, "full_name"));
  return impl_->Check(who, privilege, id);
}

Status CatalogService::DropGrantsOf(const std::string& principal) {
  TY_ASSIGN_OR_RETURN(auto ids, impl_->store.DeleteGrantsOf(principal));
  for (const auto& id : ids) impl_->index.SetGrants(id, principal, PrivilegeSet());
  return Status::Ok();
}

// ---- Impl: decisions -------------------------------------------------------------------

Result<Subject> CatalogService::Impl::SubjectOf(const identity::Principal& who) {
  Subject s;
  s.user = who.user;
  s.is_admin = who.is_admin && who.scope.empty();
  TY_ASSIGN_OR_RETURN(s.groups, identity.GroupsOf(who.user));
  return s;
}

std::optional<Subject> CatalogService::Impl::CachedSubjectOf(const identity::Principal& who) {
  auto groups = identity.GroupsOfCached(who.user);
  if (!groups) return std::nullopt;
  return Subject{who.user, who.is_admin && who.scope.empty(), std::move(*groups)};
}

void CatalogService::Impl::AuditDecision(const identity::Principal& who, const std::string& id,
                                         std::string_view privilege, const Decision& decision) {
  auto node = index.Node(id);
  identity::AuditRecord r;
  r.timestamp = clock.NowMillis();
  r.user = who.user;
  r.method = "AUTHORIZE";
  r.status = decision.allowed ? 200 : 403;
  r.securable = node ? SecurableLabel(node->type, node->full_name) : id;
  r.path = r.securable;
  r.privilege = std::string(privilege);
  r.outcome = decision.allowed ? "ALLOW" : "DENY";
  r.detail = decision.reason;
  if (!who.scope.empty()) r.detail += " (token scoped to " + who.scope + ")";
  identity.Audit(std::move(r));
}

Status CatalogService::Impl::Check(const identity::Principal& who, const Subject& subject,
                                   Privilege privilege, const std::string& id) {
  Decision d = index.Decide(subject, privilege, id);
  AuditDecision(who, id, PrivilegeName(privilege), d);
  if (d.allowed) return Status::Ok();
  return Status::PermissionDenied(d.reason);
}

Status CatalogService::Impl::Check(const identity::Principal& who, Privilege privilege,
                                   const std::string& id) {
  TY_ASSIGN_OR_RETURN(Subject subject, SubjectOf(who));
  return Check(who, subject, privilege, id);
}

bool CatalogService::Impl::MayRead(const Subject& subject, SecurableType type,
                                   const std::string& id) {
  if (index.Decide(subject, ReadPrivilege(type), id).allowed) return true;
  return type == SecurableType::kTable && index.Decide(subject, Privilege::kModify, id).allowed;
}

Status CatalogService::Impl::CheckRead(const identity::Principal& who, SecurableType type,
                                       const std::string& id) {
  TY_ASSIGN_OR_RETURN(Subject subject, SubjectOf(who));
  return CheckRead(who, subject, type, id);
}

Status CatalogService::Impl::CheckRead(const identity::Principal& who, const Subject& subject,
                                       SecurableType type, const std::string& id) {
  Decision d = index.Decide(subject, ReadPrivilege(type), id);
  if (!d.allowed && type == SecurableType::kTable) {
    Decision modify = index.Decide(subject, Privilege::kModify, id);
    if (modify.allowed) {
      AuditDecision(who, id, PrivilegeName(Privilege::kModify), modify);
      return Status::Ok();
    }
  }
  AuditDecision(who, id, PrivilegeName(ReadPrivilege(type)), d);
  return d.allowed ? Status::Ok() : Status::PermissionDenied(d.reason);
}

Result<std::string> CatalogService::Impl::Resolve(SecurableType type, std::string_view text,
                                                  std::string_view field) {
  if (type == SecurableType::kMetastore) return std::string(kMetastoreId);
  TY_ASSIGN_OR_RETURN(FullName name, ParseFullName(field, text, NameLevels(type)));
  auto id = index.Find(type, name.ToString());
  if (!id) {
    return Status::NotFound(std::string(SecurableTypeName(type)) + " '" + name.ToString() +
                            "' does not exist");
  }
  return *id;
}

Result<ObjectRow> CatalogService::Impl::Load(SecurableType type, std::string_view text,
                                             std::string_view field) {
  TY_ASSIGN_OR_RETURN(std::string id, Resolve(type, text, field));
  TY_ASSIGN_OR_RETURN(auto row, store.GetById(id));
  if (!row) {
    return Status::NotFound(std::string(SecurableTypeName(type)) + " '" + std::string(text) +
                            "' does not exist");
  }
  return std::move(*row);
}

std::string CatalogService::Impl::NewId() {
  std::string h = random.Hex(16);
  h[12] = '4';  // version 4
  h[16] = "89ab"[std::stoi(std::string(1, h[16]), nullptr, 16) & 3];
  return h.substr(0, 8) + "-" + h.substr(8, 4) + "-" + h.substr(12, 4) + "-" + h.substr(16, 4) +
         "-" + h.substr(20);
}

std::string CatalogService::Impl::ManagedRoot(const std::string& parent_id) {
  if (parent_id == kMetastoreId) return options.metastore_root;
  auto row = store.GetById(parent_id);
  if (!row.ok() || !*row) return options.metastore_root;
  return (*row)->info.storage_location;
}

// ---- Impl: generic operations ------------------------------------------------------------

Result<ObjectRow> CatalogService::Impl::Create(const identity::Principal& who,
                                               const NewObject& request) {
  const std::string type_name(SecurableTypeName(request.type));
  TY_ASSIGN_OR_RETURN(std::string name, NormalizeName("name", request.name));
  TY_RETURN_IF_ERROR(ValidateCommentAndProperties(request.comment, request.properties));
  std::string parent_id = kMetastoreId;
  std::string prefix;
  SecurableType parent_type = SecurableType::kMetastore;
  static const char* kParentFields[] = {"catalog_name", "schema_name"};
  for (size_t i = 0; i < request.parent_levels.size(); ++i) {
    TY_ASSIGN_OR_RETURN(std::string level,
                        NormalizeName(kParentFields[i], request.parent_levels[i]));
    prefix += level + ".";
  }
  if (!request.parent_levels.empty()) {
    parent_type =
        request.parent_levels.size() == 1 ? SecurableType::kCatalog : SecurableType::kSchema;
    TY_ASSIGN_OR_RETURN(parent_id, Resolve(parent_type, prefix.substr(0, prefix.size() - 1),
                                           kParentFields[request.parent_levels.size() - 1]));
  }
  TY_ASSIGN_OR_RETURN(Subject subject, SubjectOf(who));
  TY_RETURN_IF_ERROR(Check(who, subject, request.create_privilege, parent_id));
  if (request.metastore_privilege) {
    TY_RETURN_IF_ERROR(Check(who, subject, *request.metastore_privilege, kMetastoreId));
  }
  ObjectRow row;
  row.type = request.type;
  row.parent_id = parent_id;
  row.details = request.details;
  ObjectInfo& i = row.info;
  i.id = NewId();
  i.name = name;
  i.full_name = prefix + name;
  if (request.parent_levels.size() >= 1) i.catalog_name = ToLower(request.parent_levels[0]);
  if (request.parent_levels.size() >= 2) i.schema_name = ToLower(request.parent_levels[1]);
  i.owner = who.user;
  i.comment = request.comment;
  i.properties = request.properties;
  i.storage_location = request.storage_location.empty()
                           ? JoinLocation(ManagedRoot(parent_id), request.location_kind, i.id)
                           : request.storage_location;
  i.created_at = i.updated_at = clock.NowMillis();
  i.created_by = i.updated_by = who.user;
  if (index.Find(request.type, i.full_name)) {
    return Status::AlreadyExists(type_name + " '" + i.full_name + "' already exists");
  }
  TY_RETURN_IF_ERROR(store.Insert(row));
  index.Put(i.id, IndexNode{row.type, parent_id, i.owner, i.full_name});
  return row;
}

Result<ObjectRow> CatalogService::Impl::Get(const identity::Principal& who, SecurableType type,
                                            std::string_view full_name) {
  TY_ASSIGN_OR_RETURN(ObjectRow row, Load(type, full_name, "full_name"));
  TY_RETURN_IF_ERROR(CheckRead(who, type, row.info.id));
  return row;
}

Result<ObjectRow> CatalogService::Impl::GetById(const identity::Principal& who, SecurableType type,
                                                std::string_view id) {
  TY_ASSIGN_OR_RETURN(auto row, store.GetById(std::string(id)));
  if (!row || row->type != type) {
    return Status::NotFound(std::string(SecurableTypeName(type)) + " with id '" + Abbreviate(id) +
                            "' does not exist");
  }
  TY_RETURN_IF_ERROR(CheckRead(who, type, row->info.id));
  return std::move(*row);
}

Result<Page<ObjectRow>> CatalogService::Impl::List(const identity::Principal& who,
                                                   SecurableType type,
                                                   std::vector<std::string> parent_levels,
                                                   const PageRequest& page) {
  TY_ASSIGN_OR_RETURN(auto paging, DecodePage(page));
  std::string parent_id = kMetastoreId;
  TY_ASSIGN_OR_RETURN(Subject subject, SubjectOf(who));
  if (!parent_levels.empty()) {
    SecurableType parent_type =
        parent_levels.size() == 1 ? SecurableType::kCatalog : SecurableType::kSchema;
    std::string parent_name = parent_levels[0];
    if (parent_levels.size() == 2) parent_name += "." + parent_levels[1];
    TY_ASSIGN_OR_RETURN(parent_id,
                        Resolve(parent_type, parent_name,
                                parent_levels.size() == 1 ? "catalog_name" : "schema_name"));
    TY_RETURN_IF_ERROR(Check(who, subject, ReadPrivilege(parent_type), parent_id));
  }
  TY_ASSIGN_OR_RETURN(auto rows, store.List(type, parent_id, paging.second, paging.first));
  Page<ObjectRow> out;
  if (static_cast<int>(rows.size()) == paging.first) {
    out.next_page_token = Base64Encode(std::string(kPageTokenPrefix) + rows.back().info.name);
  }
  for (auto& row : rows) {
    if (MayRead(subject, type, row.info.id)) out.items.push_back(std::move(row));
  }
  return out;
}

Result<Page<ObjectRow>> CatalogService::Impl::ListAll(const identity::Principal& who,
                                                      SecurableType type, const PageRequest& page) {
  TY_ASSIGN_OR_RETURN(auto paging, DecodePage(page));
  TY_ASSIGN_OR_RETURN(Subject subject, SubjectOf(who));
  TY_ASSIGN_OR_RETURN(auto rows, store.ListAll(type, paging.second, paging.first));
  Page<ObjectRow> out;
  if (static_cast<int>(rows.size()) == paging.first) {
    out.next_page_token = Base64Encode(std::string(kPageTokenPrefix) + rows.back().info.full_name);
  }
  for (auto& row : rows) {
    if (MayRead(subject, type, row.info.id)) out.items.push_back(std::move(row));
  }
  return out;
}

Result<ObjectRow> CatalogService::Impl::Update(const identity::Principal& who, SecurableType type,
                                               std::string_view full_name,
                                               const UpdateObjectRequest& request) {
  TY_ASSIGN_OR_RETURN(ObjectRow row, Load(type, full_name, "full_name"));
  TY_ASSIGN_OR_RETURN(Subject subject, SubjectOf(who));
  if (request.new_name || request.comment || request.properties) {
    TY_RETURN_IF_ERROR(Check(who, subject, Privilege::kManage, row.info.id));
  }
  if (request.owner) {
    bool owns = subject.is_admin || row.info.owner == who.user ||
                (subject.groups && std::binary_search(subject.groups->begin(),
                                                      subject.groups->end(), row.info.owner));
    Decision d{owns, owns ? "owner or admin"
                          : "only the owner ('" + row.info.owner +
                                "') or an admin may transfer ownership of " +
                                SecurableLabel(type, row.info.full_name)};
    if (!who.scope.empty()) {
      d = Decision{false, "a token scoped to " + who.scope + " may not transfer ownership"};
    }
    AuditDecision(who, row.info.id, "OWNERSHIP", d);
    if (!d.allowed) return Status::PermissionDenied(d.reason);
    if (auto kind = identity.GetPrincipalKind(*request.owner); !kind.ok()) {
      return Status::InvalidArgument("owner: " + kind.status().message());
    }
    row.info.owner = *request.owner;
  }
  if (request.comment) row.info.comment = *request.comment;
  if (request.properties) row.info.properties = *request.properties;
  TY_RETURN_IF_ERROR(ValidateCommentAndProperties(row.info.comment, row.info.properties));
  row.info.updated_at = clock.NowMillis();
  row.info.updated_by = who.user;
  if (request.new_name) {
    TY_ASSIGN_OR_RETURN(std::string name, NormalizeName("new_name", *request.new_name));
    std::string prefix =
        row.info.full_name.substr(0, row.info.full_name.size() - row.info.name.size());
    std::string new_full_name = prefix + name;
    if (new_full_name != row.info.full_name) {
      Status renamed = store.Rename(row, name, new_full_name);
      // A table carries its catalog's and schema's names: renaming either changes them all.
      if (type == SecurableType::kTable) {
        table_cache.Invalidate({row.info.id});
      } else {
        table_cache.InvalidateAll();
      }
      TY_RETURN_IF_ERROR(renamed);
      index.Rename(row.info.id, new_full_name);
      row.info.name = name;
      row.info.full_name = new_full_name;
    }
  }
  Status updated = store.Update(row);
  table_cache.Invalidate({row.info.id});
  TY_RETURN_IF_ERROR(updated);
  index.Put(row.info.id, IndexNode{row.type, row.parent_id, row.info.owner, row.info.full_name});
  return row;
}

Status CatalogService::Impl::Delete(const identity::Principal& who, SecurableType type,
                                    std::string_view full_name, bool force) {
  TY_ASSIGN_OR_RETURN(ObjectRow row, Load(type, full_name, "full_name"));
  TY_RETURN_IF_ERROR(Check(who, Privilege::kManage, row.info.id));
  if (type == SecurableType::kCatalog || type == SecurableType::kSchema) {
    TY_ASSIGN_OR_RETURN(int64_t n, store.CountDescendants(row.info.full_name));
    if (n > 0 && !force) {
      return Status::FailedPrecondition(SecurableLabel(type, row.info.full_name) +
                                        " is not empty (" + std::to_string(n) +
                                        " objects); delete them first or pass force=true");
    }
  }
  Result<std::vector<std::string>> ids = store.DeleteSubtree(row);
  // What was deleted, or (on a failure) this object at least: a failed transaction changed
  // nothing, so dropping more than needed is only a cost.
  table_cache.Invalidate(ids.ok() ? *ids : std::vector<std::string>{row.info.id});
  if (!ids.ok()) return ids.status();
  index.Remove(*ids);
  return Status::Ok();
}

}  // namespace trainyard::catalog
