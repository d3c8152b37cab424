#include "trainyard/api/tables_api.h"

#include <charconv>
#include <string>
#include <vector>

#include "trainyard/tables/import.h"

namespace trainyard::api {

namespace {

using catalog::TableService;
using http::Method;

constexpr std::string_view kTablesPrefix = "/api/trainyard/v1/tables/";
constexpr const char* kArrowStream = "application/vnd.apache.arrow.stream";

std::string FullName(const Call& c) { return c.request.path_params.at("full_name"); }

Result<std::optional<int64_t>> IntParam(const http::Request& r, std::string_view field) {
  std::optional<std::string> v = r.Query(field);
  if (!v) return std::optional<int64_t>();
  int64_t out = 0;
  auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), out);
  if (v->empty() || ec != std::errc() || p != v->data() + v->size()) {
    return Status::InvalidArgument(std::string(field) + ": not an integer ('" + *v + "')");
  }
  return std::optional<int64_t>(out);
}

// ?version= and ?timestamp= (epoch milliseconds or ISO-8601); not both.
Result<tables::VersionSpec> VersionOf(const http::Request& r) {
  tables::VersionSpec at;
  TY_ASSIGN_OR_RETURN(at.version, IntParam(r, "version"));
  if (at.version && *at.version < 0) return Status::InvalidArgument("version: must be >= 0");
  if (std::optional<std::string> ts = r.Query("timestamp")) {
    if (at.version)
      return Status::InvalidArgument("timestamp: give version or timestamp, not both");
    if (std::optional<int64_t> us = tables::ParseIsoTimestampMicros(*ts)) {
      at.timestamp_ms = *us / 1000;
    } else {
      TY_ASSIGN_OR_RETURN(at.timestamp_ms, IntParam(r, "timestamp"));
    }
  }
  return at;
}

std::vector<std::string> SplitColumns(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    if (comma > start) out.push_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

json::object StringMap(const std::map<std::string, std::string>& m) {
  json::object o;
  for (const auto& [k, v] : m) o[k] = v;
  return o;
}

json::array Names(const std::vector<std::string>& names) {
  json::array out;
  for (const auto& n : names) out.emplace_back(n);
  return out;
}

json::object RowFilterToJson(const catalog::RowFilterInfo& f) {
  return json::object{{"predicate", f.predicate},
                      {"input_column_names", Names(f.columns)},
                      {"updated_at", f.updated_at},
                      {"updated_by", f.updated_by}};
}

json::object MaskToJson(const catalog::ColumnMaskInfo& m) {
  return json::object{{"kind", tables::MaskKindName(m.kind)},
                      {"except", Names(m.except)},
                      {"updated_at", m.updated_at},
                      {"updated_by", m.updated_by}};
}

// A table's policies: {"full_name", "row_filter"?, "column_masks": {column: mask}}.
json::object PoliciesToJson(const catalog::TableInfo& t) {
  json::object masks;
  for (const auto& c : t.columns) {
    if (c.mask) masks[c.name] = MaskToJson(*c.mask);
  }
  json::object o{{"full_name", t.full_name}, {"column_masks", std::move(masks)}};
  if (t.row_filter) o["row_filter"] = RowFilterToJson(*t.row_filter);
  return o;
}

json::value DescriptionToJson(const catalog::TableDescription& d) {
  json::array columns;
  for (const auto& f : d.delta.schema->fields()) {
    json::object c{
        {"name", f->name()}, {"type", f->type()->ToString()}, {"nullable", f->nullable()}};
    for (const auto& info : d.table.columns) {
      if (info.name != f->name() || !info.mask) continue;
      json::object mask = MaskToJson(*info.mask);
      mask["applies_to_caller"] = d.caller_policy.masks.count(f->name()) > 0;
      c["mask"] = std::move(mask);
    }
    columns.push_back(std::move(c));
  }
  json::array files;
  for (const auto& f : d.delta.files) {
    json::object o{{"path", f.path}, {"size_bytes", f.size_bytes}};
    if (f.num_records) o["num_records"] = *f.num_records;
    files.push_back(std::move(o));
  }
  json::array partitions;
  for (const auto& p : d.delta.partition_columns) partitions.push_back(json::value(p));
  json::object o{{"full_name", d.table.full_name},
                 {"owner", d.table.owner},
                 {"comment", d.table.comment},
                 {"table_type", catalog::TableTypeName(d.table.table_type)},
                 {"data_source_format", d.table.data_source_format},
                 {"storage_location", d.table.storage_location},
                 {"version", d.delta.version},
                 {"timestamp_ms", d.delta.timestamp_ms},
                 {"columns", std::move(columns)},
                 {"partition_columns", std::move(partitions)},
                 {"properties", StringMap(d.delta.properties)},
                 {"num_files", d.delta.num_files},
                 {"size_bytes", d.delta.size_bytes},
                 {"files", std::move(files)}};
  if (d.delta.num_rows) o["num_rows"] = *d.delta.num_rows;
  if (d.table.row_filter) {
    json::object filter = RowFilterToJson(*d.table.row_filter);
    filter["applies_to_caller"] = d.caller_policy.row_filter.has_value();
    o["row_filter"] = std::move(filter);
  }
  return o;
}

Result<json::value> Import(TableService& ts, Call& c) {
  const http::Request& r = c.request;
  catalog::ImportTableRequest req;
  req.full_name = FullName(c);
  TY_ASSIGN_OR_RETURN(req.mode, catalog::ParseImportMode(r.Query("mode").value_or("append")));
  req.context.run_id = r.Query("run_id").value_or("");
  const std::string dry_run = r.Query("dry_run").value_or("false");
  if (dry_run != "true" && dry_run != "false") {
    return Status::InvalidArgument("dry_run: must be true or false (got '" + dry_run + "')");
  }
  // The import's checks without its data (a client about to compute the rows asks first).
  if (dry_run == "true") {
    TY_ASSIGN_OR_RETURN(bool created, ts.CheckImport(c.principal, req));
    return json::object{{"dry_run", true}, {"created", created}};
  }
  std::string format = r.Query("format").value_or("");
  if (format.empty()) return Status::InvalidArgument("format: required (jsonl, csv or parquet)");
  Result<tables::ImportFormat> f = tables::ImportFormatFromPath("body." + format);
  if (!f.ok()) {
    return Status::InvalidArgument("format: must be jsonl, csv or parquet (got '" + format + "')");
  }
  req.format = *f;
  req.file_path = r.body_file;
  if (req.file_path.empty()) req.data = r.body;
  req.source_name = r.Query("source_name").value_or("body");
  req.user_metadata = r.Query("user_metadata").value_or("");
  TY_ASSIGN_OR_RETURN(req.context.column_lineage,
                      lineage::ParseColumnLineage(r.Query("column_lineage").value_or("")));
  TY_RETURN_IF_ERROR(
      lineage::ValidateColumnLineage({lineage::NodeType::kTable, req.full_name, std::nullopt},
                                     req.context.column_lineage, "column_lineage.columns"));
  TY_ASSIGN_OR_RETURN(catalog::ImportTableResult result, ts.Import(c.principal, req));
  return json::object{
      {"version", result.version}, {"rows", result.rows}, {"created", result.created}};
}

Result<http::Response> EncodeRows(const catalog::RowsPage& page, tables::ExportFormat format) {
  http::Response response;
  response.content_type =
      format == tables::ExportFormat::kArrowIpc ? kArrowStream : "application/x-ndjson";
  arrow::TableBatchReader reader(*page.rows);
  std::string* body = &response.body;
  TY_RETURN_IF_ERROR(tables::ExportRecords(reader, format, [body](std::string_view bytes) {
                       body->append(bytes);
                       return Status::Ok();
                     }).status());
  response.headers.emplace_back("X-Trainyard-Table-Version", std::to_string(page.version));
  if (!page.next_page_token.empty()) {
    response.headers.emplace_back("X-Trainyard-Next-Page-Token", page.next_page_token);
  }
  return response;
}

Result<http::Response> ReadRows(TableService& ts, Call& c) {
  const http::Request& r = c.request;
  catalog::ReadRowsRequest req;
  req.full_name = FullName(c);
  TY_ASSIGN_OR_RETURN(req.at, VersionOf(r));
  req.columns = SplitColumns(r.Query("columns").value_or(""));
  req.filter = r.Query("filter").value_or("");
  TY_ASSIGN_OR_RETURN(std::optional<int64_t> max_rows, IntParam(r, "max_rows"));
  req.max_rows = max_rows.value_or(catalog::kDefaultPageRows);
  req.page_token = r.Query("page_token").value_or("");
  req.context.run_id = r.Query("run_id").value_or("");
  std::string format = r.Query("format").value_or("jsonl");
  if (format != "jsonl" && format != "arrow") {
    return Status::InvalidArgument("format: must be jsonl or arrow (got '" + format + "')");
  }
  TY_ASSIGN_OR_RETURN(catalog::RowsPage page, ts.ReadRows(c.principal, req));
  return EncodeRows(
      page, format == "arrow" ? tables::ExportFormat::kArrowIpc : tables::ExportFormat::kJsonl);
}

Result<http::Response> Export(TableService& ts, Call& c) {
  const http::Request& r = c.request;
  TY_ASSIGN_OR_RETURN(tables::VersionSpec at, VersionOf(r));
  std::string name = r.Query("format").value_or("jsonl");
  Result<tables::ExportFormat> format = tables::ExportFormatFromName(name);
  if (!format.ok()) {
    return Status::InvalidArgument("format: must be jsonl, csv, parquet or arrow (got '" + name +
                                   "')");
  }
  http::Response response;
  std::string* body = &response.body;
  catalog::TableCallContext context{r.Query("run_id").value_or("")};
  TY_ASSIGN_OR_RETURN(int64_t version, ts.Export(
                                           c.principal, FullName(c), at, *format,
                                           [body](std::string_view bytes) {
                                             body->append(bytes);
                                             return Status::Ok();
                                           },
                                           context));
  static const char* kTypes[] = {"application/x-ndjson", "text/csv",
                                 "application/vnd.apache.parquet", kArrowStream};
  response.content_type = kTypes[static_cast<int>(*format)];
  response.headers.emplace_back("X-Trainyard-Table-Version", std::to_string(version));
  return response;
}

Result<json::value> History(TableService& ts, Call& c) {
  TY_ASSIGN_OR_RETURN(std::optional<int64_t> limit, IntParam(c.request, "limit"));
  TY_ASSIGN_OR_RETURN(auto entries, ts.History(c.principal, FullName(c), limit.value_or(0)));
  json::array out;
  for (const auto& e : entries) {
    out.push_back(json::object{{"version", e.version},
                               {"timestamp_ms", e.timestamp_ms},
                               {"operation", e.operation},
                               {"operation_parameters", StringMap(e.operation_parameters)},
                               {"operation_metrics", StringMap(e.operation_metrics)},
                               {"engine_info", e.engine_info},
                               {"user_metadata", e.user_metadata},
                               {"user_id", e.user_id},
                               {"user_name", e.user_name}});
  }
  return json::object{{"history", std::move(out)}};
}

Result<json::value> DeleteRows(TableService& ts, Call& c) {
  TY_ASSIGN_OR_RETURN(std::string predicate, RequiredString(c.body, "predicate"));
  TY_ASSIGN_OR_RETURN(std::optional<std::string> run_id, OptionalString(c.body, "run_id"));
  catalog::TableCallContext context{run_id.value_or("")};
  TY_ASSIGN_OR_RETURN(tables::CommitResult r,
                      ts.DeleteRows(c.principal, FullName(c), predicate, context));
  return json::object{{"version", r.version}, {"rows_deleted", r.rows_affected}};
}

Result<json::value> SetRowFilter(catalog::CatalogService& cs, Call& c) {
  TY_ASSIGN_OR_RETURN(std::string predicate, RequiredString(c.body, "predicate"));
  TY_ASSIGN_OR_RETURN(catalog::TableInfo t, cs.SetRowFilter(c.principal, FullName(c), predicate));
  return PoliciesToJson(t);
}

Result<json::value> SetColumnMask(catalog::CatalogService& cs, Call& c) {
  TY_ASSIGN_OR_RETURN(catalog::ColumnMaskInfo mask, catalog::DecodeColumnMask(c.request.body));
  TY_ASSIGN_OR_RETURN(
      catalog::TableInfo t,
      cs.SetColumnMask(c.principal, FullName(c), c.request.path_params.at("column"), mask));
  return PoliciesToJson(t);
}

}  // namespace

bool IsTableImport(http::Method method, std::string_view path) {
  return method == Method::kPost && path.substr(0, kTablesPrefix.size()) == kTablesPrefix &&
         path.size() > 7 && path.substr(path.size() - 7) == "/import";
}

void RegisterTableRoutes(Api& api, catalog::CatalogService& catalog, TableService& tables) {
  TableService* ts = &tables;
  catalog::CatalogService* cs = &catalog;
  api.Route(Method::kGet, kTrainyardPrefixes, "/tables/{full_name}",
            [ts](Call& c) -> Result<json::value> {
              TY_ASSIGN_OR_RETURN(tables::VersionSpec at, VersionOf(c.request));
              TY_ASSIGN_OR_RETURN(auto d, ts->Describe(c.principal, FullName(c), at));
              return DescriptionToJson(d);
            });
  api.Route(Method::kPost, kTrainyardPrefixes, "/tables/{full_name}/import",
            [ts](Call& c) { return Import(*ts, c); });
  api.RawRoute(Method::kGet, kTrainyardPrefixes, "/tables/{full_name}/rows",
               [ts](Call& c) { return ReadRows(*ts, c); });
  api.RawRoute(Method::kGet, kTrainyardPrefixes, "/tables/{full_name}/export",
               [ts](Call& c) { return Export(*ts, c); });
  api.Route(Method::kGet, kTrainyardPrefixes, "/tables/{full_name}/history",
            [ts](Call& c) { return History(*ts, c); });
  // What the caller may do to the table (the web UI's disabled actions), by the catalog's one
  // decision: select (read rows), modify (import, delete rows), manage (grants, row filter,
  // masks). Each check is audited like any other.
  api.Route(Method::kGet, kTrainyardPrefixes, "/tables/{full_name}/my-permissions",
            [cs](Call& c) -> Result<json::value> {
              const std::string name = FullName(c);
              using catalog::Privilege;
              using catalog::SecurableType;
              Status select =
                  cs->Authorize(c.principal, Privilege::kSelect, SecurableType::kTable, name);
              if (select.code() == StatusCode::kNotFound) return select;
              return ActionDecisionsJson({{"select", select},
                                          {"modify", cs->Authorize(c.principal, Privilege::kModify,
                                                                   SecurableType::kTable, name)},
                                          {"manage", cs->Authorize(c.principal, Privilege::kManage,
                                                                   SecurableType::kTable, name)}});
            });
  api.Route(Method::kPost, kTrainyardPrefixes, "/tables/{full_name}/delete",
            [ts](Call& c) { return DeleteRows(*ts, c); });
  api.Route(Method::kPut, kTrainyardPrefixes, "/tables/{full_name}/row-filter",
            [cs](Call& c) { return SetRowFilter(*cs, c); });
  api.Route(Method::kDelete, kTrainyardPrefixes, "/tables/{full_name}/row-filter",
            [cs](Call& c) -> Result<json::value> {
              TY_ASSIGN_OR_RETURN(catalog::TableInfo t,
                                  cs->ClearRowFilter(c.principal, FullName(c)));
              return PoliciesToJson(t);
            });
  api.Route(Method::kPut, kTrainyardPrefixes, "/tables/{full_name}/columns/{column}/mask",
            [cs](Call& c) { return SetColumnMask(*cs, c); });
  api.Route(Method::kDelete, kTrainyardPrefixes, "/tables/{full_name}/columns/{column}/mask",
            [cs](Call& c) -> Result<json::value> {
              TY_ASSIGN_OR_RETURN(catalog::TableInfo t,
                                  cs->ClearColumnMask(c.principal, FullName(c),
                                                      c.request.path_params.at("column")));
              return PoliciesToJson(t);
            });
}

}  // namespace trainyard::api
