#include "trainyard/registry/registry_service.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <utility>

#include "trainyard/common/page_token.h"
#include "trainyard/common/strings.h"
#include "trainyard/store/sql.h"
#include "trainyard/tracking/search_filter.h"
#include "trainyard/tracking/tracking_service.h"

namespace trainyard::registry {
namespace {

using store::Row;
using store::Rows;
using store::Transaction;
using store::Value;

// The tag that marks MLflow prompts, which live in the registry as registered models.
constexpr char kIsPromptTag[] = "mlflow.prompt.is_prompt";
constexpr size_t kChunk = store::kMaxListParams;
constexpr size_t kMaxUriLength = 65535;
// At most this many models' owners are cached; beyond, the cache starts over (bounds
// memory; owners are read again from the store on the next check).
constexpr size_t kMaxCachedOwners = 100'000;

constexpr char kModelColumns[] =
    "registered_models.name, registered_models.creation_timestamp, "
    "registered_models.last_updated_timestamp, registered_models.description, "
    "registered_models.user_id, registered_models.deployment_job_id";

constexpr char kVersionColumns[] =
    "model_versions.name, model_versions.version, model_versions.creation_timestamp, "
    "model_versions.last_updated_timestamp, model_versions.user_id, "
    "model_versions.current_stage, model_versions.description, model_versions.source, "
    "model_versions.storage_location, model_versions.run_id, model_versions.run_link, "
    "model_versions.status, model_versions.status_message, model_versions.model_id";

using store::InList;
using store::NullIfEmpty;
constexpr auto Exec = store::Run;

std::string Quoted(std::string_view s) { return "'" + Abbreviate(s) + "'"; }

Status ModelNotFound(const std::string& name) {
  return Status::NotFound("registered model " + Quoted(name) + " does not exist");
}

Status VersionNotFound(const std::string& name, int64_t version) {
  return Status::NotFound("registered model " + Quoted(name) + " has no version " +
                          std::to_string(version));
}

RegisteredModel ReadModel(const Row& r) {
  RegisteredModel m;
  m.name = r.Text(0);
  m.creation_timestamp = r.Int(1);
  m.last_updated_timestamp = r.Int(2);
  m.description = r.Text(3);
  m.user_id = r.Text(4);
  m.deployment_job_id = r.Text(5);
  return m;
}

ModelVersionStatus ParseStatus(const std::string& s) {
  if (s == "PENDING_REGISTRATION") return ModelVersionStatus::kPendingRegistration;
  if (s == "FAILED_REGISTRATION") return ModelVersionStatus::kFailedRegistration;
  return ModelVersionStatus::kReady;
}

ModelVersion ReadVersion(const Row& r) {
  ModelVersion v;
  v.name = r.Text(0);
  v.version = r.Int(1);
  v.creation_timestamp = r.Int(2);
  v.last_updated_timestamp = r.Int(3);
  v.user_id = r.Text(4);
  auto stage = ParseStage(r.Text(5));
  v.current_stage = stage.ok() ? *stage : Stage::kNone;
  v.description = r.Text(6);
  v.source = r.Text(7);
  v.storage_location = r.Text(8);
  v.run_id = r.Text(9);
  v.run_link = r.Text(10);
  v.status = ParseStatus(r.Text(11));
  v.status_message = r.Text(12);
  v.model_id = r.Text(13);
  return v;
}

bool ByKey(const KeyValue& a, const KeyValue& b) { return a.key < b.key; }

// Tags and aliases of `versions`, loaded in chunks.
Status FillVersions(Transaction& tx, std::vector<ModelVersion>& versions) {
  if (versions.empty()) return Status::Ok();
  std::map<std::pair<std::string, int64_t>, size_t> index;
  std::vector<std::string> names;
  for (size_t i = 0; i < versions.size(); ++i) {
    index[{versions[i].name, versions[i].version}] = i;
    names.push_back(versions[i].name);
  }
  for (size_t start = 0; start < versions.size(); start += kChunk) {
    size_t end = std::min(versions.size(), start + kChunk);
    std::string where;
    std::vector<Value> params;
    for (size_t i = start; i < end; ++i) {
      where += i > start ? " OR (name = ? AND version = ?)" : "(name = ? AND version = ?)";
      params.emplace_back(versions[i].name);
      params.emplace_back(versions[i].version);
    }
    TY_ASSIGN_OR_RETURN(
        Rows rows,
        tx.Query("SELECT name, version, key, value FROM model_version_tags WHERE " + where,
                 params));
    for (const Row& r : rows) {
      auto it = index.find({r.Text(0), r.Int(1)});
      if (it != index.end()) versions[it->second].tags.push_back({r.Text(2), r.Text(3)});
    }
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  for (size_t start = 0; start < names.size(); start += kChunk) {
    size_t end = std::min(names.size(), start + kChunk);
    std::vector<Value> params(names.begin() + static_cast<std::ptrdiff_t>(start),
                              names.begin() + static_cast<std::ptrdiff_t>(end));
    TY_ASSIGN_OR_RETURN(Rows rows,
                        tx.Query("SELECT name, alias, version FROM registered_model_aliases WHERE "
                                 "name IN " +
                                     InList(params.size()),
                                 params));
    for (const Row& r : rows) {
      auto it = index.find({r.Text(0), r.Int(2)});
      if (it != index.end()) versions[it->second].aliases.push_back(r.Text(1));
    }
  }
  for (ModelVersion& v : versions) {
    std::sort(v.tags.begin(), v.tags.end(), ByKey);
    std::sort(v.aliases.begin(), v.aliases.end());
  }
  return Status::Ok();
}

// MLflow's tag key rule: alphanumerics (any Unicode letter), _ - . space /, and the key must
// be a normalized relative path ("a//b", "./a", "a/..", "/a" are not).
bool ValidTagKeyChars(std::string_view key) {
  for (unsigned char c : key) {
    bool ok =
        std::isalnum(c) || c >= 0x80 || c == '_' || c == '-' || c == '.' || c == ' ' || c == '/';
    if (!ok) return false;
  }
  return true;
}

bool IsNormalizedRelativePath(std::string_view key) {
  for (const std::string& segment : SplitString(key, '/')) {
    if (segment.empty() || segment == "." || segment == "..") return false;
  }
  return true;
}

// The filter as SQL over `registered_models` (or `model_versions`), with MLflow's handling of
// prompts: unless the filter asks for prompts (tags.`mlflow.prompt.is_prompt` = 'true' or
// != 'false'), comparisons on that tag are dropped and prompts are left out. Models do not
// carry the tag, so a plain tag comparison would drop them all.
Result<tracking::SqlFragment> CompileRegistryFilter(std::string_view filter, bool versions) {
  TY_ASSIGN_OR_RETURN(std::vector<tracking::Comparison> comparisons,
                      tracking::ParseSearchFilter(filter));
  auto is_prompt_comparison = [](const tracking::Comparison& c) {
    return c.type == tracking::EntityType::kTag && c.key == kIsPromptTag;
  };
  bool wants_prompts = false;
  for (const auto& c : comparisons) {
    if (!is_prompt_comparison(c)) continue;
    std::string value = c.values.size() == 1 ? ToLower(c.values[0].text) : "";
    wants_prompts = (c.op == tracking::CompareOp::kEq && value == "true") ||
                    (c.op == tracking::CompareOp::kNe && value == "false");
    break;
  }
  if (!wants_prompts) {
    std::erase_if(comparisons, is_prompt_comparison);
  }
  TY_ASSIGN_OR_RETURN(tracking::SqlFragment out,
                      versions ? tracking::CompileModelVersionFilter(comparisons)
                               : tracking::CompileRegisteredModelFilter(comparisons));
  if (!wants_prompts) {
    std::string tags = versions ? "model_version_tags" : "registered_model_tags";
    std::string outer = versions ? "model_versions" : "registered_models";
    out.sql = "(" + out.sql + ") AND NOT EXISTS (SELECT 1 FROM " + tags +
              " prompt_tag WHERE prompt_tag.name = " + outer +
              ".name AND prompt_tag.key = ? AND prompt_tag.value = ?)";
    out.params.emplace_back(std::string(kIsPromptTag));
    out.params.emplace_back(std::string("true"));
  }
  return out;
}

Result<tracking::SqlFragment> CompileRegistryOrder(const std::vector<std::string>& order_by,
                                                   bool versions) {
  std::vector<tracking::OrderBy> parsed;
  std::set<std::string> seen;
  for (const std::string& clause : order_by) {
    if (Trim(clause).empty()) continue;
    TY_ASSIGN_OR_RETURN(tracking::OrderBy o, tracking::ParseOrderBy(clause));
    // MLflow accepts "timestamp" for last_updated_timestamp.
    if (o.type == tracking::EntityType::kAttribute && o.key == "timestamp") {
      o.key = "last_updated_timestamp";
    }
    if (!seen.insert(o.key).second) {
      return Status::InvalidArgument("order_by names '" + o.key + "' more than once");
    }
    parsed.push_back(std::move(o));
  }
  return versions ? tracking::CompileModelVersionOrderBy(parsed)
                  : tracking::CompileRegisteredModelOrderBy(parsed);
}

Result<int64_t> PageSize(const std::optional<int64_t>& requested, int64_t default_size,
                         int64_t max_size) {
  int64_t n = requested.value_or(default_size);
  if (n < 1 || n > max_size) {
    return Status::InvalidArgument("max_results must be between 1 and " + std::to_string(max_size) +
                                   " (got " + std::to_string(n) + ")");
  }
  return n;
}

}  // namespace

RegistryService::RegistryService(store::Database& db, Clock& clock, identity::Authorizer& authz,
                                 tracking::TrackingService& tracking, RegistryLimits limits)
    : db_(db), clock_(clock), authz_(authz), tracking_(tracking), limits_(limits) {}

Status RegistryService::AuthorizeEdit(const identity::Principal& who, const std::string& name) {
  TY_ASSIGN_OR_RETURN(std::string owner, RegisteredModelOwner(name));
  return authz_.Authorize(who, identity::Action::kEdit, {"registered_model", name, owner});
}

Status RegistryService::AuthorizeRead(const identity::Principal& who, const std::string& name) {
  TY_ASSIGN_OR_RETURN(std::string owner, RegisteredModelOwner(name));
  return authz_.Authorize(who, identity::Action::kRead, {"registered_model", name, owner});
}

std::optional<std::string> RegistryService::Claimed(std::string_view name) {
  if (ns_ == nullptr) return std::nullopt;
  return ns_->Claim(name);
}

std::vector<store::Migration> RegistryService::Migrations() {
  return {
      {"registry",
       1,
       {
           // last_version: the highest version number ever given, so that numbers of deleted
           // versions are not reused.
           "CREATE TABLE registered_models ("
           " name TEXT PRIMARY KEY,"
           " creation_timestamp BIGINT NOT NULL,"
           " last_updated_timestamp BIGINT NOT NULL,"
           " description TEXT,"
           " user_id TEXT NOT NULL,"
           " deployment_job_id TEXT,"
           " last_version BIGINT NOT NULL)",
           "CREATE TABLE registered_model_tags ("
           " name TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,"
           " PRIMARY KEY (name, key))",
           // storage_location: where the files are, resolved from source at creation.
           "CREATE TABLE model_versions ("
           " name TEXT NOT NULL,"
           " version BIGINT NOT NULL,"
           " creation_timestamp BIGINT NOT NULL,"
           " last_updated_timestamp BIGINT NOT NULL,"
           " user_id TEXT,"
           " current_stage TEXT NOT NULL,"  // None | Staging | Production | Archived
           " description TEXT,"
           " source TEXT NOT NULL,"
           " storage_location TEXT NOT NULL,"
           " run_id TEXT,"
           " run_link TEXT,"
           " status TEXT NOT NULL,"  // READY | PENDING_REGISTRATION | FAILED_REGISTRATION
           " status_message TEXT,"
           " model_id TEXT,"
           " PRIMARY KEY (name, version))",
           "CREATE INDEX model_versions_by_run ON model_versions (run_id)",
           "CREATE INDEX model_versions_by_logged_model ON model_versions (model_id)",
           "CREATE TABLE model_version_tags ("
           " name TEXT NOT NULL, version BIGINT NOT NULL, key TEXT NOT NULL,"
           " value TEXT NOT NULL, PRIMARY KEY (name, version, key))",
           "CREATE TABLE registered_model_aliases ("
           " name TEXT NOT NULL, alias TEXT NOT NULL, version BIGINT NOT NULL,"
           " PRIMARY KEY (name, alias))",
       }},
  };
}

// ---------------------------------------------------------------- validation

Status RegistryService::ValidateName(std::string_view field, const std::string& name) const {
  if (Trim(name).empty()) {
    return Status::InvalidArgument("missing required field '" + std::string(field) +
                                   "': a registered model name must not be empty");
  }
  if (name.size() > limits_.max_name_length) {
    return Status::InvalidArgument(std::string(field) + " " + Quoted(name) + " is longer than " +
                                   std::to_string(limits_.max_name_length) + " characters");
  }
  // A '/' or ':' would make models:/<name>/<version> URIs ambiguous (MLflow rejects them too).
  if (name.find('/') != std::string::npos || name.find(':') != std::string::npos) {
    return Status::InvalidArgument(std::string(field) + " " + Quoted(name) +
                                   " must not contain '/' or ':'");
  }
  return Status::Ok();
}

Status RegistryService::ValidateTag(std::string_view what, const KeyValue& tag) const {
  std::string noun = std::string(what) + " tag";
  if (tag.key.empty()) return Status::InvalidArgument(noun + " key must not be empty");
  if (!ValidTagKeyChars(tag.key)) {
    return Status::InvalidArgument("invalid " + noun + " key " + Quoted(tag.key) +
                                   ": names may only contain alphanumerics, underscores (_), "
                                   "dashes (-), periods (.), spaces ( ) and slashes (/)");
  }
  if (!IsNormalizedRelativePath(tag.key)) {
    return Status::InvalidArgument("invalid " + noun + " key " + Quoted(tag.key) +
                                   ": it must be a relative path without empty, '.' or '..' "
                                   "parts");
  }
  if (tag.key.size() > limits_.max_tag_key_length) {
    return Status::InvalidArgument(noun + " key " + Quoted(tag.key) + " is longer than " +
                                   std::to_string(limits_.max_tag_key_length) + " characters");
  }
  if (tag.value.size() > limits_.max_tag_value_length) {
    return Status::InvalidArgument(noun + " " + Quoted(tag.key) + " value is longer than " +
                                   std::to_string(limits_.max_tag_value_length) + " characters");
  }
  return Status::Ok();
}

Status RegistryService::ValidateAlias(const std::string& alias) const {
  if (alias.empty()) {
    return Status::InvalidArgument("missing required field 'alias': an alias must not be empty");
  }
  for (unsigned char c : alias) {
    if (!(std::isalnum(c) || c >= 0x80 || c == '_' || c == '-')) {
      return Status::InvalidArgument("invalid alias " + Quoted(alias) +
                                     ": aliases may only contain alphanumerics, underscores (_) "
                                     "and dashes (-)");
    }
  }
  if (alias.size() > limits_.max_alias_length) {
    return Status::InvalidArgument("alias " + Quoted(alias) + " is longer than " +
                                   std::to_string(limits_.max_alias_length) + " characters");
  }
  if (ToLower(alias) == "latest") {
    return Status::InvalidArgument(
        "alias 'latest' (in any case) is reserved: models:/<name>/"
        "latest means the latest version");
  }
  // "v3", "V3" and "3" would read as version numbers.
  std::string_view digits = alias;
  if (digits.front() == 'v' || digits.front() == 'V') digits.remove_prefix(1);
  if (!digits.empty() && std::all_of(digits.begin(), digits.end(),
                                     [](unsigned char c) { return std::isdigit(c) != 0; })) {
    return Status::InvalidArgument("alias " + Quoted(alias) +
                                   " is reserved: it looks like a version number");
  }
  return Status::Ok();
}

Status RegistryService::ValidateDescription(const std::string& description) const {
  if (description.size() > limits_.max_description_length) {
    return Status::InvalidArgument("description is longer than " +
                                   std::to_string(limits_.max_description_length) + " characters");
  }
  return Status::Ok();
}

// ---------------------------------------------------------------- loading

Result<RegisteredModel> RegistryService::LoadModel(Transaction& tx, const std::string& name) {
  TY_ASSIGN_OR_RETURN(Rows rows, tx.Query(std::string("SELECT ") + kModelColumns +
                                              " FROM registered_models WHERE name = ?",
                                          {name}));
  if (rows.empty()) return ModelNotFound(name);
  std::vector<RegisteredModel> models{ReadModel(rows[0])};
  TY_RETURN_IF_ERROR(FillModels(tx, models));
  return std::move(models[0]);
}

Result<ModelVersion> RegistryService::LoadVersion(Transaction& tx, const std::string& name,
                                                  int64_t version) {
  TY_ASSIGN_OR_RETURN(Rows rows, tx.Query(std::string("SELECT ") + kVersionColumns +
                                              " FROM model_versions WHERE name = ? AND version = ?",
                                          {name, version}));
  if (rows.empty()) {
    TY_ASSIGN_OR_RETURN(Rows model,
                        tx.Query("SELECT 1 FROM registered_models WHERE name = ?", {name}));
    if (model.empty()) return ModelNotFound(name);
    return VersionNotFound(name, version);
  }
  std::vector<ModelVersion> versions{ReadVersion(rows[0])};
  TY_RETURN_IF_ERROR(FillVersions(tx, versions));
  return std::move(versions[0]);
}

// Tags, aliases and latest versions of `models`.
Status RegistryService::FillModels(Transaction& tx, std::vector<RegisteredModel>& models) {
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < models.size(); ++i) index[models[i].name] = i;
  std::vector<std::string> names;
  for (const auto& [name, i] : index) names.push_back(name);
  std::vector<ModelVersion> latest;
  for (size_t start = 0; start < names.size(); start += kChunk) {
    size_t end = std::min(names.size(), start + kChunk);
    std::vector<Value> params(names.begin() + static_cast<std::ptrdiff_t>(start),
                              names.begin() + static_cast<std::ptrdiff_t>(end));
    std::string in = InList(params.size());
    TY_ASSIGN_OR_RETURN(
        Rows tags,
        tx.Query("SELECT name, key, value FROM registered_model_tags WHERE name IN " + in, params));
    for (const Row& r : tags) models[index[r.Text(0)]].tags.push_back({r.Text(1), r.Text(2)});
    TY_ASSIGN_OR_RETURN(
        Rows aliases,
        tx.Query("SELECT name, alias, version FROM registered_model_aliases WHERE name IN " + in,
                 params));
    for (const Row& r : aliases) models[index[r.Text(0)]].aliases.push_back({r.Text(1), r.Int(2)});
    TY_ASSIGN_OR_RETURN(
        Rows versions,
        tx.Query(std::string("SELECT ") + kVersionColumns +
                     " FROM model_versions WHERE model_versions.name IN " + in +
                     " AND model_versions.version = (SELECT MAX(v2.version) FROM model_versions "
                     "v2 WHERE v2.name = model_versions.name AND v2.current_stage = "
                     "model_versions.current_stage)",
                 params));
    for (const Row& r : versions) latest.push_back(ReadVersion(r));
  }
  TY_RETURN_IF_ERROR(FillVersions(tx, latest));
  for (ModelVersion& v : latest) models[index[v.name]].latest_versions.push_back(std::move(v));
  for (RegisteredModel& m : models) {
    std::sort(m.tags.begin(), m.tags.end(), ByKey);
    std::sort(m.aliases.begin(), m.aliases.end(),
              [](const ModelAlias& a, const ModelAlias& b) { return a.alias < b.alias; });
    std::sort(m.latest_versions.begin(), m.latest_versions.end(),
              [](const ModelVersion& a, const ModelVersion& b) { return a.version < b.version; });
  }
  return Status::Ok();
}

// ---------------------------------------------------------------- registered models

Result<RegisteredModel> RegistryService::CreateRegisteredModel(
    const identity::Principal& who, const CreateRegisteredModelRequest& original) {
  const std::string& owner = who.user;
  TY_RETURN_IF_ERROR(ValidateName("name", original.name));
  for (const KeyValue& t : original.tags) TY_RETURN_IF_ERROR(ValidateTag("registered model", t));
  TY_RETURN_IF_ERROR(ValidateDescription(original.description));
  CreateRegisteredModelRequest request = original;
  std::optional<std::string> claimed = Claimed(request.name);
  if (claimed) {
    request.name = *claimed;
    TY_RETURN_IF_ERROR(ns_->Create(who, request.name, request.description));
  }
  RegisteredModel out;
  Status s = db_.Write([&](Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(Rows existing,
                        tx.Query("SELECT 1 FROM registered_models WHERE name = ?", {request.name}));
    if (!existing.empty()) {
      return Status::AlreadyExists("registered model " + Quoted(request.name) + " already exists");
    }
    int64_t now = clock_.NowMillis();
    TY_RETURN_IF_ERROR(Exec(tx,
                            "INSERT INTO registered_models (name, creation_timestamp, "
                            "last_updated_timestamp, description, user_id, deployment_job_id, "
                            "last_version) VALUES (?, ?, ?, ?, ?, ?, 0)",
                            {request.name, now, now, NullIfEmpty(request.description), owner,
                             NullIfEmpty(request.deployment_job_id)}));
    for (const KeyValue& t : request.tags) {
      TY_RETURN_IF_ERROR(Exec(tx,
                              "INSERT INTO registered_model_tags (name, key, value) VALUES (?, ?, "
                              "?) ON CONFLICT (name, key) DO UPDATE SET value = excluded.value",
                              {request.name, t.key, t.value}));
    }
    TY_ASSIGN_OR_RETURN(out, LoadModel(tx, request.name));
    return Status::Ok();
  });
  if (!s.ok()) {
    if (claimed) (void)ns_->Remove(request.name);
    return s;
  }
  ForgetOwner(request.name);
  return out;
}

Result<RegisteredModel> RegistryService::GetRegisteredModel(const std::string& name) {
  TY_RETURN_IF_ERROR(ValidateName("name", name));
  RegisteredModel out;
  Status s = db_.Read([&](Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(out, LoadModel(tx, name));
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return out;
}

namespace {

// One page of `table` rows matching `where`, in `order`: one row more than the page is
// asked for, to know whether another page follows. `read` turns a row into an item,
// `fill` completes the page's items inside the same read.
template <typename T, typename ReadFn, typename FillFn>
Result<Page<T>> ReadSearchPage(store::Database& db, const char* columns, const char* table,
                               const tracking::SqlFragment& where,
                               const tracking::SqlFragment& order, int64_t max_results,
                               int64_t offset, ReadFn read, FillFn fill) {
  std::vector<Value> params = where.params;
  params.insert(params.end(), order.params.begin(), order.params.end());
  params.emplace_back(max_results + 1);
  params.emplace_back(offset);
  Page<T> page;
  Status s = db.Read([&](Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(Rows rows,
                        tx.Query(std::string("SELECT ") + columns + " FROM " + table + " WHERE " +
                                     where.sql + " ORDER BY " + order.sql + " LIMIT ? OFFSET ?",
                                 params));
    size_t n = std::min(rows.size(), static_cast<size_t>(max_results));
    if (rows.size() > n) page.next_page_token = EncodePageToken(offset + max_results);
    page.items.reserve(n);
    for (size_t i = 0; i < n; ++i) page.items.push_back(read(rows[i]));
    return fill(tx, page.items);
  });
  if (!s.ok()) return s;
  return page;
}

}  // namespace

Result<Page<RegisteredModel>> RegistryService::SearchRegisteredModels(
    const RegistrySearchRequest& request) {
  TY_ASSIGN_OR_RETURN(
      int64_t max_results,
      PageSize(request.max_results, limits_.default_models_per_page, limits_.max_models_per_page));
  TY_ASSIGN_OR_RETURN(tracking::SqlFragment where, CompileRegistryFilter(request.filter, false));
  TY_ASSIGN_OR_RETURN(tracking::SqlFragment order, CompileRegistryOrder(request.order_by, false));
  TY_ASSIGN_OR_RETURN(int64_t offset, DecodePageToken(request.page_token));
  return ReadSearchPage<RegisteredModel>(
      db_, kModelColumns, "registered_models", where, order, max_results, offset, ReadModel,
      [this](Transaction& tx, std::vector<RegisteredModel>& items) {
        return FillModels(tx, items);
      });
}

Result<RegisteredModel> RegistryService::UpdateRegisteredModel(
    const identity::Principal& who, const std::string& name,
    const std::optional<std::string>& description,
    const std::optional<std::string>& deployment_job_id) {
  TY_RETURN_IF_ERROR(AuthorizeEdit(who, name));
  TY_RETURN_IF_ERROR(ValidateName("name", name));
  if (description) TY_RETURN_IF_ERROR(ValidateDescription(*description));
  RegisteredModel out;
  Status s = db_.Write([&](Transaction& tx) -> Status {
    int64_t now = clock_.NowMillis();
    TY_ASSIGN_OR_RETURN(
        int64_t n, tx.Exec("UPDATE registered_models SET last_updated_timestamp = ? WHERE name = ?",
                           {now, name}));
    if (n == 0) return ModelNotFound(name);
    if (description) {
      TY_RETURN_IF_ERROR(Exec(tx, "UPDATE registered_models SET description = ? WHERE name = ?",
                              {NullIfEmpty(*description), name}));
    }
    if (deployment_job_id) {
      TY_RETURN_IF_ERROR(Exec(tx,
                              "UPDATE registered_models SET deployment_job_id = ? WHERE name = ?",
                              {NullIfEmpty(*deployment_job_id), name}));
    }
    TY_ASSIGN_OR_RETURN(out, LoadModel(tx, name));
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return out;
}

Result<RegisteredModel> RegistryService::RenameRegisteredModel(const identity::Principal& who,
                                                               const std::string& name,
                                                               const std::string& requested_name) {
  TY_RETURN_IF_ERROR(AuthorizeEdit(who, name));
  TY_RETURN_IF_ERROR(ValidateName("name", name));
  TY_RETURN_IF_ERROR(ValidateName("new_name", requested_name));
  const bool claimed_old = Claimed(name).has_value();
  const std::optional<std::string> claimed_new = Claimed(requested_name);
  const std::string new_name = claimed_new.value_or(requested_name);
  const bool in_namespace = (claimed_old || claimed_new) && new_name != name;
  if (in_namespace) TY_RETURN_IF_ERROR(ns_->Rename(who, name, new_name));
  RegisteredModel out;
  Status s = db_.Write([&](Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(Rows rows,
                        tx.Query("SELECT 1 FROM registered_models WHERE name = ?", {name}));
    if (rows.empty()) return ModelNotFound(name);
    int64_t now = clock_.NowMillis();
    if (new_name != name) {
      TY_ASSIGN_OR_RETURN(Rows clash,
                          tx.Query("SELECT 1 FROM registered_models WHERE name = ?", {new_name}));
      if (!clash.empty()) {
        return Status::AlreadyExists("registered model " + Quoted(new_name) + " already exists");
      }
      TY_RETURN_IF_ERROR(Exec(tx,
                              "UPDATE registered_models SET name = ?, last_updated_timestamp = ? "
                              "WHERE name = ?",
                              {new_name, now, name}));
      TY_RETURN_IF_ERROR(Exec(tx,
                              "UPDATE model_versions SET name = ?, last_updated_timestamp = ? "
                              "WHERE name = ?",
                              {new_name, now, name}));
      for (const char* table :
           {"registered_model_tags", "model_version_tags", "registered_model_aliases"}) {
        TY_RETURN_IF_ERROR(Exec(tx, std::string("UPDATE ") + table + " SET name = ? WHERE name = ?",
                                {new_name, name}));
      }
    }
    TY_ASSIGN_OR_RETURN(out, LoadModel(tx, new_name));
    return Status::Ok();
  });
  if (!s.ok()) {
    if (in_namespace) (void)ns_->Rename(identity::Principal::System(), new_name, name);
    return s;
  }
  ForgetOwner(name);
  ForgetOwner(new_name);
  return out;
}

Status RegistryService::DeleteRegisteredModel(const identity::Principal& who,
                                              const std::string& name) {
  TY_RETURN_IF_ERROR(AuthorizeEdit(who, name));
  TY_RETURN_IF_ERROR(ValidateName("name", name));
  Status s = db_.Write([&](Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(int64_t n, tx.Exec("DELETE FROM registered_models WHERE name = ?", {name}));
    if (n == 0) return ModelNotFound(name);
    for (const char* table : {"registered_model_tags", "model_versions", "model_version_tags",
                              "registered_model_aliases"}) {
      TY_RETURN_IF_ERROR(Exec(tx, std::string("DELETE FROM ") + table + " WHERE name = ?", {name}));
    }
    return Status::Ok();
  });
  ForgetOwner(name);
  if (s.ok() && Claimed(name)) return ns_->Remove(name);
  return s;
}

Status RegistryService::SetRegisteredModelTag(const identity::Principal& who,
                                              const std::string& name, const KeyValue& tag) {
  TY_RETURN_IF_ERROR(AuthorizeEdit(who, name));
  TY_RETURN_IF_ERROR(ValidateName("name", name));
  TY_RETURN_IF_ERROR(ValidateTag("registered model", tag));
  return db_.Write([&](Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(Rows rows,
                        tx.Query("SELECT 1 FROM registered_models WHERE name = ?", {name}));
    if (rows.empty()) return ModelNotFound(name);
    return Exec(tx,
                "INSERT INTO registered_model_tags (name, key, value) VALUES (?, ?, ?) ON "
                "CONFLICT (name, key) DO UPDATE SET value = excluded.value",
                {name, tag.key, tag.value});
  });
}

Status RegistryService::DeleteRegisteredModelTag(const identity::Principal& who,
                                                 const std::string& name, const std::string& key) {
  TY_RETURN_IF_ERROR(AuthorizeEdit(who, name));
  TY_RETURN_IF_ERROR(ValidateName("name", name));
  if (key.empty()) return Status::InvalidArgument("missing required field 'key'");
  return db_.Write([&](Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(Rows rows,
                        tx.Query("SELECT 1 FROM registered_models WHERE name = ?", {name}));
    if (rows.empty()) return ModelNotFound(name);
    return Exec(tx, "DELETE FROM registered_model_tags WHERE name = ? AND key = ?", {name, key});
  });
}

Status RegistryService::SetRegisteredModelAlias(const identity::Principal& who,
                                                const std::string& name, const std::string& alias,
                                                int64_t version) {
  TY_RETURN_IF_ERROR(AuthorizeEdit(who, name));
  TY_RETURN_IF_ERROR(ValidateName("name", name));
  TY_RETURN_IF_ERROR(ValidateAlias(alias));
  return db_.Write([&](Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(
        Rows rows,
        tx.Query("SELECT 1 FROM model_versions WHERE name = ? AND version = ?", {name, version}));
    if (rows.empty()) {
      TY_ASSIGN_OR_RETURN(Rows model,
                          tx.Query("SELECT 1 FROM registered_models WHERE name = ?", {name}));
      if (model.empty()) return ModelNotFound(name);
      return VersionNotFound(name, version);
    }
    return Exec(tx,
                "INSERT INTO registered_model_aliases (name, alias, version) VALUES (?, ?, ?) ON "
                "CONFLICT (name, alias) DO UPDATE SET version = excluded.version",
                {name, alias, version});
  });
}

Status RegistryService::DeleteRegisteredModelAlias(const identity::Principal& who,
                                                   const std::string& name,
                                                   const std::string& alias) {
  TY_RETURN_IF_ERROR(AuthorizeEdit(who, name));
  TY_RETURN_IF_ERROR(ValidateName("name", name));
  if (alias.empty()) {
    return Status::InvalidArgument("missing required field 'alias': an alias must not be empty");
  }
  return db_.Write([&](Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(Rows rows,
                        tx.Query("SELECT 1 FROM registered_models WHERE name = ?", {name}));
    if (rows.empty()) return ModelNotFound(name);
    return Exec(tx, "DELETE FROM registered_model_aliases WHERE name = ? AND alias = ?",
                {name, alias});
  });
}

Result<ModelVersion> RegistryService::GetModelVersionByAlias(const std::string& name,
                                                             const std::string& alias) {
  TY_RETURN_IF_ERROR(ValidateName("name", name));
  if (alias.empty()) {
    return Status::InvalidArgument("missing required field 'alias': an alias must not be empty");
  }
  ModelVersion out;
  Status s = db_.Read([&](Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(Rows rows, tx.Query("SELECT version FROM registered_model_aliases WHERE "
                                            "name = ? AND alias = ?",
                                            {name, alias}));
    if (rows.empty()) {
      TY_ASSIGN_OR_RETURN(Rows model,
                          tx.Query("SELECT 1 FROM registered_models WHERE name = ?", {name}));
      if (model.empty()) return ModelNotFound(name);
      return Status::NotFound("registered model " + Quoted(name) + " has no alias " +
                              Quoted(alias));
    }
    TY_ASSIGN_OR_RETURN(out, LoadVersion(tx, name, rows[0].Int(0)));
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return out;
}

Result<std::vector<ModelVersion>> RegistryService::GetLatestVersions(
    const std::string& name, const std::vector<std::string>& stages) {
  TY_RETURN_IF_ERROR(ValidateName("name", name));
  std::set<Stage> wanted;
  for (const std::string& stage : stages) {
    TY_ASSIGN_OR_RETURN(Stage s, ParseStage(stage, "stages[]"));
    wanted.insert(s);
  }
  TY_ASSIGN_OR_RETURN(RegisteredModel model, GetRegisteredModel(name));
  std::vector<ModelVersion> out;
  for (ModelVersion& v : model.latest_versions) {
    if (wanted.empty() || wanted.count(v.current_stage)) out.push_back(std::move(v));
  }
  return out;
}

Result<std::string> RegistryService::RegisteredModelOwner(const std::string& name) {
  uint64_t generation;
  {
    MutexLock lock(cache_mu_);
    auto it = owner_.find(name);
    if (it != owner_.end()) return it->second;
    generation = owner_generation_;
  }
  TY_RETURN_IF_ERROR(ValidateName("name", name));
  std::string owner;
  Status s = db_.Read([&](Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(Rows rows,
                        tx.Query("SELECT user_id FROM registered_models WHERE name = ?", {name}));
    if (rows.empty()) return ModelNotFound(name);
    owner = rows[0].Text(0);
    return Status::Ok();
  });
  if (!s.ok()) return s;
  MutexLock lock(cache_mu_);
  // A model deleted or renamed while we read must not leave its old owner behind.
  if (generation == owner_generation_) {
    if (owner_.size() > kMaxCachedOwners) owner_.clear();
    owner_[name] = owner;
  }
  return owner;
}

void RegistryService::ForgetOwner(const std::string& name) {
  MutexLock lock(cache_mu_);
  owner_.erase(name);
  ++owner_generation_;
}

// ---------------------------------------------------------------- model versions

// "name/3", "name@champion", "name/latest" or "name/Production" (MLflow's models:/ forms that
// name a registry version) → that version's download location.
Result<std::string> RegistryService::ResolveRegistryUri(const std::string& uri) {
  size_t at = uri.rfind('@');
  size_t slash = uri.rfind('/');
  if (at != std::string::npos && (slash == std::string::npos || slash < at)) {
    TY_ASSIGN_OR_RETURN(ModelVersion v,
                        GetModelVersionByAlias(uri.substr(0, at), uri.substr(at + 1)));
    return v.storage_location;
  }
  std::string name = uri.substr(0, slash);
  std::string suffix = uri.substr(slash + 1);
  if (auto version = ParseInt64(suffix)) {
    TY_ASSIGN_OR_RETURN(ModelVersion v, GetModelVersion(name, *version));
    return v.storage_location;
  }
  std::vector<std::string> stages;
  if (ToLower(suffix) != "latest") stages.push_back(suffix);
  TY_ASSIGN_OR_RETURN(std::vector<ModelVersion> latest, GetLatestVersions(name, stages));
  if (latest.empty()) {
    return Status::NotFound("registered model " + Quoted(name) + " has no version in stage " +
                            Quoted(suffix));
  }
  return latest.back().storage_location;
}

// A model version's source is read later (serving, downloads) with the server's rights, so, as
// MLflow's server does, only the server's own stores are accepted: runs:/, models:/, the
// artifact store (mlflow-artifacts:) and S3 URIs; never a local path (file:, absolute or
// relative) and never a '..' component, even percent-encoded.
namespace {
Status ValidateSourceUri(const std::string& source) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("source " + Quoted(Abbreviate(source, 200)) + " " + why +
                                   "; use runs:/<run_id>/<path>, models:/<model>, "
                                   "mlflow-artifacts:/<path> or s3://<bucket>/<path>");
  };
  for (char c : source) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) return bad("contains a control character");
  }
  std::string lower = ToLower(source);
  bool allowed = StartsWith(lower, "runs:/") || StartsWith(lower, "models:/") ||
                 StartsWith(lower, "mlflow-artifacts:") || StartsWith(lower, "s3://");
  if (!allowed) {
    return bad(StartsWith(lower, "file:") || StartsWith(source, "/") ||
                       source.find("://") == std::string::npos
                   ? "is a local path, which the server does not accept"
                   : "is not in a store the server accepts");
  }
  std::string decoded = UrlDecode(source, false).value_or(source);
  for (const std::string& text : {source, decoded}) {
    size_t scheme = text.find(':');
    std::string path = scheme == std::string::npos ? text : text.substr(scheme + 1);
    std::replace(path.begin(), path.end(), '\\', '/');
    for (const std::string& seg : SplitString(path, '/')) {
      if (seg == "..") return bad("must not contain '..' components");
    }
  }
  return Status::Ok();
}
}  // namespace

Result<RegistryService::ResolvedSource> RegistryService::ResolveSource(
    const CreateModelVersionRequest& request) {
  ResolvedSource out{request.source, request.source, request.run_id, request.model_id};
  auto logged_model = [&](const std::string& id,
                          const std::string& what) -> Result<tracking::LoggedModel> {
    auto m = tracking_.GetLoggedModel(id);
    if (!m.ok() && m.status().IsNotFound()) {
      return Status::NotFound(what + ": logged model " + Quoted(id) + " does not exist");
    }
    return m;
  };
  bool run_checked = false;
  if (!out.model_id.empty()) {
    TY_ASSIGN_OR_RETURN(tracking::LoggedModel m, logged_model(out.model_id, "model_id"));
    if (out.source.empty()) {
      out.source = "models:/" + m.model_id;
      out.storage_location = m.artifact_uri;
    }
  }
  if (out.source.empty()) {
    return Status::InvalidArgument("missing required field 'source' (or give 'model_id')");
  }
  TY_RETURN_IF_ERROR(ValidateSourceUri(out.source));
  if (StartsWith(out.source, "models:/")) {
    std::string rest = out.source.substr(8);
    while (StartsWith(rest, "/")) rest.erase(0, 1);
    if (rest.empty()) {
      return Status::InvalidArgument("source " + Quoted(out.source) +
                                     " must name a model: models:/<model_id>, "
                                     "models:/<name>/<version> or models:/<name>@<alias>");
    }
    if (rest.find('/') == std::string::npos && rest.find('@') == std::string::npos) {
      TY_ASSIGN_OR_RETURN(tracking::LoggedModel m,
                          logged_model(rest, "source " + Quoted(out.source)));
      out.storage_location = m.artifact_uri;
      if (out.model_id.empty()) out.model_id = m.model_id;
      if (out.run_id.empty()) {
        out.run_id = m.source_run_id;
        run_checked = true;  // the logged model's own run; not the caller's claim
      }
    } else {
      auto location = ResolveRegistryUri(rest);
      if (!location.ok()) return location.status().WithContext("source " + Quoted(out.source));
      out.storage_location = *location;
    }
  } else if (StartsWith(out.source, "runs:/")) {
    std::string rest = out.source.substr(6);
    while (StartsWith(rest, "/")) rest.erase(0, 1);
    size_t slash = rest.find('/');
    std::string run_id = rest.substr(0, slash);
    std::string path = slash == std::string::npos ? "" : rest.substr(slash + 1);
    while (EndsWith(path, "/")) path.pop_back();
    if (run_id.empty()) {
      return Status::InvalidArgument("source " + Quoted(out.source) +
                                     " must name a run: runs:/<run_id>/<path>");
    }
    auto run = tracking_.GetRun(run_id);
    if (!run.ok()) {
      if (run.status().IsNotFound()) {
        return Status::NotFound("source " + Quoted(out.source) + ": run " + Quoted(run_id) +
                                " does not exist");
      }
      return run.status();
    }
    out.storage_location = run->info.artifact_uri + (path.empty() ? "" : "/" + path);
    if (out.run_id.empty()) out.run_id = run_id;
    run_checked = run_checked || out.run_id == run_id;
  }
  if (!out.run_id.empty() && !run_checked) {
    auto experiment = tracking_.RunExperiment(out.run_id);
    if (!experiment.ok()) {
      if (experiment.status().IsNotFound()) {
        return Status::NotFound("run_id: run " + Quoted(out.run_id) + " does not exist");
      }
      return experiment.status();
    }
  }
  return out;
}

Result<RegistryService::ResolvedSource> RegistryService::ResolveUploadedSource(
    const CreateModelVersionRequest& request) {
  if (request.source.empty()) return Status::InvalidArgument("missing required field 'source'");
  for (char c : request.source) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      return Status::InvalidArgument("source " + Quoted(request.source) +
                                     " contains a control character");
    }
  }
  const std::string& root = request.storage_root;
  if (!StartsWith(root, "file:///") && !StartsWith(root, "s3://")) {
    return Status::Internal("storage_root must be a file:/// or s3:// URI (got " + Quoted(root) +
                            ")");
  }
  ResolvedSource out{request.source, "", request.run_id, request.model_id};
  // The run and logged model behind a source in this server's stores, for lineage; any
  // other source is a label (the files are the ones the client uploads).
  if (Status s = ValidateSourceUri(request.source); s.ok()) {
    CreateModelVersionRequest resolvable = request;
    resolvable.storage_root.clear();
    auto resolved = ResolveSource(resolvable);
    if (!resolved.ok() && !resolved.status().IsNotFound()) return resolved.status();
    if (resolved.ok()) {
      out.run_id = resolved->run_id;
      out.model_id = resolved->model_id;
    } else if (!request.run_id.empty() || !request.model_id.empty()) {
      return resolved.status();  // a run or model named explicitly must exist
    }
  } else if (!request.run_id.empty()) {
    auto experiment = tracking_.RunExperiment(request.run_id);
    if (!experiment.ok()) {
      if (experiment.status().IsNotFound()) {
        return Status::NotFound("run_id: run " + Quoted(request.run_id) + " does not exist");
      }
      return experiment.status();
    }
  }
  return out;
}

Result<ModelVersion> RegistryService::CreateModelVersion(const identity::Principal& who,
                                                         const CreateModelVersionRequest& request) {
  TY_RETURN_IF_ERROR(AuthorizeEdit(who, request.name));
  const std::string& owner = who.user;
  TY_RETURN_IF_ERROR(ValidateName("name", request.name));
  for (const KeyValue& t : request.tags) TY_RETURN_IF_ERROR(ValidateTag("model version", t));
  TY_RETURN_IF_ERROR(ValidateDescription(request.description));
  for (auto [field, value] :
       {std::pair{"source", &request.source}, std::pair{"run_id", &request.run_id},
        std::pair{"run_link", &request.run_link}, std::pair{"model_id", &request.model_id}}) {
    if (value->size() > kMaxUriLength) {
      return Status::InvalidArgument(std::string(field) + " is longer than " +
                                     std::to_string(kMaxUriLength) + " characters");
    }
  }
  // Outside the write transaction: tracking and registry reads open their own.
  const bool uploaded = !request.storage_root.empty();
  TY_ASSIGN_OR_RETURN(ResolvedSource source,
                      uploaded ? ResolveUploadedSource(request) : ResolveSource(request));
  ModelVersion out;
  Status s = db_.Write([&](Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(Rows rows, tx.Query("SELECT last_version FROM registered_models WHERE "
                                            "name = ?",
                                            {request.name}));
    if (rows.empty()) return ModelNotFound(request.name);
    int64_t version = rows[0].Int(0) + 1;
    int64_t now = clock_.NowMillis();
    TY_RETURN_IF_ERROR(Exec(tx,
                            "UPDATE registered_models SET last_version = ?, "
                            "last_updated_timestamp = ? WHERE name = ?",
                            {version, now, request.name}));
    if (uploaded) {
      std::string root = request.storage_root;
      while (EndsWith(root, "/")) root.pop_back();
      source.storage_location = root + "/versions/" + std::to_string(version);
    }
    const ModelVersionStatus status =
        uploaded ? ModelVersionStatus::kPendingRegistration : ModelVersionStatus::kReady;
    TY_RETURN_IF_ERROR(Exec(
        tx,
        "INSERT INTO model_versions (name, version, creation_timestamp, last_updated_timestamp, "
        "user_id, current_stage, description, source, storage_location, run_id, run_link, "
        "status, status_message, model_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, ?)",
        {request.name, version, now, now, NullIfEmpty(owner), std::string(StageName(Stage::kNone)),
         NullIfEmpty(request.description), source.source, source.storage_location,
         NullIfEmpty(source.run_id), NullIfEmpty(request.run_link),
         std::string(ModelVersionStatusName(status)), NullIfEmpty(source.model_id)}));
    for (const KeyValue& t : request.tags) {
      TY_RETURN_IF_ERROR(Exec(tx,
                              "INSERT INTO model_version_tags (name, version, key, value) VALUES "
                              "(?, ?, ?, ?) ON CONFLICT (name, version, key) DO UPDATE SET value "
                              "= excluded.value",
                              {request.name, version, t.key, t.value}));
    }
    TY_ASSIGN_OR_RETURN(out, LoadVersion(tx, request.name, version));
    return Status::Ok();
  });
  if (!s.ok()) return s;
  if (version_listener_) version_listener_(who, out);
  return out;
}

Result<ModelVersion> RegistryService::GetModelVersion(const std::string& name, int64_t version) {
  TY_RETURN_IF_ERROR(ValidateName("name", name));
  ModelVersion out;
  Status s = db_.Read([&](Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(out, LoadVersion(tx, name, version));
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return out;
}

Result<ModelVersion> RegistryService::FinalizeModelVersion(const identity::Principal& who,
                                                           const std::string& name,
                                                           int64_t version) {
  TY_RETURN_IF_ERROR(AuthorizeEdit(who, name));
  ModelVersion out;
  Status s = db_.Write([&](Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(out, LoadVersion(tx, name, version));
    if (out.status != ModelVersionStatus::kPendingRegistration) {
      return Status::FailedPrecondition(
          "version " + std::to_string(version) + " of registered model " + Quoted(name) + " is " +
          std::string(ModelVersionStatusName(out.status)) +
          ", not PENDING_REGISTRATION: only a version being registered can be finalized");
    }
    int64_t now = clock_.NowMillis();
    TY_RETURN_IF_ERROR(Exec(
        tx,
        "UPDATE model_versions SET status = ?, last_updated_timestamp = ? "
        "WHERE name = ? AND version = ?",
        {std::string(ModelVersionStatusName(ModelVersionStatus::kReady)), now, name, version}));
    TY_ASSIGN_OR_RETURN(out, LoadVersion(tx, name, version));
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return out;
}

Result<Page<ModelVersion>> RegistryService::SearchModelVersions(
    const RegistrySearchRequest& request) {
  TY_ASSIGN_OR_RETURN(int64_t max_results,
                      PageSize(request.max_results, limits_.default_versions_per_page,
                               limits_.max_versions_per_page));
  TY_ASSIGN_OR_RETURN(tracking::SqlFragment where, CompileRegistryFilter(request.filter, true));
  TY_ASSIGN_OR_RETURN(tracking::SqlFragment order, CompileRegistryOrder(request.order_by, true));
  TY_ASSIGN_OR_RETURN(int64_t offset, DecodePageToken(request.page_token));
  return ReadSearchPage<ModelVersion>(db_, kVersionColumns, "model_versions", where, order,
                                      max_results, offset, ReadVersion, FillVersions);
}

Result<ModelVersion> RegistryService::UpdateModelVersion(
    const identity::Principal& who, const std::string& name, int64_t version,
    const std::optional<std::string>& description) {
  TY_RETURN_IF_ERROR(AuthorizeEdit(who, name));
  TY_RETURN_IF_ERROR(ValidateName("name", name));
  if (description) TY_RETURN_IF_ERROR(ValidateDescription(*description));
  ModelVersion out;
  Status s = db_.Write([&](Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(out, LoadVersion(tx, name, version));
    int64_t now = clock_.NowMillis();
    TY_RETURN_IF_ERROR(Exec(tx,
                            "UPDATE model_versions SET last_updated_timestamp = ? WHERE name = ? "
                            "AND version = ?",
                            {now, name, version}));
    if (description) {
      TY_RETURN_IF_ERROR(Exec(tx,
                              "UPDATE model_versions SET description = ? WHERE name = ? AND "
                              "version = ?",
                              {NullIfEmpty(*description), name, version}));
    }
    TY_ASSIGN_OR_RETURN(out, LoadVersion(tx, name, version));
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return out;
}

Status RegistryService::DeleteModelVersion(const identity::Principal& who, const std::string& name,
                                           int64_t version) {
  TY_RETURN_IF_ERROR(AuthorizeEdit(who, name));
  TY_RETURN_IF_ERROR(ValidateName("name", name));
  return db_.Write([&](Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(int64_t n, tx.Exec("DELETE FROM model_versions WHERE name = ? AND "
                                           "version = ?",
                                           {name, version}));
    if (n == 0) {
      TY_ASSIGN_OR_RETURN(Rows model,
                          tx.Query("SELECT 1 FROM registered_models WHERE name = ?", {name}));
      if (model.empty()) return ModelNotFound(name);
      return VersionNotFound(name, version);
    }
    TY_RETURN_IF_ERROR(
        Exec(tx, "DELETE FROM model_version_tags WHERE name = ? AND version = ?", {name, version}));
    TY_RETURN_IF_ERROR(Exec(tx,
                            "DELETE FROM registered_model_aliases WHERE name = ? AND version = ?",
                            {name, version}));
    return Exec(tx, "UPDATE registered_models SET last_updated_timestamp = ? WHERE name = ?",
                {clock_.NowMillis(), name});
  });
}

Result<std::string> RegistryService::GetModelVersionDownloadUri(const std::string& name,
                                                                int64_t version) {
  TY_ASSIGN_OR_RETURN(ModelVersion v, GetModelVersion(name, version));
  return v.storage_location.empty() ? v.source : v.storage_location;
}

Result<ModelVersion> RegistryService::TransitionModelVersionStage(const identity::Principal& who,
                                                                  const std::string& name,
                                                                  int64_t version,
                                                                  const std::string& stage,
                                                                  bool archive_existing_versions) {
  TY_RETURN_IF_ERROR(AuthorizeEdit(who, name));
  TY_RETURN_IF_ERROR(ValidateName("name", name));
  TY_ASSIGN_OR_RETURN(Stage target, ParseStage(stage, "stage"));
  if (archive_existing_versions && target != Stage::kStaging && target != Stage::kProduction) {
    return Status::InvalidArgument(
        "archive_existing_versions may only be true when the stage is Staging or Production "
        "(got stage '" +
        std::string(StageName(target)) + "')");
  }
  ModelVersion out;
  Status s = db_.Write([&](Transaction& tx) -> Status {
    TY_RETURN_IF_ERROR(LoadVersion(tx, name, version).status());
    int64_t now = clock_.NowMillis();
    std::string target_name(StageName(target));
    if (archive_existing_versions) {
      TY_RETURN_IF_ERROR(
          Exec(tx,
               "UPDATE model_versions SET current_stage = ?, "
               "last_updated_timestamp = ? WHERE name = ? AND version != ? AND "
               "current_stage = ?",
               {std::string(StageName(Stage::kArchived)), now, name, version, target_name}));
    }
    TY_RETURN_IF_ERROR(Exec(tx,
                            "UPDATE model_versions SET current_stage = ?, last_updated_timestamp "
                            "= ? WHERE name = ? AND version = ?",
                            {target_name, now, name, version}));
    TY_RETURN_IF_ERROR(Exec(
        tx, "UPDATE registered_models SET last_updated_timestamp = ? WHERE name = ?", {now, name}));
    TY_ASSIGN_OR_RETURN(out, LoadVersion(tx, name, version));
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return out;
}

Status RegistryService::SetModelVersionTag(const identity::Principal& who, const std::string& name,
                                           int64_t version, const KeyValue& tag) {
  TY_RETURN_IF_ERROR(AuthorizeEdit(who, name));
  TY_RETURN_IF_ERROR(ValidateName("name", name));
  TY_RETURN_IF_ERROR(ValidateTag("model version", tag));
  return db_.Write([&](Transaction& tx) -> Status {
    TY_RETURN_IF_ERROR(LoadVersion(tx, name, version).status());
    return Exec(tx,
                "INSERT INTO model_version_tags (name, version, key, value) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (name, version, key) DO UPDATE SET value = excluded.value",
                {name, version, tag.key, tag.value});
  });
}

Status RegistryService::DeleteModelVersionTag(const identity::Principal& who,
                                              const std::string& name, int64_t version,
                                              const std::string& key) {
  TY_RETURN_IF_ERROR(AuthorizeEdit(who, name));
  TY_RETURN_IF_ERROR(ValidateName("name", name));
  if (key.empty()) return Status::InvalidArgument("missing required field 'key'");
  return db_.Write([&](Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(
        Rows rows,
        tx.Query("SELECT 1 FROM model_versions WHERE name = ? AND version = ?", {name, version}));
    if (rows.empty()) {
      TY_ASSIGN_OR_RETURN(Rows model,
                          tx.Query("SELECT 1 FROM registered_models WHERE name = ?", {name}));
      if (model.empty()) return ModelNotFound(name);
      return VersionNotFound(name, version);
    }
    return Exec(tx, "DELETE FROM model_version_tags WHERE name = ? AND version = ? AND key = ?",
                {name, version, key});
  });
}

}  // namespace trainyard::registry
