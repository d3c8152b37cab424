#include "trainyard/catalog/table_policy.h"

#include <algorithm>

#include "trainyard/catalog/table_service.h"
#include "trainyard/common/json.h"
#include "trainyard/common/strings.h"

namespace trainyard::catalog {

namespace {

bool Exempt(const std::vector<std::string>& except, const tables::PredicateReader& reader) {
  for (const std::string& name : except) {
    if (name == reader.user ||
        std::binary_search(reader.groups.begin(), reader.groups.end(), name)) {
      return true;
    }
  }
  return false;
}

}  // namespace

bool HasPolicies(const TableInfo& table) {
  return table.row_filter.has_value() ||
         std::any_of(table.columns.begin(), table.columns.end(),
                     [](const ColumnInfo& c) { return c.mask.has_value(); });
}

Result<ReadPolicy> PolicyFor(const TableInfo& table, const tables::PredicateReader& reader) {
  ReadPolicy policy;
  if (table.row_filter) {
    Result<tables::Predicate> p = tables::Predicate::Parse(table.row_filter->predicate);
    if (!p.ok()) {
      return Status::FailedPrecondition("table " + table.full_name +
                                        ": its row filter does not parse (" + p.status().message() +
                                        "); its owner must set it again");
    }
    tables::Predicate bound = p->BindReader(reader);
    if (bound.kind() != tables::Predicate::Kind::kTrue) policy.row_filter = std::move(bound);
  }
  for (const ColumnInfo& c : table.columns) {
    if (c.mask && !Exempt(c.mask->except, reader)) policy.masks[c.name] = c.mask->kind;
  }
  return policy;
}

Status CheckDirectAccess(const TableInfo& table) {
  if (!HasPolicies(table)) return Status::Ok();
  return Status::PermissionDenied(
      "table " + table.full_name + " has " + (table.row_filter ? "a row filter" : "column masks") +
      ", so its storage is not handed out (temporary credentials would bypass them); read it "
      "through the tables API (GET /api/trainyard/v1/tables/" +
      table.full_name + "/rows), which applies them");
}

Result<tables::Predicate> ValidateRowFilter(const std::vector<ColumnInfo>& columns,
                                            std::string_view predicate) {
  if (predicate.empty()) {
    return Status::InvalidArgument("predicate: required (clear the row filter to show every row)");
  }
  if (predicate.size() > kMaxRowFilterLength) {
    return Status::InvalidArgument("predicate: at most " + std::to_string(kMaxRowFilterLength) +
                                   " bytes");
  }
  Result<tables::Predicate> p = tables::Predicate::Parse(predicate);
  if (!p.ok()) return Status::InvalidArgument("predicate: " + p.status().message());
  TY_ASSIGN_OR_RETURN(auto schema, ArrowFromColumns(columns));
  Status valid = p->Validate(*schema);
  if (!valid.ok()) return Status::InvalidArgument("predicate: " + valid.message());
  return std::move(p).value();
}

Result<size_t> ValidateColumnMask(const std::vector<ColumnInfo>& columns, std::string_view name,
                                  tables::MaskKind kind) {
  std::optional<size_t> index;
  for (size_t i = 0; i < columns.size() && !index; ++i) {
    if (columns[i].name == name) index = i;
  }
  for (size_t i = 0; i < columns.size() && !index; ++i) {
    if (ToLower(columns[i].name) == ToLower(name)) index = i;
  }
  if (!index) {
    std::string names;
    for (const auto& c : columns) names += (names.empty() ? "" : ", ") + c.name;
    return Status::InvalidArgument("column: the table has no column '" + Abbreviate(name) +
                                   "' (its columns: " + names + ")");
  }
  TY_ASSIGN_OR_RETURN(auto schema, ArrowFromColumns({columns[*index]}));
  TY_RETURN_IF_ERROR(tables::CheckMaskable(kind, *schema->field(0)->type(), columns[*index].name));
  return *index;
}

Result<ColumnMaskInfo> DecodeColumnMask(std::string_view body) {
  Result<json::object> o = ParseJsonObject(body);
  if (!o.ok()) {
    return Status::InvalidArgument(
        "the body must be a JSON object {\"kind\": \"redact|hash|null|last4\", \"except\": "
        "[\"group or user\", ...]}");
  }
  ColumnMaskInfo mask;
  TY_ASSIGN_OR_RETURN(std::string kind, RequiredString(*o, "kind"));
  TY_ASSIGN_OR_RETURN(mask.kind, tables::ParseMaskKind(kind, "kind"));
  TY_ASSIGN_OR_RETURN(const json::array* except, OptionalArray(*o, "except"));
  if (except != nullptr) {
    if (except->size() > kMaxMaskExceptions) {
      return Status::InvalidArgument("except: at most " + std::to_string(kMaxMaskExceptions) +
                                     " names (grant a group instead)");
    }
    for (size_t i = 0; i < except->size(); ++i) {
      std::string field = "except[" + std::to_string(i) + "]";
      TY_ASSIGN_OR_RETURN(std::string name, AsString((*except)[i], field));
      if (name.empty()) return Status::InvalidArgument(field + ": empty name");
      if (std::find(mask.except.begin(), mask.except.end(), name) == mask.except.end()) {
        mask.except.push_back(std::move(name));
      }
    }
  }
  for (const auto& [key, value] : *o) {
    if (key != "kind" && key != "except") {
      return Status::InvalidArgument("unknown field '" + Abbreviate(key) +
                                     "' (a mask has kind and except)");
    }
  }
  return mask;
}

}  // namespace trainyard::catalog
