#include "trainyard/tables/delta_log.h"

#include <cctype>
#include <cmath>
#include <cstdio>

#include "trainyard/common/json.h"
#include "trainyard/common/strings.h"

namespace trainyard::tables {
namespace {

Result<std::map<std::string, std::string>> StringMap(const json::object& o,
                                                     std::string_view field) {
  std::map<std::string, std::string> out;
  TY_ASSIGN_OR_RETURN(const json::object* m, OptionalObject(o, field));
  if (m == nullptr) return out;
  for (const auto& [k, v] : *m) {
    if (v.is_null()) continue;
    if (!v.is_string()) {
      return Status::InvalidArgument(std::string(field) + "." + std::string(k) +
                                     " must be a string (got " + DescribeJson(v) + ")");
    }
    out[std::string(k)] = std::string(v.as_string());
  }
  return out;
}

Result<std::map<std::string, std::optional<std::string>>> NullableStringMap(
    const json::object& o, std::string_view field) {
  std::map<std::string, std::optional<std::string>> out;
  TY_ASSIGN_OR_RETURN(const json::object* m, OptionalObject(o, field));
  if (m == nullptr) return out;
  for (const auto& [k, v] : *m) {
    if (v.is_null()) {
      out[std::string(k)] = std::nullopt;
    } else if (v.is_string()) {
      out[std::string(k)] = std::string(v.as_string());
    } else {
      return Status::InvalidArgument(std::string(field) + "." + std::string(k) +
                                     " must be a string or null (got " + DescribeJson(v) + ")");
    }
  }
  return out;
}

Result<std::optional<std::vector<std::string>>> OptionalStrings(const json::object& o,
                                                                std::string_view field) {
  TY_ASSIGN_OR_RETURN(const json::array* a, OptionalArray(o, field));
  if (a == nullptr) return std::optional<std::vector<std::string>>();
  std::vector<std::string> out;
  for (const auto& v : *a) {
    TY_ASSIGN_OR_RETURN(std::string s, AsString(v, field));
    out.push_back(std::move(s));
  }
  return std::optional<std::vector<std::string>>(std::move(out));
}

bool HasDeletionVector(const json::object& o) {
  auto it = o.find("deletionVector");
  return it != o.end() && !it->value().is_null();
}

Result<ProtocolAction> DecodeProtocol(const json::object& o) {
  ProtocolAction p;
  TY_ASSIGN_OR_RETURN(int64_t r, RequiredInt64(o, "minReaderVersion"));
  TY_ASSIGN_OR_RETURN(int64_t w, RequiredInt64(o, "minWriterVersion"));
  if (r < 1 || r > 1000 || w < 1 || w > 1000) {
    return Status::InvalidArgument("protocol versions out of range");
  }
  p.min_reader_version = static_cast<int>(r);
  p.min_writer_version = static_cast<int>(w);
  TY_ASSIGN_OR_RETURN(p.reader_features, OptionalStrings(o, "readerFeatures"));
  TY_ASSIGN_OR_RETURN(p.writer_features, OptionalStrings(o, "writerFeatures"));
  return p;
}

Result<MetadataAction> DecodeMetadata(const json::object& o) {
  MetadataAction m;
  TY_ASSIGN_OR_RETURN(m.id, RequiredString(o, "id"));
  TY_ASSIGN_OR_RETURN(auto name, OptionalString(o, "name"));
  TY_ASSIGN_OR_RETURN(auto description, OptionalString(o, "description"));
  m.name = name.value_or("");
  m.description = description.value_or("");
  TY_ASSIGN_OR_RETURN(const json::object* format, OptionalObject(o, "format"));
  if (format != nullptr) {
    TY_ASSIGN_OR_RETURN(auto provider, OptionalString(*format, "provider"));
    m.format_provider = provider.value_or("parquet");
    TY_ASSIGN_OR_RETURN(m.format_options, StringMap(*format, "options"));
  }
  TY_ASSIGN_OR_RETURN(m.schema_string, RequiredString(o, "schemaString"));
  TY_ASSIGN_OR_RETURN(auto partitions, OptionalStrings(o, "partitionColumns"));
  if (partitions) m.partition_columns = std::move(*partitions);
  TY_ASSIGN_OR_RETURN(m.configuration, StringMap(o, "configuration"));
  TY_ASSIGN_OR_RETURN(m.created_time, OptionalInt64(o, "createdTime"));
  return m;
}

Result<AddAction> DecodeAdd(const json::object& o) {
  AddAction a;
  TY_ASSIGN_OR_RETURN(a.path, RequiredString(o, "path"));
  TY_ASSIGN_OR_RETURN(a.partition_values, NullableStringMap(o, "partitionValues"));
  TY_ASSIGN_OR_RETURN(a.size, RequiredInt64(o, "size"));
  TY_ASSIGN_OR_RETURN(auto mtime, OptionalInt64(o, "modificationTime"));
  a.modification_time = mtime.value_or(0);
  TY_ASSIGN_OR_RETURN(auto data_change, OptionalBool(o, "dataChange"));
  a.data_change = data_change.value_or(true);
  TY_ASSIGN_OR_RETURN(a.stats, OptionalString(o, "stats"));
  TY_ASSIGN_OR_RETURN(a.tags, StringMap(o, "tags"));
  a.has_deletion_vector = HasDeletionVector(o);
  if (a.path.empty()) return Status::InvalidArgument("path must not be empty");
  if (a.size < 0) return Status::InvalidArgument("size must not be negative");
  return a;
}

Result<RemoveAction> DecodeRemove(const json::object& o) {
  RemoveAction r;
  TY_ASSIGN_OR_RETURN(r.path, RequiredString(o, "path"));
  TY_ASSIGN_OR_RETURN(r.deletion_timestamp, OptionalInt64(o, "deletionTimestamp"));
  TY_ASSIGN_OR_RETURN(auto data_change, OptionalBool(o, "dataChange"));
  r.data_change = data_change.value_or(true);
  TY_ASSIGN_OR_RETURN(auto extended, OptionalBool(o, "extendedFileMetadata"));
  r.extended_file_metadata = extended.value_or(false);
  TY_ASSIGN_OR_RETURN(r.partition_values, NullableStringMap(o, "partitionValues"));
  TY_ASSIGN_OR_RETURN(r.size, OptionalInt64(o, "size"));
  r.has_deletion_vector = HasDeletionVector(o);
  if (r.path.empty()) return Status::InvalidArgument("path must not be empty");
  return r;
}

Result<TxnAction> DecodeTxn(const json::object& o) {
  TxnAction t;
  TY_ASSIGN_OR_RETURN(t.app_id, RequiredString(o, "appId"));
  TY_ASSIGN_OR_RETURN(t.version, RequiredInt64(o, "version"));
  TY_ASSIGN_OR_RETURN(t.last_updated, OptionalInt64(o, "lastUpdated"));
  return t;
}

Result<DomainMetadataAction> DecodeDomainMetadata(const json::object& o) {
  DomainMetadataAction d;
  TY_ASSIGN_OR_RETURN(d.domain, RequiredString(o, "domain"));
  TY_ASSIGN_OR_RETURN(auto configuration, OptionalString(o, "configuration"));
  d.configuration = configuration.value_or("");
  TY_ASSIGN_OR_RETURN(auto removed, OptionalBool(o, "removed"));
  d.removed = removed.value_or(false);
  return d;
}

template <typename T, typename F>
Status DecodeInto(const json::value& v, std::string_view kind, F decode, std::optional<T>& out) {
  if (!v.is_object()) {
    return Status::InvalidArgument(std::string(kind) + " must be an object (got " +
                                   DescribeJson(v) + ")");
  }
  Result<T> r = decode(v.as_object());
  if (!r.ok()) return r.status().WithContext(kind);
  out = std::move(r).value();
  return Status::Ok();
}

json::object StringMapJson(const std::map<std::string, std::string>& m) {
  json::object o;
  for (const auto& [k, v] : m) o[k] = v;
  return o;
}

json::object NullableMapJson(const std::map<std::string, std::optional<std::string>>& m) {
  json::object o;
  for (const auto& [k, v] : m) {
    if (v) {
      o[k] = *v;
    } else {
      o[k] = nullptr;
    }
  }
  return o;
}

json::array StringsJson(const std::vector<std::string>& v) {
  json::array a;
  for (const auto& s : v) a.emplace_back(s);
  return a;
}

json::object MetadataJson(const MetadataAction& m) {
  json::object o;
  o["id"] = m.id;
  if (!m.name.empty()) o["name"] = m.name;
  if (!m.description.empty()) o["description"] = m.description;
  o["format"] =
      json::object{{"provider", m.format_provider}, {"options", StringMapJson(m.format_options)}};
  o["schemaString"] = m.schema_string;
  o["partitionColumns"] = StringsJson(m.partition_columns);
  o["configuration"] = StringMapJson(m.configuration);
  if (m.created_time) o["createdTime"] = *m.created_time;
  return o;
}

json::object AddJson(const AddAction& a) {
  json::object o;
  o["path"] = a.path;
  o["partitionValues"] = NullableMapJson(a.partition_values);
  o["size"] = a.size;
  o["modificationTime"] = a.modification_time;
  o["dataChange"] = a.data_change;
  if (a.stats) o["stats"] = *a.stats;
  if (!a.tags.empty()) o["tags"] = StringMapJson(a.tags);
  return o;
}

json::object RemoveJson(const RemoveAction& r) {
  json::object o;
  o["path"] = r.path;
  if (r.deletion_timestamp) o["deletionTimestamp"] = *r.deletion_timestamp;
  o["dataChange"] = r.data_change;
  o["extendedFileMetadata"] = r.extended_file_metadata;
  o["partitionValues"] = NullableMapJson(r.partition_values);
  if (r.size) o["size"] = *r.size;
  return o;
}

json::object ProtocolJson(const ProtocolAction& p) {
  json::object o;
  o["minReaderVersion"] = p.min_reader_version;
  o["minWriterVersion"] = p.min_writer_version;
  if (p.reader_features) o["readerFeatures"] = StringsJson(*p.reader_features);
  if (p.writer_features) o["writerFeatures"] = StringsJson(*p.writer_features);
  return o;
}

}  // namespace

namespace {

std::optional<int64_t> Int64Field(const boost::json::object& fields, const char* key) {
  auto it = fields.find(key);
  if (it != fields.end() && it->value().is_int64()) return it->value().as_int64();
  if (it != fields.end() && it->value().is_uint64()) {
    return static_cast<int64_t>(it->value().as_uint64());
  }
  return std::nullopt;
}

}  // namespace

std::optional<int64_t> CommitInfoAction::Timestamp() const {
  if (auto ict = InCommitTimestamp()) return ict;
  return Int64Field(fields, "timestamp");
}

std::optional<int64_t> CommitInfoAction::InCommitTimestamp() const {
  return Int64Field(fields, "inCommitTimestamp");
}

Result<Action> ActionFromJson(const json::object& object) {
  Action a;
  for (const auto& [key, value] : object) {
    if (key == "add") {
      TY_RETURN_IF_ERROR(DecodeInto(value, "add", DecodeAdd, a.add));
    } else if (key == "remove") {
      TY_RETURN_IF_ERROR(DecodeInto(value, "remove", DecodeRemove, a.remove));
    } else if (key == "metaData") {
      TY_RETURN_IF_ERROR(DecodeInto(value, "metaData", DecodeMetadata, a.metadata));
    } else if (key == "protocol") {
      TY_RETURN_IF_ERROR(DecodeInto(value, "protocol", DecodeProtocol, a.protocol));
    } else if (key == "txn") {
      TY_RETURN_IF_ERROR(DecodeInto(value, "txn", DecodeTxn, a.txn));
    } else if (key == "domainMetadata") {
      TY_RETURN_IF_ERROR(
          DecodeInto(value, "domainMetadata", DecodeDomainMetadata, a.domain_metadata));
    } else if (key == "commitInfo") {
      if (!value.is_object()) return Status::InvalidArgument("commitInfo must be an object");
      a.commit_info = CommitInfoAction{value.as_object()};
    }
    // cdc, checkpointMetadata, sidecar and unknown kinds: skipped.
  }
  return a;
}

namespace {

// Whether every number in `v` is finite. The shared parser reads an out-of-range literal
// (1e400) as infinity, which no JSON writer can write back: such a line is corrupt.
bool AllNumbersFinite(const json::value& v) {
  switch (v.kind()) {
    case json::kind::double_:
      return std::isfinite(v.get_double());
    case json::kind::array:
      for (const auto& e : v.get_array()) {
        if (!AllNumbersFinite(e)) return false;
      }
      return true;
    case json::kind::object:
      for (const auto& kv : v.get_object()) {
        if (!AllNumbersFinite(kv.value())) return false;
      }
      return true;
    default:
      return true;
  }
}

}  // namespace

Result<Action> ParseActionLine(std::string_view line) {
  Result<json::value> parsed = ParseJsonExact(line);
  if (!parsed.ok()) {
    // The shared parser's message speaks of request bodies; say what is wrong in log terms.
    boost::system::error_code ec;
    (void)boost::json::parse(line, ec);
    std::string why = ec ? ec.message() : "unparsable";
    return Status::InvalidArgument("the action is not valid JSON (" + why +
                                   "; the file is truncated or corrupt)");
  }
  if (!parsed->is_object()) {
    return Status::InvalidArgument("an action must be a JSON object (got " + DescribeJson(*parsed) +
                                   ")");
  }
  if (!AllNumbersFinite(*parsed)) {
    return Status::InvalidArgument(
        "the action holds a number out of range (the file is truncated or corrupt)");
  }
  return ActionFromJson(parsed->as_object());
}

Result<std::vector<Action>> ParseCommit(std::string_view text) {
  std::vector<Action> actions;
  size_t line_no = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (Trim(line).empty()) continue;
    Result<Action> action = ParseActionLine(line);
    if (!action.ok()) return action.status().WithContext("line " + std::to_string(line_no));
    actions.push_back(std::move(action).value());
  }
  return actions;
}

json::object ActionToJson(const Action& a) {
  json::object o;
  if (a.protocol) o["protocol"] = ProtocolJson(*a.protocol);
  if (a.metadata) o["metaData"] = MetadataJson(*a.metadata);
  if (a.add) o["add"] = AddJson(*a.add);
  if (a.remove) o["remove"] = RemoveJson(*a.remove);
  if (a.txn) {
    json::object t{{"appId", a.txn->app_id}, {"version", a.txn->version}};
    if (a.txn->last_updated) t["lastUpdated"] = *a.txn->last_updated;
    o["txn"] = std::move(t);
  }
  if (a.domain_metadata) {
    o["domainMetadata"] = json::object{{"domain", a.domain_metadata->domain},
                                       {"configuration", a.domain_metadata->configuration},
                                       {"removed", a.domain_metadata->removed}};
  }
  if (a.commit_info) o["commitInfo"] = a.commit_info->fields;
  return o;
}

std::string ActionLine(const Action& action) { return json::serialize(ActionToJson(action)); }

std::string CommitFileName(int64_t version) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%020lld.json", static_cast<long long>(version));
  return buf;
}

std::string CheckpointFileName(int64_t version) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%020lld.checkpoint.parquet", static_cast<long long>(version));
  return buf;
}

std::optional<int64_t> ParseCommitFileName(std::string_view name) {
  if (name.size() != 25 || !EndsWith(name, ".json")) return std::nullopt;
  int64_t v = 0;
  for (size_t i = 0; i < 20; ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    if (v > (INT64_MAX - 9) / 10) return std::nullopt;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}

std::string EscapePartitionValue(std::string_view value) {
  static constexpr char kDigits[] = "0123456789ABCDEF";
  static constexpr std::string_view kSpecial = "\"#%'*/:=?\\{[]^";
  std::string out;
  for (unsigned char c : value) {
    if (c < 0x20 || c == 0x7f || kSpecial.find(static_cast<char>(c)) != std::string_view::npos) {
      out.push_back('%');
      out.push_back(kDigits[c >> 4]);
      out.push_back(kDigits[c & 0xf]);
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  return out;
}

std::string EncodePathUri(std::string_view path) {
  // RFC 2396 path characters, and '=' of Hive-style partition directories.
  return UrlEncode(path, "=");
}

Result<std::string> DecodePathUri(std::string_view uri) {
  std::optional<std::string> decoded = UrlDecode(uri, false);
  if (!decoded) return Status::InvalidArgument("path is not a valid URI: " + Abbreviate(uri));
  return *decoded;
}

}  // namespace trainyard::tables
