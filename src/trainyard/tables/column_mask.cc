#include "trainyard/tables/column_mask.h"

#include <arrow/compute/api.h>

#include <cctype>

#include "trainyard/common/strings.h"
#include "trainyard/tables/arrow_util.h"

namespace trainyard::tables {

namespace {

constexpr MaskKind kKinds[] = {MaskKind::kRedact, MaskKind::kHash, MaskKind::kNull,
                               MaskKind::kLast4};

bool IsString(const arrow::DataType& t) {
  return t.id() == arrow::Type::STRING || t.id() == arrow::Type::LARGE_STRING;
}
bool IsBinary(const arrow::DataType& t) {
  return t.id() == arrow::Type::BINARY || t.id() == arrow::Type::LARGE_BINARY;
}

bool Maskable(MaskKind kind, const arrow::DataType& type) {
  switch (kind) {
    case MaskKind::kNull:
      return true;
    case MaskKind::kRedact:
    case MaskKind::kHash:
      return IsString(type) || IsBinary(type);
    case MaskKind::kLast4:
      return IsString(type);
  }
  return false;
}

// The value with all but its last 4 characters (UTF-8 code points) replaced by '*'; all '*'
// when it has 4 or fewer.
std::string Last4(std::string_view v) {
  std::vector<size_t> starts;  // where each character begins
  for (size_t i = 0; i < v.size(); ++i) {
    if (i == 0 || (static_cast<unsigned char>(v[i]) & 0xC0) != 0x80) starts.push_back(i);
  }
  if (starts.size() <= 4) return std::string(starts.size(), '*');
  size_t keep_from = starts[starts.size() - 4];
  return std::string(starts.size() - 4, '*') + std::string(v.substr(keep_from));
}

std::string MaskValue(MaskKind kind, std::string_view v) {
  switch (kind) {
    case MaskKind::kRedact:
      return std::string(kRedactedValue);
    case MaskKind::kHash:
      return Sha256Hex(v);
    case MaskKind::kLast4:
      return Last4(v);
    case MaskKind::kNull:
      break;
  }
  return "";
}

// Each non-null value of a string or binary array of type T through MaskValue.
template <typename T>
Result<std::shared_ptr<arrow::Array>> MaskBytes(MaskKind kind, const arrow::Array& values) {
  using ArrayT = typename arrow::TypeTraits<T>::ArrayType;
  using BuilderT = typename arrow::TypeTraits<T>::BuilderType;
  const auto& a = static_cast<const ArrayT&>(values);
  BuilderT builder;
  TY_RETURN_IF_ERROR(FromArrow(builder.Reserve(a.length()), "masking"));
  for (int64_t i = 0; i < a.length(); ++i) {
    if (a.IsNull(i)) {
      TY_RETURN_IF_ERROR(FromArrow(builder.AppendNull(), "masking"));
    } else {
      TY_RETURN_IF_ERROR(FromArrow(builder.Append(MaskValue(kind, a.GetView(i))), "masking"));
    }
  }
  std::shared_ptr<arrow::Array> out;
  TY_RETURN_IF_ERROR(FromArrow(builder.Finish(&out), "masking"));
  return out;
}

class MaskingReader : public arrow::RecordBatchReader {
 public:
  MaskingReader(std::unique_ptr<arrow::RecordBatchReader> source,
                std::map<std::string, MaskKind> masks, std::optional<Predicate> filter,
                std::vector<int> projection, std::shared_ptr<arrow::Schema> schema)
      : source_(std::move(source)),
        masks_(std::move(masks)),
        filter_(std::move(filter)),
        projection_(std::move(projection)),
        schema_(std::move(schema)) {}

  std::shared_ptr<arrow::Schema> schema() const override { return schema_; }

  arrow::Status ReadNext(std::shared_ptr<arrow::RecordBatch>* batch) override {
    while (true) {
      std::shared_ptr<arrow::RecordBatch> next;
      ARROW_RETURN_NOT_OK(source_->ReadNext(&next));
      if (next == nullptr) {
        *batch = nullptr;
        return arrow::Status::OK();
      }
      Result<std::shared_ptr<arrow::RecordBatch>> out = Process(*next);
      if (!out.ok()) return arrow::Status::Invalid(out.status().message());
      if ((*out)->num_rows() > 0) {
        *batch = std::move(out).value();
        return arrow::Status::OK();
      }
    }
  }

 private:
  Result<std::shared_ptr<arrow::RecordBatch>> Process(const arrow::RecordBatch& raw) {
    TY_ASSIGN_OR_RETURN(std::shared_ptr<arrow::RecordBatch> b, MaskBatch(raw, masks_));
    if (filter_) {
      TY_ASSIGN_OR_RETURN(auto keep, filter_->Evaluate(*b));
      TY_ASSIGN_OR_RETURN(arrow::Datum kept,
                          FromArrow(arrow::compute::Filter(b, keep), "filtering masked rows"));
      b = kept.record_batch();
    }
    if (projection_.empty()) return b;
    return FromArrow(b->SelectColumns(projection_), "projecting masked rows");
  }

  std::unique_ptr<arrow::RecordBatchReader> source_;
  std::map<std::string, MaskKind> masks_;
  std::optional<Predicate> filter_;
  std::vector<int> projection_;
  std::shared_ptr<arrow::Schema> schema_;
};

}  // namespace

std::string_view MaskKindName(MaskKind kind) {
  switch (kind) {
    case MaskKind::kRedact:
      return "redact";
    case MaskKind::kHash:
      return "hash";
    case MaskKind::kNull:
      return "null";
    case MaskKind::kLast4:
      return "last4";
  }
  return "redact";
}

Result<MaskKind> ParseMaskKind(std::string_view text, std::string_view field) {
  std::string lower(text);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (MaskKind k : kKinds) {
    if (lower == MaskKindName(k)) return k;
  }
  return Status::InvalidArgument(std::string(field) +
                                 ": must be redact, hash, null or last4 (got '" + Abbreviate(text) +
                                 "')");
}

Status CheckMaskable(MaskKind kind, const arrow::DataType& type, const std::string& column) {
  if (Maskable(kind, type)) return Status::Ok();
  std::string instead =
      kind == MaskKind::kLast4 && IsBinary(type) ? "redact, hash or null" : "null";
  return Status::InvalidArgument("kind: a " + std::string(MaskKindName(kind)) +
                                 " mask keeps a column's type and cannot mask column \"" + column +
                                 "\" of type " + type.ToString() + "; use " + instead);
}

Result<std::shared_ptr<arrow::Array>> MaskArray(MaskKind kind, const arrow::Array& values) {
  if (!Maskable(kind, *values.type())) {
    return CheckMaskable(kind, *values.type(), "?");
  }
  if (kind == MaskKind::kNull) {
    return FromArrow(arrow::MakeArrayOfNull(values.type(), values.length()), "masking");
  }
  switch (values.type_id()) {
    case arrow::Type::STRING:
      return MaskBytes<arrow::StringType>(kind, values);
    case arrow::Type::LARGE_STRING:
      return MaskBytes<arrow::LargeStringType>(kind, values);
    case arrow::Type::BINARY:
      return MaskBytes<arrow::BinaryType>(kind, values);
    case arrow::Type::LARGE_BINARY:
      return MaskBytes<arrow::LargeBinaryType>(kind, values);
    default:
      break;
  }
  return Status::Internal("masking: unexpected type " + values.type()->ToString());
}

std::shared_ptr<arrow::Schema> MaskedSchema(const arrow::Schema& schema,
                                            const std::map<std::string, MaskKind>& masks) {
  arrow::FieldVector fields = schema.fields();
  for (auto& f : fields) {
    auto it = masks.find(f->name());
    if (it != masks.end() && it->second == MaskKind::kNull) f = f->WithNullable(true);
  }
  return arrow::schema(std::move(fields), schema.metadata());
}

Result<std::shared_ptr<arrow::RecordBatch>> MaskBatch(
    const arrow::RecordBatch& batch, const std::map<std::string, MaskKind>& masks) {
  arrow::ArrayVector columns = batch.columns();
  for (int i = 0; i < batch.num_columns(); ++i) {
    auto it = masks.find(batch.schema()->field(i)->name());
    if (it == masks.end()) continue;
    TY_ASSIGN_OR_RETURN(columns[i], MaskArray(it->second, *columns[i]));
  }
  return arrow::RecordBatch::Make(MaskedSchema(*batch.schema(), masks), batch.num_rows(),
                                  std::move(columns));
}

Result<std::unique_ptr<arrow::RecordBatchReader>> MaskRows(
    std::unique_ptr<arrow::RecordBatchReader> source, std::map<std::string, MaskKind> masks,
    std::optional<Predicate> filter, std::vector<std::string> columns) {
  InitializeArrowCompute();
  std::shared_ptr<arrow::Schema> masked = MaskedSchema(*source->schema(), masks);
  if (filter) TY_RETURN_IF_ERROR(filter->Validate(*masked));
  std::vector<int> projection;
  std::shared_ptr<arrow::Schema> output = masked;
  if (!columns.empty()) {
    arrow::FieldVector fields;
    for (const std::string& name : columns) {
      int i = masked->GetFieldIndex(name);
      if (i < 0) return Status::InvalidArgument("columns: no column '" + name + "'");
      projection.push_back(i);
      fields.push_back(masked->field(i));
    }
    output = arrow::schema(std::move(fields));
  }
  return std::unique_ptr<arrow::RecordBatchReader>(
      std::make_unique<MaskingReader>(std::move(source), std::move(masks), std::move(filter),
                                      std::move(projection), std::move(output)));
}

}  // namespace trainyard::tables
