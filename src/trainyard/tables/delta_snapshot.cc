#include "trainyard/tables/delta_snapshot.h"

#include <arrow/io/file.h>
#include <arrow/io/memory.h>
#include <parquet/arrow/reader.h>
#include <parquet/arrow/schema.h>
#include <parquet/arrow/writer.h>
#include <sys/stat.h>

#include <algorithm>
#include <ctime>
#include <set>

#include "trainyard/common/json.h"
#include "trainyard/common/strings.h"
#include "trainyard/tables/arrow_util.h"
#include "trainyard/tables/delta_schema.h"

namespace trainyard::tables {
namespace {

std::string FormatMillis(int64_t ms) {
  std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(ms % 1000));
  return buf;
}

// A checkpoint file name: version, part (1-based) and number of parts (1 for a single file).
struct CheckpointName {
  int64_t version = 0;
  int part = 1;
  int parts = 1;
};

std::optional<CheckpointName> ParseCheckpointName(std::string_view name) {
  if (name.size() < 20 + 19 || !EndsWith(name, ".parquet")) return std::nullopt;
  auto digits = [](std::string_view s) -> std::optional<int64_t> {
    if (s.empty()) return std::nullopt;
    for (char c : s) {
      if (c < '0' || c > '9') return std::nullopt;
    }
    return ParseInt64(s);
  };
  auto version = digits(name.substr(0, 20));
  if (!version || name.substr(20, 12) != ".checkpoint.") return std::nullopt;
  if (name.substr(32) == "parquet") return CheckpointName{*version, 1, 1};
  if (name.size() < 32 + 8 + 3) return std::nullopt;
  std::string_view rest = name.substr(32, name.size() - 32 - 8);
  auto dot = rest.find('.');
  if (dot == std::string_view::npos) return std::nullopt;  // v2 checkpoints (uuid): unsupported
  auto part = digits(rest.substr(0, dot));
  auto parts = digits(rest.substr(dot + 1));
  if (!part || !parts || *part < 1 || *parts < 1 || *part > *parts || *parts > 100000) {
    return std::nullopt;
  }
  return CheckpointName{*version, static_cast<int>(*part), static_cast<int>(*parts)};
}

std::string MultipartName(int64_t version, int part, int parts) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%020lld.checkpoint.%010d.%010d.parquet",
                static_cast<long long>(version), part, parts);
  return buf;
}

// One element of an Arrow array as JSON (checkpoint rows become the same JSON actions that
// commits hold, so one decoder serves both).
json::value CellToJson(const arrow::Array& a, int64_t i) {
  if (a.IsNull(i)) return nullptr;
  switch (a.type_id()) {
    case arrow::Type::BOOL:
      return static_cast<const arrow::BooleanArray&>(a).Value(i);
    case arrow::Type::INT8:
      return static_cast<const arrow::Int8Array&>(a).Value(i);
    case arrow::Type::INT16:
      return static_cast<const arrow::Int16Array&>(a).Value(i);
    case arrow::Type::INT32:
      return static_cast<const arrow::Int32Array&>(a).Value(i);
    case arrow::Type::INT64:
      return static_cast<const arrow::Int64Array&>(a).Value(i);
    case arrow::Type::FLOAT:
      return static_cast<const arrow::FloatArray&>(a).Value(i);
    case arrow::Type::DOUBLE:
      return static_cast<const arrow::DoubleArray&>(a).Value(i);
    case arrow::Type::STRING:
      return json::string(static_cast<const arrow::StringArray&>(a).GetView(i));
    case arrow::Type::LARGE_STRING:
      return json::string(static_cast<const arrow::LargeStringArray&>(a).GetView(i));
    case arrow::Type::BINARY:
      return json::string(static_cast<const arrow::BinaryArray&>(a).GetView(i));
    case arrow::Type::TIMESTAMP:
      return static_cast<const arrow::TimestampArray&>(a).Value(i);
    case arrow::Type::STRUCT: {
      const auto& s = static_cast<const arrow::StructArray&>(a);
      json::object o;
      for (int f = 0; f < s.num_fields(); ++f) {
        o[s.struct_type()->field(f)->name()] = CellToJson(*s.field(f), i);
      }
      return o;
    }
    case arrow::Type::MAP: {
      const auto& m = static_cast<const arrow::MapArray&>(a);
      json::object o;
      for (int64_t j = m.value_offset(i); j < m.value_offset(i) + m.value_length(i); ++j) {
        json::value k = CellToJson(*m.keys(), j);
        if (k.is_string()) o[k.as_string()] = CellToJson(*m.items(), j);
      }
      return o;
    }
    case arrow::Type::LIST: {
      const auto& l = static_cast<const arrow::ListArray&>(a);
      json::array out;
      for (int64_t j = l.value_offset(i); j < l.value_offset(i) + l.value_length(i); ++j) {
        out.push_back(CellToJson(*l.values(), j));
      }
      return out;
    }
    default:
      return nullptr;
  }
}

// Appends a JSON value to a builder of `type` (the inverse of CellToJson, for the checkpoint
// schema's types). Absent or null values append null.
Status AppendJson(arrow::ArrayBuilder* builder, const json::value* v) {
  if (v == nullptr || v->is_null()) return FromArrow(builder->AppendNull(), "checkpoint");
  switch (builder->type()->id()) {
    case arrow::Type::STRING: {
      if (!v->is_string()) return FromArrow(builder->AppendNull(), "checkpoint");
      std::string_view s = v->as_string();
      return FromArrow(static_cast<arrow::StringBuilder*>(builder)->Append(s), "checkpoint");
    }
    case arrow::Type::INT64: {
      Result<int64_t> n = AsInt64(*v, "checkpoint");
      if (!n.ok()) return n.status();
      return FromArrow(static_cast<arrow::Int64Builder*>(builder)->Append(*n), "checkpoint");
    }
    case arrow::Type::INT32: {
      Result<int64_t> n = AsInt64(*v, "checkpoint");
      if (!n.ok()) return n.status();
      return FromArrow(static_cast<arrow::Int32Builder*>(builder)->Append(static_cast<int32_t>(*n)),
                       "checkpoint");
    }
    case arrow::Type::BOOL:
      return FromArrow(
          static_cast<arrow::BooleanBuilder*>(builder)->Append(v->is_bool() && v->as_bool()),
          "checkpoint");
    case arrow::Type::STRUCT: {
      auto* sb = static_cast<arrow::StructBuilder*>(builder);
      if (!v->is_object()) return FromArrow(sb->AppendNull(), "checkpoint");
      TY_RETURN_IF_ERROR(FromArrow(sb->Append(), "checkpoint"));
      for (int f = 0; f < sb->num_fields(); ++f) {
        const json::value* child = v->as_object().if_contains(sb->type()->field(f)->name());
        TY_RETURN_IF_ERROR(AppendJson(sb->field_builder(f), child));
      }
      return Status::Ok();
    }
    case arrow::Type::MAP: {
      auto* mb = static_cast<arrow::MapBuilder*>(builder);
      if (!v->is_object()) return FromArrow(mb->AppendNull(), "checkpoint");
      TY_RETURN_IF_ERROR(FromArrow(mb->Append(), "checkpoint"));
      for (const auto& [k, item] : v->as_object()) {
        json::value key(k);
        TY_RETURN_IF_ERROR(AppendJson(mb->key_builder(), &key));
        TY_RETURN_IF_ERROR(AppendJson(mb->item_builder(), &item));
      }
      return Status::Ok();
    }
    case arrow::Type::LIST: {
      auto* lb = static_cast<arrow::ListBuilder*>(builder);
      if (!v->is_array()) return FromArrow(lb->AppendNull(), "checkpoint");
      TY_RETURN_IF_ERROR(FromArrow(lb->Append(), "checkpoint"));
      for (const auto& e : v->as_array()) TY_RETURN_IF_ERROR(AppendJson(lb->value_builder(), &e));
      return Status::Ok();
    }
    default:
      return Status::Internal("checkpoint: unexpected type " + builder->type()->ToString());
  }
}

std::shared_ptr<arrow::Schema> CheckpointSchema(bool with_domains) {
  auto str = arrow::utf8();
  auto i64 = arrow::int64();
  auto strmap = arrow::map(str, str);
  arrow::FieldVector fields = {
      arrow::field("txn", arrow::struct_({arrow::field("appId", str), arrow::field("version", i64),
                                          arrow::field("lastUpdated", i64)})),
      arrow::field(
          "add", arrow::struct_({arrow::field("path", str), arrow::field("partitionValues", strmap),
                                 arrow::field("size", i64), arrow::field("modificationTime", i64),
                                 arrow::field("dataChange", arrow::boolean()),
                                 arrow::field("tags", strmap), arrow::field("stats", str)})),
      arrow::field(
          "remove",
          arrow::struct_({arrow::field("path", str), arrow::field("deletionTimestamp", i64),
                          arrow::field("dataChange", arrow::boolean()),
                          arrow::field("extendedFileMetadata", arrow::boolean()),
                          arrow::field("partitionValues", strmap), arrow::field("size", i64)})),
      arrow::field(
          "metaData",
          arrow::struct_(
              {arrow::field("id", str), arrow::field("name", str), arrow::field("description", str),
               arrow::field("format", arrow::struct_({arrow::field("provider", str),
                                                      arrow::field("options", strmap)})),
               arrow::field("schemaString", str),
               arrow::field("partitionColumns", arrow::list(str)),
               arrow::field("configuration", strmap), arrow::field("createdTime", i64)})),
      arrow::field("protocol", arrow::struct_({arrow::field("minReaderVersion", arrow::int32()),
                                               arrow::field("minWriterVersion", arrow::int32()),
                                               arrow::field("readerFeatures", arrow::list(str)),
                                               arrow::field("writerFeatures", arrow::list(str))}))};
  if (with_domains) {
    fields.push_back(arrow::field(
        "domainMetadata",
        arrow::struct_({arrow::field("domain", str), arrow::field("configuration", str),
                        arrow::field("removed", arrow::boolean())})));
  }
  return arrow::schema(fields);
}

// Leaf column indices of the checkpoint's action columns, without the parsed copies of stats
// and partition values that some writers add.
void CollectLeaves(const parquet::arrow::SchemaField& field, int depth, std::vector<int>& out) {
  if (depth == 1 &&
      (field.field->name() == "stats_parsed" || field.field->name() == "partitionValues_parsed")) {
    return;
  }
  if (field.column_index >= 0) out.push_back(field.column_index);
  for (const auto& child : field.children) CollectLeaves(child, depth + 1, out);
}

// The commits' modification times made strictly increasing (a time not after its predecessor's
// becomes that time + 1 ms), as Spark adjusts them, so that time travel is well defined.
std::vector<int64_t> MonotonicCommitTimes(const std::vector<CommitFile>& commits) {
  std::vector<int64_t> times;
  times.reserve(commits.size());
  for (const CommitFile& c : commits) {
    times.push_back(times.empty() ? c.modified_ms : std::max(c.modified_ms, times.back() + 1));
  }
  return times;
}

// Decodes a checkpoint's `add` column straight from Arrow, without building JSON per row (that
// was most of the time to open a table with 10,000 files). Only for the column types the
// protocol gives (Spark, delta-rs and we write them); Make returns nullptr for anything else,
// and the rows go through the JSON decoder.
class AddColumnDecoder {
 public:
  static std::unique_ptr<AddColumnDecoder> Make(const arrow::Array& column) {
    if (column.type_id() != arrow::Type::STRUCT) return nullptr;
    auto d = std::unique_ptr<AddColumnDecoder>(new AddColumnDecoder);
    d->add_ = &static_cast<const arrow::StructArray&>(column);
    auto child = [&](const char* name, arrow::Type::type type) -> const arrow::Array* {
      std::shared_ptr<arrow::Array> c = d->add_->GetFieldByName(name);
      return c && c->type_id() == type ? c.get() : nullptr;
    };
    d->path_ = static_cast<const arrow::StringArray*>(child("path", arrow::Type::STRING));
    d->size_ = static_cast<const arrow::Int64Array*>(child("size", arrow::Type::INT64));
    d->mtime_ =
        static_cast<const arrow::Int64Array*>(child("modificationTime", arrow::Type::INT64));
    d->data_change_ =
        static_cast<const arrow::BooleanArray*>(child("dataChange", arrow::Type::BOOL));
    d->stats_ = static_cast<const arrow::StringArray*>(child("stats", arrow::Type::STRING));
    d->partitions_ =
        static_cast<const arrow::MapArray*>(child("partitionValues", arrow::Type::MAP));
    d->tags_ = static_cast<const arrow::MapArray*>(child("tags", arrow::Type::MAP));
    d->deletion_vector_ = d->add_->GetFieldByName("deletionVector");
    if (!d->path_ || !d->size_ || !d->partitions_ || !StringMap(*d->partitions_) ||
        (d->tags_ && !StringMap(*d->tags_))) {
      return nullptr;
    }
    for (int f = 0; f < d->add_->num_fields(); ++f) {
      const std::string& name = d->add_->struct_type()->field(f)->name();
      if (name == "stats_parsed" || name == "partitionValues_parsed") continue;
      if (!kKnown.count(name)) return nullptr;  // a field the JSON decoder may treat otherwise
    }
    return d;
  }

  Result<AddAction> Decode(int64_t row) const {
    AddAction a;
    if (!path_->IsValid(row) || !size_->IsValid(row)) {
      return Status::InvalidArgument("add: path and size must be set");
    }
    a.path = std::string(path_->GetView(row));
    a.size = size_->Value(row);
    if (mtime_ && mtime_->IsValid(row)) a.modification_time = mtime_->Value(row);
    if (data_change_ && data_change_->IsValid(row)) a.data_change = data_change_->Value(row);
    if (stats_ && stats_->IsValid(row)) a.stats = std::string(stats_->GetView(row));
    ReadMap(*partitions_, row, [&](std::string k, std::optional<std::string> v) {
      a.partition_values.emplace(std::move(k), std::move(v));
    });
    if (tags_) {
      ReadMap(*tags_, row, [&](std::string k, std::optional<std::string> v) {
        if (v) a.tags.emplace(std::move(k), std::move(*v));
      });
    }
    a.has_deletion_vector = deletion_vector_ && deletion_vector_->IsValid(row);
    if (a.path.empty()) return Status::InvalidArgument("add: path must not be empty");
    if (a.size < 0) return Status::InvalidArgument("add: size must not be negative");
    return a;
  }

 private:
  AddColumnDecoder() = default;

  static inline const std::set<std::string> kKnown = {"path",
                                                      "partitionValues",
                                                      "size",
                                                      "modificationTime",
                                                      "dataChange",
                                                      "stats",
                                                      "tags",
                                                      "deletionVector",
                                                      "baseRowId",
                                                      "defaultRowCommitVersion",
                                                      "clusteringProvider"};

  static bool StringMap(const arrow::MapArray& m) {
    return m.keys()->type_id() == arrow::Type::STRING &&
           m.items()->type_id() == arrow::Type::STRING;
  }

  template <typename F>
  static void ReadMap(const arrow::MapArray& m, int64_t row, F&& put) {
    if (!m.IsValid(row)) return;
    const auto& keys = static_cast<const arrow::StringArray&>(*m.keys());
    const auto& items = static_cast<const arrow::StringArray&>(*m.items());
    for (int64_t j = m.value_offset(row); j < m.value_offset(row) + m.value_length(row); ++j) {
      if (!keys.IsValid(j)) continue;
      std::optional<std::string> v;
      if (items.IsValid(j)) v = std::string(items.GetView(j));
      put(std::string(keys.GetView(j)), std::move(v));
    }
  }

  const arrow::StructArray* add_ = nullptr;
  const arrow::StringArray* path_ = nullptr;
  const arrow::Int64Array* size_ = nullptr;
  const arrow::Int64Array* mtime_ = nullptr;
  const arrow::BooleanArray* data_change_ = nullptr;
  const arrow::StringArray* stats_ = nullptr;
  const arrow::MapArray* partitions_ = nullptr;
  const arrow::MapArray* tags_ = nullptr;
  std::shared_ptr<arrow::Array> deletion_vector_;
};

bool SupportedReaderFeature(const std::string& f) {
  return f == "timestampNtz" || f == "vacuumProtocolCheck" || f == "columnMapping" ||
         f == "domainMetadata" || f == "checkConstraints" || f == "appendOnly" || f == "invariants";
}

bool SupportedWriterFeature(const std::string& f) {
  return f == "timestampNtz" || f == "vacuumProtocolCheck" || f == "appendOnly" ||
         f == "invariants" || f == "domainMetadata";
}

Status CheckColumnMapping(const Snapshot& s) {
  auto it = s.metadata.configuration.find("delta.columnMapping.mode");
  if (it != s.metadata.configuration.end() && it->second != "none") {
    return Status::FailedPrecondition("the table uses column mapping (delta.columnMapping.mode=" +
                                      it->second + "), which this reader does not support");
  }
  return Status::Ok();
}

}  // namespace

Status CheckReadable(const Snapshot& s) {
  const ProtocolAction& p = s.protocol;
  if (p.min_reader_version > 3) {
    return Status::FailedPrecondition("the table needs reader version " +
                                      std::to_string(p.min_reader_version) +
                                      "; this reader supports up to 3");
  }
  if (p.min_reader_version == 3 && p.reader_features) {
    for (const auto& f : *p.reader_features) {
      if (!SupportedReaderFeature(f)) {
        return Status::FailedPrecondition("the table uses the reader feature '" + f +
                                          "', which this reader does not support");
      }
    }
  }
  return CheckColumnMapping(s);
}

Status CheckWritable(const Snapshot& s) {
  TY_RETURN_IF_ERROR(CheckReadable(s));
  const ProtocolAction& p = s.protocol;
  if (p.min_writer_version > 2 && p.min_writer_version < 7) {
    return Status::FailedPrecondition(
        "the table needs writer version " + std::to_string(p.min_writer_version) +
        " (check constraints, generated or identity columns, change data feed); this writer "
        "supports 2 and table features");
  }
  if (p.min_writer_version > 7) {
    return Status::FailedPrecondition("the table needs writer version " +
                                      std::to_string(p.min_writer_version));
  }
  if (p.min_writer_version == 7 && p.writer_features) {
    for (const auto& f : *p.writer_features) {
      if (!SupportedWriterFeature(f)) {
        return Status::FailedPrecondition("the table uses the writer feature '" + f +
                                          "', which this writer does not support");
      }
    }
  }
  return Status::Ok();
}

Result<std::optional<int64_t>> IntervalProperty(const Snapshot& snapshot, const std::string& key) {
  auto it = snapshot.metadata.configuration.find(key);
  if (it == snapshot.metadata.configuration.end()) return std::optional<int64_t>();
  std::string text = ToLower(Trim(it->second));
  if (StartsWith(text, "interval ")) text = text.substr(9);
  std::vector<std::string> tokens;
  for (const auto& t : SplitString(text, ' ')) {
    if (!t.empty()) tokens.push_back(t);
  }
  if (tokens.empty() || tokens.size() % 2 != 0) {
    return Status::InvalidArgument(key + " must look like 'interval 7 days' (got '" + it->second +
                                   "')");
  }
  int64_t total = 0;
  for (size_t i = 0; i < tokens.size(); i += 2) {
    auto n = ParseInt64(tokens[i]);
    std::string unit = tokens[i + 1];
    if (EndsWith(unit, "s")) unit.pop_back();
    static const std::map<std::string, int64_t> kUnits = {
        {"millisecond", 1},  {"second", 1000},    {"minute", 60'000},
        {"hour", 3'600'000}, {"day", 86'400'000}, {"week", 7 * 86'400'000LL}};
    auto u = kUnits.find(unit);
    if (!n || *n < 0 || u == kUnits.end() || *n > INT64_MAX / u->second / 4) {
      return Status::InvalidArgument(key + " must look like 'interval 7 days' (got '" + it->second +
                                     "')");
    }
    total += *n * u->second;
  }
  return std::optional<int64_t>(total);
}

DeltaLog::DeltaLog(blob::BlobStore& store, std::string root, std::string name)
    : store_(store), root_(std::move(root)), name_(std::move(name)) {}

std::string DeltaLog::TableName() const {
  if (!name_.empty()) return "table '" + name_ + "'";
  return root_.empty() ? "the table at the store's root" : "table '" + root_ + "'";
}

std::string DeltaLog::Key(std::string_view relative) const {
  return root_.empty() ? std::string(relative) : root_ + "/" + std::string(relative);
}

std::string DeltaLog::Describe(int64_t version) const {
  return TableName() + ": log entry " + CommitFileName(version) + " (version " +
         std::to_string(version) + ")";
}

Status DeltaLog::Apply(Snapshot& s, std::vector<Action> actions) {
  for (Action& a : actions) {
    if (a.protocol) s.protocol = std::move(*a.protocol);
    if (a.metadata) s.metadata = std::move(*a.metadata);
    if (a.add) {
      if (a.add->has_deletion_vector) {
        return Status::FailedPrecondition(
            "the table uses the reader feature 'deletionVectors' (file " + a.add->path +
            "), which this reader does not support");
      }
      s.tombstones.erase(a.add->path);
      std::string path = a.add->path;
      s.files[path] = std::move(*a.add);
    }
    if (a.remove) {
      s.files.erase(a.remove->path);
      std::string path = a.remove->path;
      s.tombstones[path] = std::move(*a.remove);
    }
    if (a.txn) s.txns[a.txn->app_id] = *a.txn;
    if (a.domain_metadata) {
      if (a.domain_metadata->removed) {
        s.domains.erase(a.domain_metadata->domain);
      } else {
        s.domains[a.domain_metadata->domain] = *a.domain_metadata;
      }
    }
    if (a.commit_info) {
      if (auto ts = a.commit_info->Timestamp()) s.timestamp_ms = *ts;
    }
  }
  return Status::Ok();
}

Result<std::optional<std::vector<Action>>> DeltaLog::ReadCommit(int64_t version) const {
  Result<std::string> bytes = store_.GetBytes(LogKey(CommitFileName(version)));
  if (!bytes.ok()) {
    if (bytes.status().IsNotFound()) return std::optional<std::vector<Action>>();
    return bytes.status().WithContext(Describe(version));
  }
  Result<std::vector<Action>> actions = ParseCommit(*bytes);
  if (!actions.ok()) {
    return Status(actions.status().code(), Describe(version) +
                                               " is damaged: " + actions.status().message() +
                                               "; earlier versions can still be read by version");
  }
  return std::optional<std::vector<Action>>(std::move(actions).value());
}

Result<int64_t> DeltaLog::CommitTimestamp(int64_t version) const {
  TY_ASSIGN_OR_RETURN(auto actions, ReadCommit(version));
  if (!actions) return Status::NotFound("version " + std::to_string(version) + " does not exist");
  for (const Action& a : *actions) {
    if (a.commit_info) {
      if (auto ts = a.commit_info->Timestamp()) return *ts;
    }
  }
  TY_ASSIGN_OR_RETURN(auto commits, ListCommits());
  for (const CommitFile& c : commits) {
    if (c.version == version) return c.modified_ms;
  }
  return Status::NotFound("version " + std::to_string(version) + " does not exist");
}

Result<std::vector<CommitFile>> DeltaLog::ListCommits() const {
  TY_ASSIGN_OR_RETURN(auto entries, store_.List(Key("_delta_log")));
  std::vector<CommitFile> commits;
  for (const auto& e : entries) {
    if (auto v = ParseCommitFileName(e.name); v && !e.is_dir) {
      commits.push_back(CommitFile{*v, e.modified_ms});
    }
  }
  std::sort(commits.begin(), commits.end(),
            [](const CommitFile& a, const CommitFile& b) { return a.version < b.version; });
  return commits;
}

Result<std::vector<int64_t>> DeltaLog::ListCommitVersions() const {
  TY_ASSIGN_OR_RETURN(auto commits, ListCommits());
  std::vector<int64_t> versions;
  versions.reserve(commits.size());
  for (const CommitFile& c : commits) versions.push_back(c.version);
  return versions;
}

Result<std::vector<Action>> DeltaLog::ReadCheckpointFile(const std::string& name) const {
  std::string context = TableName() + ": checkpoint " + name;
  Result<std::string> local = store_.LocalPathForRead(LogKey(name));
  if (!local.ok()) return local.status().WithContext(context);
  TY_ASSIGN_OR_RETURN(auto file, FromArrow(arrow::io::ReadableFile::Open(*local), context));
  TY_ASSIGN_OR_RETURN(
      auto reader,
      FromArrow(parquet::arrow::OpenFile(file, arrow::default_memory_pool()), context));
  std::vector<int> leaves;
  static const std::set<std::string> kActions = {"add",      "remove", "metaData",
                                                 "protocol", "txn",    "domainMetadata"};
  for (const auto& field : reader->manifest().schema_fields) {
    if (kActions.count(field.field->name())) CollectLeaves(field, 0, leaves);
  }
  TY_ASSIGN_OR_RETURN(std::shared_ptr<arrow::Table> table,
                      FromArrow(reader->ReadTable(leaves), context));
  TY_ASSIGN_OR_RETURN(table, FromArrow(table->CombineChunks(), context));
  std::vector<Action> actions;
  actions.reserve(static_cast<size_t>(table->num_rows()));  // Action is large: never relocate
  int add_column = table->schema()->GetFieldIndex("add");
  std::unique_ptr<AddColumnDecoder> adds;
  if (add_column >= 0 && table->column(add_column)->num_chunks() == 1) {
    adds = AddColumnDecoder::Make(*table->column(add_column)->chunk(0));
  }
  for (int64_t row = 0; row < table->num_rows(); ++row) {
    json::object object;
    for (int c = 0; c < table->num_columns(); ++c) {
      const auto& column = *table->column(c)->chunk(0);
      if (!column.IsValid(row)) continue;
      if (c == add_column && adds) {
        Result<AddAction> add = adds->Decode(row);
        if (!add.ok()) return add.status().WithContext(context + " row " + std::to_string(row));
        actions.emplace_back().add = std::move(add).value();
        continue;
      }
      object[table->field(c)->name()] = CellToJson(column, row);
    }
    if (object.empty()) continue;
    Result<Action> action = ActionFromJson(object);
    if (!action.ok()) {
      return action.status().WithContext(context + " row " + std::to_string(row));
    }
    actions.push_back(std::move(action).value());
  }
  return actions;
}

Result<std::shared_ptr<Snapshot>> DeltaLog::LoadFromCheckpoint(int64_t version, int parts) const {
  auto snapshot = std::make_shared<Snapshot>();
  for (int part = 1; part <= parts; ++part) {
    std::string name =
        parts == 1 ? CheckpointFileName(version) : MultipartName(version, part, parts);
    TY_ASSIGN_OR_RETURN(auto actions, ReadCheckpointFile(name));
    TY_RETURN_IF_ERROR(Apply(*snapshot, std::move(actions)));
  }
  snapshot->version = version;
  snapshot->timestamp_ms = 0;
  Result<int64_t> ts = CommitTimestamp(version);
  if (ts.ok()) snapshot->timestamp_ms = *ts;
  return snapshot;
}

Status DeltaLog::Finish(Snapshot& s) const {
  if (s.metadata.schema_string.empty()) {
    return Status::FailedPrecondition(TableName() + ": the log has no metaData action");
  }
  Result<std::shared_ptr<arrow::Schema>> schema = SchemaFromDeltaJson(s.metadata.schema_string);
  if (!schema.ok()) return schema.status().WithContext(TableName());
  s.schema = *schema;
  return Status::Ok();
}

Result<std::shared_ptr<const Snapshot>> DeltaLog::Replay(std::shared_ptr<Snapshot> base,
                                                         int64_t from,
                                                         std::optional<int64_t> until) const {
  for (int64_t v = from; !until || v <= *until; ++v) {
    TY_ASSIGN_OR_RETURN(auto actions, ReadCommit(v));
    if (!actions) break;
    base->timestamp_ms = 0;
    Status applied = Apply(*base, std::move(*actions));
    if (!applied.ok()) return applied.WithContext(Describe(v));
    base->version = v;
  }
  if (base->version < 0) {
    return Status::NotFound("no Delta table at '" + (name_.empty() ? root_ : name_) +
                            "' (no _delta_log entries)");
  }
  TY_RETURN_IF_ERROR(Finish(*base));
  return std::shared_ptr<const Snapshot>(std::move(base));
}

Result<std::shared_ptr<const Snapshot>> DeltaLog::LoadLatest() const {
  Result<std::string> last = store_.GetBytes(LogKey("_last_checkpoint"));
  if (last.ok()) {
    Result<json::object> o = ParseJsonObject(*last);
    if (o.ok()) {
      Result<int64_t> version = RequiredInt64(*o, "version");
      Result<std::optional<int64_t>> parts = OptionalInt64(*o, "parts");
      if (version.ok() && parts.ok()) {
        auto base = LoadFromCheckpoint(*version, static_cast<int>(parts->value_or(1)));
        if (base.ok()) return Replay(*base, *version + 1, std::nullopt);
      }
    }
  }
  // No (usable) _last_checkpoint: the newest complete checkpoint found by listing.
  TY_ASSIGN_OR_RETURN(auto entries, store_.List(Key("_delta_log")));
  std::map<int64_t, std::pair<int, std::set<int>>> checkpoints;  // version -> (parts, seen)
  std::optional<int64_t> first_commit;
  for (const auto& e : entries) {
    if (auto v = ParseCommitFileName(e.name)) {
      if (!first_commit || *v < *first_commit) first_commit = *v;
    } else if (auto c = ParseCheckpointName(e.name)) {
      auto& [parts, seen] = checkpoints[c->version];
      parts = c->parts;
      seen.insert(c->part);
    }
  }
  for (auto it = checkpoints.rbegin(); it != checkpoints.rend(); ++it) {
    if (static_cast<int>(it->second.second.size()) != it->second.first) continue;
    TY_ASSIGN_OR_RETURN(auto base, LoadFromCheckpoint(it->first, it->second.first));
    return Replay(base, it->first + 1, std::nullopt);
  }
  if (!first_commit) {
    return Status::NotFound("no Delta table at '" + (name_.empty() ? root_ : name_) +
                            "' (no _delta_log entries)");
  }
  if (*first_commit != 0) {
    return Status::FailedPrecondition(TableName() + ": the log starts at version " +
                                      std::to_string(*first_commit) + " without a checkpoint");
  }
  return Replay(std::make_shared<Snapshot>(), 0, std::nullopt);
}

Result<std::shared_ptr<const Snapshot>> DeltaLog::LoadVersion(int64_t version) const {
  TY_ASSIGN_OR_RETURN(auto entries, store_.List(Key("_delta_log")));
  std::map<int64_t, std::pair<int, std::set<int>>> checkpoints;
  std::set<int64_t> commits;
  for (const auto& e : entries) {
    if (auto v = ParseCommitFileName(e.name)) {
      commits.insert(*v);
    } else if (auto c = ParseCheckpointName(e.name)) {
      auto& [parts, seen] = checkpoints[c->version];
      parts = c->parts;
      seen.insert(c->part);
    }
  }
  if (commits.empty()) {
    return Status::NotFound("no Delta table at '" + (name_.empty() ? root_ : name_) +
                            "' (no _delta_log entries)");
  }
  int64_t latest = *commits.rbegin();
  if (version < 0 || version > latest) {
    return Status::NotFound("version " + std::to_string(version) + " does not exist; latest is " +
                            std::to_string(latest));
  }
  for (auto it = checkpoints.rbegin(); it != checkpoints.rend(); ++it) {
    if (it->first > version || static_cast<int>(it->second.second.size()) != it->second.first) {
      continue;
    }
    TY_ASSIGN_OR_RETURN(auto base, LoadFromCheckpoint(it->first, it->second.first));
    TY_ASSIGN_OR_RETURN(auto snapshot, Replay(base, it->first + 1, version));
    if (snapshot->version == version) return snapshot;
    break;
  }
  if (!commits.count(0)) {
    return Status::NotFound("version " + std::to_string(version) +
                            " is no longer available; the oldest commit is " +
                            std::to_string(*commits.begin()));
  }
  TY_ASSIGN_OR_RETURN(auto snapshot, Replay(std::make_shared<Snapshot>(), 0, version));
  if (snapshot->version != version) {
    return Status::FailedPrecondition(TableName() + ": commit " +
                                      std::to_string(snapshot->version + 1) +
                                      " is missing from the log");
  }
  return snapshot;
}

Result<std::shared_ptr<const Snapshot>> DeltaLog::Advance(
    std::shared_ptr<const Snapshot> base) const {
  TY_ASSIGN_OR_RETURN(auto next, ReadCommit(base->version + 1));
  if (!next) return base;
  auto copy = std::make_shared<Snapshot>(*base);
  copy->timestamp_ms = 0;
  Status applied = Apply(*copy, std::move(*next));
  if (!applied.ok()) return applied.WithContext(Describe(base->version + 1));
  copy->version = base->version + 1;
  return Replay(copy, base->version + 2, std::nullopt);
}

Result<int64_t> DeltaLog::VersionAtTimestamp(int64_t timestamp_ms, int64_t latest,
                                             bool in_commit_timestamps) const {
  TY_ASSIGN_OR_RETURN(auto commits, ListCommits());
  while (!commits.empty() && commits.back().version > latest) commits.pop_back();
  if (commits.empty()) return Status::NotFound(TableName() + " has no commits");
  std::vector<int64_t> times = MonotonicCommitTimes(commits);
  if (in_commit_timestamps) {
    // Each commit's own inCommitTimestamp where it has one (they increase by construction).
    for (size_t i = 0; i < commits.size(); ++i) {
      TY_ASSIGN_OR_RETURN(auto actions, ReadCommit(commits[i].version));
      if (!actions) continue;
      for (const Action& a : *actions) {
        if (!a.commit_info) continue;
        if (auto ict = a.commit_info->InCommitTimestamp()) times[i] = *ict;
      }
    }
  }
  if (timestamp_ms < times.front()) {
    return Status::InvalidArgument("timestamp " + FormatMillis(timestamp_ms) +
                                   " is before the table's first commit (version " +
                                   std::to_string(commits.front().version) + " at " +
                                   FormatMillis(times.front()) + ")");
  }
  size_t at = std::upper_bound(times.begin(), times.end(), timestamp_ms) - times.begin();
  return commits[at - 1].version;
}

Status DeltaLog::WriteCheckpoint(const Snapshot& s, int64_t tombstone_cutoff_ms) const {
  std::string context = TableName() + ": writing checkpoint " + CheckpointFileName(s.version);
  auto schema = CheckpointSchema(!s.domains.empty());
  TY_ASSIGN_OR_RETURN(std::unique_ptr<arrow::ArrayBuilder> builder,
                      FromArrow(arrow::MakeBuilder(arrow::struct_(schema->fields())), context));
  auto* rows = static_cast<arrow::StructBuilder*>(builder.get());
  int64_t count = 0;
  auto append = [&](const Action& a) -> Status {
    json::value row = ActionToJson(a);
    ++count;
    return AppendJson(rows, &row);
  };
  Action protocol;
  protocol.protocol = s.protocol;
  TY_RETURN_IF_ERROR(append(protocol));
  Action metadata;
  metadata.metadata = s.metadata;
  TY_RETURN_IF_ERROR(append(metadata));
  for (const auto& [id, txn] : s.txns) {
    Action a;
    a.txn = txn;
    TY_RETURN_IF_ERROR(append(a));
  }
  for (const auto& [domain, d] : s.domains) {
    Action a;
    a.domain_metadata = d;
    TY_RETURN_IF_ERROR(append(a));
  }
  for (const auto& [path, add] : s.files) {
    Action a;
    a.add = add;
    a.add->data_change = false;
    TY_RETURN_IF_ERROR(append(a));
  }
  for (const auto& [path, remove] : s.tombstones) {
    if (remove.deletion_timestamp.value_or(0) < tombstone_cutoff_ms) continue;
    Action a;
    a.remove = remove;
    a.remove->data_change = false;
    TY_RETURN_IF_ERROR(append(a));
  }
  std::shared_ptr<arrow::Array> array;
  TY_RETURN_IF_ERROR(FromArrow(rows->Finish(&array), context));
  TY_ASSIGN_OR_RETURN(auto batch, FromArrow(arrow::RecordBatch::FromStructArray(array), context));
  auto table = arrow::Table::Make(schema, batch->columns());
  TY_ASSIGN_OR_RETURN(auto sink, FromArrow(arrow::io::BufferOutputStream::Create(), context));
  auto props =
      parquet::WriterProperties::Builder().compression(arrow::Compression::SNAPPY)->build();
  TY_RETURN_IF_ERROR(FromArrow(
      parquet::arrow::WriteTable(*table, arrow::default_memory_pool(), sink, 1 << 20, props),
      context));
  TY_ASSIGN_OR_RETURN(auto buffer, FromArrow(sink->Finish(), context));
  TY_RETURN_IF_ERROR(store_.PutBytes(LogKey(CheckpointFileName(s.version)), buffer->ToString()));
  json::object last{{"version", s.version},
                    {"size", count},
                    {"sizeInBytes", buffer->size()},
                    {"numOfAddFiles", static_cast<int64_t>(s.files.size())}};
  return store_.PutBytes(LogKey("_last_checkpoint"), json::serialize(last));
}

}  // namespace trainyard::tables
