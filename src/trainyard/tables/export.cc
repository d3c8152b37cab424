#include "trainyard/tables/export.h"

#include <arrow/io/interfaces.h>
#include <arrow/ipc/writer.h>
#include <parquet/arrow/writer.h>
#include <unistd.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "trainyard/common/strings.h"
#include "trainyard/tables/arrow_util.h"

namespace trainyard::tables {
namespace {

// ---------------------------------------------------------------------------------------------
// Value formatting.

void AppendJsonString(std::string_view s, std::string* out) {
  static const char* kHex = "0123456789abcdef";
  out->push_back('"');
  for (char c : s) {
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          *out += "\\u00";
          out->push_back(kHex[(c >> 4) & 0xF]);
          out->push_back(kHex[c & 0xF]);
        } else {
          out->push_back(c);
        }
    }
  }
  out->push_back('"');
}

std::string Base64(std::string_view in) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= in.size(); i += 3) {
    uint32_t v =
        (uint32_t(uint8_t(in[i])) << 16) | (uint32_t(uint8_t(in[i + 1])) << 8) | uint8_t(in[i + 2]);
    for (int k = 18; k >= 0; k -= 6) out.push_back(kAlphabet[(v >> k) & 63]);
  }
  if (i < in.size()) {
    uint32_t v = uint32_t(uint8_t(in[i])) << 16;
    if (i + 1 < in.size()) v |= uint32_t(uint8_t(in[i + 1])) << 8;
    out.push_back(kAlphabet[(v >> 18) & 63]);
    out.push_back(kAlphabet[(v >> 12) & 63]);
    out.push_back(i + 1 < in.size() ? kAlphabet[(v >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

// Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
void CivilFromDays(int64_t z, int64_t* y, unsigned* m, unsigned* d) {
  z += 719468;
  int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  auto doe = static_cast<unsigned>(z - era * 146097);
  unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  unsigned mp = (5 * doy + 2) / 153;
  *d = doy - (153 * mp + 2) / 5 + 1;
  *m = mp < 10 ? mp + 3 : mp - 9;
  *y = static_cast<int64_t>(yoe) + era * 400 + (*m <= 2);
}

std::string FormatDate(int64_t days) {
  int64_t y;
  unsigned m, d;
  CivilFromDays(days, &y, &m, &d);
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%04lld-%02u-%02u", static_cast<long long>(y), m, d);
  return buf;
}

// ISO-8601 of a timestamp in `unit`; the fraction has the unit's digits when it is not zero.
std::string FormatTimestamp(int64_t v, arrow::TimeUnit::type unit, bool utc) {
  int64_t per_second = unit == arrow::TimeUnit::SECOND  ? 1
                       : unit == arrow::TimeUnit::MILLI ? 1000
                       : unit == arrow::TimeUnit::MICRO ? 1000000
                                                        : 1000000000;
  int digits = unit == arrow::TimeUnit::SECOND  ? 0
               : unit == arrow::TimeUnit::MILLI ? 3
               : unit == arrow::TimeUnit::MICRO ? 6
                                                : 9;
  int64_t secs = v / per_second, frac = v % per_second;
  if (frac < 0) {
    frac += per_second;
    --secs;
  }
  int64_t days = secs / 86400, rem = secs % 86400;
  if (rem < 0) {
    rem += 86400;
    --days;
  }
  char buf[64];
  int n = std::snprintf(buf, sizeof(buf), "%sT%02d:%02d:%02d", FormatDate(days).c_str(),
                        static_cast<int>(rem / 3600), static_cast<int>(rem / 60 % 60),
                        static_cast<int>(rem % 60));
  std::string out(buf, static_cast<size_t>(n));
  if (frac != 0) {
    std::snprintf(buf, sizeof(buf), ".%0*lld", digits, static_cast<long long>(frac));
    out += buf;
  }
  if (utc) out.push_back('Z');
  return out;
}

void AppendDouble(double v, std::string* out) {
  if (!std::isfinite(v)) {
    *out += "null";
    return;
  }
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  out->append(buf, end);
}

template <typename ArrayT>
void AppendInt(const arrow::Array& a, int64_t row, std::string* out) {
  *out += std::to_string(static_cast<const ArrayT&>(a).Value(row));
}

// The value at `row` as text for CSV or JSON; `json` quotes strings and writes nested values.
void AppendScalarJson(const arrow::Array& a, int64_t row, std::string* out) {
  switch (a.type_id()) {
    case arrow::Type::BOOL:
      *out += static_cast<const arrow::BooleanArray&>(a).Value(row) ? "true" : "false";
      return;
    case arrow::Type::INT8:
      return AppendInt<arrow::Int8Array>(a, row, out);
    case arrow::Type::INT16:
      return AppendInt<arrow::Int16Array>(a, row, out);
    case arrow::Type::INT32:
      return AppendInt<arrow::Int32Array>(a, row, out);
    case arrow::Type::INT64:
      return AppendInt<arrow::Int64Array>(a, row, out);
    case arrow::Type::UINT8:
      return AppendInt<arrow::UInt8Array>(a, row, out);
    case arrow::Type::UINT16:
      return AppendInt<arrow::UInt16Array>(a, row, out);
    case arrow::Type::UINT32:
      return AppendInt<arrow::UInt32Array>(a, row, out);
    case arrow::Type::UINT64:
      return AppendInt<arrow::UInt64Array>(a, row, out);
    case arrow::Type::FLOAT:
      return AppendDouble(static_cast<const arrow::FloatArray&>(a).Value(row), out);
    case arrow::Type::DOUBLE:
      return AppendDouble(static_cast<const arrow::DoubleArray&>(a).Value(row), out);
    case arrow::Type::STRING:
      return AppendJsonString(static_cast<const arrow::StringArray&>(a).GetView(row), out);
    case arrow::Type::LARGE_STRING:
      return AppendJsonString(static_cast<const arrow::LargeStringArray&>(a).GetView(row), out);
    case arrow::Type::BINARY:
      return AppendJsonString(Base64(static_cast<const arrow::BinaryArray&>(a).GetView(row)), out);
    case arrow::Type::LARGE_BINARY:
      return AppendJsonString(Base64(static_cast<const arrow::LargeBinaryArray&>(a).GetView(row)),
                              out);
    case arrow::Type::TIMESTAMP: {
      const auto& t = static_cast<const arrow::TimestampType&>(*a.type());
      int64_t v = static_cast<const arrow::TimestampArray&>(a).Value(row);
      return AppendJsonString(FormatTimestamp(v, t.unit(), !t.timezone().empty()), out);
    }
    case arrow::Type::DATE32:
      return AppendJsonString(FormatDate(static_cast<const arrow::Date32Array&>(a).Value(row)),
                              out);
    default: {
      // Decimals and the rest: Arrow's own rendering, as a string.
      auto scalar = a.GetScalar(row);
      AppendJsonString(scalar.ok() ? (*scalar)->ToString() : "", out);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Writers.

// An Arrow output stream that hands what is written to a ByteSink.
class SinkOutputStream : public arrow::io::OutputStream {
 public:
  explicit SinkOutputStream(const ByteSink& sink) : sink_(sink) {}

  arrow::Status Write(const void* data, int64_t nbytes) override {
    Status s = sink_(std::string_view(static_cast<const char*>(data), static_cast<size_t>(nbytes)));
    if (!s.ok()) {
      error_ = s;
      return arrow::Status::IOError(s.message());
    }
    position_ += nbytes;
    return arrow::Status::OK();
  }
  arrow::Status Close() override {
    closed_ = true;
    return arrow::Status::OK();
  }
  bool closed() const override { return closed_; }
  arrow::Result<int64_t> Tell() const override { return position_; }
  // The sink's own error, if a write failed there (rather than in Arrow).
  const Status& error() const { return error_; }

 private:
  const ByteSink& sink_;
  int64_t position_ = 0;
  bool closed_ = false;
  Status error_;
};

bool CsvNeedsQuotes(std::string_view s, char delim) {
  if (s.empty()) return true;  // "" is the empty string; an empty unquoted field is null
  if (s.front() == ' ' || s.back() == ' ') return true;
  for (char c : s) {
    if (c == delim || c == '"' || c == '\n' || c == '\r') return true;
  }
  return false;
}

void AppendCsvField(std::string_view s, char delim, std::string* out) {
  if (!CsvNeedsQuotes(s, delim)) {
    out->append(s);
    return;
  }
  out->push_back('"');
  for (char c : s) {
    if (c == '"') out->push_back('"');
    out->push_back(c);
  }
  out->push_back('"');
}

// The CSV text of a value: strings as they are, the rest as their JSON text unquoted.
void AppendCsvValue(const arrow::Array& a, int64_t row, char delim, std::string* out) {
  if (a.IsNull(row)) return;
  std::string_view raw;
  if (a.type_id() == arrow::Type::STRING) {
    raw = static_cast<const arrow::StringArray&>(a).GetView(row);
  } else if (a.type_id() == arrow::Type::LARGE_STRING) {
    raw = static_cast<const arrow::LargeStringArray&>(a).GetView(row);
  } else if ((a.type_id() == arrow::Type::DOUBLE || a.type_id() == arrow::Type::FLOAT) &&
             !std::isfinite(a.type_id() == arrow::Type::DOUBLE
                                ? static_cast<const arrow::DoubleArray&>(a).Value(row)
                                : static_cast<const arrow::FloatArray&>(a).Value(row))) {
    // JSON has no NaN or infinity, CSV does (the importer reads these back).
    double v = a.type_id() == arrow::Type::DOUBLE
                   ? static_cast<const arrow::DoubleArray&>(a).Value(row)
                   : static_cast<const arrow::FloatArray&>(a).Value(row);
    out->append(std::isnan(v) ? "NaN" : v > 0 ? "inf" : "-inf");
    return;
  } else {
    std::string text;
    AppendJsonValue(a, row, &text);
    bool quoted_string = text.size() >= 2 && text.front() == '"' &&
                         a.type_id() != arrow::Type::STRUCT && a.type_id() != arrow::Type::LIST &&
                         a.type_id() != arrow::Type::LARGE_LIST;
    // Timestamps, dates, binary: their JSON string without the JSON quotes.
    if (quoted_string) text = text.substr(1, text.size() - 2);
    return AppendCsvField(text, delim, out);
  }
  AppendCsvField(raw, delim, out);
}

Status WriteJsonl(const arrow::RecordBatch& batch, const ByteSink& sink) {
  std::string out;
  const auto& fields = batch.schema()->fields();
  std::vector<std::string> keys;
  for (const auto& f : fields) {
    std::string k;
    AppendJsonString(f->name(), &k);
    keys.push_back(k + ":");
  }
  for (int64_t r = 0; r < batch.num_rows(); ++r) {
    out.push_back('{');
    for (int c = 0; c < batch.num_columns(); ++c) {
      if (c) out.push_back(',');
      out += keys[static_cast<size_t>(c)];
      AppendJsonValue(*batch.column(c), r, &out);
    }
    out += "}\n";
    if (out.size() > (1u << 20)) {
      TY_RETURN_IF_ERROR(sink(out));
      out.clear();
    }
  }
  return out.empty() ? Status::Ok() : sink(out);
}

Status WriteCsv(const arrow::RecordBatch& batch, char delim, const ByteSink& sink) {
  std::string out;
  for (int64_t r = 0; r < batch.num_rows(); ++r) {
    for (int c = 0; c < batch.num_columns(); ++c) {
      if (c) out.push_back(delim);
      AppendCsvValue(*batch.column(c), r, delim, &out);
    }
    out += "\r\n";
    if (out.size() > (1u << 20)) {
      TY_RETURN_IF_ERROR(sink(out));
      out.clear();
    }
  }
  return out.empty() ? Status::Ok() : sink(out);
}

Status WriteCsvHeader(const arrow::Schema& schema, char delim, const ByteSink& sink) {
  std::string out;
  for (int c = 0; c < schema.num_fields(); ++c) {
    if (c) out.push_back(delim);
    AppendCsvField(schema.field(c)->name(), delim, &out);
  }
  out += "\r\n";
  return sink(out);
}

// Calls `each` with every batch of `reader` (sliced to `max_rows` in all); returns the rows.
Result<int64_t> ForEachBatch(arrow::RecordBatchReader& reader, int64_t max_rows,
                             const std::function<Status(const arrow::RecordBatch&)>& each) {
  int64_t rows = 0;
  for (;;) {
    if (max_rows >= 0 && rows >= max_rows) break;
    std::shared_ptr<arrow::RecordBatch> batch;
    TY_RETURN_IF_ERROR(FromArrow(reader.ReadNext(&batch), "reading the rows to export"));
    if (!batch) break;
    if (max_rows >= 0 && rows + batch->num_rows() > max_rows)
      batch = batch->Slice(0, max_rows - rows);
    TY_RETURN_IF_ERROR(each(*batch));
    rows += batch->num_rows();
  }
  return rows;
}

Result<int64_t> WriteArrowFormat(arrow::RecordBatchReader& reader, ExportFormat format,
                                 const ByteSink& sink, const ExportOptions& options) {
  auto stream = std::make_shared<SinkOutputStream>(sink);
  auto sink_or_arrow = [&](const arrow::Status& s, std::string_view what) {
    return stream->error().ok() ? FromArrow(s, what) : stream->error();
  };
  if (format == ExportFormat::kArrowIpc) {
    auto writer = arrow::ipc::MakeStreamWriter(stream, reader.schema());
    if (!writer.ok()) return sink_or_arrow(writer.status(), "starting the Arrow stream");
    Result<int64_t> rows = ForEachBatch(reader, options.max_rows, [&](const arrow::RecordBatch& b) {
      return sink_or_arrow((*writer)->WriteRecordBatch(b), "writing the Arrow stream");
    });
    TY_RETURN_IF_ERROR(rows.status());
    TY_RETURN_IF_ERROR(sink_or_arrow((*writer)->Close(), "ending the Arrow stream"));
    return rows;
  }
  auto props = parquet::WriterProperties::Builder()
                   .compression(parquet::Compression::SNAPPY)
                   ->max_row_group_length(options.parquet_row_group_rows)
                   ->build();
  auto arrow_props = parquet::ArrowWriterProperties::Builder().store_schema()->build();
  auto writer = parquet::arrow::FileWriter::Open(*reader.schema(), arrow::default_memory_pool(),
                                                 stream, props, arrow_props);
  if (!writer.ok()) return sink_or_arrow(writer.status(), "starting the Parquet file");
  Result<int64_t> rows = ForEachBatch(reader, options.max_rows, [&](const arrow::RecordBatch& b) {
    return sink_or_arrow((*writer)->WriteRecordBatch(b), "writing the Parquet file");
  });
  TY_RETURN_IF_ERROR(rows.status());
  TY_RETURN_IF_ERROR(sink_or_arrow((*writer)->Close(), "ending the Parquet file"));
  return rows;
}

}  // namespace

void AppendJsonValue(const arrow::Array& array, int64_t row, std::string* out) {
  if (array.IsNull(row)) {
    *out += "null";
    return;
  }
  switch (array.type_id()) {
    case arrow::Type::NA:
      *out += "null";
      return;
    case arrow::Type::STRUCT: {
      const auto& s = static_cast<const arrow::StructArray&>(array);
      out->push_back('{');
      for (int i = 0; i < s.num_fields(); ++i) {
        if (i) out->push_back(',');
        AppendJsonString(s.type()->field(i)->name(), out);
        out->push_back(':');
        // field(i) applies the struct's offset, so `row` indexes it directly.
        AppendJsonValue(*s.field(i), row, out);
      }
      out->push_back('}');
      return;
    }
    case arrow::Type::LIST:
    case arrow::Type::LARGE_LIST: {
      std::shared_ptr<arrow::Array> values;
      int64_t begin, end;
      if (array.type_id() == arrow::Type::LIST) {
        const auto& l = static_cast<const arrow::ListArray&>(array);
        values = l.values();
        begin = l.value_offset(row);
        end = l.value_offset(row) + l.value_length(row);
      } else {
        const auto& l = static_cast<const arrow::LargeListArray&>(array);
        values = l.values();
        begin = l.value_offset(row);
        end = l.value_offset(row) + l.value_length(row);
      }
      out->push_back('[');
      for (int64_t i = begin; i < end; ++i) {
        if (i > begin) out->push_back(',');
        AppendJsonValue(*values, i, out);
      }
      out->push_back(']');
      return;
    }
    default:
      AppendScalarJson(array, row, out);
  }
}

Result<ExportFormat> ExportFormatFromName(std::string_view name_or_path) {
  std::string l = ToLower(name_or_path);
  if (l == "jsonl" || l == "json" || EndsWith(l, ".jsonl") || EndsWith(l, ".ndjson")) {
    return ExportFormat::kJsonl;
  }
  if (l == "csv" || EndsWith(l, ".csv")) return ExportFormat::kCsv;
  if (l == "parquet" || EndsWith(l, ".parquet")) return ExportFormat::kParquet;
  if (l == "arrow" || EndsWith(l, ".arrow") || EndsWith(l, ".arrows")) {
    return ExportFormat::kArrowIpc;
  }
  return Status::InvalidArgument("unknown export format '" + Abbreviate(name_or_path) +
                                 "': use jsonl, csv, parquet or arrow");
}

Result<int64_t> ExportRecords(arrow::RecordBatchReader& reader, ExportFormat format,
                              const ByteSink& sink, const ExportOptions& options) {
  if (options.parquet_row_group_rows < 1) {
    return Status::InvalidArgument("parquet_row_group_rows must be at least 1");
  }
  char delim = options.csv_delimiter;
  switch (format) {
    case ExportFormat::kJsonl:
      return ForEachBatch(reader, options.max_rows,
                          [&](const arrow::RecordBatch& b) { return WriteJsonl(b, sink); });
    case ExportFormat::kCsv:
      if (delim == '"' || delim == '\n' || delim == '\r') {
        return Status::InvalidArgument("csv_delimiter must not be a quote or a line break");
      }
      TY_RETURN_IF_ERROR(WriteCsvHeader(*reader.schema(), delim, sink));
      return ForEachBatch(reader, options.max_rows,
                          [&](const arrow::RecordBatch& b) { return WriteCsv(b, delim, sink); });
    case ExportFormat::kParquet:
    case ExportFormat::kArrowIpc:
      return WriteArrowFormat(reader, format, sink, options);
  }
  return Status::InvalidArgument("unknown export format");
}

Result<int64_t> ExportToFile(arrow::RecordBatchReader& reader, ExportFormat format,
                             const std::string& path, const ExportOptions& options) {
  std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  if (!out) return Status::IOError("cannot create " + tmp);
  Result<int64_t> rows = ExportRecords(
      reader, format,
      [&](std::string_view bytes) {
        out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
        return out ? Status::Ok() : Status::IOError("cannot write " + tmp);
      },
      options);
  out.close();
  std::error_code ec;
  if (rows.ok() && !out) rows = Status::IOError("cannot write " + tmp);
  if (rows.ok()) std::filesystem::rename(tmp, path, ec);
  if (rows.ok() && ec) rows = Status::IOError("cannot rename into " + path + ": " + ec.message());
  if (!rows.ok()) std::filesystem::remove(tmp, ec);
  return rows;
}

}  // namespace trainyard::tables
