#include "trainyard/tables/import.h"

#include <arrow/io/file.h>
#include <arrow/io/memory.h>
#include <parquet/arrow/reader.h>

#include <algorithm>
#include <boost/json.hpp>
#include <cctype>
#include <charconv>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <unordered_map>
#include <vector>

#include "trainyard/common/mutex.h"
#include "trainyard/common/strings.h"
#include "trainyard/tables/arrow_util.h"
#include "trainyard/tables/import_chunks.h"

namespace trainyard::tables {
namespace {

namespace json = boost::json;

// ---------------------------------------------------------------------------------------------
// Text helpers.

// Offset of the first byte that is not part of valid UTF-8, or npos.
// Whether a line holds only whitespace (what Trim would leave empty), without copying it.
bool IsBlank(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; });
}

size_t InvalidUtf8At(std::string_view s) {
  size_t i = 0, n = s.size();
  while (i < n) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (len == 0 || c == 0xC0 || c == 0xC1 || c > 0xF4 || i + len > n) return i;
    for (size_t k = 1; k < len; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return i;
    }
    auto c1 = static_cast<unsigned char>(s[i + 1]);
    if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 > 0x9F) || (c == 0xF0 && c1 < 0x90) ||
        (c == 0xF4 && c1 > 0x8F)) {
      return i;  // overlong, surrogate or beyond U+10FFFF
    }
    i += len;
  }
  return std::string_view::npos;
}

// A value quoted for an error message, shortened and with control bytes escaped.
std::string QuoteForMessage(std::string_view s) {
  static const char* kHex = "0123456789abcdef";
  std::string out = "\"";
  for (char c : s.substr(0, 60)) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += "\\x";
      out.push_back(kHex[(c >> 4) & 0xF]);
      out.push_back(kHex[c & 0xF]);
    } else {
      out.push_back(c);
    }
  }
  return out + (s.size() > 60 ? "...\"" : "\"");
}

bool IsDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::optional<int> TwoDigits(std::string_view s, size_t at) {
  if (at + 2 > s.size() || !IsDigits(s.substr(at, 2))) return std::nullopt;
  return (s[at] - '0') * 10 + (s[at + 1] - '0');
}

// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
int64_t DaysFromCivil(int64_t y, int64_t m, int64_t d) {
  y -= m <= 2;
  int64_t era = (y >= 0 ? y : y - 399) / 400;
  int64_t yoe = y - era * 400;
  int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

// A leading "YYYY-MM-DD" into days since the epoch.
std::optional<int64_t> ParseDate(std::string_view s) {
  if (s.size() < 10 || s[4] != '-' || s[7] != '-' || !IsDigits(s.substr(0, 4))) {
    return std::nullopt;
  }
  auto month = TwoDigits(s, 5), day = TwoDigits(s, 8);
  if (!month || !day || *month < 1 || *month > 12 || *day < 1) return std::nullopt;
  int64_t year = std::stoi(std::string(s.substr(0, 4)));
  static const int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
  if (*day > kDays[*month - 1] + (*month == 2 && leap)) return std::nullopt;
  return DaysFromCivil(year, *month, *day);
}

std::optional<int64_t> ParseDateOnly(std::string_view s) {
  if (s.size() != 10) return std::nullopt;
  return ParseDate(s);
}

// ---------------------------------------------------------------------------------------------
// Inferred types.

enum class Kind { kNull, kBool, kInt64, kDouble, kTimestamp, kString, kList, kStruct };

const char* KindName(Kind k) {
  switch (k) {
    case Kind::kNull:
      return "null";
    case Kind::kBool:
      return "bool";
    case Kind::kInt64:
      return "int64";
    case Kind::kDouble:
      return "double";
    case Kind::kTimestamp:
      return "timestamp";
    case Kind::kString:
      return "string";
    case Kind::kList:
      return "array";
    case Kind::kStruct:
      return "object";
  }
  return "?";
}

struct Inferred {
  Kind kind = Kind::kNull;
  int64_t first_line = 0;  // where `kind` was first seen
  std::unique_ptr<Inferred> element;
  // A struct's fields in the order first seen (two vectors: Inferred is incomplete here).
  std::vector<std::string> field_names;
  std::vector<Inferred> field_types;

  Inferred* Field(const std::string& name) {
    for (size_t i = 0; i < field_names.size(); ++i) {
      if (field_names[i] == name) return &field_types[i];
    }
    field_names.push_back(name);
    field_types.emplace_back();
    return &field_types.back();
  }
};

std::shared_ptr<arrow::DataType> ToArrowType(const Inferred& t) {
  switch (t.kind) {
    case Kind::kBool:
      return arrow::boolean();
    case Kind::kInt64:
      return arrow::int64();
    case Kind::kDouble:
      return arrow::float64();
    case Kind::kTimestamp:
      return arrow::timestamp(arrow::TimeUnit::MICRO, "UTC");
    case Kind::kList:
      return arrow::list(ToArrowType(*t.element));
    case Kind::kStruct: {
      arrow::FieldVector fields;
      for (size_t i = 0; i < t.field_names.size(); ++i) {
        fields.push_back(arrow::field(t.field_names[i], ToArrowType(t.field_types[i])));
      }
      return arrow::struct_(std::move(fields));
    }
    case Kind::kNull:
    case Kind::kString:
      return arrow::utf8();
  }
  return arrow::utf8();
}

Kind JsonKind(const json::value& v) {
  switch (v.kind()) {
    case json::kind::null:
      return Kind::kNull;
    case json::kind::bool_:
      return Kind::kBool;
    case json::kind::int64:
      return Kind::kInt64;
    case json::kind::uint64:
      return v.get_uint64() <= uint64_t(std::numeric_limits<int64_t>::max()) ? Kind::kInt64
                                                                             : Kind::kDouble;
    case json::kind::double_:
      return Kind::kDouble;
    case json::kind::string:
      return ParseIsoTimestampMicros(v.get_string()) ? Kind::kTimestamp : Kind::kString;
    case json::kind::array:
      return Kind::kList;
    case json::kind::object:
      return Kind::kStruct;
  }
  return Kind::kNull;
}

// Widens `into` to hold `v` too (JSON rules, see import.h).
Status MergeJson(Inferred& into, const json::value& v, int64_t line, const std::string& path) {
  Kind k = JsonKind(v);
  if (k == Kind::kNull) return Status::Ok();
  if (into.kind == Kind::kNull) {
    into.kind = k;
    into.first_line = line;
    if (k == Kind::kList) into.element = std::make_unique<Inferred>();
  } else if (into.kind != k) {
    auto widen = [&](Kind a, Kind b, Kind to) {
      if ((into.kind == a && k == b) || (into.kind == b && k == a)) {
        into.kind = to;
        return true;
      }
      return false;
    };
    if (!widen(Kind::kInt64, Kind::kDouble, Kind::kDouble) &&
        !widen(Kind::kTimestamp, Kind::kString, Kind::kString)) {
      return Status::InvalidArgument(
          "line " + std::to_string(line) + ": field '" + path + "': " + KindName(k) + " here but " +
          KindName(into.kind) + " at line " + std::to_string(into.first_line) +
          "; a field must have one type (fix the data, or import into a table whose schema says "
          "which)");
    }
  }
  if (k == Kind::kList) {
    for (const json::value& e : v.get_array()) {
      TY_RETURN_IF_ERROR(MergeJson(*into.element, e, line, path + "[]"));
    }
  } else if (k == Kind::kStruct) {
    for (const auto& kv : v.get_object()) {
      std::string name(kv.key());
      TY_RETURN_IF_ERROR(MergeJson(*into.Field(name), kv.value(), line, path + "." + name));
    }
  }
  return Status::Ok();
}

// What a CSV column's text values allow.
struct CsvColumnStats {
  bool any = false, all_int = true, all_number = true, all_bool = true, all_timestamp = true;

  void Add(std::string_view s) {
    any = true;
    if (all_int && !ParseInt64(s)) all_int = false;
    if (all_number) {
      bool looks = !s.empty() && (std::isdigit(static_cast<unsigned char>(s[0])) || s[0] == '-' ||
                                  s[0] == '+' || s[0] == '.');
      if (!looks || !ParseDouble(s)) all_number = false;
    }
    if (all_bool) {
      std::string l = ToLower(s);
      if (l != "true" && l != "false") all_bool = false;
    }
    if (all_timestamp && !ParseIsoTimestampMicros(s)) all_timestamp = false;
  }
  std::shared_ptr<arrow::DataType> Type() const {
    if (!any) return arrow::utf8();
    if (all_int) return arrow::int64();
    if (all_number) return arrow::float64();
    if (all_bool) return arrow::boolean();
    if (all_timestamp) return arrow::timestamp(arrow::TimeUnit::MICRO, "UTC");
    return arrow::utf8();
  }
};

// ---------------------------------------------------------------------------------------------
// Building batches.

int64_t MicrosToUnit(int64_t micros, arrow::TimeUnit::type unit, bool* overflow) {
  switch (unit) {
    case arrow::TimeUnit::SECOND:
      return micros / 1000000;
    case arrow::TimeUnit::MILLI:
      return micros / 1000;
    case arrow::TimeUnit::MICRO:
      return micros;
    case arrow::TimeUnit::NANO:
      if (micros > std::numeric_limits<int64_t>::max() / 1000 ||
          micros < std::numeric_limits<int64_t>::min() / 1000) {
        *overflow = true;
        return 0;
      }
      return micros * 1000;
  }
  return micros;
}

Status Mismatch(const std::string& path, const arrow::DataType& type, std::string_view got) {
  return Status::InvalidArgument("field '" + path + "': expected " + type.ToString() + ", got " +
                                 std::string(got));
}

std::string JsonGot(const json::value& v) {
  switch (v.kind()) {
    case json::kind::string:
      return "string " + QuoteForMessage(v.get_string());
    case json::kind::array:
      return "an array";
    case json::kind::object:
      return "an object";
    case json::kind::double_: {
      char buf[32];
      auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v.get_double());
      return "double " + std::string(buf, end);
    }
    default:
      return std::string(KindName(JsonKind(v))) + " " + json::serialize(v);
  }
}

template <typename BuilderT, typename T>
Status AppendIntegral(arrow::ArrayBuilder* b, int64_t v, const std::string& path,
                      const arrow::DataType& type) {
  if (v < int64_t(std::numeric_limits<T>::min()) || v > int64_t(std::numeric_limits<T>::max())) {
    return Status::InvalidArgument("field '" + path + "': " + std::to_string(v) +
                                   " is out of range for " + type.ToString());
  }
  return FromArrow(static_cast<BuilderT*>(b)->Append(static_cast<T>(v)), path);
}

Status AppendInteger(arrow::ArrayBuilder* b, int64_t v, const std::string& path,
                     const arrow::DataType& type) {
  switch (type.id()) {
    case arrow::Type::INT8:
      return AppendIntegral<arrow::Int8Builder, int8_t>(b, v, path, type);
    case arrow::Type::INT16:
      return AppendIntegral<arrow::Int16Builder, int16_t>(b, v, path, type);
    case arrow::Type::INT32:
      return AppendIntegral<arrow::Int32Builder, int32_t>(b, v, path, type);
    default:
      return FromArrow(static_cast<arrow::Int64Builder*>(b)->Append(v), path);
  }
}

Status AppendDouble(arrow::ArrayBuilder* b, double v, const arrow::DataType& type) {
  if (type.id() == arrow::Type::FLOAT) {
    return FromArrow(static_cast<arrow::FloatBuilder*>(b)->Append(static_cast<float>(v)), "");
  }
  return FromArrow(static_cast<arrow::DoubleBuilder*>(b)->Append(v), "");
}

Status AppendTimestamp(arrow::ArrayBuilder* b, std::string_view s, const std::string& path,
                       const arrow::DataType& type, std::string_view got) {
  std::optional<int64_t> micros = ParseIsoTimestampMicros(s);
  if (!micros) return Mismatch(path, type, got);
  bool overflow = false;
  int64_t v =
      MicrosToUnit(*micros, static_cast<const arrow::TimestampType&>(type).unit(), &overflow);
  if (overflow) return Status::InvalidArgument("field '" + path + "': timestamp out of range");
  return FromArrow(static_cast<arrow::TimestampBuilder*>(b)->Append(v), path);
}

std::optional<std::string> DecodeBase64(std::string_view s) {
  static const std::string kAlphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  size_t pad = 0;
  for (char c : s) {
    if (c == '=') {
      ++pad;
      continue;
    }
    size_t v = kAlphabet.find(c);
    if (v == std::string::npos || pad > 0) return std::nullopt;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  if (pad > 2 || (s.size() % 4 != 0)) return std::nullopt;
  return out;
}

struct Limits {
  size_t max_field_bytes;
};

Status AppendJson(const json::value& v, const arrow::Field& field, arrow::ArrayBuilder* b,
                  const std::string& path, const Limits& limits);

Status AppendJsonStruct(const json::value& v, const arrow::DataType& type, arrow::ArrayBuilder* b,
                        const std::string& path, const Limits& limits) {
  if (!v.is_object()) return Mismatch(path, type, JsonGot(v));
  const json::object& obj = v.get_object();
  auto* sb = static_cast<arrow::StructBuilder*>(b);
  for (const auto& kv : obj) {
    if (static_cast<const arrow::StructType&>(type).GetFieldIndex(std::string(kv.key())) < 0) {
      return Status::InvalidArgument("field '" + path + "." + std::string(kv.key()) +
                                     "' is not in the schema (" + type.ToString() + ")");
    }
  }
  TY_RETURN_IF_ERROR(FromArrow(sb->Append(), path));
  static const json::value kNull;
  for (int i = 0; i < type.num_fields(); ++i) {
    const arrow::Field& f = *type.field(i);
    const json::value* sub = obj.if_contains(f.name());
    TY_RETURN_IF_ERROR(
        AppendJson(sub ? *sub : kNull, f, sb->field_builder(i), path + "." + f.name(), limits));
  }
  return Status::Ok();
}

Status AppendJsonList(const json::value& v, const arrow::DataType& type, arrow::ArrayBuilder* b,
                      const std::string& path, const Limits& limits) {
  if (!v.is_array()) return Mismatch(path, type, JsonGot(v));
  const arrow::Field& element = *static_cast<const arrow::BaseListType&>(type).value_field();
  arrow::ArrayBuilder* vb;
  if (type.id() == arrow::Type::LARGE_LIST) {
    auto* lb = static_cast<arrow::LargeListBuilder*>(b);
    TY_RETURN_IF_ERROR(FromArrow(lb->Append(), path));
    vb = lb->value_builder();
  } else {
    auto* lb = static_cast<arrow::ListBuilder*>(b);
    TY_RETURN_IF_ERROR(FromArrow(lb->Append(), path));
    vb = lb->value_builder();
  }
  const json::array& arr = v.get_array();
  for (size_t i = 0; i < arr.size(); ++i) {
    TY_RETURN_IF_ERROR(
        AppendJson(arr[i], element, vb, path + "[" + std::to_string(i) + "]", limits));
  }
  return Status::Ok();
}

Status AppendJsonScalar(const json::value& v, const arrow::DataType& type, arrow::ArrayBuilder* b,
                        const std::string& path, const Limits& limits) {
  if (v.is_string() && v.get_string().size() > limits.max_field_bytes) {
    return Status::InvalidArgument(
        "field '" + path + "': a value of " + std::to_string(v.get_string().size()) +
        " bytes is longer than the limit of " + std::to_string(limits.max_field_bytes));
  }
  switch (type.id()) {
    case arrow::Type::NA:
      return Mismatch(path, type, JsonGot(v));
    case arrow::Type::BOOL:
      if (!v.is_bool()) return Mismatch(path, type, JsonGot(v));
      return FromArrow(static_cast<arrow::BooleanBuilder*>(b)->Append(v.get_bool()), path);
    case arrow::Type::INT8:
    case arrow::Type::INT16:
    case arrow::Type::INT32:
    case arrow::Type::INT64:
      if (v.is_int64()) return AppendInteger(b, v.get_int64(), path, type);
      if (v.is_uint64() && v.get_uint64() <= uint64_t(std::numeric_limits<int64_t>::max())) {
        return AppendInteger(b, static_cast<int64_t>(v.get_uint64()), path, type);
      }
      return Mismatch(path, type, JsonGot(v));
    case arrow::Type::FLOAT:
    case arrow::Type::DOUBLE:
      if (!v.is_number()) return Mismatch(path, type, JsonGot(v));
      return AppendDouble(b, v.to_number<double>(), type);
    case arrow::Type::STRING:
      if (!v.is_string()) return Mismatch(path, type, JsonGot(v));
      return FromArrow(
          static_cast<arrow::StringBuilder*>(b)->Append(std::string_view(v.get_string())), path);
    case arrow::Type::LARGE_STRING:
      if (!v.is_string()) return Mismatch(path, type, JsonGot(v));
      return FromArrow(
          static_cast<arrow::LargeStringBuilder*>(b)->Append(std::string_view(v.get_string())),
          path);
    case arrow::Type::BINARY: {
      std::optional<std::string> bytes;
      if (v.is_string()) bytes = DecodeBase64(v.get_string());
      if (!bytes) return Mismatch(path, type, JsonGot(v) + " (binary values are base64 strings)");
      return FromArrow(static_cast<arrow::BinaryBuilder*>(b)->Append(*bytes), path);
    }
    case arrow::Type::TIMESTAMP:
      if (!v.is_string()) return Mismatch(path, type, JsonGot(v));
      return AppendTimestamp(b, v.get_string(), path, type, JsonGot(v));
    case arrow::Type::DATE32: {
      std::optional<int64_t> days;
      if (v.is_string()) days = ParseDateOnly(v.get_string());
      if (!days) return Mismatch(path, type, JsonGot(v));
      return FromArrow(static_cast<arrow::Date32Builder*>(b)->Append(static_cast<int32_t>(*days)),
                       path);
    }
    default:
      return Status::NotImplemented("field '" + path + "' has type " + type.ToString() +
                                    ", which the JSON importer cannot fill");
  }
}

Status AppendJson(const json::value& v, const arrow::Field& field, arrow::ArrayBuilder* b,
                  const std::string& path, const Limits& limits) {
  const arrow::DataType& type = *field.type();
  if (v.is_null()) {
    if (!field.nullable()) {
      return Status::InvalidArgument("missing required field '" + path + "' (" + type.ToString() +
                                     ", not nullable)");
    }
    return FromArrow(b->AppendNull(), path);
  }
  switch (type.id()) {
    case arrow::Type::STRUCT:
      return AppendJsonStruct(v, type, b, path, limits);
    case arrow::Type::LIST:
    case arrow::Type::LARGE_LIST:
      return AppendJsonList(v, type, b, path, limits);
    default:
      return AppendJsonScalar(v, type, b, path, limits);
  }
}

// One CSV field: its text and whether it was quoted ("" is the empty string, nothing is null).
struct CsvField {
  std::string text;
  bool quoted = false;
};

Status AppendCsv(const CsvField& f, const arrow::Field& field, arrow::ArrayBuilder* b) {
  const arrow::DataType& type = *field.type();
  const std::string& path = field.name();
  const std::string& s = f.text;
  if (s.empty() && !f.quoted) {
    if (!field.nullable()) {
      return Status::InvalidArgument("missing required field '" + path + "' (empty)");
    }
    return FromArrow(b->AppendNull(), path);
  }
  std::string got = QuoteForMessage(s);
  switch (type.id()) {
    case arrow::Type::BOOL: {
      std::string l = ToLower(s);
      if (l != "true" && l != "false") return Mismatch(path, type, got);
      return FromArrow(static_cast<arrow::BooleanBuilder*>(b)->Append(l == "true"), path);
    }
    case arrow::Type::INT8:
    case arrow::Type::INT16:
    case arrow::Type::INT32:
    case arrow::Type::INT64: {
      std::optional<int64_t> v = ParseInt64(s);
      if (!v) return Mismatch(path, type, got);
      return AppendInteger(b, *v, path, type);
    }
    case arrow::Type::FLOAT:
    case arrow::Type::DOUBLE: {
      std::optional<double> v = ParseDouble(s);
      if (!v) return Mismatch(path, type, got);
      return AppendDouble(b, *v, type);
    }
    case arrow::Type::STRING:
      return FromArrow(static_cast<arrow::StringBuilder*>(b)->Append(s), path);
    case arrow::Type::LARGE_STRING:
      return FromArrow(static_cast<arrow::LargeStringBuilder*>(b)->Append(s), path);
    case arrow::Type::TIMESTAMP:
      return AppendTimestamp(b, s, path, type, got);
    case arrow::Type::DATE32: {
      std::optional<int64_t> days = ParseDateOnly(s);
      if (!days) return Mismatch(path, type, got);
      return FromArrow(static_cast<arrow::Date32Builder*>(b)->Append(static_cast<int32_t>(*days)),
                       path);
    }
    default:
      return Status::InvalidArgument("field '" + path + "' has type " + type.ToString() +
                                     ", which a CSV file cannot hold; import JSON lines instead");
  }
}

// Builders for one batch of a schema.
class BatchBuilder {
 public:
  static Result<BatchBuilder> Make(std::shared_ptr<arrow::Schema> schema) {
    BatchBuilder out;
    out.schema_ = std::move(schema);
    for (const auto& f : out.schema_->fields()) {
      TY_ASSIGN_OR_RETURN(std::unique_ptr<arrow::ArrayBuilder> b,
                          FromArrow(arrow::MakeBuilder(f->type()), "column '" + f->name() + "'"));
      out.builders_.push_back(std::move(b));
    }
    return out;
  }
  arrow::ArrayBuilder* column(int i) { return builders_[static_cast<size_t>(i)].get(); }
  int64_t rows() const { return rows_; }
  void AddRow() { ++rows_; }
  Result<std::shared_ptr<arrow::RecordBatch>> Finish() {
    arrow::ArrayVector arrays;
    for (auto& b : builders_) {
      TY_ASSIGN_OR_RETURN(std::shared_ptr<arrow::Array> a, FromArrow(b->Finish(), "a batch"));
      arrays.push_back(std::move(a));
    }
    auto batch = arrow::RecordBatch::Make(schema_, rows_, std::move(arrays));
    rows_ = 0;
    return batch;
  }

 private:
  std::shared_ptr<arrow::Schema> schema_;
  std::vector<std::unique_ptr<arrow::ArrayBuilder>> builders_;
  int64_t rows_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Reading: lines (JSONL) and records (CSV) from a stream, with size limits.

class BlockReader {
 public:
  explicit BlockReader(std::unique_ptr<std::istream> in) : in_(std::move(in)) {}
  // Reads `text`, which must outlive the reader.
  explicit BlockReader(std::string_view text) : data_(text) {}

  // The next byte, or -1 at the end. (Inlined: CSV parsing calls them for every byte.)
  [[gnu::always_inline]] int Get() {
    if (pos_ == data_.size() && !Fill()) return -1;
    return static_cast<unsigned char>(data_[pos_++]);
  }
  [[gnu::always_inline]] int Peek() {
    if (pos_ == data_.size() && !Fill()) return -1;
    return static_cast<unsigned char>(data_[pos_]);
  }
  bool failed() const { return in_ != nullptr && in_->bad(); }

  // Skips a UTF-8 byte order mark at the very start.
  void SkipBom() {
    if (Peek() == 0xEF && data_.substr(pos_, 3) == "\xEF\xBB\xBF") pos_ += 3;
  }

  // The next line without its "\n" / "\r\n" into `line`; false at the end. Lines longer than
  // `max` are an error (nothing more than `max` bytes is buffered for them).
  Result<bool> Line(std::string* line, size_t max, int64_t line_no) {
    line->clear();
    bool any = false;
    for (;;) {
      if (pos_ == data_.size() && !Fill()) break;
      any = true;
      size_t nl = data_.find('\n', pos_);
      size_t end = nl == std::string_view::npos ? data_.size() : nl;
      if (line->size() + (end - pos_) > max + 1) {
        return Status::InvalidArgument("line " + std::to_string(line_no) +
                                       " is longer than the limit of " + std::to_string(max) +
                                       " bytes");
      }
      line->append(data_.substr(pos_, end - pos_));
      pos_ = end;
      if (nl != std::string_view::npos) {
        ++pos_;
        break;
      }
    }
    if (!line->empty() && line->back() == '\r') line->pop_back();
    if (line->size() > max) {
      return Status::InvalidArgument("line " + std::to_string(line_no) +
                                     " is longer than the limit of " + std::to_string(max) +
                                     " bytes");
    }
    return any;
  }

  // From now on, remembers the bytes consumed, until EndCapture() returns them.
  void StartCapture() {
    capture_.assign(data_.substr(pos_));
    capturing_ = true;
  }
  std::string EndCapture() {
    capturing_ = false;
    capture_.resize(capture_.size() - (data_.size() - pos_));  // not consumed yet
    return std::move(capture_);
  }

  // Appends the bytes not consumed yet, or else up to `n` more from the stream, to `out`,
  // consuming them; false at the end.
  bool ReadMore(std::string* out, size_t n) {
    if (pos_ < data_.size()) {
      out->append(data_.substr(pos_));
      pos_ = data_.size();
      return true;
    }
    if (in_ == nullptr) return false;
    size_t old = out->size();
    out->resize(old + n);
    in_->read(out->data() + old, static_cast<std::streamsize>(n));
    out->resize(old + static_cast<size_t>(in_->gcount()));
    return out->size() > old;
  }

 private:
  [[gnu::noinline]] bool Fill() {
    if (in_ == nullptr) return false;
    buf_.resize(kBlock);
    in_->read(buf_.data(), kBlock);
    buf_.resize(static_cast<size_t>(in_->gcount()));
    data_ = buf_;
    pos_ = 0;
    if (capturing_) capture_.append(buf_);
    return !buf_.empty();
  }

  static constexpr size_t kBlock = 1 << 16;
  std::unique_ptr<std::istream> in_;  // null when reading a string
  std::string buf_;
  std::string_view data_;  // buf_, or the string read
  size_t pos_ = 0;
  bool capturing_ = false;
  std::string capture_;
};

class CsvReader {
 public:
  CsvReader(std::unique_ptr<std::istream> in, char delimiter, size_t max_record, size_t max_field)
      : in_(std::move(in)), delim_(delimiter), max_record_(max_record), max_field_(max_field) {
    in_.SkipBom();
  }
  // Reads the records of `text` (which must outlive it), a part of a file that starts at a
  // record's start, on line `first_line` (no byte order mark is skipped: it would be data).
  CsvReader(std::string_view text, int64_t first_line, char delimiter, size_t max_record,
            size_t max_field)
      : in_(text),
        delim_(delimiter),
        max_record_(max_record),
        max_field_(max_field),
        line_(first_line) {}

  int64_t line() const { return line_; }
  BlockReader& block() { return in_; }

  // The next record; false at the end. Blank lines between records are skipped. `start_line`
  // is the line the record starts on (a quoted field may span lines).
  Result<bool> Next(std::vector<CsvField>* fields, int64_t* start_line) {
    fields->clear();
    for (;;) {
      int c = in_.Peek();
      if (c == '\n') {
        in_.Get();
        ++line_;
      } else if (c == '\r') {
        in_.Get();
      } else if (c == -1) {
        if (in_.failed()) return Status::IOError("reading failed at line " + std::to_string(line_));
        return false;
      } else {
        break;
      }
    }
    *start_line = line_;
    size_t record_bytes = 0;
    for (;;) {
      CsvField f;
      TY_ASSIGN_OR_RETURN(int end, ReadField(&f, *start_line, fields->size() + 1));
      record_bytes += f.text.size() + 1;
      if (record_bytes > max_record_) {
        return Status::InvalidArgument("line " + std::to_string(*start_line) +
                                       ": the record is longer than the limit of " +
                                       std::to_string(max_record_) + " bytes");
      }
      fields->push_back(std::move(f));
      if (end != delim_) return true;
    }
  }

 private:
  // Reads one field; returns what ended it: the delimiter, '\n' or -1 (the end).
  Result<int> ReadField(CsvField* f, int64_t start_line, size_t index) {
    auto too_long = [&] {
      return Status::InvalidArgument("line " + std::to_string(start_line) + ": field " +
                                     std::to_string(index) + " is longer than the limit of " +
                                     std::to_string(max_field_) + " bytes");
    };
    if (in_.Peek() == '"') {
      in_.Get();
      f->quoted = true;
      for (;;) {
        int c = in_.Get();
        if (c == -1) {
          return Status::InvalidArgument("line " + std::to_string(start_line) + ": field " +
                                         std::to_string(index) +
                                         " opens a quote that is never closed");
        }
        if (c == '"') {
          if (in_.Peek() != '"') break;
          in_.Get();
        } else if (c == '\n') {
          ++line_;
        }
        f->text.push_back(static_cast<char>(c));
        if (f->text.size() > max_field_) return too_long();
      }
      int c = in_.Get();
      if (c == '\r' && in_.Peek() == '\n') c = in_.Get();
      if (c == '\n') ++line_;
      if (c == delim_ || c == '\n' || c == -1) return c;
      return Status::InvalidArgument("line " + std::to_string(line_) + ": field " +
                                     std::to_string(index) +
                                     " has characters after its closing quote; quote the whole "
                                     "field and double the quotes inside it");
    }
    for (;;) {
      int c = in_.Get();
      if (c == '\r' && in_.Peek() == '\n') c = in_.Get();
      if (c == '\n') ++line_;
      if (c == delim_ || c == '\n' || c == -1) return c;
      f->text.push_back(static_cast<char>(c));
      if (f->text.size() > max_field_) return too_long();
    }
  }

  BlockReader in_;
  const int delim_;
  const size_t max_record_, max_field_;
  int64_t line_ = 1;
};

// Where the record starting at `pos` of `buf` ends, found as CsvReader::Next() reads it (the
// same blank lines skipped, quotes, line ends and limits) but without copying its fields: the
// cheap pass that cuts a CSV file into chunks at record boundaries, so that CsvReader can parse
// the chunks on any thread. `eof`: nothing follows `buf`.
struct CsvScan {
  enum class Kind {
    kRecord,    // a record ends at `end` (after its line end, or at the end of the input)
    kBlankEnd,  // only blank lines are left
    kNeedMore,  // the record runs past `buf` (or CsvReader would look at the byte after it)
    kBad,       // CsvReader fails on this record, having read no further than `end`
  };
  Kind kind;
  size_t end = 0;
};

CsvScan ScanCsvRecord(std::string_view buf, size_t pos, bool eof, char delim, size_t max_record,
                      size_t max_field) {
  using ScanKind = CsvScan::Kind;
  const size_t n = buf.size();
  const CsvScan need_more{ScanKind::kNeedMore, 0};
  // (A kBad's `end` may lie past the byte CsvReader fails on: the chunk it ends only needs to
  // hold that byte.)
  while (pos < n && (buf[pos] == '\n' || buf[pos] == '\r')) ++pos;
  if (pos == n) return eof ? CsvScan{ScanKind::kBlankEnd, n} : need_more;
  size_t record_bytes = 0;
  for (;;) {
    size_t text = 0;  // the field's bytes as CsvReader keeps them
    bool more_fields = false;
    if (pos == n && !eof) return need_more;
    if (pos < n && buf[pos] == '"') {
      ++pos;
      for (;;) {
        const void* quote = std::memchr(buf.data() + pos, '"', n - pos);
        size_t at = quote ? static_cast<size_t>(static_cast<const char*>(quote) - buf.data()) : n;
        text += at - pos;
        if (text > max_field) return CsvScan{ScanKind::kBad, at};
        pos = at;
        if (pos == n) return eof ? CsvScan{ScanKind::kBad, n} : need_more;  // never closed
        ++pos;
        if (pos == n && !eof) return need_more;
        if (pos == n || buf[pos] != '"') break;
        ++pos;  // "" is a quote in the text
        if (++text > max_field) return CsvScan{ScanKind::kBad, pos};
      }
      if (pos < n) {
        char c = buf[pos++];
        if (c == '\r') {
          if (pos == n && !eof) return need_more;
          if (pos < n && buf[pos] == '\n') c = buf[pos++];
        }
        if (c == delim) {
          more_fields = true;
        } else if (c != '\n') {
          return CsvScan{ScanKind::kBad, pos};  // characters after the closing quote
        }
      } else if (!eof) {
        return need_more;
      }
    } else {
      for (;;) {
        size_t start = pos;
        while (pos < n && buf[pos] != delim && buf[pos] != '\n' && buf[pos] != '\r') ++pos;
        text += pos - start;
        if (text > max_field) return CsvScan{ScanKind::kBad, pos};
        if (pos == n) {
          if (!eof) return need_more;
          break;
        }
        char c = buf[pos++];
        if (c == '\r') {
          if (pos == n && !eof) return need_more;
          if (pos == n || buf[pos] != '\n') {
            if (++text > max_field) return CsvScan{ScanKind::kBad, pos};
            continue;  // a lone CR is text
          }
          c = buf[pos++];
        }
        more_fields = c == delim;
        break;
      }
    }
    record_bytes += text + 1;
    if (record_bytes > max_record) return CsvScan{ScanKind::kBad, pos};
    if (!more_fields) return CsvScan{ScanKind::kRecord, pos};
  }
}

// ---------------------------------------------------------------------------------------------
// The importers.

Status ValidateOptions(const ImportOptions& o) {
  if (o.batch_rows < 1) return Status::InvalidArgument("batch_rows must be at least 1");
  if (o.infer_rows < 1) return Status::InvalidArgument("infer_rows must be at least 1");
  if (o.max_record_bytes < 1 || o.max_field_bytes < 1) {
    return Status::InvalidArgument("max_record_bytes and max_field_bytes must be positive");
  }
  if (o.csv_delimiter == '"' || o.csv_delimiter == '\n' || o.csv_delimiter == '\r') {
    return Status::InvalidArgument("csv_delimiter must not be a quote or a line break");
  }
  return Status::Ok();
}

// Columns of `expected` plus, when evolution is allowed, the sample's other fields.
Result<std::shared_ptr<arrow::Schema>> SchemaWithNewColumns(
    const ImportOptions& o,
    const std::vector<std::pair<std::string, std::shared_ptr<arrow::DataType>>>& sample_fields) {
  if (!o.expected_schema) {
    arrow::FieldVector fields;
    for (const auto& [name, type] : sample_fields) fields.push_back(arrow::field(name, type));
    return arrow::schema(std::move(fields));
  }
  arrow::FieldVector fields = o.expected_schema->fields();
  if (o.allow_new_columns) {
    for (const auto& [name, type] : sample_fields) {
      if (o.expected_schema->GetFieldIndex(name) < 0) fields.push_back(arrow::field(name, type));
    }
  }
  return arrow::schema(std::move(fields));
}

// Text importers: an inference sample, then records appended one by one.
class TextImporter : public RecordImporter {
 public:
  explicit TextImporter(ImportOptions options) : options_(std::move(options)) {}

  std::shared_ptr<arrow::Schema> schema() const override { return schema_; }
  int64_t rows_read() const override { return rows_read_; }

  Result<std::shared_ptr<arrow::RecordBatch>> Next() override {
    if (!error_.ok()) return error_;
    Status s = FillBatch();
    if (!s.ok()) {
      error_ = s;
      return s;
    }
    if (builder_->rows() == 0) return std::shared_ptr<arrow::RecordBatch>();
    return builder_->Finish();
  }

 protected:
  // Appends the next record to the builders; false at the end of the source.
  virtual Result<bool> AppendNext() = 0;

  Status Fail(int64_t line, const Status& s) const {
    return Status(s.code(),
                  options_.source_name + " line " + std::to_string(line) + ": " + s.message());
  }
  Status Fail(const Status& s) const {
    return Status(s.code(), options_.source_name + " " + s.message());
  }

  Status InitBuilders() {
    for (const auto& f : schema_->fields()) {
      if (!column_index_.emplace(f->name(), column_index_.size()).second) {
        return Status::InvalidArgument(options_.source_name + ": column '" + f->name() +
                                       "' appears twice");
      }
    }
    TY_ASSIGN_OR_RETURN(BatchBuilder b, BatchBuilder::Make(schema_));
    builder_ = std::make_unique<BatchBuilder>(std::move(b));
    return Status::Ok();
  }

  ImportOptions options_;
  std::shared_ptr<arrow::Schema> schema_;
  std::unordered_map<std::string, size_t> column_index_;
  std::unique_ptr<BatchBuilder> builder_;
  int64_t rows_read_ = 0;

 private:
  Status FillBatch() {
    while (builder_->rows() < options_.batch_rows) {
      TY_ASSIGN_OR_RETURN(bool more, AppendNext());
      if (!more) break;
      builder_->AddRow();
      ++rows_read_;
    }
    return Status::Ok();
  }

  Status error_;
};

class JsonlImporter : public TextImporter, public ChunkedImporter {
 public:
  JsonlImporter(std::unique_ptr<std::istream> in, ImportOptions options)
      : TextImporter(std::move(options)), in_(std::move(in)) {
    in_.SkipBom();
  }

  Status Init() {
    Inferred top;
    top.kind = Kind::kStruct;
    capture_ = &sample_text_;
    while (static_cast<int64_t>(sample_.size()) < options_.infer_rows) {
      TY_ASSIGN_OR_RETURN(bool more, ReadRecord());
      if (!more) break;
      for (const auto& kv : record_.get_object()) {
        std::string name(kv.key());
        if (options_.expected_schema && options_.expected_schema->GetFieldIndex(name) >= 0) {
          continue;  // checked against the expected type when appended
        }
        Status s = MergeJson(*top.Field(name), kv.value(), line_no_, name);
        if (!s.ok()) return Fail(s);
      }
      sample_.emplace_back(line_no_, std::move(record_));
    }
    capture_ = nullptr;
    std::vector<std::pair<std::string, std::shared_ptr<arrow::DataType>>> fields;
    for (size_t i = 0; i < top.field_names.size(); ++i) {
      fields.emplace_back(top.field_names[i], ToArrowType(top.field_types[i]));
    }
    TY_ASSIGN_OR_RETURN(schema_, SchemaWithNewColumns(options_, fields));
    return InitBuilders();
  }

 protected:
  Result<bool> AppendNext() override {
    int64_t line;
    if (next_sample_ < sample_.size()) {
      auto& [l, v] = sample_[next_sample_++];
      line = l;
      record_ = std::move(v);
      if (next_sample_ == sample_.size()) ReleaseSample();
    } else {
      TY_ASSIGN_OR_RETURN(bool more, ReadRecord());
      if (!more) return false;
      line = line_no_;
    }
    Status s = AppendRecord(record_.get_object(), *builder_, slots_);
    if (!s.ok()) return Fail(line, s);
    return true;
  }

 public:
  std::shared_ptr<arrow::Schema> schema() const override { return schema_; }

  Result<std::optional<RecordChunk>> NextChunk() override {
    if (!read_error_.ok()) return read_error_;
    if (!chunking_) {
      // The inference sample's lines come first, parsed again like the rest.
      chunking_ = true;
      unsent_ = std::move(sample_text_);
      ReleaseSample();
    }
    RecordChunk chunk;
    chunk.first_line = next_chunk_line_;
    size_t taken = 0;
    while (chunk.records < options_.batch_rows && taken < unsent_.size()) {
      size_t nl = unsent_.find('\n', taken);  // every captured line ends in one
      if (!IsBlank(std::string_view(unsent_).substr(taken, nl - taken))) ++chunk.records;
      taken = nl + 1;
      ++next_chunk_line_;
    }
    chunk.text.assign(unsent_, 0, taken);
    unsent_.erase(0, taken);
    while (chunk.records < options_.batch_rows) {
      Result<bool> more = in_.Line(&line_, options_.max_record_bytes, next_chunk_line_);
      if (!more.ok()) {
        // A line over the limit fails the batch it would be in, but Next() fails that batch on
        // an earlier bad record first: the records before the line go out as a chunk of their
        // own, and the error comes with the next call.
        if (chunk.records == 0) return Fail(more.status());
        read_error_ = Fail(more.status());
        break;
      }
      if (!*more) break;
      ++next_chunk_line_;
      if (!IsBlank(line_)) ++chunk.records;
      chunk.text.append(line_).push_back('\n');
    }
    if (chunk.records == 0) return std::optional<RecordChunk>();
    rows_read_ += chunk.records;
    return std::optional<RecordChunk>(std::move(chunk));
  }

  Result<std::shared_ptr<arrow::RecordBatch>> ParseChunk(const RecordChunk& chunk) const override {
    TY_ASSIGN_OR_RETURN(BatchBuilder builder, BatchBuilder::Make(schema_));
    std::vector<const json::value*> slots;
    std::string_view text = chunk.text;
    int64_t line_no = chunk.first_line;
    for (size_t start = 0; start < text.size(); ++line_no) {
      size_t nl = text.find('\n', start);
      if (nl == std::string_view::npos) nl = text.size();
      std::string_view line = text.substr(start, nl - start);
      start = nl + 1;
      if (IsBlank(line)) continue;
      TY_ASSIGN_OR_RETURN(json::value record, ParseLine(line, line_no));
      Status s = AppendRecord(record.get_object(), builder, slots);
      if (!s.ok()) return Fail(line_no, s);
      builder.AddRow();
    }
    return builder.Finish();
  }

 private:
  void ReleaseSample() {
    sample_.clear();
    sample_.shrink_to_fit();
    sample_text_ = {};
    next_sample_ = 0;
  }

  // Reads the next non-blank line into `record_` (an object); false at the end.
  Result<bool> ReadRecord() {
    for (;;) {
      ++line_no_;
      Result<bool> more = in_.Line(&line_, options_.max_record_bytes, line_no_);
      if (!more.ok()) return Fail(more.status());
      if (!*more) return false;
      if (capture_ != nullptr) capture_->append(line_).push_back('\n');
      if (Trim(line_).empty()) continue;
      TY_ASSIGN_OR_RETURN(record_, ParseLine(line_, line_no_));
      return true;
    }
  }

  // One non-blank line as a JSON object, or the error naming the line.
  Result<json::value> ParseLine(std::string_view line, int64_t line_no) const {
    size_t bad = InvalidUtf8At(line);
    if (bad != std::string::npos) {
      return Fail(line_no, Status::InvalidArgument("invalid UTF-8 at byte " +
                                                   std::to_string(bad + 1) + " of the line"));
    }
    boost::system::error_code ec;
    json::parse_options po;
    po.max_depth = 64;
    json::value record = json::parse(line, ec, {}, po);
    if (ec) {
      return Fail(line_no, Status::InvalidArgument("malformed JSON (" + ec.message() +
                                                   "): " + QuoteForMessage(line)));
    }
    if (!record.is_object()) {
      return Fail(line_no,
                  Status::InvalidArgument("expected a JSON object, got " + JsonGot(record)));
    }
    return record;
  }

  Status AppendRecord(const json::object& obj, BatchBuilder& builder,
                      std::vector<const json::value*>& slots) const {
    slots.assign(static_cast<size_t>(schema_->num_fields()), nullptr);
    for (const auto& kv : obj) {
      auto it = column_index_.find(std::string(kv.key()));
      if (it == column_index_.end()) return UnknownField(std::string(kv.key()));
      slots[it->second] = &kv.value();
    }
    static const json::value kNull;
    Limits limits{options_.max_field_bytes};
    for (int i = 0; i < schema_->num_fields(); ++i) {
      const json::value* v = slots[static_cast<size_t>(i)];
      const arrow::Field& f = *schema_->field(i);
      TY_RETURN_IF_ERROR(AppendJson(v ? *v : kNull, f, builder.column(i), f.name(), limits));
    }
    return Status::Ok();
  }

  Status UnknownField(const std::string& name) const {
    if (options_.expected_schema && !options_.allow_new_columns) {
      return Status::InvalidArgument("unknown field '" + name +
                                     "': the table has no such column (allow new columns to add "
                                     "it)");
    }
    return Status::InvalidArgument(
        "field '" + name + "' first appears after the " + std::to_string(options_.infer_rows) +
        " records the schema was inferred from; raise the inference sample (infer_rows) or "
        "import into a table that has the column");
  }

  BlockReader in_;
  std::string line_;
  int64_t line_no_ = 0;
  json::value record_;
  std::vector<std::pair<int64_t, json::value>> sample_;
  size_t next_sample_ = 0;
  std::vector<const json::value*> slots_;
  // Chunks: the sample's lines as read (blank ones too), those not yet in a chunk, and the
  // line the next chunk starts on.
  std::string* capture_ = nullptr;
  std::string sample_text_;
  bool chunking_ = false;
  std::string unsent_;
  int64_t next_chunk_line_ = 1;
  Status read_error_;  // for the call after the chunk it ended
};

class CsvImporter : public TextImporter, public ChunkedImporter {
 public:
  CsvImporter(std::unique_ptr<std::istream> in, ImportOptions options)
      : TextImporter(std::move(options)),
        in_(std::move(in), options_.csv_delimiter, options_.max_record_bytes,
            options_.max_field_bytes) {}

  Status Init() {
    int64_t line = 1;
    Result<bool> more = in_.Next(&header_, &line);
    if (!more.ok()) return Fail(more.status());
    if (!*more)
      return Status::InvalidArgument(options_.source_name +
                                     " is empty: a CSV file needs a header row");
    std::vector<std::string> names;
    for (size_t i = 0; i < header_.size(); ++i) {
      const std::string& n = header_[i].text;
      if (n.empty() || InvalidUtf8At(n) != std::string::npos) {
        return Fail(line, Status::InvalidArgument("header column " + std::to_string(i + 1) +
                                                  " has an empty or invalid UTF-8 name"));
      }
      if (std::find(names.begin(), names.end(), n) != names.end()) {
        return Fail(line, Status::InvalidArgument("header names column '" + n + "' twice"));
      }
      names.push_back(n);
    }
    // The records after the header, kept for chunks (which parse the sample again).
    next_chunk_line_ = in_.line();
    in_.block().StartCapture();
    std::vector<CsvColumnStats> stats(names.size());
    while (static_cast<int64_t>(sample_.size()) < options_.infer_rows) {
      TY_ASSIGN_OR_RETURN(bool got, ReadRecord());
      if (!got) break;
      for (size_t i = 0; i < record_.size(); ++i) {
        if (!record_[i].text.empty() || record_[i].quoted) stats[i].Add(record_[i].text);
      }
      sample_.emplace_back(record_line_, std::move(record_));
    }
    sample_text_ = in_.block().EndCapture();
    std::vector<std::pair<std::string, std::shared_ptr<arrow::DataType>>> fields;
    for (size_t i = 0; i < names.size(); ++i) fields.emplace_back(names[i], stats[i].Type());
    TY_ASSIGN_OR_RETURN(schema_, SchemaWithNewColumns(options_, fields));
    TY_RETURN_IF_ERROR(InitBuilders());
    return MapColumns(names, line);
  }

  std::shared_ptr<arrow::Schema> schema() const override { return schema_; }

  Result<std::optional<RecordChunk>> NextChunk() override {
    if (!chunking_) {
      chunking_ = true;
      unsent_ = std::move(sample_text_);
      ReleaseSample();
    }
    RecordChunk chunk;
    chunk.first_line = next_chunk_line_;
    size_t taken = 0;
    while (!cut_done_ && chunk.records < options_.batch_rows) {
      CsvScan scan = ScanCsvRecord(unsent_, taken, at_end_, options_.csv_delimiter,
                                   options_.max_record_bytes, options_.max_field_bytes);
      if (scan.kind == CsvScan::Kind::kNeedMore) {
        // Reading at least as much again as is buffered keeps rescanning a long record linear.
        if (!in_.block().ReadMore(&unsent_, std::max(kReadBytes, unsent_.size() - taken))) {
          if (in_.block().failed()) {
            return Fail(Status::IOError(
                "reading failed at line " +
                std::to_string(next_chunk_line_ +
                               std::count(unsent_.begin(), unsent_.begin() + taken, '\n'))));
          }
          at_end_ = true;
        }
        continue;
      }
      if (scan.kind == CsvScan::Kind::kBlankEnd) {
        taken = unsent_.size();
        cut_done_ = true;
        break;
      }
      ++chunk.records;
      if (scan.kind == CsvScan::Kind::kBad) {
        // The chunk ends with the record CsvReader fails on (its parse gives the error); the
        // byte after the point of failure goes too, in case CsvReader looks at it.
        taken = std::min(unsent_.size(), scan.end + 1);
        cut_done_ = true;
        break;
      }
      taken = scan.end;
    }
    chunk.text.assign(unsent_, 0, taken);
    unsent_.erase(0, taken);
    next_chunk_line_ += std::count(chunk.text.begin(), chunk.text.end(), '\n');
    if (chunk.records == 0) return std::optional<RecordChunk>();
    rows_read_ += chunk.records;
    return std::optional<RecordChunk>(std::move(chunk));
  }

  Result<std::shared_ptr<arrow::RecordBatch>> ParseChunk(const RecordChunk& chunk) const override {
    TY_ASSIGN_OR_RETURN(BatchBuilder builder, BatchBuilder::Make(schema_));
    CsvReader reader(chunk.text, chunk.first_line, options_.csv_delimiter,
                     options_.max_record_bytes, options_.max_field_bytes);
    std::vector<CsvField> record;
    int64_t line = 0;
    for (;;) {
      Result<bool> more = reader.Next(&record, &line);
      if (!more.ok()) return Fail(more.status());
      if (!*more) break;
      TY_RETURN_IF_ERROR(CheckRecord(record, line));
      TY_RETURN_IF_ERROR(AppendRecord(record, line, builder));
      builder.AddRow();
    }
    if (builder.rows() != chunk.records) {
      return Status::Internal(options_.source_name + " line " + std::to_string(chunk.first_line) +
                              ": a chunk of " + std::to_string(chunk.records) +
                              " CSV records parsed into " + std::to_string(builder.rows()));
    }
    return builder.Finish();
  }

 protected:
  Result<bool> AppendNext() override {
    int64_t line;
    if (next_sample_ < sample_.size()) {
      auto& [l, r] = sample_[next_sample_++];
      line = l;
      record_ = std::move(r);
      if (next_sample_ == sample_.size()) ReleaseSample();
    } else {
      TY_ASSIGN_OR_RETURN(bool got, ReadRecord());
      if (!got) return false;
      line = record_line_;
    }
    TY_RETURN_IF_ERROR(AppendRecord(record_, line, *builder_));
    return true;
  }

 private:
  static constexpr size_t kReadBytes = size_t{1} << 20;

  void ReleaseSample() {
    sample_.clear();
    sample_.shrink_to_fit();
    sample_text_ = {};
    next_sample_ = 0;
  }

  Result<bool> ReadRecord() {
    Result<bool> more = in_.Next(&record_, &record_line_);
    if (!more.ok()) return Fail(more.status());
    if (!*more) return false;
    TY_RETURN_IF_ERROR(CheckRecord(record_, record_line_));
    return true;
  }

  // The field count and UTF-8 of a record read from line `line`.
  Status CheckRecord(const std::vector<CsvField>& record, int64_t line) const {
    if (record.size() != header_.size()) {
      return Fail(line, Status::InvalidArgument("expected " + std::to_string(header_.size()) +
                                                " fields (as the header has), got " +
                                                std::to_string(record.size())));
    }
    for (size_t i = 0; i < record.size(); ++i) {
      size_t bad = InvalidUtf8At(record[i].text);
      if (bad != std::string::npos) {
        return Fail(line,
                    Status::InvalidArgument("field '" + header_[i].text +
                                            "': invalid UTF-8 at byte " + std::to_string(bad + 1)));
      }
    }
    return Status::Ok();
  }

  Status AppendRecord(const std::vector<CsvField>& record, int64_t line,
                      BatchBuilder& builder) const {
    for (int i = 0; i < schema_->num_fields(); ++i) {
      int src = column_source_[static_cast<size_t>(i)];
      static const CsvField kMissing;
      const CsvField& f = src < 0 ? kMissing : record[static_cast<size_t>(src)];
      Status s = AppendCsv(f, *schema_->field(i), builder.column(i));
      if (!s.ok()) return Fail(line, s);
    }
    return Status::Ok();
  }

  // Which header column fills each schema column; unknown header columns are an error.
  Status MapColumns(const std::vector<std::string>& names, int64_t header_line) {
    column_source_.assign(static_cast<size_t>(schema_->num_fields()), -1);
    for (size_t i = 0; i < names.size(); ++i) {
      auto it = column_index_.find(names[i]);
      if (it == column_index_.end()) {
        return Fail(header_line,
                    Status::InvalidArgument("unknown field '" + names[i] +
                                            "': the table has no such column (allow new "
                                            "columns to add it)"));
      }
      column_source_[it->second] = static_cast<int>(i);
    }
    return Status::Ok();
  }

  CsvReader in_;
  std::vector<CsvField> header_, record_;
  int64_t record_line_ = 0;
  std::vector<std::pair<int64_t, std::vector<CsvField>>> sample_;
  size_t next_sample_ = 0;
  std::vector<int> column_source_;
  // Chunks: the sample's bytes as read, then the bytes not yet in a chunk; the line the next
  // chunk starts on; whether the source is read to its end; whether the last chunk is cut.
  std::string sample_text_;
  bool chunking_ = false;
  std::string unsent_;
  int64_t next_chunk_line_ = 1;
  bool at_end_ = false;
  bool cut_done_ = false;
};

// Parquet batches as the import's schema: the file's columns in the schema's order, null
// columns for the schema's columns the file lacks, and the check of required columns.
class ParquetPlan {
 public:
  static Result<ParquetPlan> Make(const arrow::Schema& file_schema, const ImportOptions& options) {
    ParquetPlan plan;
    const std::string& src = options.source_name;
    plan.source_name_ = src;
    std::vector<std::pair<std::string, std::shared_ptr<arrow::DataType>>> fields;
    for (const auto& f : file_schema.fields()) fields.emplace_back(f->name(), f->type());
    TY_ASSIGN_OR_RETURN(plan.schema_, SchemaWithNewColumns(options, fields));
    for (const auto& f : plan.schema_->fields()) {
      int i = file_schema.GetFieldIndex(f->name());
      plan.source_.push_back(i);
      if (i < 0 && !f->nullable()) {
        return Status::InvalidArgument(src + ": missing required field '" + f->name() + "'");
      }
      if (i >= 0 && !file_schema.field(i)->type()->Equals(*f->type())) {
        return Status::InvalidArgument(
            src + ": field '" + f->name() + "': expected " + f->type()->ToString() + ", got " +
            file_schema.field(i)->type()->ToString() + " (the file's column type)");
      }
    }
    for (const auto& f : file_schema.fields()) {
      if (plan.schema_->GetFieldIndex(f->name()) < 0) {
        return Status::InvalidArgument(src + ": unknown field '" + f->name() +
                                       "': the table has no such column (allow new columns to "
                                       "add it)");
      }
    }
    return plan;
  }

  const std::shared_ptr<arrow::Schema>& schema() const { return schema_; }

  Result<std::shared_ptr<arrow::RecordBatch>> Adapt(const arrow::RecordBatch& in) const {
    arrow::ArrayVector columns;
    for (size_t i = 0; i < source_.size(); ++i) {
      if (source_[i] >= 0) {
        columns.push_back(in.column(source_[i]));
      } else {
        TY_ASSIGN_OR_RETURN(
            std::shared_ptr<arrow::Array> nulls,
            FromArrow(
                arrow::MakeArrayOfNull(schema_->field(static_cast<int>(i))->type(), in.num_rows()),
                source_name_));
        columns.push_back(std::move(nulls));
      }
    }
    for (size_t i = 0; i < columns.size(); ++i) {
      if (!schema_->field(static_cast<int>(i))->nullable() && columns[i]->null_count() > 0) {
        return Status::InvalidArgument(source_name_ + ": field '" +
                                       schema_->field(static_cast<int>(i))->name() +
                                       "' is required but has nulls");
      }
    }
    return arrow::RecordBatch::Make(schema_, in.num_rows(), std::move(columns));
  }

 private:
  std::string source_name_;
  std::shared_ptr<arrow::Schema> schema_;
  std::vector<int> source_;  // the file's column for each of schema_'s, or -1
};

// A Parquet file's reader with the import's options (one per thread that decodes).
Result<std::unique_ptr<parquet::arrow::FileReader>> OpenParquetReader(
    std::shared_ptr<arrow::io::RandomAccessFile> file,
    std::shared_ptr<parquet::FileMetaData> metadata, const ImportOptions& options) {
  std::unique_ptr<parquet::ParquetFileReader> raw;
  try {
    raw = parquet::ParquetFileReader::Open(std::move(file), parquet::default_reader_properties(),
                                           std::move(metadata));
  } catch (const std::exception& e) {
    return Status::InvalidArgument(options.source_name +
                                   " is not a readable Parquet file: " + e.what());
  }
  parquet::ArrowReaderProperties properties = parquet::default_arrow_reader_properties();
  properties.set_batch_size(options.batch_rows);
  return FromArrow(
      parquet::arrow::FileReader::Make(arrow::default_memory_pool(), std::move(raw), properties),
      options.source_name + " is not a readable Parquet file");
}

// Reads row group by row group, in batches of up to batch_rows rows within each (a chunk's
// batches, ParquetChunks below, are cut the same way).
class ParquetImporter : public RecordImporter {
 public:
  explicit ParquetImporter(ImportOptions options) : options_(std::move(options)) {}

  Status Init(std::shared_ptr<arrow::io::RandomAccessFile> file) {
    TY_ASSIGN_OR_RETURN(reader_, OpenParquetReader(std::move(file), nullptr, options_));
    std::shared_ptr<arrow::Schema> file_schema;
    TY_RETURN_IF_ERROR(FromArrow(reader_->GetSchema(&file_schema), options_.source_name));
    TY_ASSIGN_OR_RETURN(plan_, ParquetPlan::Make(*file_schema, options_));
    return Status::Ok();
  }

  std::shared_ptr<arrow::Schema> schema() const override { return plan_.schema(); }
  int64_t rows_read() const override { return rows_read_; }

  Result<std::shared_ptr<arrow::RecordBatch>> Next() override {
    std::shared_ptr<arrow::RecordBatch> in;
    while (!in) {
      if (!batches_) {
        if (next_row_group_ == reader_->num_row_groups()) return in;
        TY_ASSIGN_OR_RETURN(batches_, FromArrow(reader_->GetRecordBatchReader({next_row_group_}),
                                                options_.source_name));
        ++next_row_group_;
      }
      TY_RETURN_IF_ERROR(FromArrow(batches_->ReadNext(&in), options_.source_name));
      if (!in) batches_.reset();
      if (in && in->num_rows() == 0) in.reset();
    }
    rows_read_ += in->num_rows();
    return plan_.Adapt(*in);
  }

 private:
  ImportOptions options_;
  std::unique_ptr<parquet::arrow::FileReader> reader_;
  std::unique_ptr<arrow::RecordBatchReader> batches_;
  int next_row_group_ = 0;
  ParquetPlan plan_;
  int64_t rows_read_ = 0;
};

// Parquet in chunks: NextChunk only counts rows in the footer (a chunk is a row group's
// `slice`-th batch of batch_rows rows); ParseChunk decodes. Each row group is decoded by its
// own reader, front to back, whichever thread asks first: a thread that asks for a later
// batch of a row group decodes the earlier ones on the way and leaves them for their chunks.
// So row groups decode in parallel, and a row group's batches are those ParquetImporter reads.
class ParquetChunks : public ChunkedImporter {
 public:
  explicit ParquetChunks(ImportOptions options) : options_(std::move(options)) {}

  Status Init(std::shared_ptr<arrow::io::RandomAccessFile> file) {
    file_ = std::move(file);
    TY_ASSIGN_OR_RETURN(auto reader, OpenParquetReader(file_, nullptr, options_));
    metadata_ = reader->parquet_reader()->metadata();
    std::shared_ptr<arrow::Schema> file_schema;
    TY_RETURN_IF_ERROR(FromArrow(reader->GetSchema(&file_schema), options_.source_name));
    TY_ASSIGN_OR_RETURN(plan_, ParquetPlan::Make(*file_schema, options_));
    return Status::Ok();
  }

  std::shared_ptr<arrow::Schema> schema() const override { return plan_.schema(); }

  Result<std::optional<RecordChunk>> NextChunk() override {
    while (row_group_ < metadata_->num_row_groups()) {
      int64_t rows = metadata_->RowGroup(row_group_)->num_rows();
      int64_t at = slice_ * options_.batch_rows;
      if (at < rows) {
        RecordChunk chunk;
        chunk.row_group = row_group_;
        chunk.slice = slice_++;
        chunk.records = std::min(options_.batch_rows, rows - at);
        return std::optional<RecordChunk>(std::move(chunk));
      }
      ++row_group_;
      slice_ = 0;
    }
    return std::optional<RecordChunk>();
  }

  Result<std::shared_ptr<arrow::RecordBatch>> ParseChunk(const RecordChunk& chunk) const override {
    if (chunk.row_group < 0 || chunk.row_group >= metadata_->num_row_groups()) {
      return Status::InvalidArgument("not a chunk of " + options_.source_name);
    }
    std::shared_ptr<RowGroupStream> stream;
    {
      MutexLock lock(mu_);
      std::shared_ptr<RowGroupStream>& s = streams_[chunk.row_group];
      if (!s) s = std::make_shared<RowGroupStream>();
      stream = s;
    }
    bool finished = false;
    Result<std::shared_ptr<arrow::RecordBatch>> raw = Take(*stream, chunk, &finished);
    if (finished) {
      MutexLock lock(mu_);
      streams_.erase(chunk.row_group);
    }
    if (!raw.ok()) return raw.status();
    return plan_.Adapt(**raw);
  }

 private:
  // One row group's decoding, shared by the chunks of that row group.
  struct RowGroupStream {
    Mutex mu;
    std::unique_ptr<parquet::arrow::FileReader> reader TY_GUARDED_BY(mu);
    std::unique_ptr<arrow::RecordBatchReader> batches TY_GUARDED_BY(mu);
    std::shared_ptr<arrow::RecordBatch> carry TY_GUARDED_BY(mu);  // read, not yet in a batch
    int64_t decoded TY_GUARDED_BY(mu) = 0;                        // batches decoded so far
    int64_t taken TY_GUARDED_BY(mu) = 0;                          // ...and handed out
    Status failed TY_GUARDED_BY(mu);
    std::map<int64_t, Result<std::shared_ptr<arrow::RecordBatch>>> ready TY_GUARDED_BY(mu);
  };

  Result<std::shared_ptr<arrow::RecordBatch>> Take(RowGroupStream& s, const RecordChunk& chunk,
                                                   bool* finished) const {
    MutexLock lock(s.mu);
    while (s.decoded <= chunk.slice) {
      s.ready.emplace(s.decoded, DecodeNext(s, chunk.row_group));
      ++s.decoded;
    }
    auto it = s.ready.find(chunk.slice);
    if (it == s.ready.end()) {
      return Status::Internal(options_.source_name + ": a chunk of row group " +
                              std::to_string(chunk.row_group) + " was parsed twice");
    }
    Result<std::shared_ptr<arrow::RecordBatch>> out = std::move(it->second);
    s.ready.erase(it);
    int64_t rows = metadata_->RowGroup(chunk.row_group)->num_rows();
    *finished = ++s.taken * options_.batch_rows >= rows;
    return out;
  }

  // The row group's next batch of batch_rows rows (fewer for its last).
  Result<std::shared_ptr<arrow::RecordBatch>> DecodeNext(RowGroupStream& s, int row_group) const
      TY_REQUIRES(s.mu) {
    if (!s.failed.ok()) return s.failed;
    Result<std::shared_ptr<arrow::RecordBatch>> out = ReadRows(s, row_group);
    if (!out.ok()) s.failed = out.status();
    return out;
  }

  Result<std::shared_ptr<arrow::RecordBatch>> ReadRows(RowGroupStream& s, int row_group) const
      TY_REQUIRES(s.mu) {
    if (!s.batches) {
      TY_ASSIGN_OR_RETURN(s.reader, OpenParquetReader(file_, metadata_, options_));
      TY_ASSIGN_OR_RETURN(
          s.batches, FromArrow(s.reader->GetRecordBatchReader({row_group}), options_.source_name));
    }
    int64_t rows = metadata_->RowGroup(row_group)->num_rows();
    int64_t want = std::min(options_.batch_rows, rows - s.decoded * options_.batch_rows);
    // Arrow's reader gives batch_rows rows at a time within a row group; it may cut them
    // smaller (a column's chunk boundary), so pieces are put together to the expected size.
    arrow::RecordBatchVector pieces;
    int64_t have = 0;
    while (have < want) {
      std::shared_ptr<arrow::RecordBatch> piece = std::move(s.carry);
      if (!piece) {
        TY_RETURN_IF_ERROR(FromArrow(s.batches->ReadNext(&piece), options_.source_name));
        if (!piece) {
          return Status::InvalidArgument(options_.source_name + ": row group " +
                                         std::to_string(row_group) + " holds fewer rows than " +
                                         "its footer says");
        }
      }
      if (have + piece->num_rows() > want) {
        s.carry = piece->Slice(want - have);
        piece = piece->Slice(0, want - have);
      }
      have += piece->num_rows();
      if (piece->num_rows() > 0) pieces.push_back(std::move(piece));
    }
    if (pieces.size() == 1) return pieces.front();
    return FromArrow(arrow::ConcatenateRecordBatches(pieces), options_.source_name);
  }

  ImportOptions options_;
  std::shared_ptr<arrow::io::RandomAccessFile> file_;  // ReadAt is thread-safe
  std::shared_ptr<parquet::FileMetaData> metadata_;
  ParquetPlan plan_;
  int row_group_ = 0;  // NextChunk's place
  int64_t slice_ = 0;
  mutable Mutex mu_;
  mutable std::map<int, std::shared_ptr<RowGroupStream>> streams_ TY_GUARDED_BY(mu_);
};

Result<std::unique_ptr<RecordImporter>> OpenText(std::unique_ptr<std::istream> in,
                                                 ImportOptions options) {
  if (options.format == ImportFormat::kJsonl) {
    auto imp = std::make_unique<JsonlImporter>(std::move(in), std::move(options));
    TY_RETURN_IF_ERROR(imp->Init());
    return std::unique_ptr<RecordImporter>(std::move(imp));
  }
  auto imp = std::make_unique<CsvImporter>(std::move(in), std::move(options));
  TY_RETURN_IF_ERROR(imp->Init());
  return std::unique_ptr<RecordImporter>(std::move(imp));
}

Result<std::unique_ptr<ChunkedImporter>> OpenTextChunks(std::unique_ptr<std::istream> in,
                                                        ImportOptions options) {
  if (options.format == ImportFormat::kJsonl) {
    auto imp = std::make_unique<JsonlImporter>(std::move(in), std::move(options));
    TY_RETURN_IF_ERROR(imp->Init());
    return std::unique_ptr<ChunkedImporter>(std::move(imp));
  }
  auto imp = std::make_unique<CsvImporter>(std::move(in), std::move(options));
  TY_RETURN_IF_ERROR(imp->Init());
  return std::unique_ptr<ChunkedImporter>(std::move(imp));
}

Result<std::unique_ptr<ChunkedImporter>> OpenParquetChunks(
    std::shared_ptr<arrow::io::RandomAccessFile> file, ImportOptions options) {
  auto imp = std::make_unique<ParquetChunks>(std::move(options));
  TY_RETURN_IF_ERROR(imp->Init(std::move(file)));
  return std::unique_ptr<ChunkedImporter>(std::move(imp));
}

}  // namespace

Result<std::unique_ptr<ChunkedImporter>> OpenImportChunks(const std::string& path,
                                                          ImportOptions options) {
  TY_RETURN_IF_ERROR(ValidateOptions(options));
  if (options.source_name.empty()) {
    size_t slash = path.rfind('/');
    options.source_name = slash == std::string::npos ? path : path.substr(slash + 1);
  }
  if (options.format == ImportFormat::kParquet) {
    TY_ASSIGN_OR_RETURN(std::shared_ptr<arrow::io::ReadableFile> file,
                        FromArrow(arrow::io::ReadableFile::Open(path), "cannot open " + path));
    return OpenParquetChunks(std::move(file), std::move(options));
  }
  auto in = std::make_unique<std::ifstream>(path, std::ios::binary);
  if (!*in) return Status::NotFound("cannot open " + path);
  return OpenTextChunks(std::move(in), std::move(options));
}

Result<std::unique_ptr<ChunkedImporter>> OpenImportChunksBuffer(std::string data,
                                                                ImportOptions options) {
  TY_RETURN_IF_ERROR(ValidateOptions(options));
  if (options.source_name.empty()) options.source_name = "input";
  if (options.format == ImportFormat::kParquet) {
    return OpenParquetChunks(
        std::make_shared<arrow::io::BufferReader>(arrow::Buffer::FromString(std::move(data))),
        std::move(options));
  }
  return OpenTextChunks(std::make_unique<std::istringstream>(std::move(data)), std::move(options));
}

Result<std::unique_ptr<ChunkedImporter>> OpenJsonlChunks(const std::string& path,
                                                         ImportOptions options) {
  options.format = ImportFormat::kJsonl;
  return OpenImportChunks(path, std::move(options));
}

Result<std::unique_ptr<ChunkedImporter>> OpenJsonlChunksBuffer(std::string data,
                                                               ImportOptions options) {
  options.format = ImportFormat::kJsonl;
  return OpenImportChunksBuffer(std::move(data), std::move(options));
}

std::optional<int64_t> ParseIsoTimestampMicros(std::string_view s) {
  std::optional<int64_t> days = ParseDate(s);
  if (!days || s.size() < 16 || (s[10] != 'T' && s[10] != ' ' && s[10] != 't')) {
    return std::nullopt;
  }
  auto hh = TwoDigits(s, 11), mm = TwoDigits(s, 14);
  if (!hh || !mm || s[13] != ':' || *hh > 23 || *mm > 59) return std::nullopt;
  size_t i = 16;
  int64_t seconds = 0, micros = 0;
  if (i < s.size() && s[i] == ':') {
    auto ss = TwoDigits(s, i + 1);
    if (!ss || *ss > 60) return std::nullopt;  // 60: a leap second, as ISO-8601 allows
    seconds = *ss;
    i += 3;
    if (i < s.size() && (s[i] == '.' || s[i] == ',')) {
      size_t start = ++i;
      while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
        if (i - start < 6) micros = micros * 10 + (s[i] - '0');
        ++i;
      }
      if (i == start) return std::nullopt;
      for (size_t k = std::min<size_t>(i - start, 6); k < 6; ++k) micros *= 10;
    }
  }
  int64_t offset_minutes = 0;
  if (i < s.size()) {
    if ((s[i] == 'Z' || s[i] == 'z') && i + 1 == s.size()) {
      ++i;
    } else if (s[i] == '+' || s[i] == '-') {
      auto oh = TwoDigits(s, i + 1);
      size_t m_at = i + 3 < s.size() && s[i + 3] == ':' ? i + 4 : i + 3;
      auto om = TwoDigits(s, m_at);
      if (!oh || !om || *oh > 23 || *om > 59 || m_at + 2 != s.size()) return std::nullopt;
      offset_minutes = (*oh * 60 + *om) * (s[i] == '-' ? -1 : 1);
      i = s.size();
    } else {
      return std::nullopt;
    }
  }
  if (i != s.size()) return std::nullopt;
  int64_t secs = *days * 86400 + *hh * 3600 + *mm * 60 + seconds - offset_minutes * 60;
  return secs * 1000000 + micros;
}

Result<ImportFormat> ImportFormatFromPath(std::string_view path) {
  std::string lower = ToLower(path);
  if (EndsWith(lower, ".jsonl") || EndsWith(lower, ".ndjson") || EndsWith(lower, ".json")) {
    return ImportFormat::kJsonl;
  }
  if (EndsWith(lower, ".csv")) return ImportFormat::kCsv;
  if (EndsWith(lower, ".parquet")) return ImportFormat::kParquet;
  return Status::InvalidArgument("cannot tell the format of '" + Abbreviate(path) +
                                 "' from its name: use a .jsonl, .csv or .parquet file");
}

Result<std::unique_ptr<RecordImporter>> OpenImportFile(const std::string& path,
                                                       ImportOptions options) {
  TY_RETURN_IF_ERROR(ValidateOptions(options));
  if (options.source_name.empty()) {
    size_t slash = path.rfind('/');
    options.source_name = slash == std::string::npos ? path : path.substr(slash + 1);
  }
  if (options.format == ImportFormat::kParquet) {
    TY_ASSIGN_OR_RETURN(std::shared_ptr<arrow::io::ReadableFile> file,
                        FromArrow(arrow::io::ReadableFile::Open(path), "cannot open " + path));
    auto imp = std::make_unique<ParquetImporter>(std::move(options));
    TY_RETURN_IF_ERROR(imp->Init(std::move(file)));
    return std::unique_ptr<RecordImporter>(std::move(imp));
  }
  auto in = std::make_unique<std::ifstream>(path, std::ios::binary);
  if (!*in) return Status::NotFound("cannot open " + path);
  return OpenText(std::move(in), std::move(options));
}

Result<std::unique_ptr<RecordImporter>> OpenImportBuffer(std::string data, ImportOptions options) {
  TY_RETURN_IF_ERROR(ValidateOptions(options));
  if (options.source_name.empty()) options.source_name = "input";
  if (options.format == ImportFormat::kParquet) {
    auto file =
        std::make_shared<arrow::io::BufferReader>(arrow::Buffer::FromString(std::move(data)));
    auto imp = std::make_unique<ParquetImporter>(std::move(options));
    TY_RETURN_IF_ERROR(imp->Init(std::move(file)));
    return std::unique_ptr<RecordImporter>(std::move(imp));
  }
  return OpenText(std::make_unique<std::istringstream>(std::move(data)), std::move(options));
}

}  // namespace trainyard::tables
