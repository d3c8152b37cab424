#include "trainyard/prep/spark_bridge.h"

#include <arrow/api.h>

#include <algorithm>
#include <filesystem>
#include <utility>

#include "trainyard/tables/arrow_util.h"
#include "trainyard/tables/export.h"

namespace trainyard::prep {
namespace {

// The source's batches with their ordinals appended, for the Parquet export.
class OrdinalReader : public arrow::RecordBatchReader {
 public:
  explicit OrdinalReader(BatchSource& source)
      : source_(source),
        schema_(*source.schema()->AddField(source.schema()->num_fields(),
                                           arrow::field(kStagedOrdinalColumn, arrow::int64(),
                                                        /*nullable=*/false))) {}

  std::shared_ptr<arrow::Schema> schema() const override { return schema_; }

  arrow::Status ReadNext(std::shared_ptr<arrow::RecordBatch>* out) override {
    auto next = source_.Next();
    if (!next.ok()) return arrow::Status::IOError(next.status().message());
    if (!*next) {
      *out = nullptr;
      return arrow::Status::OK();
    }
    SourceBatch& b = **next;
    if (Status parsed = b.Parse(); !parsed.ok()) return arrow::Status::IOError(parsed.message());
    arrow::Int64Builder ordinals;
    ARROW_RETURN_NOT_OK(ordinals.Reserve(b.rows->num_rows()));
    for (int64_t r = 0; r < b.rows->num_rows(); ++r) ordinals.UnsafeAppend(b.first_ordinal + r);
    ARROW_ASSIGN_OR_RAISE(auto column, ordinals.Finish());
    rows_ += b.rows->num_rows();
    ARROW_ASSIGN_OR_RAISE(
        *out, b.rows->AddColumn(b.rows->num_columns(), schema_->fields().back(), column));
    return arrow::Status::OK();
  }

  int64_t rows() const { return rows_; }

 private:
  BatchSource& source_;
  std::shared_ptr<arrow::Schema> schema_;
  int64_t rows_ = 0;
};

// Spark's Parquet names a list's element "element" and marks non-null what it knows is never
// null; the native engine's outputs use Arrow's defaults (list<item>, every field nullable).
// Same values, so the catalog tables both engines write have the same schema.
std::shared_ptr<arrow::DataType> NativeType(const std::shared_ptr<arrow::DataType>& type) {
  if (type->id() == arrow::Type::LIST) {
    return arrow::list(NativeType(static_cast<const arrow::ListType&>(*type).value_type()));
  }
  if (type->id() == arrow::Type::LARGE_LIST) {
    return arrow::large_list(
        NativeType(static_cast<const arrow::LargeListType&>(*type).value_type()));
  }
  return type;
}

std::shared_ptr<arrow::Schema> NativeSchema(const arrow::Schema& schema) {
  std::vector<std::shared_ptr<arrow::Field>> fields;
  for (const auto& f : schema.fields()) {
    fields.push_back(arrow::field(f->name(), NativeType(f->type()), /*nullable=*/true));
  }
  return arrow::schema(std::move(fields));
}

std::shared_ptr<arrow::Array> Retyped(const std::shared_ptr<arrow::Array>& array,
                                      const std::shared_ptr<arrow::DataType>& type) {
  if (array->type()->Equals(*type)) return array;
  // The same layout under another field name: only the type changes (recursively for lists).
  auto data = array->data()->Copy();
  data->type = type;
  if (type->id() == arrow::Type::LIST || type->id() == arrow::Type::LARGE_LIST) {
    auto child = arrow::MakeArray(data->child_data[0]);
    data->child_data[0] = Retyped(child, type->field(0)->type())->data();
  }
  return arrow::MakeArray(data);
}

Result<std::string> String(const json::object& o, std::string_view field) {
  return RequiredString(o, field);
}

}  // namespace

Result<StagedSource> StageTableSource(const ServerEndpoint& server, const std::string& table,
                                      std::optional<int64_t> version, const std::string& run_id,
                                      const std::string& parquet_path) {
  TY_ASSIGN_OR_RETURN(auto source, OpenTableSource(server, table, version, run_id));
  StagedSource staged;
  staged.doc_source = source->Describe();
  staged.version = source->version().value_or(0);
  staged.columns = source->schema()->field_names();
  if (std::find(staged.columns.begin(), staged.columns.end(), kStagedOrdinalColumn) !=
      staged.columns.end()) {
    return Status::InvalidArgument(staged.doc_source + " has a column " + kStagedOrdinalColumn +
                                   ", which the Spark engine uses; rename it");
  }
  OrdinalReader reader(*source);
  auto written = tables::ExportToFile(reader, tables::ExportFormat::kParquet, parquet_path);
  if (!written.ok()) {
    return Status(written.status().code(),
                  "staging " + staged.doc_source + " for Spark: " + written.status().message());
  }
  staged.rows = *written;
  return staged;
}

Result<OutputResult> ImportStagedOutput(const ServerEndpoint& server,
                                        const std::string& parquet_dir, const std::string& table,
                                        const std::string& run_id, int64_t flush_rows,
                                        const std::string& column_lineage) {
  namespace fs = std::filesystem;
  std::vector<std::string> paths;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(parquet_dir, ec)) {
    std::string name = entry.path().filename().string();
    if (name.rfind("part-", 0) == 0 && entry.path().extension() == ".parquet") {
      paths.push_back(entry.path().string());
    }
  }
  if (ec || paths.empty()) {
    return Status::Internal("the Spark engine left no Parquet files for " + table + " in " +
                            parquet_dir + (ec ? ": " + ec.message() : ""));
  }
  std::sort(paths.begin(), paths.end());
  TY_ASSIGN_OR_RETURN(auto source, OpenFileSource(paths, paths, /*batch_rows=*/65536));
  auto schema = NativeSchema(*source->schema());
  auto writer = OpenCatalogOutput(server, table, schema, run_id, flush_rows, column_lineage);
  while (true) {
    TY_ASSIGN_OR_RETURN(auto batch, source->Next());
    if (!batch) break;
    TY_RETURN_IF_ERROR(batch->Parse());  // file sources hand out unparsed chunks
    std::vector<std::shared_ptr<arrow::Array>> columns;
    for (int c = 0; c < schema->num_fields(); ++c) {
      columns.push_back(Retyped(batch->rows->column(c), schema->field(c)->type()));
    }
    TY_RETURN_IF_ERROR(writer->Write(
        arrow::RecordBatch::Make(schema, batch->rows->num_rows(), std::move(columns))));
  }
  return writer->Finish();
}

Result<PipelineReport> ReportFromJson(const json::object& o, const PipelineSpec& spec) {
  PipelineReport report;
  TY_ASSIGN_OR_RETURN(report.pipeline, String(o, "pipeline"));
  TY_ASSIGN_OR_RETURN(report.version, String(o, "version"));
  TY_ASSIGN_OR_RETURN(report.source, String(o, "source"));
  TY_ASSIGN_OR_RETURN(report.source_version, OptionalInt64(o, "source_version"));
  TY_ASSIGN_OR_RETURN(report.rows_in, RequiredInt64(o, "rows_in"));
  TY_ASSIGN_OR_RETURN(report.rows_out, RequiredInt64(o, "rows_out"));
  TY_ASSIGN_OR_RETURN(report.rows_dropped, RequiredInt64(o, "rows_dropped"));
  TY_ASSIGN_OR_RETURN(auto master, OptionalString(o, "master"));
  report.master = master.value_or("");
  TY_ASSIGN_OR_RETURN(auto seconds, OptionalDouble(o, "seconds"));
  report.seconds = seconds.value_or(0);
  TY_ASSIGN_OR_RETURN(const json::array* steps, OptionalArray(o, "steps"));
  if (!steps || steps->size() != spec.steps.size()) {
    return Status::InvalidArgument("the report has " + std::to_string(steps ? steps->size() : 0) +
                                   " steps, the spec " + std::to_string(spec.steps.size()));
  }
  for (size_t i = 0; i < steps->size(); ++i) {
    if (!(*steps)[i].is_object()) return Status::InvalidArgument("steps[] must be objects");
    const json::object& s = (*steps)[i].as_object();
    StepReport step;
    step.label = spec.steps[i].label;
    step.kind = spec.steps[i].kind;
    step.line = spec.steps[i].line;
    TY_ASSIGN_OR_RETURN(step.rows_in, RequiredInt64(s, "rows_in"));
    TY_ASSIGN_OR_RETURN(step.rows_out, RequiredInt64(s, "rows_out"));
    TY_ASSIGN_OR_RETURN(const json::object* dropped, OptionalObject(s, "dropped"));
    if (dropped) {
      for (const auto& [reason, value] : *dropped) {
        if (!value.is_object()) return Status::InvalidArgument("dropped." + std::string(reason));
        ReasonReport r;
        TY_ASSIGN_OR_RETURN(r.rows, RequiredInt64(value.as_object(), "rows"));
        TY_ASSIGN_OR_RETURN(const json::array* examples,
                            OptionalArray(value.as_object(), "examples"));
        if (examples) {
          for (const auto& e : *examples) {
            TY_ASSIGN_OR_RETURN(std::string id, AsString(e, "examples[]"));
            r.examples.push_back(std::move(id));
          }
        }
        step.dropped[std::string(reason)] = std::move(r);
      }
    }
    TY_ASSIGN_OR_RETURN(auto changed_rows, OptionalInt64(s, "rows_changed"));
    step.rows_changed = changed_rows.value_or(0);
    for (const char* field : {"changed", "splits"}) {
      TY_ASSIGN_OR_RETURN(const json::object* counts, OptionalObject(s, field));
      if (!counts) continue;
      auto& into = std::string_view(field) == "changed" ? step.changed : step.split_rows;
      for (const auto& [key, value] : *counts) {
        TY_ASSIGN_OR_RETURN(into[std::string(key)], AsInt64(value, field));
      }
    }
    report.steps.push_back(std::move(step));
  }
  TY_ASSIGN_OR_RETURN(const json::array* outputs, OptionalArray(o, "outputs"));
  if (outputs) {
    for (const auto& v : *outputs) {
      if (!v.is_object()) return Status::InvalidArgument("outputs[] must be objects");
      OutputReport out;
      TY_ASSIGN_OR_RETURN(out.name, String(v.as_object(), "name"));
      TY_ASSIGN_OR_RETURN(out.target, String(v.as_object(), "target"));
      TY_ASSIGN_OR_RETURN(out.rows, RequiredInt64(v.as_object(), "rows"));
      TY_ASSIGN_OR_RETURN(out.version, OptionalInt64(v.as_object(), "version"));
      report.outputs.push_back(std::move(out));
    }
  }
  return report;
}

}  // namespace trainyard::prep
