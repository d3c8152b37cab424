#include "trainyard/catalog/table_service.h"

#include <arrow/util/utf8.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <set>
#include <utility>

#include "trainyard/blob/blob_store.h"
#include "trainyard/common/json.h"
#include "trainyard/common/strings.h"
#include "trainyard/tables/arrow_util.h"
#include "trainyard/tables/column_mask.h"
#include "trainyard/tables/delta_schema.h"

namespace trainyard::catalog {

namespace {

std::string Upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// Spark's simpleString of a Delta JSON type ("bigint", "array<struct<a:int>>").
std::string TypeText(const json::value& type) {
  if (type.is_string()) {
    std::string t(type.as_string());
    if (t == "long") return "bigint";
    if (t == "integer") return "int";
    if (t == "short") return "smallint";
    if (t == "byte") return "tinyint";
    return t;
  }
  const json::object& o = type.as_object();
  std::string kind(o.at("type").as_string());
  if (kind == "array") return "array<" + TypeText(o.at("elementType")) + ">";
  if (kind == "map") {
    return "map<" + TypeText(o.at("keyType")) + "," + TypeText(o.at("valueType")) + ">";
  }
  std::string out = "struct<";
  bool first = true;
  for (const auto& f : o.at("fields").as_array()) {
    if (!first) out += ",";
    first = false;
    out += std::string(f.at("name").as_string()) + ":" + TypeText(f.at("type"));
  }
  return out + ">";
}

// UC's ColumnTypeName of a Delta JSON type.
std::string TypeName(const json::value& type) {
  if (!type.is_string()) return Upper(std::string(type.as_object().at("type").as_string()));
  std::string t(type.as_string());
  if (t == "integer") return "INT";
  if (t.rfind("decimal", 0) == 0) return "DECIMAL";
  return Upper(t);
}

// A type_text or type_name of a primitive column as a Delta type name.
std::optional<std::string> DeltaPrimitive(std::string t) {
  for (char& c : t) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (t == "bigint" || t == "long") return "long";
  if (t == "int" || t == "integer") return "integer";
  if (t == "smallint" || t == "short") return "short";
  if (t == "tinyint" || t == "byte") return "byte";
  for (const char* same :
       {"string", "double", "float", "boolean", "binary", "date", "timestamp", "timestamp_ntz"}) {
    if (t == same) return t;
  }
  if (t.rfind("decimal(", 0) == 0) return t;
  return std::nullopt;
}

// The Delta field of a column: from type_json when it is a field's JSON ({"name", "type",
// ...}), else from type_text / type_name for a primitive type.
Result<json::value> DeltaFieldOf(const ColumnInfo& c, size_t i) {
  std::string field = "columns[" + std::to_string(i) + "]";
  if (!c.type_json.empty()) {
    Result<json::value> v = ParseJsonExact(c.type_json);
    if (v.ok() && v->is_object() && v->as_object().contains("type")) {
      v->as_object()["name"] = c.name;
      if (!v->as_object().contains("nullable")) v->as_object()["nullable"] = c.nullable;
      if (!v->as_object().contains("metadata")) v->as_object()["metadata"] = json::object{};
      return std::move(v).value();
    }
  }
  std::optional<std::string> t = DeltaPrimitive(c.type_text.empty() ? c.type_name : c.type_text);
  if (!t) {
    return Status::InvalidArgument(field + ".type_text: unsupported type '" + c.type_text +
                                   "' (give a field's JSON in type_json for nested types)");
  }
  return json::value(json::object{
      {"name", c.name}, {"type", *t}, {"nullable", c.nullable}, {"metadata", json::object{}}});
}

// An arrow::RecordBatchReader over an importer; keeps the importer's error as our Status.
class ImporterReader : public arrow::RecordBatchReader {
 public:
  explicit ImporterReader(tables::RecordImporter& importer) : importer_(importer) {}
  std::shared_ptr<arrow::Schema> schema() const override { return importer_.schema(); }
  arrow::Status ReadNext(std::shared_ptr<arrow::RecordBatch>* batch) override {
    Result<std::shared_ptr<arrow::RecordBatch>> next = importer_.Next();
    if (!next.ok()) {
      error_ = next.status();
      return arrow::Status::Invalid(error_.message());
    }
    *batch = std::move(next).value();
    return arrow::Status::OK();
  }
  const Status& error() const { return error_; }

 private:
  tables::RecordImporter& importer_;
  Status error_;
};

Result<std::unique_ptr<tables::RecordImporter>> OpenImporter(const ImportTableRequest& r,
                                                             tables::ImportOptions options) {
  options.format = r.format;
  options.source_name = r.source_name.empty() ? "body" : r.source_name;
  if (!r.file_path.empty()) return tables::OpenImportFile(r.file_path, std::move(options));
  return tables::OpenImportBuffer(r.data, std::move(options));
}

// The DeltaTable options of an import's commit.
tables::TableOptions WriteOptions(const ImportTableRequest& r) {
  tables::TableOptions options;
  options.commit_user_metadata = r.user_metadata;
  return options;
}

// Runs a write fed by `reader`, preferring the importer's own error (it names the line).
Result<tables::CommitResult> WriteRows(tables::DeltaTable& table, ImporterReader& reader,
                                       ImportMode mode) {
  Result<tables::CommitResult> r =
      mode == ImportMode::kAppend ? table.Append(reader) : table.Overwrite(reader);
  if (!r.ok() && !reader.error().ok()) return reader.error();
  return r;
}

// catalog.schema.table as its three parts.
Result<std::vector<std::string>> TableNameParts(const std::string& full_name) {
  std::vector<std::string> parts;
  for (size_t start = 0;;) {
    size_t dot = full_name.find('.', start);
    parts.push_back(full_name.substr(start, dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  if (parts.size() != 3) {
    return Status::InvalidArgument("full_name: a table is named catalog.schema.table (got '" +
                                   full_name + "')");
  }
  return parts;
}

}  // namespace

Result<ImportMode> ParseImportMode(std::string_view text) {
  if (text == "append" || text.empty()) return ImportMode::kAppend;
  if (text == "overwrite") return ImportMode::kOverwrite;
  return Status::InvalidArgument("mode: must be append or overwrite (got '" + std::string(text) +
                                 "')");
}

Result<std::vector<ColumnInfo>> ColumnsFromArrow(const arrow::Schema& schema) {
  TY_ASSIGN_OR_RETURN(std::string text, tables::SchemaToDeltaJson(schema));
  TY_ASSIGN_OR_RETURN(json::value parsed, ParseJsonExact(text));
  std::vector<ColumnInfo> columns;
  int32_t position = 0;
  for (const auto& f : parsed.at("fields").as_array()) {
    ColumnInfo c;
    c.name = std::string(f.at("name").as_string());
    c.type_text = TypeText(f.at("type"));
    c.type_name = TypeName(f.at("type"));
    c.type_json = json::serialize(f);
    c.nullable = f.at("nullable").as_bool();
    c.position = position++;
    columns.push_back(std::move(c));
  }
  return columns;
}

Result<std::shared_ptr<arrow::Schema>> ArrowFromColumns(const std::vector<ColumnInfo>& columns) {
  json::array fields;
  for (size_t i = 0; i < columns.size(); ++i) {
    TY_ASSIGN_OR_RETURN(json::value f, DeltaFieldOf(columns[i], i));
    fields.push_back(std::move(f));
  }
  json::object schema{{"type", "struct"}, {"fields", std::move(fields)}};
  return tables::SchemaFromDeltaJson(json::serialize(schema));
}

std::string FormatPageToken(int64_t version, int64_t offset) {
  return std::to_string(version) + ":" + std::to_string(offset);
}

Result<std::pair<int64_t, int64_t>> ParsePageToken(std::string_view token) {
  size_t colon = token.find(':');
  int64_t version = -1, offset = -1;
  auto parse = [](std::string_view s, int64_t& out) {
    if (s.empty() || s.front() < '0' || s.front() > '9') return false;  // no "-0"
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc() && p == s.data() + s.size() && !s.empty() && out >= 0;
  };
  if (colon == std::string_view::npos || !parse(token.substr(0, colon), version) ||
      !parse(token.substr(colon + 1), offset)) {
    return Status::InvalidArgument("page_token: malformed (pass next_page_token as returned)");
  }
  return std::make_pair(version, offset);
}

struct TableService::Opened {
  TableInfo row;
  std::unique_ptr<blob::BlobStore> store;
  std::unique_ptr<tables::DeltaTable> table;
};

TableService::TableService(CatalogService& catalog, lineage::LineageRecorder* lineage, Clock& clock,
                           TableServiceOptions options)
    : catalog_(catalog), lineage_(lineage), clock_(clock), options_(std::move(options)) {}

TableService::~TableService() = default;

namespace {

// The commitInfo fields naming who made a version. userId is the stable account name (our
// users have no separate numeric id), userName the same name; a workload's job-scoped token
// acts as its user, so the user is named, not the job.
tables::TableOptions CommitterOptions(const identity::Principal* who,
                                      tables::TableOptions options = {}) {
  if (who != nullptr) {
    options.user_id = who->user;
    options.user_name = who->user;
  }
  return options;
}

}  // namespace

Result<TableService::Opened> TableService::OpenRow(TableInfo row, const identity::Principal* writer,
                                                   tables::TableOptions table_options) {
  if (row.data_source_format != "DELTA") {
    return Status::FailedPrecondition("table " + row.full_name + " is " + row.data_source_format +
                                      ", not DELTA");
  }
  Opened o;
  TY_ASSIGN_OR_RETURN(o.store, blob::OpenBlobStore(row.storage_location, options_.blob_cache_dir));
  Result<std::unique_ptr<tables::DeltaTable>> t = tables::DeltaTable::Open(
      *o.store, "", clock_, CommitterOptions(writer, std::move(table_options)));
  if (!t.ok() && t.status().code() == StatusCode::kNotFound) {
    return Status::NotFound("table " + row.full_name + " has no data yet (import some first)");
  }
  TY_ASSIGN_OR_RETURN(o.table, std::move(t));
  o.row = std::move(row);
  return o;
}

Result<TableService::Opened> TableService::Open(const identity::Principal& who,
                                                std::string_view full_name, Privilege privilege,
                                                tables::TableOptions table_options) {
  TY_RETURN_IF_ERROR(catalog_.Authorize(who, privilege, SecurableType::kTable, full_name));
  TY_ASSIGN_OR_RETURN(TableInfo row, catalog_.LoadTable(full_name));
  return OpenRow(std::move(row), privilege == Privilege::kModify ? &who : nullptr,
                 std::move(table_options));
}

Result<ReadPolicy> TableService::PolicyOf(const identity::Principal& who, const Opened& o,
                                          const arrow::Schema& schema) {
  if (!HasPolicies(o.row)) return ReadPolicy{};
  TY_ASSIGN_OR_RETURN(tables::PredicateReader reader, catalog_.ReaderOf(who));
  TY_ASSIGN_OR_RETURN(ReadPolicy policy, PolicyFor(o.row, reader));
  // Masks name the catalog's columns; the data's may differ in case (Delta's names are
  // case-insensitive), and a mask must never miss its column for that. A column the data (at
  // this version) does not have has nothing to mask.
  std::map<std::string, tables::MaskKind> masks;
  for (const auto& [column, kind] : policy.masks) {
    for (const auto& field : schema.fields()) {
      if (ToLower(field->name()) == ToLower(column)) masks[field->name()] = kind;
    }
  }
  policy.masks = std::move(masks);
  return policy;
}

Result<std::unique_ptr<arrow::RecordBatchReader>> TableService::ReadGoverned(
    Opened& o, const ReadPolicy& policy, tables::ReadOptions read,
    std::optional<tables::Predicate> filter) {
  read.filter = policy.row_filter;
  std::optional<tables::Predicate> over_masked;
  if (filter) {
    std::vector<std::string> names = filter->Columns();
    bool names_masked = std::any_of(names.begin(), names.end(),
                                    [&](const std::string& c) { return policy.masks.count(c); });
    if (names_masked) {
      over_masked = std::move(filter);
    } else {
      read.filter = read.filter ? tables::Predicate::And(*read.filter, *filter) : *filter;
    }
  }
  std::vector<std::string> output;
  if (over_masked && !read.columns.empty()) {
    output = read.columns;  // read the filter's columns too, then project them away
    for (const std::string& c : over_masked->Columns()) {
      if (std::find(read.columns.begin(), read.columns.end(), c) == read.columns.end()) {
        read.columns.push_back(c);
      }
    }
  }
  TY_ASSIGN_OR_RETURN(std::unique_ptr<arrow::RecordBatchReader> reader, o.table->Read(read));
  if (policy.masks.empty() && !over_masked) return reader;
  return tables::MaskRows(std::move(reader), policy.masks, std::move(over_masked),
                          std::move(output));
}

Status TableService::CreateDeltaForRow(const identity::Principal& who, const TableInfo& row) {
  if (row.table_type != TableType::kManaged || row.data_source_format != "DELTA") {
    return Status::Ok();
  }
  TY_ASSIGN_OR_RETURN(std::shared_ptr<arrow::Schema> schema, ArrowFromColumns(row.columns));
  TY_ASSIGN_OR_RETURN(auto store,
                      blob::OpenBlobStore(row.storage_location, options_.blob_cache_dir));
  tables::CreateTableRequest create;
  create.schema = std::move(schema);
  create.name = row.name;
  create.description = row.comment;
  for (const ColumnInfo& c : row.columns) {
    if (c.partition_index) create.partition_columns.push_back(c.name);
  }
  return tables::DeltaTable::Create(*store, "", clock_, create, CommitterOptions(&who)).status();
}

Result<TableInfo> TableService::CreateManagedTable(const identity::Principal& who,
                                                   CreateTableRequest request,
                                                   std::shared_ptr<arrow::Schema> schema) {
  request.table_type = TableType::kManaged;
  request.data_source_format = "DELTA";
  TY_ASSIGN_OR_RETURN(request.columns, ColumnsFromArrow(*schema));
  TY_ASSIGN_OR_RETURN(TableInfo row, catalog_.CreateTable(who, request));
  if (Status s = CreateDeltaForRow(who, row); !s.ok()) {
    (void)catalog_.DeleteTable(identity::Principal::System(), row.full_name);
    return s;
  }
  return row;
}

bool TableService::IsNewTable(const Result<Opened>& opened, const std::string& full_name) {
  return !opened.ok() && opened.status().code() == StatusCode::kNotFound &&
         !catalog_.GetTable(identity::Principal::System(), full_name).ok();
}

Status TableService::CheckOverwrite(const identity::Principal& who, const Opened& o,
                                    ImportMode mode, const arrow::Schema& schema) {
  if (mode != ImportMode::kOverwrite) return Status::Ok();
  TY_ASSIGN_OR_RETURN(ReadPolicy policy, PolicyOf(who, o, schema));
  if (policy.row_filter) {
    return Status::PermissionDenied(
        "mode: table " + o.row.full_name +
        " has a row filter that hides rows from you, and an overwrite would replace them too; "
        "append, or delete the rows you see first");
  }
  return Status::Ok();
}

Result<ImportTableResult> TableService::ImportNew(const identity::Principal& who,
                                                  const ImportTableRequest& request) {
  TY_ASSIGN_OR_RETURN(std::vector<std::string> parts, TableNameParts(request.full_name));
  TY_ASSIGN_OR_RETURN(auto importer, OpenImporter(request, {}));
  TY_RETURN_IF_ERROR(CheckContext(who, request.context, importer->schema().get()));
  CreateTableRequest create;
  create.catalog_name = parts[0];
  create.schema_name = parts[1];
  create.name = parts[2];
  TY_ASSIGN_OR_RETURN(TableInfo row, CreateManagedTable(who, create, importer->schema()));
  auto fail = [&](Status s) -> Status {
    (void)catalog_.DeleteTable(identity::Principal::System(), row.full_name);
    return s;
  };
  Result<Opened> opened = OpenRow(row, &who, WriteOptions(request));
  if (!opened.ok()) return fail(opened.status());
  ImporterReader reader(*importer);
  Result<tables::CommitResult> commit = WriteRows(*opened->table, reader, request.mode);
  if (!commit.ok()) return fail(commit.status());
  RecordWrite(who, row.full_name, commit->version, request.context);
  return ImportTableResult{commit->version, commit->rows_written, true};
}

Status TableService::CheckContext(const identity::Principal& who, const TableCallContext& context,
                                  const arrow::Schema* schema) {
  if (!context.column_lineage.empty()) {
    if (context.run_id.empty() && who.scope.rfind("job:", 0) != 0) {
      return Status::InvalidArgument(
          "column_lineage: needs run_id (lineage records the run that wrote the table)");
    }
    std::set<std::string> checked;
    for (size_t i = 0; i < context.column_lineage.size(); ++i) {
      const lineage::ColumnLineage& c = context.column_lineage[i];
      std::string at = "column_lineage.columns[" + std::to_string(i) + "]";
      if (schema != nullptr && schema->GetFieldIndex(c.column) < 0) {
        return Status::InvalidArgument(at + ".column: '" + c.column +
                                       "' is not a column of the data written");
      }
      if (!checked.insert(c.source.key).second) continue;
      Status readable =
          catalog_.Authorize(who, Privilege::kSelect, SecurableType::kTable, c.source.key);
      if (!readable.ok()) {
        return Status(readable.code(), at + ".source: " + readable.message());
      }
    }
  }
  if (context.run_id.empty()) return Status::Ok();
  if (!options_.authorize_run) {
    return Status::FailedPrecondition(
        "run_id: this server cannot check runs, so it records no lineage for one; leave "
        "run_id out");
  }
  Status s = options_.authorize_run(who, context.run_id);
  if (s.ok()) return s;
  if (s.IsNotFound()) {
    return Status::NotFound("run_id: run '" + context.run_id +
                            "' does not exist; name the run you log to (MLFLOW_RUN_ID in a job)");
  }
  if (s.code() == StatusCode::kPermissionDenied) {
    return Status::PermissionDenied("run_id: you may not log to run '" + context.run_id + "' (" +
                                    s.message() +
                                    "); name a run you may write to, or leave run_id out");
  }
  return s;
}

Result<ImportTableResult> TableService::Import(const identity::Principal& who,
                                               const ImportTableRequest& request) {
  TY_RETURN_IF_ERROR(CheckContext(who, request.context));
  if (request.user_metadata.size() > kMaxUserMetadataBytes) {
    return Status::InvalidArgument("user_metadata: at most " +
                                   std::to_string(kMaxUserMetadataBytes) + " bytes (got " +
                                   std::to_string(request.user_metadata.size()) + ")");
  }
  // Delta logs are JSON, which other readers (Spark, delta-rs) parse strictly.
  arrow::util::InitializeUTF8();
  if (!arrow::util::ValidateUTF8(request.user_metadata)) {
    return Status::InvalidArgument("user_metadata: must be UTF-8 text");
  }
  Result<Opened> opened = Open(who, request.full_name, Privilege::kModify, WriteOptions(request));
  if (IsNewTable(opened, request.full_name)) {
    Result<ImportTableResult> created = ImportNew(who, request);
    // Another first import created the table meanwhile: append to (or overwrite) theirs.
    if (created.ok() || created.status().code() != StatusCode::kAlreadyExists) return created;
    opened = Open(who, request.full_name, Privilege::kModify, WriteOptions(request));
  }
  TY_RETURN_IF_ERROR(opened.status());
  TY_ASSIGN_OR_RETURN(tables::TableInfo current, opened->table->Describe());
  TY_RETURN_IF_ERROR(CheckContext(who, request.context, current.schema.get()));
  TY_RETURN_IF_ERROR(CheckOverwrite(who, *opened, request.mode, *current.schema));
  tables::ImportOptions options;
  options.expected_schema = current.schema;
  TY_ASSIGN_OR_RETURN(auto importer, OpenImporter(request, std::move(options)));
  ImporterReader reader(*importer);
  TY_ASSIGN_OR_RETURN(tables::CommitResult commit, WriteRows(*opened->table, reader, request.mode));
  RecordWrite(who, opened->row.full_name, commit.version, request.context);
  return ImportTableResult{commit.version, commit.rows_written, false};
}

Result<bool> TableService::CheckImport(const identity::Principal& who,
                                       const ImportTableRequest& request) {
  TY_RETURN_IF_ERROR(CheckContext(who, request.context));
  Result<Opened> opened = Open(who, request.full_name, Privilege::kModify);
  if (IsNewTable(opened, request.full_name)) {
    // A new table, as ImportNew creates it: CREATE TABLE (and USE) on its schema.
    TY_ASSIGN_OR_RETURN(std::vector<std::string> parts, TableNameParts(request.full_name));
    TY_RETURN_IF_ERROR(catalog_.Authorize(who, Privilege::kCreateTable, SecurableType::kSchema,
                                          parts[0] + "." + parts[1]));
    return true;
  }
  TY_RETURN_IF_ERROR(opened.status());
  TY_ASSIGN_OR_RETURN(tables::TableInfo current, opened->table->Describe());
  TY_RETURN_IF_ERROR(CheckContext(who, request.context, current.schema.get()));
  TY_RETURN_IF_ERROR(CheckOverwrite(who, *opened, request.mode, *current.schema));
  return false;
}

Result<RowsPage> TableService::ReadRows(const identity::Principal& who,
                                        const ReadRowsRequest& request) {
  TY_RETURN_IF_ERROR(CheckContext(who, request.context));
  if (request.max_rows < 1 || request.max_rows > kMaxPageRows) {
    return Status::InvalidArgument("max_rows: must be between 1 and " +
                                   std::to_string(kMaxPageRows));
  }
  tables::ReadOptions read;
  int64_t offset = 0;
  if (!request.page_token.empty()) {
    TY_ASSIGN_OR_RETURN(auto token, ParsePageToken(request.page_token));
    read.at.version = token.first;
    offset = token.second;
  } else {
    read.at = request.at;
  }
  read.columns = request.columns;
  std::optional<tables::Predicate> filter;
  if (!request.filter.empty()) {
    Result<tables::Predicate> p = tables::Predicate::Parse(request.filter);
    if (!p.ok()) return Status::InvalidArgument("filter: " + p.status().message());
    filter = std::move(p).value();
  }
  TY_ASSIGN_OR_RETURN(Opened o, Open(who, request.full_name, Privilege::kSelect));
  TY_ASSIGN_OR_RETURN(tables::TableInfo info, o.table->Describe(read.at));
  read.at = {info.version, std::nullopt};
  TY_ASSIGN_OR_RETURN(ReadPolicy policy, PolicyOf(who, o, *info.schema));
  if (filter && filter->UsesReader()) {
    TY_RETURN_IF_ERROR(filter->Validate(*info.schema));
    TY_ASSIGN_OR_RETURN(tables::PredicateReader reader, catalog_.ReaderOf(who));
    filter = filter->BindReader(reader);
  }
  TY_ASSIGN_OR_RETURN(auto reader, ReadGoverned(o, policy, std::move(read), std::move(filter)));
  std::vector<std::shared_ptr<arrow::RecordBatch>> batches;
  int64_t skipped = 0, taken = 0;
  bool more = false;
  while (true) {
    std::shared_ptr<arrow::RecordBatch> batch;
    TY_RETURN_IF_ERROR(tables::FromArrow(reader->ReadNext(&batch), "reading " + o.row.full_name));
    if (!batch) break;
    int64_t start = std::min(batch->num_rows(), offset - skipped);
    skipped += start;
    int64_t n = std::min(batch->num_rows() - start, request.max_rows - taken);
    if (n > 0) batches.push_back(batch->Slice(start, n));
    taken += std::max<int64_t>(n, 0);
    if (start + n < batch->num_rows()) {
      more = true;
      break;
    }
  }
  RowsPage page;
  page.version = info.version;
  TY_ASSIGN_OR_RETURN(page.rows,
                      tables::FromArrow(arrow::Table::FromRecordBatches(reader->schema(), batches),
                                        "collecting rows"));
  if (more) page.next_page_token = FormatPageToken(info.version, offset + taken);
  RecordRead(who, o.row.full_name, info.version, request.context);
  return page;
}

Result<TableDescription> TableService::Describe(const identity::Principal& who,
                                                std::string_view full_name,
                                                const tables::VersionSpec& at) {
  TY_ASSIGN_OR_RETURN(Opened o, Open(who, full_name, Privilege::kSelect));
  TY_ASSIGN_OR_RETURN(tables::TableInfo delta, o.table->Describe(at));
  TY_ASSIGN_OR_RETURN(ReadPolicy policy, PolicyOf(who, o, *delta.schema));
  if (policy.restricted()) o.row.storage_location.clear();
  return TableDescription{std::move(o.row), std::move(delta), std::move(policy)};
}

Result<std::vector<tables::HistoryEntry>> TableService::History(const identity::Principal& who,
                                                                std::string_view full_name,
                                                                int64_t limit) {
  if (limit < 0) return Status::InvalidArgument("limit: must not be negative");
  TY_ASSIGN_OR_RETURN(Opened o, Open(who, full_name, Privilege::kSelect));
  TY_ASSIGN_OR_RETURN(std::vector<tables::HistoryEntry> entries, o.table->History(limit));
  if (HasPolicies(o.row)) {
    TY_ASSIGN_OR_RETURN(tables::PredicateReader reader, catalog_.ReaderOf(who));
    TY_ASSIGN_OR_RETURN(ReadPolicy policy, PolicyFor(o.row, reader));
    if (policy.restricted()) {
      for (auto& e : entries) {
        if (auto it = e.operation_parameters.find("predicate");
            it != e.operation_parameters.end()) {
          it->second = "\"(hidden: a row filter or column masks apply to you)\"";
        }
      }
    }
  }
  return entries;
}

Result<int64_t> TableService::Export(const identity::Principal& who, std::string_view full_name,
                                     const tables::VersionSpec& at, tables::ExportFormat format,
                                     const tables::ByteSink& sink,
                                     const TableCallContext& context) {
  TY_RETURN_IF_ERROR(CheckContext(who, context));
  TY_ASSIGN_OR_RETURN(Opened o, Open(who, full_name, Privilege::kSelect));
  TY_ASSIGN_OR_RETURN(tables::TableInfo info, o.table->Describe(at));
  TY_ASSIGN_OR_RETURN(ReadPolicy policy, PolicyOf(who, o, *info.schema));
  tables::ReadOptions read;
  read.at.version = info.version;
  TY_ASSIGN_OR_RETURN(auto reader, ReadGoverned(o, policy, std::move(read), std::nullopt));
  TY_RETURN_IF_ERROR(tables::ExportRecords(*reader, format, sink).status());
  RecordRead(who, o.row.full_name, info.version, context);
  return info.version;
}

Result<tables::CommitResult> TableService::DeleteRows(const identity::Principal& who,
                                                      std::string_view full_name,
                                                      std::string_view predicate,
                                                      const TableCallContext& context) {
  TY_RETURN_IF_ERROR(CheckContext(who, context));
  if (predicate.empty()) {
    return Status::InvalidArgument("predicate: required (use TRUE to delete every row)");
  }
  Result<tables::Predicate> p = tables::Predicate::Parse(predicate);
  if (!p.ok()) return Status::InvalidArgument("predicate: " + p.status().message());
  TY_ASSIGN_OR_RETURN(Opened o, Open(who, full_name, Privilege::kModify));
  tables::Predicate where = std::move(p).value();
  if (HasPolicies(o.row) || where.UsesReader()) {
    TY_ASSIGN_OR_RETURN(tables::TableInfo info, o.table->Describe());
    TY_RETURN_IF_ERROR(where.Validate(*info.schema));
    TY_ASSIGN_OR_RETURN(ReadPolicy policy, PolicyOf(who, o, *info.schema));
    for (const std::string& c : where.Columns()) {
      if (policy.masks.count(c)) {
        return Status::PermissionDenied("predicate: column '" + c +
                                        "' is masked for you, so you may not delete by its "
                                        "values; delete by other columns");
      }
    }
    TY_ASSIGN_OR_RETURN(tables::PredicateReader reader, catalog_.ReaderOf(who));
    where = where.BindReader(reader);
    // Only rows the caller sees: a filtered reader cannot delete what it cannot read.
    if (policy.row_filter) where = tables::Predicate::And(*policy.row_filter, std::move(where));
  }
  TY_ASSIGN_OR_RETURN(tables::CommitResult commit, o.table->Delete(where));
  RecordWrite(who, o.row.full_name, commit.version, context);
  return commit;
}

namespace {
// The node that reads or writes for lineage: the run given, else a job-scoped token's job.
std::optional<lineage::NodeRef> ActorOf(const identity::Principal& who,
                                        const TableCallContext& context) {
  if (!context.run_id.empty())
    return lineage::NodeRef{lineage::NodeType::kRun, context.run_id, std::nullopt};
  if (who.scope.rfind("job:", 0) == 0) {
    return lineage::NodeRef{lineage::NodeType::kJob, who.scope.substr(4), std::nullopt};
  }
  return std::nullopt;
}
}  // namespace

void TableService::RecordRead(const identity::Principal& who, const std::string& table,
                              int64_t version, const TableCallContext& context) {
  std::optional<lineage::NodeRef> actor = ActorOf(who, context);
  if (lineage_ == nullptr || !actor) return;
  lineage::TableReadRecord r{table, version, *actor, "", context.run_id};
  if (actor->type == lineage::NodeType::kJob) r.job_id = actor->key;
  if (Status s = lineage_->RecordTableRead(who, r); !s.ok()) {
    spdlog::warn("lineage: cannot record the read of {}@{}: {}", table, version, s.message());
  }
}

void TableService::RecordWrite(const identity::Principal& who, const std::string& table,
                               int64_t version, const TableCallContext& context) {
  std::optional<lineage::NodeRef> actor = ActorOf(who, context);
  if (lineage_ == nullptr || !actor) return;
  lineage::TableWriteRecord w;
  w.table = table;
  w.version = version;
  w.writer = *actor;
  w.run_id = context.run_id;
  if (actor->type == lineage::NodeType::kJob) w.job_id = actor->key;
  for (const lineage::ColumnLineage& c : context.column_lineage) {
    auto source = std::find_if(w.sources.begin(), w.sources.end(), [&](const auto& s) {
      return s.table == c.source.key && s.version == c.source.version;
    });
    if (source == w.sources.end()) {
      source =
          w.sources.insert(w.sources.end(), {c.source.key, c.source.version.value_or(0), {}, {}});
    }
    if (!c.source_columns.empty()) source->columns[c.column] = c.source_columns;
    source->column_transforms[c.column] = c.transform;
  }
  if (Status s = lineage_->RecordTableWrite(who, w); !s.ok()) {
    spdlog::warn("lineage: cannot record the write of {}@{}: {}", table, version, s.message());
  }
}

}  // namespace trainyard::catalog
