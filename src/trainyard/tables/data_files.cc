#include "trainyard/tables/data_files.h"

#include <arrow/compute/api.h>
#include <arrow/io/file.h>
#include <arrow/io/memory.h>
#include <arrow/util/byte_size.h>
#include <parquet/arrow/reader.h>
#include <parquet/arrow/schema.h>
#include <parquet/arrow/writer.h>
#include <parquet/exception.h>
#include <parquet/file_writer.h>
#include <parquet/metadata.h>
#include <parquet/page_index.h>
#include <parquet/statistics.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <deque>
#include <filesystem>
#include <set>
#include <thread>

#include "trainyard/common/json.h"
#include "trainyard/common/strings.h"
#include "trainyard/tables/arrow_util.h"
#include "trainyard/tables/recycling_pool.h"

namespace trainyard::tables {

namespace cp = arrow::compute;
namespace fs = std::filesystem;

namespace {

constexpr size_t kStatsStringPrefix = 32;  // code points, as Spark truncates string stats
constexpr char kNullPartition[] = "__HIVE_DEFAULT_PARTITION__";

// ---------------------------------------------------------------------------------------------
// Statistics of written files.

// A column's statistics over the rows of one file. Null counts come from the Arrow arrays;
// minimum and maximum from the column chunk statistics Parquet computes while it encodes
// (MergeParquetStats), except for row groups where Parquet keeps none (AccumulateMinMax).
struct ColumnAcc {
  std::shared_ptr<arrow::DataType> type;
  int64_t nulls = 0;
  std::optional<Literal> min, max;
  // A bound that cannot be stated (an infinite extreme, a chunk without statistics): that
  // side is left out of the file's stats, which is always correct. NaNs are left out of
  // bounds altogether, as Parquet does.
  bool min_unknown = false, max_unknown = false;
  std::map<std::string, ColumnAcc> children;  // struct fields
};

bool MinMaxType(const arrow::DataType& t) {
  return arrow::is_integer(t.id()) || arrow::is_floating(t.id()) || t.id() == arrow::Type::STRING ||
         t.id() == arrow::Type::DATE32;
}

std::optional<Literal> ScalarLiteral(const arrow::Scalar& s) {
  if (!s.is_valid) return std::nullopt;
  switch (s.type->id()) {
    case arrow::Type::INT8:
      return Literal(int64_t{static_cast<const arrow::Int8Scalar&>(s).value});
    case arrow::Type::INT16:
      return Literal(int64_t{static_cast<const arrow::Int16Scalar&>(s).value});
    case arrow::Type::INT32:
      return Literal(int64_t{static_cast<const arrow::Int32Scalar&>(s).value});
    case arrow::Type::INT64:
      return Literal(static_cast<const arrow::Int64Scalar&>(s).value);
    case arrow::Type::DATE32:
      return Literal(int64_t{static_cast<const arrow::Date32Scalar&>(s).value});
    case arrow::Type::FLOAT: {
      double d = static_cast<const arrow::FloatScalar&>(s).value;
      return std::isfinite(d) ? std::optional<Literal>(d) : std::nullopt;
    }
    case arrow::Type::DOUBLE: {
      double d = static_cast<const arrow::DoubleScalar&>(s).value;
      return std::isfinite(d) ? std::optional<Literal>(d) : std::nullopt;
    }
    case arrow::Type::STRING:
      return Literal(std::string(static_cast<const arrow::StringScalar&>(s).view()));
    default:
      return std::nullopt;
  }
}

bool Less(const Literal& a, const Literal& b) {
  if (a.index() != b.index()) return false;
  if (const auto* x = std::get_if<int64_t>(&a)) return *x < std::get<int64_t>(b);
  if (const auto* x = std::get_if<double>(&a)) return *x < std::get<double>(b);
  if (const auto* x = std::get_if<std::string>(&a)) return *x < std::get<std::string>(b);
  return false;
}

// Widens acc's bounds to include [lo, hi]; an absent bound (not representable) is unknown.
void MergeBounds(ColumnAcc& acc, std::optional<Literal> lo, std::optional<Literal> hi) {
  if (!lo) acc.min_unknown = true;
  if (!hi) acc.max_unknown = true;
  if (lo && (!acc.min || Less(*lo, *acc.min))) acc.min = std::move(lo);
  if (hi && (!acc.max || Less(*acc.max, *hi))) acc.max = std::move(hi);
}

bool IsNaN(const arrow::Scalar& s) {
  if (!s.is_valid) return false;
  if (s.type->id() == arrow::Type::FLOAT) {
    return std::isnan(static_cast<const arrow::FloatScalar&>(s).value);
  }
  if (s.type->id() == arrow::Type::DOUBLE) {
    return std::isnan(static_cast<const arrow::DoubleScalar&>(s).value);
  }
  return false;
}

// Null counts of `array`, and of its fields for a struct.
Status AccumulateNulls(ColumnAcc& acc, const std::shared_ptr<arrow::Array>& array) {
  acc.type = array->type();
  acc.nulls += array->null_count();
  if (array->type_id() != arrow::Type::STRUCT) return Status::Ok();
  const auto& s = static_cast<const arrow::StructArray&>(*array);
  for (int i = 0; i < s.num_fields(); ++i) {
    TY_ASSIGN_OR_RETURN(auto child, FromArrow(s.GetFlattenedField(i), "statistics"));
    TY_RETURN_IF_ERROR(AccumulateNulls(acc.children[s.struct_type()->field(i)->name()], child));
  }
  return Status::Ok();
}

// Minimum and maximum of `array` (and of its fields for a struct), computed here.
Status AccumulateMinMax(ColumnAcc& acc, const std::shared_ptr<arrow::Array>& array) {
  if (array->type_id() == arrow::Type::STRUCT) {
    const auto& s = static_cast<const arrow::StructArray&>(*array);
    for (int i = 0; i < s.num_fields(); ++i) {
      TY_ASSIGN_OR_RETURN(auto child, FromArrow(s.GetFlattenedField(i), "statistics"));
      TY_RETURN_IF_ERROR(AccumulateMinMax(acc.children[s.struct_type()->field(i)->name()], child));
    }
    return Status::Ok();
  }
  if (!MinMaxType(*array->type()) || array->null_count() == array->length()) return Status::Ok();
  TY_ASSIGN_OR_RETURN(auto datum, FromArrow(cp::MinMax(array), "statistics"));
  const auto& pair = static_cast<const arrow::StructScalar&>(*datum.scalar());
  if (IsNaN(*pair.value[0])) return Status::Ok();  // only NaNs, which bounds leave out
  MergeBounds(acc, ScalarLiteral(*pair.value[0]), ScalarLiteral(*pair.value[1]));
  return Status::Ok();
}

// Whether `array` holds a string longer than Parquet keeps in statistics: Parquet then drops
// the column chunk's minimum and maximum rather than truncate them. Reads only the offsets.
bool HasLongStrings(const arrow::Array& array) {
  if (array.type_id() == arrow::Type::STRUCT) {
    const auto& s = static_cast<const arrow::StructArray&>(array);
    for (int i = 0; i < s.num_fields(); ++i) {
      if (HasLongStrings(*s.field(i))) return true;
    }
    return false;
  }
  if (array.type_id() != arrow::Type::STRING) return false;
  const int32_t* offsets = static_cast<const arrow::StringArray&>(array).raw_value_offsets();
  for (int64_t i = 0; i < array.length(); ++i) {
    if (offsets[i + 1] - offsets[i] > static_cast<int32_t>(parquet::DEFAULT_MAX_STATISTICS_SIZE)) {
      return true;
    }
  }
  return false;
}

// One side of a column chunk's Parquet statistics as the Literal of the Arrow `type` it was
// written from; nullopt where it cannot be a bound (NaN, infinities, another type).
std::optional<Literal> ChunkBound(const parquet::Statistics& s, const arrow::DataType& type,
                                  bool is_min) {
  switch (type.id()) {
    case arrow::Type::INT8:
    case arrow::Type::INT16:
    case arrow::Type::INT32:
    case arrow::Type::DATE32: {
      if (s.physical_type() != parquet::Type::INT32) return std::nullopt;
      const auto& t = static_cast<const parquet::Int32Statistics&>(s);
      return Literal(int64_t{is_min ? t.min() : t.max()});
    }
    case arrow::Type::INT64: {
      if (s.physical_type() != parquet::Type::INT64) return std::nullopt;
      const auto& t = static_cast<const parquet::Int64Statistics&>(s);
      return Literal(is_min ? t.min() : t.max());
    }
    case arrow::Type::FLOAT: {
      if (s.physical_type() != parquet::Type::FLOAT) return std::nullopt;
      const auto& t = static_cast<const parquet::FloatStatistics&>(s);
      double d = is_min ? t.min() : t.max();
      return std::isfinite(d) ? std::optional<Literal>(d) : std::nullopt;
    }
    case arrow::Type::DOUBLE: {
      if (s.physical_type() != parquet::Type::DOUBLE) return std::nullopt;
      const auto& t = static_cast<const parquet::DoubleStatistics&>(s);
      double d = is_min ? t.min() : t.max();
      return std::isfinite(d) ? std::optional<Literal>(d) : std::nullopt;
    }
    case arrow::Type::STRING: {
      if (s.physical_type() != parquet::Type::BYTE_ARRAY) return std::nullopt;
      const auto& t = static_cast<const parquet::ByteArrayStatistics&>(s);
      parquet::ByteArray v = is_min ? t.min() : t.max();
      return Literal(std::string(reinterpret_cast<const char*>(v.ptr), v.len));
    }
    default:
      return std::nullopt;
  }
}

// Adds the minimum and maximum of each column chunk of the written file `metadata` to
// `columns`, except for the row groups' columns in `own_minmax` (computed here instead).
void MergeParquetStats(const parquet::FileMetaData& metadata,
                       const std::vector<std::set<std::string>>& own_minmax,
                       std::map<std::string, ColumnAcc>& columns) {
  const parquet::SchemaDescriptor& schema = *metadata.schema();
  for (int g = 0; g < metadata.num_row_groups(); ++g) {
    auto group = metadata.RowGroup(g);
    for (int c = 0; c < group->num_columns(); ++c) {
      std::vector<std::string> path = schema.Column(c)->path()->ToDotVector();
      if (static_cast<size_t>(g) < own_minmax.size() && own_minmax[g].count(path[0])) continue;
      // The column's accumulator: top-level, or a field of struct fields; others (lists,
      // maps) carry no bounds.
      std::map<std::string, ColumnAcc>* level = &columns;
      ColumnAcc* acc = nullptr;
      for (const std::string& part : path) {
        auto it = level->find(part);
        if (it == level->end()) {
          acc = nullptr;
          break;
        }
        acc = &it->second;
        level = &acc->children;
      }
      if (acc == nullptr || acc->type == nullptr || !MinMaxType(*acc->type)) continue;
      auto chunk = group->ColumnChunk(c);
      std::shared_ptr<parquet::Statistics> stats = chunk->statistics();
      if (stats != nullptr && stats->HasMinMax()) {
        MergeBounds(*acc, ChunkBound(*stats, *acc->type, true),
                    ChunkBound(*stats, *acc->type, false));
      } else if (arrow::is_floating(acc->type->id()) && stats != nullptr) {
        // Parquet leaves NaN out of bounds, as AccumulateMinMax does: a chunk of only NaNs
        // (and nulls) has none and adds none.
      } else if (stats == nullptr || !stats->HasNullCount() || stats->num_values() > 0) {
        acc->min_unknown = acc->max_unknown = true;  // values without bounds
      }
    }
  }
}

std::string FormatDate(int64_t days) {
  std::time_t secs = static_cast<std::time_t>(days * 86400);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02d", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday);
  return buf;
}

// The byte length of the first `n` UTF-8 code points of `s` (all of it when shorter).
size_t Utf8Prefix(const std::string& s, size_t n) {
  size_t i = 0, points = 0;
  while (i < s.size() && points < n) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    i += c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    ++points;
  }
  return std::min(i, s.size());
}

json::value StatJson(const Literal& v, const arrow::DataType& type, bool is_max) {
  if (type.id() == arrow::Type::DATE32) return json::value(FormatDate(std::get<int64_t>(v)));
  if (const auto* i = std::get_if<int64_t>(&v)) return *i;
  if (const auto* d = std::get_if<double>(&v)) return *d;
  const std::string& s = std::get<std::string>(v);
  size_t cut = Utf8Prefix(s, kStatsStringPrefix);
  if (cut == s.size()) return json::value(s);
  // A truncated max stays an upper bound: the prefix followed by the largest code point.
  return json::value(is_max ? s.substr(0, cut) + "\xF4\x8F\xBF\xBF" : s.substr(0, cut));
}

void StatsJson(const std::map<std::string, ColumnAcc>& columns, json::object& mins,
               json::object& maxes, json::object& nulls) {
  for (const auto& [name, acc] : columns) {
    if (!acc.children.empty()) {
      json::object cmin, cmax, cnull;
      StatsJson(acc.children, cmin, cmax, cnull);
      if (!cmin.empty()) mins[name] = std::move(cmin);
      if (!cmax.empty()) maxes[name] = std::move(cmax);
      nulls[name] = std::move(cnull);
      continue;
    }
    nulls[name] = acc.nulls;
    if (acc.min && !acc.min_unknown) mins[name] = StatJson(*acc.min, *acc.type, false);
    if (acc.max && !acc.max_unknown) maxes[name] = StatJson(*acc.max, *acc.type, true);
  }
}

std::optional<Literal> JsonLiteral(const json::value& v, const arrow::DataType& type) {
  if (arrow::is_integer(type.id()) && (v.is_int64() || v.is_uint64())) {
    return Literal(v.is_int64() ? v.as_int64() : static_cast<int64_t>(v.as_uint64()));
  }
  if (arrow::is_floating(type.id()) && v.is_number()) return Literal(v.to_number<double>());
  if ((type.id() == arrow::Type::STRING || type.id() == arrow::Type::DATE32) && v.is_string()) {
    return Literal(std::string(v.as_string()));
  }
  return std::nullopt;
}

std::optional<Literal> PartitionLiteral(const std::string& v, const arrow::DataType& type) {
  if (arrow::is_integer(type.id())) {
    if (auto i = ParseInt64(v)) return Literal(*i);
    return std::nullopt;
  }
  if (arrow::is_floating(type.id())) {
    if (auto d = ParseDouble(v)) return Literal(*d);
    return std::nullopt;
  }
  if (type.id() == arrow::Type::BOOL) return Literal(v == "true");
  if (type.id() == arrow::Type::STRING || type.id() == arrow::Type::DATE32) return Literal(v);
  return std::nullopt;
}

}  // namespace

std::string NewUuid(Random& random) {
  std::string h = random.Hex(16);
  h[12] = '4';
  h[16] = "89ab"[std::stoi(h.substr(16, 1), nullptr, 16) & 3];
  return h.substr(0, 8) + "-" + h.substr(8, 4) + "-" + h.substr(12, 4) + "-" + h.substr(16, 4) +
         "-" + h.substr(20, 12);
}

FileStats StatsOfFile(const AddAction& add, const arrow::Schema& schema) {
  FileStats stats;
  if (add.stats) {
    Result<json::object> parsed = ParseJsonObject(*add.stats);
    if (parsed.ok()) {
      if (auto n = OptionalInt64(*parsed, "numRecords"); n.ok()) stats.num_records = *n;
      auto section = [&](const char* name) -> const json::object* {
        auto r = OptionalObject(*parsed, name);
        return r.ok() ? *r : nullptr;
      };
      const json::object* mins = section("minValues");
      const json::object* maxes = section("maxValues");
      const json::object* nulls = section("nullCount");
      for (const auto& field : schema.fields()) {
        ColumnStats c;
        const std::string& name = field->name();
        if (mins && mins->contains(name)) c.min = JsonLiteral(mins->at(name), *field->type());
        if (maxes && maxes->contains(name)) c.max = JsonLiteral(maxes->at(name), *field->type());
        if (nulls && nulls->contains(name) && nulls->at(name).is_int64()) {
          c.null_count = nulls->at(name).as_int64();
        }
        if (c.min || c.max || c.null_count) stats.columns[name] = std::move(c);
      }
    }
  }
  for (const auto& [name, value] : add.partition_values) {
    auto field = schema.GetFieldByName(name);
    if (field == nullptr) continue;
    ColumnStats c;
    if (!value) {
      if (!stats.num_records) stats.num_records = 1;
      c.null_count = *stats.num_records;
    } else {
      c.min = c.max = PartitionLiteral(*value, *field->type());
      c.null_count = 0;
      if (!c.min) continue;
    }
    stats.columns[name] = std::move(c);
  }
  return stats;
}

Result<std::shared_ptr<arrow::RecordBatch>> ConformBatch(const arrow::RecordBatch& batch,
                                                         const arrow::Schema& schema) {
  for (const auto& field : batch.schema()->fields()) {
    if (schema.GetFieldIndex(field->name()) < 0) {
      return Status::InvalidArgument("column '" + field->name() +
                                     "' is not in the table's schema (add it with AddColumns)");
    }
  }
  arrow::ArrayVector columns;
  for (const auto& field : schema.fields()) {
    auto column = batch.GetColumnByName(field->name());
    if (column == nullptr) {
      if (!field->nullable()) {
        return Status::InvalidArgument("column '" + field->name() +
                                       "' is missing and is not nullable");
      }
      TY_ASSIGN_OR_RETURN(column, FromArrow(arrow::MakeArrayOfNull(field->type(), batch.num_rows()),
                                            "column " + field->name()));
    } else if (!column->type()->Equals(*field->type())) {
      auto cast = cp::Cast(*column, field->type());
      if (!cast.ok()) {
        return Status::InvalidArgument("column '" + field->name() + "': cannot convert " +
                                       column->type()->ToString() + " to the table's " +
                                       field->type()->ToString() + ": " + cast.status().message());
      }
      column = *cast;
    }
    if (!field->nullable() && column->null_count() > 0) {
      return Status::InvalidArgument("column '" + field->name() + "' is not nullable but has " +
                                     std::to_string(column->null_count()) + " null value(s)");
    }
    columns.push_back(std::move(column));
  }
  return arrow::RecordBatch::Make(arrow::schema(schema.fields()), batch.num_rows(), columns);
}

// ---------------------------------------------------------------------------------------------
// DataFileWriter

namespace {

constexpr unsigned kMaxEncoders = 4;
constexpr char kParquetMagic[] = "PAR1";

// Moves the page offsets of `column` (a column chunk of an encoded row group) by `shift` into
// `builder`, with everything else as the encoder wrote it.
void CopyColumnChunk(const parquet::ColumnChunkMetaData& column, int64_t shift,
                     parquet::ColumnChunkMetaDataBuilder& builder) {
  if (auto stats = column.encoded_statistics()) {
    // Not kept in the metadata: whether the deprecated min/max fields are written too.
    parquet::EncodedStatistics copy = *stats;
    copy.set_is_signed(builder.descr()->sort_order() == parquet::SortOrder::SIGNED);
    builder.SetStatistics(copy);
  }
  if (auto sizes = column.size_statistics()) builder.SetSizeStatistics(*sizes);
  std::map<parquet::Encoding::type, int32_t> dict_stats, data_stats;
  bool plain_data = false;
  for (const parquet::PageEncodingStats& page : column.encoding_stats()) {
    if (page.page_type == parquet::PageType::DICTIONARY_PAGE) {
      dict_stats[page.encoding] += page.count;
    } else {
      data_stats[page.encoding] += page.count;
      plain_data = plain_data || (page.encoding != parquet::Encoding::RLE_DICTIONARY &&
                                  page.encoding != parquet::Encoding::PLAIN_DICTIONARY);
    }
  }
  bool has_dictionary = column.has_dictionary_page();
  builder.Finish(column.num_values(), has_dictionary ? column.dictionary_page_offset() + shift : 0,
                 -1, column.data_page_offset() + shift, column.total_compressed_size(),
                 column.total_uncompressed_size(), has_dictionary, has_dictionary && plain_data,
                 dict_stats, data_stats);
}

}  // namespace

// A data file being written. The caller's thread owns it until it hands the file's close to
// the appender, except the fields the appender uses (`sink` on, `position`, `metadata*`, the
// footer); then the appender owns it, and then the storer (ownership passes through
// SerialWorker's queue).
struct DataFileWriter::OpenFile {
  ~OpenFile() {
    if (sink) (void)sink->Close();
    std::error_code ec;
    fs::remove(temp_path, ec);  // nothing left when the file was stored
  }

  std::string relative_path;  // decoded, under the table root
  std::string temp_path;
  std::shared_ptr<parquet::WriterProperties> props;
  std::shared_ptr<arrow::io::FileOutputStream> sink;
  int64_t position = 0;  // bytes written to `sink`
  // The footer being built from the row groups' own: the first one's metadata (it owns the
  // schema the builder refers to) and the builder.
  std::shared_ptr<parquet::FileMetaData> first_metadata;
  std::unique_ptr<parquet::FileMetaDataBuilder> metadata_builder;
  std::shared_ptr<parquet::FileMetaData> metadata;  // when closed
  int row_groups = 0;                               // appended
  // The page indexes of the appended row groups, serialized (offset indexes with their page
  // offsets in this file), written before the footer as Parquet's writer does.
  std::vector<std::pair<parquet::ColumnChunkId, std::string>> column_indexes, offset_indexes;
  std::map<std::string, std::optional<std::string>> partition_values;
  std::map<std::string, ColumnAcc> stats;
  int64_t rows = 0;
  // The rows of the row group being gathered (slices of the caller's batches, not copies).
  std::vector<std::shared_ptr<arrow::RecordBatch>> pending;
  int64_t pending_rows = 0;
  int64_t pending_bytes = 0;
  // Per row group, the top-level columns whose minimum and maximum were computed here because
  // Parquet keeps none for them (HasLongStrings).
  std::vector<std::set<std::string>> own_minmax;
};

// A row group handed to an encoder: the appender waits for it. Completed once: by the encoder,
// or, when the encoder's task is dropped without running (a pipeline stopped by an error), by
// the task's destruction, so the appender never waits for a row group that will not come.
// A row group encoded as a Parquet file of its own, in memory: its bytes (magic, column
// chunks, footer) and its metadata.
struct DataFileWriter::Encoded {
  std::shared_ptr<arrow::Buffer> bytes;
  std::shared_ptr<parquet::FileMetaData> metadata;
};

struct DataFileWriter::EncodedGroup {
  void Complete(Result<Encoded> result) TY_EXCLUDES(mu) {
    MutexLock lock(mu);
    if (encoded) return;
    encoded = std::move(result);
    changed.NotifyAll();
  }
  Result<Encoded> Wait() TY_EXCLUDES(mu) {
    MutexLock lock(mu);
    while (!encoded) changed.Wait(mu);
    return *encoded;
  }

  Mutex mu;
  CondVar changed;
  std::optional<Result<Encoded>> encoded TY_GUARDED_BY(mu);
};

// What an encoder's task holds; completes its group as not encoded if it never ran.
struct DataFileWriter::EncodeTask {
  ~EncodeTask() {
    group->Complete(Status::Internal("the row group was not encoded: the write stopped"));
  }
  std::shared_ptr<EncodedGroup> group;
  std::shared_ptr<arrow::Schema> schema;
  std::shared_ptr<parquet::WriterProperties> props;
  std::vector<std::shared_ptr<arrow::ChunkedArray>> columns;
  int64_t size_hint = 0;
};

Result<DataFileWriter::Encoded> DataFileWriter::Encode(const EncodeTask& task) {
  arrow::MemoryPool* pool = ScanMemoryPool();
  TY_ASSIGN_OR_RETURN(auto sink,
                      FromArrow(arrow::io::BufferOutputStream::Create(task.size_hint, pool),
                                "encoding a row group"));
  TY_ASSIGN_OR_RETURN(
      auto writer, FromArrow(parquet::arrow::FileWriter::Open(*task.schema, pool, sink, task.props),
                             "encoding a row group"));
  TY_RETURN_IF_ERROR(FromArrow(writer->NewRowGroup(), "encoding a row group"));
  for (const auto& column : task.columns) {
    TY_RETURN_IF_ERROR(FromArrow(writer->WriteColumnChunk(column), "encoding a row group"));
  }
  TY_RETURN_IF_ERROR(FromArrow(writer->Close(), "encoding a row group"));
  Encoded out;
  out.metadata = writer->metadata();
  TY_ASSIGN_OR_RETURN(out.bytes, FromArrow(sink->Finish(), "encoding a row group"));
  return out;
}

DataFileWriter::DataFileWriter(blob::BlobStore& store, const DeltaLog& log,
                               std::shared_ptr<arrow::Schema> schema,
                               std::vector<std::string> partition_columns,
                               const TableOptions& options, Clock& clock, Random& random)
    : store_(store),
      log_(log),
      schema_(std::move(schema)),
      partition_columns_(std::move(partition_columns)),
      options_(options),
      clock_(clock),
      random_(random) {
  InitializeArrowCompute();
  arrow::FieldVector fields;
  for (const auto& f : schema_->fields()) {
    if (std::find(partition_columns_.begin(), partition_columns_.end(), f->name()) ==
        partition_columns_.end()) {
      fields.push_back(f);
    }
  }
  file_schema_ = arrow::schema(fields);
}

DataFileWriter::~DataFileWriter() { StopWorkers(); }

void DataFileWriter::StopWorkers() {
  encoders_.clear();  // first: the appender waits for their row groups
  appender_.reset();  // then: its tasks hand files to the storer
  storer_.reset();
}

Status DataFileWriter::Write(const arrow::RecordBatch& batch) {
  if (abandoned_) return Status::FailedPrecondition("the data file writer was abandoned");
  rows_ += batch.num_rows();
  if (batch.num_rows() == 0) return Status::Ok();
  if (partition_columns_.empty()) {
    arrow::ArrayVector all;
    for (const auto& f : file_schema_->fields()) all.push_back(batch.GetColumnByName(f->name()));
    return WriteGroup("", *arrow::RecordBatch::Make(file_schema_, batch.num_rows(), all), {});
  }
  // The rows of each partition: keys from the partition values as text.
  std::vector<std::shared_ptr<arrow::Array>> texts;
  for (const auto& name : partition_columns_) {
    auto column = batch.GetColumnByName(name);
    TY_ASSIGN_OR_RETURN(auto text,
                        FromArrow(cp::Cast(*column, arrow::utf8()), "partition " + name));
    texts.push_back(text);
  }
  std::map<std::string, std::vector<int64_t>> groups;
  std::map<std::string, std::map<std::string, std::optional<std::string>>> group_values;
  for (int64_t row = 0; row < batch.num_rows(); ++row) {
    std::string key;
    for (const auto& t : texts) {
      key += t->IsNull(row)
                 ? std::string("\x01")
                 : "\x02" + std::string(static_cast<const arrow::StringArray&>(*t).GetView(row));
      key += '\0';
    }
    auto& indices = groups[key];
    if (indices.empty()) {
      auto& values = group_values[key];
      for (size_t c = 0; c < texts.size(); ++c) {
        values[partition_columns_[c]] =
            texts[c]->IsNull(row)
                ? std::nullopt
                : std::optional<std::string>(
                      static_cast<const arrow::StringArray&>(*texts[c]).GetView(row));
      }
    }
    indices.push_back(row);
  }
  arrow::ArrayVector data;
  for (const auto& f : file_schema_->fields()) data.push_back(batch.GetColumnByName(f->name()));
  auto data_batch = arrow::RecordBatch::Make(file_schema_, batch.num_rows(), data);
  for (auto& [key, indices] : groups) {
    std::shared_ptr<arrow::RecordBatch> rows = data_batch;
    if (groups.size() > 1) {
      arrow::Int64Builder b;
      TY_RETURN_IF_ERROR(FromArrow(b.AppendValues(indices), "partition"));
      TY_ASSIGN_OR_RETURN(auto idx, FromArrow(b.Finish(), "partition"));
      TY_ASSIGN_OR_RETURN(auto taken, FromArrow(cp::Take(data_batch, idx), "partition"));
      rows = taken.record_batch();
    }
    TY_RETURN_IF_ERROR(WriteGroup(key, *rows, group_values[key]));
  }
  return Status::Ok();
}

Status DataFileWriter::WriteGroup(const std::string& key, const arrow::RecordBatch& rows,
                                  const std::map<std::string, std::optional<std::string>>& values) {
  int64_t offset = 0;
  while (offset < rows.num_rows()) {
    auto& slot = open_[key];
    if (!slot) {
      if (!appender_) {
        storer_ = std::make_unique<SerialWorker>(2);
        unsigned cores = std::thread::hardware_concurrency();
        for (unsigned i = std::clamp(cores, 1u, kMaxEncoders); i > 0; --i) {
          encoders_.push_back(std::make_unique<SerialWorker>(1));
        }
        appender_ = std::make_unique<SerialWorker>(encoders_.size() + 1);
      }
      slot = std::make_shared<OpenFile>();
      std::string dir;
      for (const auto& name : partition_columns_) {
        const auto& v = values.at(name);
        dir += name + "=" + (v ? EscapePartitionValue(*v) : kNullPartition) + "/";
      }
      char prefix[32];
      std::snprintf(prefix, sizeof prefix, "part-%05lld-", static_cast<long long>(files_++));
      std::string uuid = NewUuid(random_);
      slot->relative_path =
          dir + prefix + uuid + ".c000." + (options_.zstd ? "zstd" : "snappy") + ".parquet";
      slot->temp_path =
          (fs::temp_directory_path() / ("trainyard-table-" + uuid + ".parquet")).string();
      slot->partition_values = values;
      TY_ASSIGN_OR_RETURN(slot->sink, FromArrow(arrow::io::FileOutputStream::Open(slot->temp_path),
                                                "creating a data file"));
      slot->props =
          parquet::WriterProperties::Builder()
              .compression(options_.zstd ? arrow::Compression::ZSTD : arrow::Compression::SNAPPY)
              ->max_row_group_length(options_.row_group_rows)
              ->memory_pool(ScanMemoryPool())
              ->build();
      TY_RETURN_IF_ERROR(FromArrow(slot->sink->Write(kParquetMagic, 4), "creating a data file"));
      slot->position = 4;
    }
    int64_t n = std::min({rows.num_rows() - offset, options_.target_file_rows - slot->rows,
                          options_.row_group_rows - slot->pending_rows});
    auto part = rows.Slice(offset, n);
    for (int c = 0; c < part->num_columns(); ++c) {
      TY_RETURN_IF_ERROR(
          AccumulateNulls(slot->stats[part->schema()->field(c)->name()], part->column(c)));
    }
    TY_ASSIGN_OR_RETURN(int64_t bytes,
                        FromArrow(arrow::util::ReferencedBufferSize(*part), "writing a data file"));
    slot->pending.push_back(std::move(part));
    slot->pending_rows += n;
    slot->pending_bytes += bytes;
    slot->rows += n;
    offset += n;
    if (slot->pending_rows >= options_.row_group_rows ||
        slot->pending_bytes >= options_.row_group_bytes) {
      TY_RETURN_IF_ERROR(WriteRowGroup(slot));
    }
    if (slot->rows >= options_.target_file_rows) {
      std::shared_ptr<OpenFile> file = std::move(slot);
      open_.erase(key);
      TY_RETURN_IF_ERROR(Close(std::move(file)));
    }
  }
  return Status::Ok();
}

Status DataFileWriter::WriteRowGroup(const std::shared_ptr<OpenFile>& file) {
  if (file->pending_rows == 0) return Status::Ok();
  auto task = std::make_shared<EncodeTask>();
  task->group = std::make_shared<EncodedGroup>();
  task->schema = file_schema_;
  task->props = file->props;
  // Snappy output is a fraction of the Arrow bytes for text; the buffer grows if not.
  task->size_hint = file->pending_bytes / 2 + (int64_t{1} << 20);
  std::set<std::string>& own = file->own_minmax.emplace_back();
  for (int c = 0; c < file_schema_->num_fields(); ++c) {
    const std::string& name = file_schema_->field(c)->name();
    arrow::ArrayVector chunks;
    chunks.reserve(file->pending.size());
    for (const auto& batch : file->pending) chunks.push_back(batch->column(c));
    if (std::any_of(chunks.begin(), chunks.end(),
                    [](const auto& a) { return HasLongStrings(*a); })) {
      own.insert(name);
      for (const auto& chunk : chunks) {
        TY_RETURN_IF_ERROR(AccumulateMinMax(file->stats[name], chunk));
      }
    }
    task->columns.push_back(
        std::make_shared<arrow::ChunkedArray>(std::move(chunks), file_schema_->field(c)->type()));
  }
  file->pending.clear();
  file->pending_rows = 0;
  file->pending_bytes = 0;
  std::shared_ptr<EncodedGroup> group = task->group;
  SerialWorker& encoder = *encoders_[next_encoder_++ % encoders_.size()];
  TY_RETURN_IF_ERROR(encoder.Submit([task]() -> Status {
    Result<Encoded> encoded = Encode(*task);
    Status status = encoded.status();
    task->group->Complete(std::move(encoded));
    return status;
  }));
  return appender_->Submit([file, group]() -> Status {
    TY_ASSIGN_OR_RETURN(Encoded encoded, group->Wait());
    return AppendRowGroup(*file, encoded);
  });
}

Status DataFileWriter::AppendRowGroup(OpenFile& file, const Encoded& encoded) {
  // The encoded file: "PAR1", the column chunks, their page indexes, the footer. The column
  // chunks are copied as they are; the page indexes are kept for the file's end (offset
  // indexes with their offsets moved); the footer is rebuilt with the offsets in this file.
  const uint8_t* data = encoded.bytes->data();
  int64_t size = encoded.bytes->size();
  const parquet::FileMetaData& metadata = *encoded.metadata;
  if (metadata.num_row_groups() != 1) {
    return Status::Internal("encoding a row group: unexpected Parquet layout");
  }
  int64_t shift = file.position - 4;
  int32_t ordinal = file.row_groups;
  try {
    std::unique_ptr<parquet::RowGroupMetaData> group = metadata.RowGroup(0);
    int64_t chunks_end = 4;
    for (int c = 0; c < group->num_columns(); ++c) {
      chunks_end += group->ColumnChunk(c)->total_compressed_size();
    }
    if (chunks_end > size) {
      return Status::Internal("encoding a row group: unexpected Parquet layout");
    }
    auto index_bytes = [&](const parquet::IndexLocation& at) -> Result<std::string_view> {
      if (at.offset < chunks_end || at.length < 0 || at.offset + at.length > size) {
        return Status::Internal("encoding a row group: a page index out of place");
      }
      return std::string_view(reinterpret_cast<const char*>(data + at.offset), at.length);
    };
    if (!file.metadata_builder) {
      file.first_metadata = encoded.metadata;
      file.metadata_builder =
          parquet::FileMetaDataBuilder::Make(file.first_metadata->schema(), file.props);
    }
    parquet::RowGroupMetaDataBuilder* builder = file.metadata_builder->AppendRowGroup();
    builder->set_num_rows(group->num_rows());
    for (int c = 0; c < group->num_columns(); ++c) {
      std::unique_ptr<parquet::ColumnChunkMetaData> column = group->ColumnChunk(c);
      CopyColumnChunk(*column, shift, *builder->NextColumnChunk());
      parquet::ColumnChunkId id{ordinal, c};
      if (auto at = column->GetColumnIndexLocation()) {
        TY_ASSIGN_OR_RETURN(std::string_view bytes, index_bytes(*at));
        file.column_indexes.emplace_back(id, std::string(bytes));
      }
      if (auto at = column->GetOffsetIndexLocation()) {
        TY_ASSIGN_OR_RETURN(std::string_view bytes, index_bytes(*at));
        auto index = parquet::OffsetIndex::Make(bytes.data(), static_cast<uint32_t>(bytes.size()),
                                                parquet::default_reader_properties());
        auto moved = parquet::OffsetIndexBuilder::Make();
        const auto& pages = index->page_locations();
        const auto& unencoded = index->unencoded_byte_array_data_bytes();
        for (size_t i = 0; i < pages.size(); ++i) {
          moved->AddPage(
              pages[i].offset, pages[i].compressed_page_size, pages[i].first_row_index,
              i < unencoded.size() ? std::optional<int64_t>(unencoded[i]) : std::nullopt);
        }
        moved->Finish(shift);
        TY_ASSIGN_OR_RETURN(auto out, FromArrow(arrow::io::BufferOutputStream::Create(),
                                                "writing a data file's page index"));
        moved->WriteTo(out.get());
        TY_ASSIGN_OR_RETURN(auto serialized,
                            FromArrow(out->Finish(), "writing a data file's page index"));
        file.offset_indexes.emplace_back(id, serialized->ToString());
      }
    }
    builder->Finish(group->total_byte_size());  // no ordinal, as Parquet's writer
    TY_RETURN_IF_ERROR(
        FromArrow(file.sink->Write(data + 4, chunks_end - 4), "writing a data file"));
    file.position += chunks_end - 4;
    ++file.row_groups;
  } catch (const parquet::ParquetException& e) {
    return Status::Internal(std::string("writing a data file's metadata: ") + e.what());
  }
  return Status::Ok();
}

// On the appender: the page indexes, then the footer.
Status DataFileWriter::WriteFooter(OpenFile& file) {
  if (!file.metadata_builder) return Status::Internal("closing a data file without rows");
  for (auto* indexes : {&file.column_indexes, &file.offset_indexes}) {
    parquet::IndexLocations locations;
    for (const auto& [id, bytes] : *indexes) {
      locations.emplace_back(
          id, parquet::IndexLocation{file.position, static_cast<int32_t>(bytes.size())});
      TY_RETURN_IF_ERROR(
          FromArrow(file.sink->Write(bytes.data(), static_cast<int64_t>(bytes.size())),
                    "writing a data file's page index"));
      file.position += static_cast<int64_t>(bytes.size());
    }
    try {
      file.metadata_builder->SetIndexLocations(indexes == &file.column_indexes
                                                   ? parquet::IndexKind::kColumnIndex
                                                   : parquet::IndexKind::kOffsetIndex,
                                               locations);
    } catch (const parquet::ParquetException& e) {
      return Status::Internal(std::string("writing a data file's page index: ") + e.what());
    }
  }
  try {
    file.metadata = file.metadata_builder->Finish(file.first_metadata->key_value_metadata());
    parquet::WriteFileMetaData(*file.metadata, file.sink.get());
  } catch (const parquet::ParquetException& e) {
    return Status::Internal(std::string("writing a data file's metadata: ") + e.what());
  }
  file.metadata_builder.reset();
  return Status::Ok();
}

Status DataFileWriter::Close(std::shared_ptr<OpenFile> file) {
  TY_RETURN_IF_ERROR(WriteRowGroup(file));
  return appender_->Submit([this, file = std::move(file)]() mutable -> Status {
    TY_RETURN_IF_ERROR(WriteFooter(*file));
    MergeParquetStats(*file->metadata, file->own_minmax, file->stats);
    TY_RETURN_IF_ERROR(FromArrow(file->sink->Close(), "closing a data file"));
    return storer_->Submit([this, file = std::move(file)] { return Store(*file); });
  });
}

Status DataFileWriter::Store(OpenFile& file) {
  std::error_code ec;
  int64_t size = static_cast<int64_t>(fs::file_size(file.temp_path, ec));
  if (ec) return Status::IOError("data file " + file.temp_path + ": " + ec.message());
  TY_RETURN_IF_ERROR(store_.PutFile(log_.Key(file.relative_path), file.temp_path));
  fs::remove(file.temp_path, ec);
  json::object mins, maxes, nulls;
  StatsJson(file.stats, mins, maxes, nulls);
  json::object stats{{"numRecords", file.rows},
                     {"minValues", std::move(mins)},
                     {"maxValues", std::move(maxes)},
                     {"nullCount", std::move(nulls)}};
  AddAction add;
  add.path = EncodePathUri(file.relative_path);
  add.partition_values = file.partition_values;
  add.size = size;
  add.modification_time = clock_.NowMillis();
  add.data_change = true;
  add.stats = json::serialize(stats);
  MutexLock lock(done_mu_);
  done_.push_back(std::move(add));
  return Status::Ok();
}

void DataFileWriter::Abandon() {
  abandoned_ = true;
  StopWorkers();  // files already handed on may still be stored until they stop
  open_.clear();  // their temporary files go with them
  std::vector<AddAction> done;
  {
    MutexLock lock(done_mu_);
    done.swap(done_);
  }
  for (const AddAction& add : done) {
    Result<std::string> path = DecodePathUri(add.path);
    if (path.ok()) (void)store_.Delete(log_.Key(*path));  // best effort; Vacuum also would
  }
}

Result<std::vector<AddAction>> DataFileWriter::Finish() {
  if (abandoned_) return Status::FailedPrecondition("the data file writer was abandoned");
  if (appender_) {
    for (auto& [key, file] : open_) TY_RETURN_IF_ERROR(Close(std::move(file)));
    open_.clear();
    for (auto& encoder : encoders_) TY_RETURN_IF_ERROR(encoder->Drain());
    TY_RETURN_IF_ERROR(appender_->Drain());
    TY_RETURN_IF_ERROR(storer_->Drain());
  }
  MutexLock lock(done_mu_);
  return std::move(done_);
}

// ---------------------------------------------------------------------------------------------
// Scanning

namespace {

void CollectLeafIndices(const parquet::arrow::SchemaField& field, std::vector<int>& out) {
  if (field.column_index >= 0) out.push_back(field.column_index);
  for (const auto& child : field.children) CollectLeafIndices(child, out);
}

std::optional<Literal> ParquetStat(const parquet::Statistics& s, bool is_min) {
  const parquet::ColumnDescriptor* d = s.descr();
  auto logical = d->logical_type();
  bool plain_int = logical == nullptr || logical->is_none() || logical->is_int();
  switch (s.physical_type()) {
    case parquet::Type::INT32: {
      if (!plain_int) return std::nullopt;
      const auto& t = static_cast<const parquet::Int32Statistics&>(s);
      return Literal(int64_t{is_min ? t.min() : t.max()});
    }
    case parquet::Type::INT64: {
      if (!plain_int) return std::nullopt;
      const auto& t = static_cast<const parquet::Int64Statistics&>(s);
      return Literal(is_min ? t.min() : t.max());
    }
    case parquet::Type::DOUBLE: {
      const auto& t = static_cast<const parquet::DoubleStatistics&>(s);
      double v = is_min ? t.min() : t.max();
      return std::isfinite(v) ? std::optional<Literal>(v) : std::nullopt;
    }
    case parquet::Type::FLOAT: {
      const auto& t = static_cast<const parquet::FloatStatistics&>(s);
      double v = is_min ? t.min() : t.max();
      return std::isfinite(v) ? std::optional<Literal>(v) : std::nullopt;
    }
    case parquet::Type::BYTE_ARRAY: {
      if (logical == nullptr || !logical->is_string()) return std::nullopt;
      const auto& t = static_cast<const parquet::ByteArrayStatistics&>(s);
      parquet::ByteArray v = is_min ? t.min() : t.max();
      return Literal(std::string(reinterpret_cast<const char*>(v.ptr), v.len));
    }
    default:
      return std::nullopt;
  }
}

// Files are opened (footer, row-group pruning) on the caller's thread; their row groups are
// decoded by a few decoder threads of the reader, a bounded number of units ahead of the
// caller, and handed out in file and row-group order. A unit is a run of consecutive row
// groups of one file with at least batch_rows rows (or the file's last ones): batches never
// span units, as they did not span files before.
class ScanReader : public arrow::RecordBatchReader {
 public:
  ScanReader(blob::BlobStore& store, std::shared_ptr<const DeltaLog> log,
             std::shared_ptr<const Snapshot> snapshot, std::vector<AddAction> files,
             std::shared_ptr<arrow::Schema> output, std::optional<Predicate> filter,
             int64_t batch_rows)
      : store_(store),
        log_(std::move(log)),
        snapshot_(std::move(snapshot)),
        files_(std::move(files)),
        output_(std::move(output)),
        filter_(std::move(filter)),
        batch_rows_(std::max<int64_t>(1, batch_rows)) {
    arrow::FieldVector fields = output_->fields();
    if (filter_) {
      for (const auto& c : filter_->Columns()) {
        if (output_->GetFieldIndex(c) < 0) {
          if (auto f = snapshot_->schema->GetFieldByName(c)) fields.push_back(f);
        }
      }
    }
    read_schema_ = arrow::schema(fields);
    unsigned cores = std::thread::hardware_concurrency();
    threads_ = static_cast<int>(std::clamp(cores, 1u, kMaxDecoders));
  }

  ~ScanReader() override {
    {
      MutexLock lock(mu_);
      stopping_ = true;
    }
    changed_.NotifyAll();
    for (auto& t : decoders_) t.join();
  }

  std::shared_ptr<arrow::Schema> schema() const override { return output_; }

  arrow::Status ReadNext(std::shared_ptr<arrow::RecordBatch>* out) override {
    Status s = Next(out);
    if (s.ok()) return arrow::Status::OK();
    if (s.code() == StatusCode::kInvalidArgument) return arrow::Status::Invalid(s.message());
    if (s.code() == StatusCode::kIOError) return arrow::Status::IOError(s.message());
    return arrow::Status::UnknownError(std::string(StatusCodeName(s.code())) + ": " + s.message());
  }

 private:
  static constexpr unsigned kMaxDecoders = 4;
  // Uncompressed bytes of row groups decoded ahead of the caller, beyond the first unit.
  static constexpr int64_t kReadAheadBytes = int64_t{512} << 20;

  // An open data file, shared by its units (read-only once made).
  struct File {
    const AddAction* add = nullptr;
    std::string context;  // "reading data file ..."
    std::shared_ptr<arrow::io::RandomAccessFile> source;
    std::shared_ptr<parquet::FileMetaData> metadata;
    std::vector<int> leaves;
    std::map<std::string, std::shared_ptr<arrow::Scalar>> partition_scalars;
  };
  struct Unit {
    std::shared_ptr<const File> file;
    std::vector<int> groups;
    int64_t bytes = 0;  // uncompressed, from the footer
    // Set by the decoder that takes it, under mu_.
    bool done = false;
    Status status;
    std::deque<std::shared_ptr<arrow::RecordBatch>> batches;
  };

  Status Next(std::shared_ptr<arrow::RecordBatch>* out) {
    while (true) {
      if (current_ && !current_->batches.empty()) {
        *out = std::move(current_->batches.front());
        current_->batches.pop_front();
        return Status::Ok();
      }
      current_.reset();
      TY_RETURN_IF_ERROR(Plan());
      MutexLock lock(mu_);
      if (ahead_.empty()) {
        *out = nullptr;
        return Status::Ok();
      }
      while (!ahead_.front()->done) changed_.Wait(mu_);
      current_ = std::move(ahead_.front());
      ahead_.pop_front();
      ahead_bytes_ -= current_->bytes;
      TY_RETURN_IF_ERROR(current_->status);
    }
  }

  // Queues units for the decoders until the read-ahead is full or every file is planned.
  Status Plan() {
    while (true) {
      {
        MutexLock lock(mu_);
        if (!ahead_.empty() &&
            (static_cast<int>(ahead_.size()) > threads_ || ahead_bytes_ >= kReadAheadBytes)) {
          return Status::Ok();
        }
      }
      if (next_group_ >= groups_.size()) {
        if (next_file_ >= files_.size()) return Status::Ok();
        TY_RETURN_IF_ERROR(OpenNext());
        continue;
      }
      auto unit = std::make_shared<Unit>();
      unit->file = file_;
      int64_t rows = 0;
      while (next_group_ < groups_.size() && (unit->groups.empty() || rows < batch_rows_)) {
        int g = groups_[next_group_++];
        auto rg = file_->metadata->RowGroup(g);
        rows += rg->num_rows();
        unit->bytes += rg->total_byte_size();
        unit->groups.push_back(g);
      }
      StartDecoders();
      {
        MutexLock lock(mu_);
        ahead_bytes_ += unit->bytes;
        ahead_.push_back(unit);
        queued_.push_back(std::move(unit));
      }
      changed_.NotifyAll();
    }
  }

  void StartDecoders() {
    while (static_cast<int>(decoders_.size()) < threads_) {
      decoders_.emplace_back([this] { Decoder(); });
    }
  }

  void Decoder() TY_EXCLUDES(mu_) {
    while (true) {
      std::shared_ptr<Unit> unit;
      {
        MutexLock lock(mu_);
        while (!stopping_ && queued_.empty()) changed_.Wait(mu_);
        if (stopping_) return;
        unit = std::move(queued_.front());
        queued_.pop_front();
      }
      std::deque<std::shared_ptr<arrow::RecordBatch>> batches;
      Status status = Decode(*unit, batches);
      {
        MutexLock lock(mu_);
        unit->status = std::move(status);
        unit->batches = std::move(batches);
        unit->done = true;
      }
      changed_.NotifyAll();
    }
  }

  // On a decoder: the unit's rows, shaped to the read schema and filtered, in batches.
  Status Decode(const Unit& unit, std::deque<std::shared_ptr<arrow::RecordBatch>>& out) const {
    const File& file = *unit.file;
    arrow::MemoryPool* pool = ScanMemoryPool();
    std::unique_ptr<parquet::ParquetFileReader> raw;
    try {
      raw = parquet::ParquetFileReader::Open(file.source, parquet::ReaderProperties(pool),
                                             file.metadata);
    } catch (const std::exception& e) {
      return Status::IOError(file.context + ": " + e.what());
    }
    parquet::ArrowReaderProperties props;
    props.set_batch_size(batch_rows_);
    std::unique_ptr<parquet::arrow::FileReader> reader;
    TY_ASSIGN_OR_RETURN(
        reader,
        FromArrow(parquet::arrow::FileReader::Make(pool, std::move(raw), props), file.context));
    TY_ASSIGN_OR_RETURN(
        auto batches,
        FromArrow(reader->GetRecordBatchReader(unit.groups, file.leaves), file.context));
    while (true) {
      std::shared_ptr<arrow::RecordBatch> raw_batch;
      TY_RETURN_IF_ERROR(FromArrow(batches->ReadNext(&raw_batch), file.context));
      if (raw_batch == nullptr) return Status::Ok();
      TY_ASSIGN_OR_RETURN(auto batch, Shape(file, *raw_batch));
      if (filter_) {
        TY_ASSIGN_OR_RETURN(auto mask, filter_->Evaluate(*batch));
        TY_ASSIGN_OR_RETURN(auto filtered, FromArrow(cp::Filter(batch, mask), "filter"));
        batch = filtered.record_batch();
      }
      if (batch->num_rows() == 0) continue;
      arrow::ArrayVector columns(batch->columns().begin(),
                                 batch->columns().begin() + output_->num_fields());
      out.push_back(arrow::RecordBatch::Make(output_, batch->num_rows(), columns));
    }
  }

  // Opens the next file and lists its row groups that the filter does not rule out.
  Status OpenNext() {
    const AddAction* add = &files_[next_file_++];
    groups_.clear();
    next_group_ = 0;
    if (filter_ && !filter_->MayMatch(StatsOfFile(*add, *snapshot_->schema))) {
      return Status::Ok();
    }
    TY_ASSIGN_OR_RETURN(std::string relative, DecodePathUri(add->path));
    if (relative.find("://") != std::string::npos || StartsWith(relative, "/")) {
      return Status::NotImplemented("data file " + add->path +
                                    " has an absolute path; only relative paths are supported");
    }
    TY_ASSIGN_OR_RETURN(std::string local, store_.LocalPathForRead(log_->Key(relative)));
    auto file = std::make_shared<File>();
    file->add = add;
    file->context = "reading data file " + relative;
    arrow::MemoryPool* pool = ScanMemoryPool();
    // ReadAt is thread-safe: the decoders of the file's units share it.
    TY_ASSIGN_OR_RETURN(file->source,
                        FromArrow(arrow::io::ReadableFile::Open(local, pool), file->context));
    parquet::arrow::FileReaderBuilder builder;
    TY_RETURN_IF_ERROR(
        FromArrow(builder.Open(file->source, parquet::ReaderProperties(pool)), file->context));
    file->metadata = builder.raw_reader()->metadata();
    TY_ASSIGN_OR_RETURN(auto reader, FromArrow(builder.memory_pool(pool)->Build(), file->context));
    std::shared_ptr<arrow::Schema> file_schema;
    TY_RETURN_IF_ERROR(FromArrow(reader->GetSchema(&file_schema), file->context));
    const auto& manifest = reader->manifest();
    for (const auto& f : read_schema_->fields()) {
      int i = file_schema->GetFieldIndex(f->name());
      if (i >= 0) CollectLeafIndices(manifest.schema_fields[i], file->leaves);
    }
    if (file->leaves.empty() && !manifest.schema_fields.empty()) {
      CollectLeafIndices(manifest.schema_fields[0], file->leaves);  // for the row count only
    }
    TY_ASSIGN_OR_RETURN(groups_, RowGroups(*file->metadata, *file_schema));
    TY_ASSIGN_OR_RETURN(file->partition_scalars, PartitionColumns(*add));
    file_ = std::move(file);
    return Status::Ok();
  }

  Result<std::vector<int>> RowGroups(const parquet::FileMetaData& metadata,
                                     const arrow::Schema& file_schema) {
    std::vector<int> groups;
    for (int g = 0; g < metadata.num_row_groups(); ++g) {
      if (!filter_) {
        groups.push_back(g);
        continue;
      }
      auto rg = metadata.RowGroup(g);
      FileStats stats;
      stats.num_records = rg->num_rows();
      for (int c = 0; c < rg->num_columns(); ++c) {
        auto chunk = rg->ColumnChunk(c);
        auto s = chunk->statistics();
        std::string name = metadata.schema()->Column(c)->path()->ToDotString();
        if (s == nullptr || file_schema.GetFieldIndex(name) < 0) continue;
        ColumnStats cs;
        if (s->HasNullCount()) cs.null_count = s->null_count();
        if (s->HasMinMax()) {
          cs.min = ParquetStat(*s, true);
          cs.max = ParquetStat(*s, false);
        }
        stats.columns[name] = std::move(cs);
      }
      if (filter_->MayMatch(stats)) groups.push_back(g);
    }
    return groups;
  }

  Result<std::map<std::string, std::shared_ptr<arrow::Scalar>>> PartitionColumns(
      const AddAction& add) {
    std::map<std::string, std::shared_ptr<arrow::Scalar>> scalars;
    for (const auto& [name, value] : add.partition_values) {
      auto field = read_schema_->GetFieldByName(name);
      if (field == nullptr) continue;
      if (!value) {
        scalars[name] = arrow::MakeNullScalar(field->type());
        continue;
      }
      auto text = arrow::MakeScalar(*value);
      auto cast = text->CastTo(field->type());
      if (!cast.ok()) {
        return Status::InvalidArgument("data file " + add.path + ": partition value '" + *value +
                                       "' of column " + name + " is not a " +
                                       field->type()->ToString());
      }
      scalars[name] = *cast;
    }
    return scalars;
  }

  Result<std::shared_ptr<arrow::RecordBatch>> Shape(const File& file,
                                                    const arrow::RecordBatch& raw) const {
    arrow::ArrayVector columns;
    int64_t n = raw.num_rows();
    for (const auto& f : read_schema_->fields()) {
      std::shared_ptr<arrow::Array> column;
      if (auto p = file.partition_scalars.find(f->name()); p != file.partition_scalars.end()) {
        TY_ASSIGN_OR_RETURN(column,
                            FromArrow(arrow::MakeArrayFromScalar(*p->second, n), f->name()));
      } else if (auto c = raw.GetColumnByName(f->name())) {
        column = c;
        if (!c->type()->Equals(*f->type())) {
          TY_ASSIGN_OR_RETURN(column,
                              FromArrow(cp::Cast(*c, f->type()),
                                        "reading column " + f->name() + " of " + file.add->path));
        }
      } else {
        TY_ASSIGN_OR_RETURN(column, FromArrow(arrow::MakeArrayOfNull(f->type(), n), f->name()));
      }
      columns.push_back(std::move(column));
    }
    return arrow::RecordBatch::Make(read_schema_, n, columns);
  }

  // Read-only after construction (the decoders read them).
  blob::BlobStore& store_;
  std::shared_ptr<const DeltaLog> log_;
  std::shared_ptr<const Snapshot> snapshot_;
  const std::vector<AddAction> files_;
  std::shared_ptr<arrow::Schema> output_;
  std::shared_ptr<arrow::Schema> read_schema_;  // output + the filter's other columns
  const std::optional<Predicate> filter_;
  const int64_t batch_rows_;
  int threads_ = 1;
  // The caller's.
  size_t next_file_ = 0;
  std::shared_ptr<const File> file_;  // the file being planned
  std::vector<int> groups_;           // its row groups left after pruning
  size_t next_group_ = 0;
  std::shared_ptr<Unit> current_;  // the unit whose batches are being handed out
  std::vector<std::thread> decoders_;
  // Shared with the decoders.
  Mutex mu_;
  CondVar changed_;  // a unit was queued or decoded, or the reader stops
  std::deque<std::shared_ptr<Unit>> ahead_ TY_GUARDED_BY(mu_);   // planned, in order
  std::deque<std::shared_ptr<Unit>> queued_ TY_GUARDED_BY(mu_);  // not yet taken by a decoder
  int64_t ahead_bytes_ TY_GUARDED_BY(mu_) = 0;
  bool stopping_ TY_GUARDED_BY(mu_) = false;
};

}  // namespace

Result<std::unique_ptr<arrow::RecordBatchReader>> ScanFiles(
    blob::BlobStore& store, std::shared_ptr<const DeltaLog> log,
    std::shared_ptr<const Snapshot> snapshot, std::vector<AddAction> files,
    std::shared_ptr<arrow::Schema> output_schema, std::optional<Predicate> filter,
    int64_t batch_rows) {
  InitializeArrowCompute();
  if (filter) TY_RETURN_IF_ERROR(filter->Validate(*snapshot->schema));
  return std::unique_ptr<arrow::RecordBatchReader>(
      std::make_unique<ScanReader>(store, std::move(log), std::move(snapshot), std::move(files),
                                   std::move(output_schema), std::move(filter), batch_rows));
}

}  // namespace trainyard::tables
