// delta_tool: test and benchmark program, a thin command line over tables::DeltaTable for
// tests/test_delta_interop.py and bench/tables. Each command opens the table at a local
// directory or an S3 location (s3://bucket/prefix, see blob/s3_blob_store.h), does one thing and
// prints one JSON object (or, for `read` without --out, the rows as JSON lines). Errors go to
// stderr as "delta_tool: <status>" with exit code 1; usage errors exit 2.
//
//   delta_tool create TABLE --schema SPEC [--partition C,C] [--property K=V]... [--name N]
//   delta_tool append TABLE FILE [--repeat N] [--crash-before-commit]
//   delta_tool overwrite TABLE FILE [--where PRED]
//   delta_tool delete TABLE --where PRED
//   delta_tool update TABLE --where PRED --set C=LITERAL...
//   delta_tool add-columns TABLE --schema SPEC
//   delta_tool read TABLE [--version V | --timestamp MS] [--columns C,C] [--where PRED]
//                         [--out FILE.arrow | --count]
//   delta_tool describe TABLE [--version V | --timestamp MS]
//   delta_tool history TABLE [--limit N]
//   delta_tool vacuum TABLE [--retention-hours H] [--force] [--dry-run]
//   delta_tool checkpoint TABLE
//   delta_tool open TABLE            (times Open + Describe of the latest version)
//
// SPEC is "name:type[!],..." with type one of int32 int64 float32 float64 string bool date32
// timestamp (microseconds, UTC) timestamp_ntz; "!" marks a non-nullable column. FILE is JSON
// lines (*.jsonl/*.json) or CSV (*.csv), read with tables/import.h against the table's schema,
// an Arrow IPC stream (*.arrows) or file (*.arrow), or Parquet (*.parquet). PRED is the grammar of
// tables/predicate.h.
//
// --crash-before-commit writes the input as a Parquet data file into the table directory, the
// way a writer does before its log commit, then kills this process with SIGKILL: what a writer
// killed between its data files and its commit leaves behind. DeltaTable has no hook for this
// yet, so the tool writes that file itself (tests/README.md).
#include <arrow/api.h>
#include <arrow/io/api.h>
#include <arrow/ipc/api.h>
#include <parquet/arrow/reader.h>
#include <parquet/arrow/writer.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainyard/blob/blob_store.h"
#include "trainyard/common/clock.h"
#include "trainyard/common/json.h"
#include "trainyard/common/status.h"
#include "trainyard/common/strings.h"
#include "trainyard/tables/arrow_util.h"
#include "trainyard/tables/import.h"
#include "trainyard/tables/predicate.h"
#include "trainyard/tables/table.h"

namespace {

using namespace trainyard;
using tables::DeltaTable;
using tables::Literal;
using tables::Predicate;

// The parsed command line: a command, a table location, positional arguments and --options
// (repeatable; a flag without a value holds "").
struct Args {
  std::string command;
  std::string table;
  std::vector<std::string> positional;
  std::multimap<std::string, std::string> options;

  std::optional<std::string> Get(const std::string& name) const {
    auto it = options.find(name);
    if (it == options.end()) return std::nullopt;
    return it->second;
  }
  bool Has(const std::string& name) const { return options.count(name) > 0; }
  std::vector<std::string> All(const std::string& name) const {
    std::vector<std::string> out;
    for (auto [it, end] = options.equal_range(name); it != end; ++it) out.push_back(it->second);
    return out;
  }
};

const char* const kFlags[] = {"--crash-before-commit", "--force", "--dry-run", "--count"};

Result<Args> ParseArgs(int argc, char** argv) {
  if (argc < 3) return Status::InvalidArgument("expected: delta_tool COMMAND TABLE [options]");
  Args args;
  args.command = argv[1];
  args.table = argv[2];
  for (int i = 3; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) {
      args.positional.push_back(arg);
      continue;
    }
    bool flag = false;
    for (const char* f : kFlags) flag = flag || arg == f;
    if (flag) {
      args.options.emplace(arg.substr(2), "");
    } else if (i + 1 < argc) {
      args.options.emplace(arg.substr(2), argv[++i]);
    } else {
      return Status::InvalidArgument(arg + " needs a value");
    }
  }
  return args;
}

Result<int64_t> IntOption(const Args& args, const std::string& name, int64_t fallback) {
  auto text = args.Get(name);
  if (!text) return fallback;
  auto v = ParseInt64(*text);
  if (!v) return Status::InvalidArgument("--" + name + " must be an integer (got '" + *text + "')");
  return *v;
}

// ---- schemas and literals

Result<std::shared_ptr<arrow::DataType>> ParseType(const std::string& name) {
  static const std::map<std::string, std::shared_ptr<arrow::DataType>> kTypes = {
      {"int32", arrow::int32()},
      {"int64", arrow::int64()},
      {"float32", arrow::float32()},
      {"float64", arrow::float64()},
      {"string", arrow::utf8()},
      {"bool", arrow::boolean()},
      {"date32", arrow::date32()},
      {"timestamp", arrow::timestamp(arrow::TimeUnit::MICRO, "UTC")},
      {"timestamp_ntz", arrow::timestamp(arrow::TimeUnit::MICRO)},
  };
  auto it = kTypes.find(name);
  if (it == kTypes.end()) return Status::InvalidArgument("--schema: unknown type '" + name + "'");
  return it->second;
}

Result<std::vector<std::shared_ptr<arrow::Field>>> ParseFields(const std::string& spec) {
  std::vector<std::shared_ptr<arrow::Field>> fields;
  for (const std::string& item : SplitString(spec, ',')) {
    size_t colon = item.find(':');
    if (colon == std::string::npos || colon == 0) {
      return Status::InvalidArgument("--schema: expected name:type (got '" + item + "')");
    }
    std::string type = item.substr(colon + 1);
    bool nullable = type.empty() || type.back() != '!';
    if (!nullable) type.pop_back();
    TY_ASSIGN_OR_RETURN(auto arrow_type, ParseType(type));
    fields.push_back(arrow::field(item.substr(0, colon), arrow_type, nullable));
  }
  return fields;
}

// NULL, TRUE, FALSE, 'quoted string', an integer, a decimal; anything else is a string.
Literal ParseLiteral(const std::string& text) {
  if (text == "NULL" || text == "null") return std::monostate{};
  if (text == "TRUE" || text == "true") return true;
  if (text == "FALSE" || text == "false") return false;
  if (text.size() >= 2 && text.front() == '\'' && text.back() == '\'') {
    return text.substr(1, text.size() - 2);
  }
  if (auto i = ParseInt64(text)) return *i;
  if (auto d = ParseDouble(text)) return *d;
  return text;
}

// ---- input rows

// Part B's importer (tables/import.h) as an Arrow stream: JSON lines and CSV checked against
// the table's schema, a batch at a time; its errors name the line.
class ImporterReader : public arrow::RecordBatchReader {
 public:
  explicit ImporterReader(std::unique_ptr<tables::RecordImporter> importer)
      : importer_(std::move(importer)) {}
  std::shared_ptr<arrow::Schema> schema() const override { return importer_->schema(); }
  arrow::Status ReadNext(std::shared_ptr<arrow::RecordBatch>* batch) override {
    auto next = importer_->Next();
    if (!next.ok()) return arrow::Status::Invalid(next.status().ToString());
    *batch = *next;
    return arrow::Status::OK();
  }

 private:
  std::unique_ptr<tables::RecordImporter> importer_;
};

Result<std::shared_ptr<arrow::RecordBatchReader>> ImportText(
    const std::string& path, tables::ImportFormat format,
    const std::shared_ptr<arrow::Schema>& schema) {
  tables::ImportOptions options;
  options.format = format;
  options.expected_schema = schema;
  TY_ASSIGN_OR_RETURN(auto importer, tables::OpenImportFile(path, options));
  return std::make_shared<ImporterReader>(std::move(importer));
}

Result<std::shared_ptr<arrow::RecordBatchReader>> ReadParquet(const std::string& path) {
  TY_ASSIGN_OR_RETURN(auto file, tables::FromArrow(arrow::io::ReadableFile::Open(path), path));
  TY_ASSIGN_OR_RETURN(
      auto reader,
      tables::FromArrow(parquet::arrow::OpenFile(file, arrow::default_memory_pool()), path));
  TY_ASSIGN_OR_RETURN(auto table, tables::FromArrow(reader->ReadTable(), path));
  return std::make_shared<arrow::TableBatchReader>(table);
}

// The rows of FILE as a stream; JSON lines are typed by the table's `schema`.
Result<std::shared_ptr<arrow::RecordBatchReader>> OpenRows(
    const std::string& path, const std::shared_ptr<arrow::Schema>& schema) {
  auto ends_with = [&](std::string_view suffix) {
    return path.size() >= suffix.size() &&
           path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (ends_with(".jsonl") || ends_with(".json")) {
    return ImportText(path, tables::ImportFormat::kJsonl, schema);
  }
  if (ends_with(".csv")) return ImportText(path, tables::ImportFormat::kCsv, schema);
  if (ends_with(".parquet")) return ReadParquet(path);
  // Mapped, Arrow IPC is read in place: the batches are slices of the page cache, not copies.
  TY_ASSIGN_OR_RETURN(
      auto file,
      tables::FromArrow(arrow::io::MemoryMappedFile::Open(path, arrow::io::FileMode::READ), path));
  if (ends_with(".arrows")) {
    TY_ASSIGN_OR_RETURN(auto stream,
                        tables::FromArrow(arrow::ipc::RecordBatchStreamReader::Open(file), path));
    return std::shared_ptr<arrow::RecordBatchReader>(std::move(stream));
  }
  if (ends_with(".arrow")) {
    TY_ASSIGN_OR_RETURN(auto reader,
                        tables::FromArrow(arrow::ipc::RecordBatchFileReader::Open(file), path));
    TY_ASSIGN_OR_RETURN(auto table, tables::FromArrow(reader->ToTable(), path));
    return std::make_shared<arrow::TableBatchReader>(table);
  }
  return Status::InvalidArgument(
      "FILE must end in .jsonl, .json, .csv, .arrows, .arrow or .parquet (got '" + path + "')");
}

// ---- output

double MillisSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

void Print(const json::value& v) { std::printf("%s\n", json::serialize(v).c_str()); }

json::object CommitJson(const tables::CommitResult& r) {
  return {{"version", r.version},           {"timestamp_ms", r.timestamp_ms},
          {"files_added", r.files_added},   {"files_removed", r.files_removed},
          {"rows_written", r.rows_written}, {"rows_affected", r.rows_affected},
          {"attempts", r.attempts}};
}

json::value ScalarToJson(const arrow::Scalar& s) {
  if (!s.is_valid) return nullptr;
  switch (s.type->id()) {
    case arrow::Type::BOOL:
      return static_cast<const arrow::BooleanScalar&>(s).value;
    case arrow::Type::INT8:
    case arrow::Type::INT16:
    case arrow::Type::INT32:
    case arrow::Type::INT64: {
      auto cast = s.CastTo(arrow::int64());
      return cast.ok() ? json::value(static_cast<const arrow::Int64Scalar&>(**cast).value)
                       : json::value(s.ToString());
    }
    case arrow::Type::FLOAT:
      return DoubleToJson(static_cast<const arrow::FloatScalar&>(s).value);
    case arrow::Type::DOUBLE:
      return DoubleToJson(static_cast<const arrow::DoubleScalar&>(s).value);
    default:
      return json::value(s.ToString());  // strings as themselves, timestamps ISO-like
  }
}

Status PrintJsonLines(arrow::RecordBatchReader& reader) {
  while (true) {
    TY_ASSIGN_OR_RETURN(auto batch, tables::FromArrow(reader.Next(), "reading the table"));
    if (!batch) return Status::Ok();
    for (int64_t row = 0; row < batch->num_rows(); ++row) {
      json::object line;
      for (int c = 0; c < batch->num_columns(); ++c) {
        TY_ASSIGN_OR_RETURN(auto scalar,
                            tables::FromArrow(batch->column(c)->GetScalar(row), "a row"));
        line[batch->schema()->field(c)->name()] = ScalarToJson(*scalar);
      }
      Print(line);
    }
  }
}

}  // namespace

namespace {

// ---- the table

struct Session {
  std::unique_ptr<blob::BlobStore> store;
  SystemClock clock;
  tables::TableOptions options;  // names the table by its location in errors
};

Result<std::unique_ptr<Session>> OpenStore(const std::string& location) {
  auto session = std::make_unique<Session>();
  session->options.name = location;
  if (location.rfind("s3://", 0) == 0) {
    TY_ASSIGN_OR_RETURN(session->store, blob::OpenBlobStore(location));
  } else {
    std::error_code ec;
    std::filesystem::create_directories(location, ec);
    if (ec) return Status::IOError("creating " + location + ": " + ec.message());
    TY_ASSIGN_OR_RETURN(session->store, blob::OpenLocalBlobStore(location));
  }
  return session;
}

Result<tables::VersionSpec> VersionOption(const Args& args) {
  tables::VersionSpec at;
  if (args.Has("version")) {
    TY_ASSIGN_OR_RETURN(int64_t v, IntOption(args, "version", 0));
    at.version = v;
  }
  if (args.Has("timestamp")) {
    TY_ASSIGN_OR_RETURN(int64_t ts, IntOption(args, "timestamp", 0));
    at.timestamp_ms = ts;
  }
  return at;
}

Result<std::optional<Predicate>> WhereOption(const Args& args, bool required) {
  auto text = args.Get("where");
  if (!text) {
    if (required) return Status::InvalidArgument("--where is required");
    return std::optional<Predicate>();
  }
  TY_ASSIGN_OR_RETURN(auto predicate, Predicate::Parse(*text));
  return std::optional<Predicate>(std::move(predicate));
}

Result<std::string> OnlyFile(const Args& args) {
  if (args.positional.size() != 1) return Status::InvalidArgument("expected one FILE of rows");
  return args.positional[0];
}

// ---- commands

Status Create(Session& s, const Args& args) {
  auto spec = args.Get("schema");
  if (!spec) return Status::InvalidArgument("--schema is required");
  tables::CreateTableRequest request;
  TY_ASSIGN_OR_RETURN(auto fields, ParseFields(*spec));
  request.schema = arrow::schema(fields);
  if (auto partition = args.Get("partition"))
    request.partition_columns = SplitString(*partition, ',');
  for (const std::string& kv : args.All("property")) {
    size_t eq = kv.find('=');
    if (eq == std::string::npos) return Status::InvalidArgument("--property must be K=V");
    request.properties[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  request.name = args.Get("name").value_or("");
  auto start = std::chrono::steady_clock::now();
  TY_ASSIGN_OR_RETURN(auto table, DeltaTable::Create(*s.store, "", s.clock, request, s.options));
  TY_ASSIGN_OR_RETURN(int64_t version, table->LatestVersion());
  Print(json::object{{"version", version}, {"elapsed_ms", MillisSince(start)}});
  return Status::Ok();
}

// Writes the rows as a data file the way a writer does before its commit, then dies.
[[noreturn]] void CrashBeforeCommit(Session& s, arrow::RecordBatchReader& rows) {
  auto table = rows.ToTable();
  std::string local = std::filesystem::temp_directory_path() /
                      ("delta_tool_" + std::to_string(getpid()) + ".parquet");
  auto out = arrow::io::FileOutputStream::Open(local);
  if (table.ok() && out.ok() &&
      parquet::arrow::WriteTable(**table, arrow::default_memory_pool(), *out).ok() &&
      (*out)->Close().ok()) {
    std::string key = "part-00000-crashed-" + std::to_string(getpid()) + "-c000.snappy.parquet";
    if (s.store->PutFile(key, local).ok()) std::raise(SIGKILL);
  }
  std::fprintf(stderr, "delta_tool: could not write the orphan data file\n");
  std::_Exit(1);
}

Status Append(Session& s, const Args& args) {
  TY_ASSIGN_OR_RETURN(std::string file, OnlyFile(args));
  TY_ASSIGN_OR_RETURN(int64_t repeat, IntOption(args, "repeat", 1));
  TY_ASSIGN_OR_RETURN(auto table, DeltaTable::Open(*s.store, "", s.clock, s.options));
  TY_ASSIGN_OR_RETURN(auto info, table->Describe());
  auto start = std::chrono::steady_clock::now();
  json::array commits;
  for (int64_t i = 0; i < repeat; ++i) {
    TY_ASSIGN_OR_RETURN(auto rows, OpenRows(file, info.schema));
    if (args.Has("crash-before-commit")) CrashBeforeCommit(s, *rows);
    TY_ASSIGN_OR_RETURN(auto result, table->Append(*rows));
    commits.push_back(CommitJson(result));
  }
  Print(json::object{{"commits", std::move(commits)}, {"elapsed_ms", MillisSince(start)}});
  return Status::Ok();
}

Status Overwrite(Session& s, const Args& args) {
  TY_ASSIGN_OR_RETURN(std::string file, OnlyFile(args));
  TY_ASSIGN_OR_RETURN(auto where, WhereOption(args, false));
  TY_ASSIGN_OR_RETURN(auto table, DeltaTable::Open(*s.store, "", s.clock, s.options));
  TY_ASSIGN_OR_RETURN(auto info, table->Describe());
  TY_ASSIGN_OR_RETURN(auto rows, OpenRows(file, info.schema));
  TY_ASSIGN_OR_RETURN(auto result, table->Overwrite(*rows, where));
  Print(CommitJson(result));
  return Status::Ok();
}

Status Delete(Session& s, const Args& args) {
  TY_ASSIGN_OR_RETURN(auto where, WhereOption(args, true));
  TY_ASSIGN_OR_RETURN(auto table, DeltaTable::Open(*s.store, "", s.clock, s.options));
  TY_ASSIGN_OR_RETURN(auto result, table->Delete(*where));
  Print(CommitJson(result));
  return Status::Ok();
}

Status Update(Session& s, const Args& args) {
  TY_ASSIGN_OR_RETURN(auto where, WhereOption(args, true));
  std::map<std::string, Literal> set;
  for (const std::string& kv : args.All("set")) {
    size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
      return Status::InvalidArgument("--set must be C=LITERAL");
    set[kv.substr(0, eq)] = ParseLiteral(kv.substr(eq + 1));
  }
  if (set.empty()) return Status::InvalidArgument("--set is required");
  TY_ASSIGN_OR_RETURN(auto table, DeltaTable::Open(*s.store, "", s.clock, s.options));
  TY_ASSIGN_OR_RETURN(auto result, table->Update(*where, set));
  Print(CommitJson(result));
  return Status::Ok();
}

Status AddColumns(Session& s, const Args& args) {
  auto spec = args.Get("schema");
  if (!spec) return Status::InvalidArgument("--schema is required");
  TY_ASSIGN_OR_RETURN(auto fields, ParseFields(*spec));
  TY_ASSIGN_OR_RETURN(auto table, DeltaTable::Open(*s.store, "", s.clock, s.options));
  TY_ASSIGN_OR_RETURN(auto result, table->AddColumns(fields));
  Print(CommitJson(result));
  return Status::Ok();
}

Status WriteArrowFile(const std::string& path, arrow::RecordBatchReader& reader, int64_t* rows) {
  TY_ASSIGN_OR_RETURN(auto out, tables::FromArrow(arrow::io::FileOutputStream::Open(path), path));
  TY_ASSIGN_OR_RETURN(auto writer,
                      tables::FromArrow(arrow::ipc::MakeFileWriter(out, reader.schema()), path));
  while (true) {
    TY_ASSIGN_OR_RETURN(auto batch, tables::FromArrow(reader.Next(), "reading the table"));
    if (!batch) break;
    *rows += batch->num_rows();
    TY_RETURN_IF_ERROR(tables::FromArrow(writer->WriteRecordBatch(*batch), path));
  }
  TY_RETURN_IF_ERROR(tables::FromArrow(writer->Close(), path));
  return tables::FromArrow(out->Close(), path);
}

Status Read(Session& s, const Args& args) {
  tables::ReadOptions options;
  TY_ASSIGN_OR_RETURN(options.at, VersionOption(args));
  TY_ASSIGN_OR_RETURN(options.filter, WhereOption(args, false));
  if (auto columns = args.Get("columns")) options.columns = SplitString(*columns, ',');
  auto start = std::chrono::steady_clock::now();
  TY_ASSIGN_OR_RETURN(auto table, DeltaTable::Open(*s.store, "", s.clock, s.options));
  TY_ASSIGN_OR_RETURN(auto info, table->Describe(options.at));
  TY_ASSIGN_OR_RETURN(auto reader, table->Read(options));
  int64_t rows = 0;
  if (auto out = args.Get("out")) {
    TY_RETURN_IF_ERROR(WriteArrowFile(*out, *reader, &rows));
  } else if (args.Has("count")) {
    while (true) {
      TY_ASSIGN_OR_RETURN(auto batch, tables::FromArrow(reader->Next(), "reading the table"));
      if (!batch) break;
      rows += batch->num_rows();
    }
  } else {
    return PrintJsonLines(*reader);
  }
  Print(
      json::object{{"version", info.version}, {"rows", rows}, {"elapsed_ms", MillisSince(start)}});
  return Status::Ok();
}

json::array StringsJson(const std::vector<std::string>& v) {
  json::array out;
  for (const auto& s : v) out.emplace_back(s);
  return out;
}

json::object InfoJson(const tables::TableInfo& info) {
  json::object partition_of_files, properties;
  json::array files;
  for (const auto& f : info.files) files.emplace_back(f.path);
  for (const auto& [k, v] : info.properties) properties[k] = v;
  json::array columns;
  for (const auto& field : info.schema->fields()) {
    columns.push_back(json::object{{"name", field->name()},
                                   {"type", field->type()->ToString()},
                                   {"nullable", field->nullable()}});
  }
  return {{"version", info.version},
          {"timestamp_ms", info.timestamp_ms},
          {"id", info.id},
          {"name", info.name},
          {"columns", std::move(columns)},
          {"partition_columns", StringsJson(info.partition_columns)},
          {"properties", std::move(properties)},
          {"min_reader_version", info.min_reader_version},
          {"min_writer_version", info.min_writer_version},
          {"reader_features", StringsJson(info.reader_features)},
          {"writer_features", StringsJson(info.writer_features)},
          {"files", std::move(files)},
          {"num_files", info.num_files},
          {"num_rows", info.num_rows ? json::value(*info.num_rows) : json::value(nullptr)},
          {"size_bytes", info.size_bytes}};
}

Status Describe(Session& s, const Args& args) {
  TY_ASSIGN_OR_RETURN(auto at, VersionOption(args));
  TY_ASSIGN_OR_RETURN(auto table, DeltaTable::Open(*s.store, "", s.clock, s.options));
  TY_ASSIGN_OR_RETURN(auto info, table->Describe(at));
  Print(InfoJson(info));
  return Status::Ok();
}

Status History(Session& s, const Args& args) {
  TY_ASSIGN_OR_RETURN(int64_t limit, IntOption(args, "limit", 0));
  TY_ASSIGN_OR_RETURN(auto table, DeltaTable::Open(*s.store, "", s.clock, s.options));
  TY_ASSIGN_OR_RETURN(auto history, table->History(limit));
  json::array entries;
  for (const auto& h : history) {
    json::object params, metrics;
    for (const auto& [k, v] : h.operation_parameters) params[k] = v;
    for (const auto& [k, v] : h.operation_metrics) metrics[k] = v;
    entries.push_back(json::object{{"version", h.version},
                                   {"timestamp_ms", h.timestamp_ms},
                                   {"operation", h.operation},
                                   {"operation_parameters", std::move(params)},
                                   {"operation_metrics", std::move(metrics)},
                                   {"engine_info", h.engine_info}});
  }
  Print(json::object{{"history", std::move(entries)}});
  return Status::Ok();
}

Status Vacuum(Session& s, const Args& args) {
  tables::VacuumOptions options;
  if (args.Has("retention-hours")) {
    TY_ASSIGN_OR_RETURN(int64_t hours, IntOption(args, "retention-hours", 0));
    options.retention_ms = hours * 3600 * 1000;
  }
  options.force = args.Has("force");
  options.dry_run = args.Has("dry-run");
  TY_ASSIGN_OR_RETURN(auto table, DeltaTable::Open(*s.store, "", s.clock, s.options));
  TY_ASSIGN_OR_RETURN(auto result, table->Vacuum(options));
  Print(json::object{{"deleted", StringsJson(result.deleted)}, {"bytes", result.bytes}});
  return Status::Ok();
}

Status Checkpoint(Session& s, const Args&) {
  TY_ASSIGN_OR_RETURN(auto table, DeltaTable::Open(*s.store, "", s.clock, s.options));
  TY_RETURN_IF_ERROR(table->Checkpoint());
  TY_ASSIGN_OR_RETURN(int64_t version, table->LatestVersion());
  Print(json::object{{"version", version}});
  return Status::Ok();
}

Status OpenTimed(Session& s, const Args&) {
  auto start = std::chrono::steady_clock::now();
  TY_ASSIGN_OR_RETURN(auto table, DeltaTable::Open(*s.store, "", s.clock, s.options));
  TY_ASSIGN_OR_RETURN(auto info, table->Describe());
  double elapsed = MillisSince(start);
  Print(
      json::object{{"version", info.version}, {"num_files", info.num_files}, {"open_ms", elapsed}});
  return Status::Ok();
}

using Command = Status (*)(Session&, const Args&);
const std::map<std::string, Command> kCommands = {
    {"create", Create}, {"append", Append},         {"overwrite", Overwrite},
    {"delete", Delete}, {"update", Update},         {"add-columns", AddColumns},
    {"read", Read},     {"describe", Describe},     {"history", History},
    {"vacuum", Vacuum}, {"checkpoint", Checkpoint}, {"open", OpenTimed},
};

}  // namespace

int main(int argc, char** argv) {
  auto args = ParseArgs(argc, argv);
  auto command = args.ok() ? kCommands.find(args->command) : kCommands.end();
  if (!args.ok() || command == kCommands.end()) {
    std::fprintf(stderr, "delta_tool: %s\nusage: delta_tool COMMAND TABLE [options]; commands: ",
                 args.ok() ? ("unknown command '" + args->command + "'").c_str()
                           : args.status().ToString().c_str());
    for (const auto& [name, unused] : kCommands) std::fprintf(stderr, "%s ", name.c_str());
    std::fprintf(stderr, "\n");
    return 2;
  }
  auto session = OpenStore(args->table);
  Status status = session.ok() ? command->second(**session, *args) : session.status();
  if (!status.ok()) {
    std::fprintf(stderr, "delta_tool: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
