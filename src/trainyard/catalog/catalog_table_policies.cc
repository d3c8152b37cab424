// CatalogService's table policies: row filters and column masks stored in
// catalog_table_policies, attached to the tables it returns, set and cleared by a table's
// owner or MANAGE holder (table_policy.h has the rules; TableService enforces them).
#include <algorithm>
#include <map>

#include "trainyard/catalog/catalog_service.h"
#include "trainyard/catalog/catalog_service_impl.h"
#include "trainyard/catalog/table_policy.h"
#include "trainyard/common/json.h"
#include "trainyard/common/strings.h"

namespace trainyard::catalog {
namespace {

using identity::Principal;

constexpr const char* kRowFilterKind = "row_filter";

std::string ExceptToJson(const std::vector<std::string>& except) {
  json::array a;
  for (const auto& name : except) a.emplace_back(name);
  return json::serialize(a);
}

std::vector<std::string> ExceptFromJson(std::string_view text) {
  std::vector<std::string> out;
  Result<json::value> v = ParseJsonExact(text);
  if (!v.ok() || !v->is_array()) return out;
  for (const auto& item : v->as_array()) {
    if (item.is_string()) out.emplace_back(item.as_string());
  }
  return out;
}

std::string MaskText(const ColumnMaskInfo& mask) {
  std::string out(tables::MaskKindName(mask.kind));
  if (!mask.except.empty()) {
    out += " except ";
    for (size_t i = 0; i < mask.except.size(); ++i) out += (i ? ", " : "") + mask.except[i];
  }
  return out;
}

}  // namespace

Result<tables::PredicateReader> CatalogService::Impl::ReaderOf(const Principal& who) {
  TY_ASSIGN_OR_RETURN(Subject subject, SubjectOf(who));
  tables::PredicateReader reader{who.user, {}};
  if (subject.groups) reader.groups = *subject.groups;
  return reader;
}

Status CatalogService::Impl::AttachPolicies(std::vector<TableInfo>& tables) {
  std::vector<std::string> ids;
  for (const auto& t : tables) ids.push_back(t.id);
  TY_ASSIGN_OR_RETURN(std::vector<PolicyRow> rows, store.ListPolicies(ids));
  ApplyPolicies(rows, tables);
  return Status::Ok();
}

void CatalogService::Impl::ApplyPolicies(const std::vector<PolicyRow>& rows,
                                         std::vector<TableInfo>& tables) {
  std::map<std::string, TableInfo*> by_id;
  for (auto& t : tables) by_id[t.id] = &t;
  for (const PolicyRow& row : rows) {
    auto it = by_id.find(row.table_id);
    if (it == by_id.end()) continue;
    TableInfo& t = *it->second;
    if (row.column.empty()) {
      RowFilterInfo filter{row.spec, {}, row.updated_at, row.updated_by};
      if (auto p = tables::Predicate::Parse(row.spec); p.ok()) filter.columns = p->Columns();
      t.row_filter = std::move(filter);
      continue;
    }
    auto column = std::find_if(t.columns.begin(), t.columns.end(),
                               [&](const ColumnInfo& c) { return c.name == row.column; });
    if (column == t.columns.end()) continue;
    // A kind this version does not know hides every value rather than none.
    Result<tables::MaskKind> kind = tables::ParseMaskKind(row.kind);
    column->mask = ColumnMaskInfo{kind.ok() ? *kind : tables::MaskKind::kNull,
                                  ExceptFromJson(row.spec), row.updated_at, row.updated_by};
  }
}

Result<std::shared_ptr<const TableInfo>> CatalogService::Impl::TableById(std::string_view id) {
  const std::string key(id);
  if (auto cached = table_cache.Get(key)) return cached;
  // Taken before the store read: a write that lands meanwhile keeps this load out.
  const uint64_t generation = table_cache.Generation();
  TY_ASSIGN_OR_RETURN(auto found, store.GetWithPolicies(key));
  if (!found || found->first.type != SecurableType::kTable) {
    return Status::NotFound("table with id '" + Abbreviate(id) + "' does not exist");
  }
  std::vector<TableInfo> one{ToTable(found->first)};
  ApplyPolicies(found->second, one);
  auto table = std::make_shared<const TableInfo>(std::move(one[0]));
  table_cache.Put(generation, table);
  return table;
}

namespace {

tables::PredicateReader ReaderFrom(const Subject& subject) {
  tables::PredicateReader reader{subject.user, {}};
  if (subject.groups) reader.groups = *subject.groups;
  return reader;
}

// Where the table's policies restrict `reader`, its location is no way around them.
void HideLocationIfRestricted(TableInfo& table, const tables::PredicateReader& reader) {
  Result<ReadPolicy> policy = PolicyFor(table, reader);
  if (!policy.ok() || policy->restricted()) table.storage_location.clear();
}

}  // namespace

Status CatalogService::Impl::PresentTables(const Principal& who, std::vector<TableInfo>& tables) {
  TY_RETURN_IF_ERROR(AttachPolicies(tables));
  std::optional<tables::PredicateReader> reader;
  for (TableInfo& t : tables) {
    if (!HasPolicies(t)) continue;
    if (!reader) {
      TY_ASSIGN_OR_RETURN(reader, ReaderOf(who));
    }
    HideLocationIfRestricted(t, *reader);
  }
  return Status::Ok();
}

Result<TableInfo> CatalogService::Impl::PresentTable(const Principal& who, TableInfo table) {
  std::vector<TableInfo> one{std::move(table)};
  TY_RETURN_IF_ERROR(PresentTables(who, one));
  return std::move(one[0]);
}

Result<TableInfo> CatalogService::Impl::ReadableTable(const Principal& who, const Subject& subject,
                                                      const TableInfo& table) {
  TY_RETURN_IF_ERROR(CheckRead(who, subject, SecurableType::kTable, table.id));
  TableInfo out = table;
  if (HasPolicies(out)) HideLocationIfRestricted(out, ReaderFrom(subject));
  return out;
}

Status CatalogService::Impl::CheckPolicyChange(const Principal& who, const TableInfo& table,
                                               const std::string& change) {
  TY_ASSIGN_OR_RETURN(Subject subject, SubjectOf(who));
  Decision d = index.Decide(subject, Privilege::kManage, table.id);
  Decision audited = d;
  audited.reason += (d.allowed ? "; " : "; refused: ") + change;
  AuditDecision(who, table.id, PrivilegeName(Privilege::kManage), audited);
  if (!d.allowed) return Status::PermissionDenied(d.reason);
  return Status::Ok();
}

Result<TableInfo> CatalogService::LoadTable(std::string_view full_name) {
  TY_ASSIGN_OR_RETURN(std::string id,
                      impl_->Resolve(SecurableType::kTable, full_name, "full_name"));
  Result<std::shared_ptr<const TableInfo>> table = impl_->TableById(id);
  if (table.status().IsNotFound()) {
    return Status::NotFound("table '" + std::string(full_name) + "' does not exist");
  }
  if (!table.ok()) return table.status();
  return **table;
}

Result<tables::PredicateReader> CatalogService::ReaderOf(const Principal& who) {
  return impl_->ReaderOf(who);
}

Result<TableInfo> CatalogService::SetRowFilter(const Principal& who, std::string_view full_name,
                                               std::string_view predicate) {
  TY_ASSIGN_OR_RETURN(TableInfo table, LoadTable(full_name));
  TY_RETURN_IF_ERROR(
      impl_->CheckPolicyChange(who, table, "set row filter: " + Abbreviate(predicate, 400)));
  TY_RETURN_IF_ERROR(ValidateRowFilter(table.columns, predicate).status());
  Status put = impl_->store.PutPolicy(PolicyRow{
      table.id, "", kRowFilterKind, std::string(predicate), impl_->clock.NowMillis(), who.user});
  impl_->table_cache.Invalidate({table.id});
  TY_RETURN_IF_ERROR(put);
  TY_ASSIGN_OR_RETURN(table, LoadTable(table.full_name));
  return impl_->PresentTable(who, std::move(table));
}

Result<TableInfo> CatalogService::ClearRowFilter(const Principal& who, std::string_view full_name) {
  TY_ASSIGN_OR_RETURN(TableInfo table, LoadTable(full_name));
  TY_RETURN_IF_ERROR(impl_->CheckPolicyChange(who, table, "clear row filter"));
  Status deleted = impl_->store.DeletePolicy(table.id, "").status();
  impl_->table_cache.Invalidate({table.id});
  TY_RETURN_IF_ERROR(deleted);
  TY_ASSIGN_OR_RETURN(table, LoadTable(table.full_name));
  return impl_->PresentTable(who, std::move(table));
}

Result<TableInfo> CatalogService::SetColumnMask(const Principal& who, std::string_view full_name,
                                                std::string_view column,
                                                const ColumnMaskInfo& mask) {
  TY_ASSIGN_OR_RETURN(TableInfo table, LoadTable(full_name));
  TY_RETURN_IF_ERROR(impl_->CheckPolicyChange(
      who, table, "set mask of column " + Abbreviate(column) + ": " + MaskText(mask)));
  TY_ASSIGN_OR_RETURN(size_t index, ValidateColumnMask(table.columns, column, mask.kind));
  if (mask.except.size() > kMaxMaskExceptions) {
    return Status::InvalidArgument("except: at most " + std::to_string(kMaxMaskExceptions) +
                                   " names (exempt a group instead)");
  }
  for (size_t i = 0; i < mask.except.size(); ++i) {
    if (auto kind = impl_->identity.GetPrincipalKind(mask.except[i]); !kind.ok()) {
      return Status::InvalidArgument("except[" + std::to_string(i) +
                                     "]: " + kind.status().message());
    }
  }
  Status put = impl_->store.PutPolicy(
      PolicyRow{table.id, table.columns[index].name, std::string(tables::MaskKindName(mask.kind)),
                ExceptToJson(mask.except), impl_->clock.NowMillis(), who.user});
  impl_->table_cache.Invalidate({table.id});
  TY_RETURN_IF_ERROR(put);
  TY_ASSIGN_OR_RETURN(table, LoadTable(table.full_name));
  return impl_->PresentTable(who, std::move(table));
}

Result<TableInfo> CatalogService::ClearColumnMask(const Principal& who, std::string_view full_name,
                                                  std::string_view column) {
  TY_ASSIGN_OR_RETURN(TableInfo table, LoadTable(full_name));
  TY_RETURN_IF_ERROR(
      impl_->CheckPolicyChange(who, table, "clear mask of column " + Abbreviate(column)));
  auto it = std::find_if(table.columns.begin(), table.columns.end(),
                         [&](const ColumnInfo& c) { return c.name == column; });
  if (it == table.columns.end()) {
    it = std::find_if(table.columns.begin(), table.columns.end(),
                      [&](const ColumnInfo& c) { return ToLower(c.name) == ToLower(column); });
  }
  if (it == table.columns.end()) {
    return Status::InvalidArgument("column: the table has no column '" + Abbreviate(column) + "'");
  }
  Status deleted = impl_->store.DeletePolicy(table.id, it->name).status();
  impl_->table_cache.Invalidate({table.id});
  TY_RETURN_IF_ERROR(deleted);
  TY_ASSIGN_OR_RETURN(table, LoadTable(table.full_name));
  return impl_->PresentTable(who, std::move(table));
}

}  // namespace trainyard::catalog
