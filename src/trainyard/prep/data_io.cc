#include "trainyard/prep/data_io.h"

#include <arrow/io/memory.h>
#include <arrow/ipc/reader.h>
#include <arrow/util/byte_size.h>

#include <utility>

#include "trainyard/blob/blob_store.h"
#include "trainyard/common/clock.h"
#include "trainyard/common/strings.h"
#include "trainyard/tables/arrow_util.h"
#include "trainyard/tables/export.h"
#include "trainyard/tables/import.h"
#include "trainyard/tables/table.h"

namespace trainyard::prep {
namespace {

// Rows per page asked of the server (its maximum).
constexpr int64_t kTablePageRows = 10000;
// A writer commits when its buffered rows hold this many bytes, whatever flush_rows says.
constexpr int64_t kFlushBytes = int64_t{64} << 20;

std::string TablePath(const std::string& table) {
  return "/api/trainyard/v1/tables/" + UrlEncode(table);
}

// A failed call about `table`, with what to do.
Status Explain(const Status& s, const std::string& table, bool writing) {
  std::string hint;
  if (s.code() == StatusCode::kNotFound && !writing) {
    hint = "; see the table with 'trainyard tables show " + table + "' and its versions with " +
           "'trainyard tables history " + table + "'";
  } else if (s.code() == StatusCode::kPermissionDenied) {
    hint = writing ? "; writing needs MODIFY on the table (or CREATE TABLE on its schema for a "
                     "new one) and USE CATALOG / USE SCHEMA above it"
                   : "; reading needs SELECT on the table and USE CATALOG / USE SCHEMA above it";
  }
  return Status(s.code(), s.message() + hint);
}

class FileSource : public BatchSource {
 public:
  FileSource(std::vector<std::string> paths, std::vector<std::string> names, int64_t batch_rows)
      : paths_(std::move(paths)), names_(std::move(names)), batch_rows_(batch_rows) {}

  Status Open() {
    TY_RETURN_IF_ERROR(OpenFile(0));
    schema_ = chunks_->schema();
    return Status::Ok();
  }

  std::shared_ptr<arrow::Schema> schema() const override { return schema_; }

  Result<std::optional<SourceBatch>> Next() override {
    while (chunks_) {
      TY_ASSIGN_OR_RETURN(auto chunk, chunks_->NextChunk());
      if (chunk) {
        SourceBatch out{nullptr,        names_[file_],    ordinal_,
                        chunk->records, std::move(chunk), chunks_};
        ordinal_ += out.num_rows;
        return std::optional<SourceBatch>(std::move(out));
      }
      chunks_.reset();
      if (file_ + 1 < paths_.size()) TY_RETURN_IF_ERROR(OpenFile(file_ + 1));
    }
    return std::optional<SourceBatch>();
  }

  Status Rewind() override { return OpenFile(0); }

  std::string Describe() const override {
    std::string out;
    for (const auto& n : names_) out += (out.empty() ? "" : ", ") + n;
    return out;
  }

 private:
  Status OpenFile(size_t i) {
    tables::ImportOptions options;
    TY_ASSIGN_OR_RETURN(options.format, tables::ImportFormatFromPath(paths_[i]));
    options.source_name = names_[i];
    options.batch_rows = batch_rows_;
    options.expected_schema = schema_;  // null for the first file of the first pass
    chunks_.reset();
    // Chunks of records that the engine's workers parse (JSON lines, CSV) or decode (Parquet).
    auto opened = tables::OpenImportChunks(paths_[i], options);
    if (!opened.ok()) {
      return Status(opened.status().code(), names_[i] + ": " + opened.status().message());
    }
    chunks_ = std::move(*opened);
    file_ = i;
    ordinal_ = 0;
    return Status::Ok();
  }

  std::vector<std::string> paths_;
  std::vector<std::string> names_;
  int64_t batch_rows_;
  std::shared_ptr<arrow::Schema> schema_;
  // Shared with the chunks not parsed yet (they may outlive it here).
  std::shared_ptr<tables::ChunkedImporter> chunks_;
  size_t file_ = 0;
  int64_t ordinal_ = 0;
};

class TableSource : public BatchSource {
 public:
  TableSource(ServerEndpoint server, std::string table, std::string run_id)
      : server_(std::move(server)), table_(std::move(table)), run_id_(std::move(run_id)) {}

  Status Open(std::optional<int64_t> version) {
    std::string path = TablePath(table_);
    if (version) path += "?version=" + std::to_string(*version);
    auto described = CallServerJson(server_, "GET", path, {}, "reading table " + table_);
    if (!described.ok()) return Explain(described.status(), table_, false);
    auto v = OptionalInt64(*described, "version");
    if (!v.ok() || !*v || **v < 0) {
      return Status::Internal("the server described " + table_ + " without a version");
    }
    version_ = **v;
    doc_source_ = table_ + "@" + std::to_string(version_);
    TY_RETURN_IF_ERROR(Rewind());
    schema_ = reader_->schema();
    return Status::Ok();
  }

  std::shared_ptr<arrow::Schema> schema() const override { return schema_; }

  Result<std::optional<SourceBatch>> Next() override {
    while (reader_) {
      std::shared_ptr<arrow::RecordBatch> batch;
      TY_RETURN_IF_ERROR(tables::FromArrow(reader_->ReadNext(&batch), "reading " + doc_source_));
      if (batch) {
        if (batch->num_rows() == 0) continue;
        SourceBatch out{batch, doc_source_, ordinal_, batch->num_rows(), std::nullopt, nullptr};
        ordinal_ += batch->num_rows();
        return std::optional<SourceBatch>(std::move(out));
      }
      reader_.reset();
      if (!page_token_.empty()) TY_RETURN_IF_ERROR(FetchPage());
    }
    return std::optional<SourceBatch>();
  }

  Status Rewind() override {
    ordinal_ = 0;
    page_token_.clear();
    return FetchPage();
  }

  std::string Describe() const override { return doc_source_; }
  std::optional<int64_t> version() const override { return version_; }

 private:
  Status FetchPage() {
    std::string path = TablePath(table_) +
                       "/rows?format=arrow&version=" + std::to_string(version_) +
                       "&max_rows=" + std::to_string(kTablePageRows);
    if (!run_id_.empty()) path += "&run_id=" + UrlEncode(run_id_);
    if (!page_token_.empty()) path += "&page_token=" + UrlEncode(page_token_);
    auto r = CallServer(server_, "GET", path, "", "", "reading " + doc_source_);
    if (!r.ok()) return Explain(r.status(), table_, false);
    auto served = r->headers.find("x-trainyard-table-version");
    if (served == r->headers.end() || served->second != std::to_string(version_)) {
      return Status::Internal("reading " + doc_source_ +
                              ": the server answered with another version");
    }
    auto next = r->headers.find("x-trainyard-next-page-token");
    page_token_ = next == r->headers.end() ? "" : next->second;
    page_ = std::make_shared<std::string>(std::move(r->body));
    auto input = std::make_shared<arrow::io::BufferReader>(std::make_shared<arrow::Buffer>(
        reinterpret_cast<const uint8_t*>(page_->data()), static_cast<int64_t>(page_->size())));
    TY_ASSIGN_OR_RETURN(reader_, tables::FromArrow(arrow::ipc::RecordBatchStreamReader::Open(input),
                                                   "reading " + doc_source_));
    return Status::Ok();
  }

  ServerEndpoint server_;
  std::string table_;
  std::string run_id_;
  int64_t version_ = 0;
  std::string doc_source_;
  std::shared_ptr<arrow::Schema> schema_;
  std::shared_ptr<std::string> page_;  // the bytes reader_ reads
  std::shared_ptr<arrow::ipc::RecordBatchStreamReader> reader_;
  std::string page_token_;
  int64_t ordinal_ = 0;
};

// Buffers batches and commits them: the first commit overwrites, the rest append.
class BufferedWriter : public OutputWriter {
 public:
  BufferedWriter(std::shared_ptr<arrow::Schema> schema, int64_t flush_rows)
      : schema_(std::move(schema)), flush_rows_(flush_rows) {}

  Status Write(const std::shared_ptr<arrow::RecordBatch>& rows) override {
    if (rows->num_rows() == 0) return Status::Ok();
    buffered_rows_ += rows->num_rows();
    buffered_bytes_ += arrow::util::TotalBufferSize(*rows);
    buffer_.push_back(rows);
    if (buffered_rows_ >= flush_rows_ || buffered_bytes_ >= kFlushBytes) return Flush();
    return Status::Ok();
  }

  Result<OutputResult> Finish() override {
    if (!buffer_.empty() || commits_ == 0) TY_RETURN_IF_ERROR(Flush());
    return result_;
  }

 protected:
  // Commits `rows` (overwrite on the first commit); returns the version written.
  virtual Result<int64_t> Commit(const arrow::Table& rows, bool overwrite) = 0;
  const std::shared_ptr<arrow::Schema>& schema() const { return schema_; }

 private:
  Status Flush() {
    TY_ASSIGN_OR_RETURN(auto table,
                        tables::FromArrow(arrow::Table::FromRecordBatches(schema_, buffer_),
                                          "writing " + Describe()));
    TY_ASSIGN_OR_RETURN(int64_t version, Commit(*table, commits_ == 0));
    result_.rows += table->num_rows();
    result_.version = version;
    ++commits_;
    buffer_.clear();
    buffered_rows_ = 0;
    buffered_bytes_ = 0;
    return Status::Ok();
  }

  std::shared_ptr<arrow::Schema> schema_;
  int64_t flush_rows_;
  std::vector<std::shared_ptr<arrow::RecordBatch>> buffer_;
  int64_t buffered_rows_ = 0;
  int64_t buffered_bytes_ = 0;
  int64_t commits_ = 0;
  OutputResult result_;
};

class LocalWriter : public BufferedWriter {
 public:
  LocalWriter(std::string dir, std::shared_ptr<arrow::Schema> schema,
              std::map<std::string, std::string> properties, int64_t flush_rows,
              std::unique_ptr<blob::BlobStore> store, std::string commit_metadata)
      : BufferedWriter(std::move(schema), flush_rows),
        dir_(std::move(dir)),
        properties_(std::move(properties)),
        store_(std::move(store)),
        commit_metadata_(std::move(commit_metadata)) {}

  std::string Describe() const override { return dir_; }

 protected:
  Result<int64_t> Commit(const arrow::Table& rows, bool overwrite) override {
    if (!table_) {
      tables::TableOptions options;
      options.name = dir_;
      options.commit_user_metadata = commit_metadata_;
      auto opened = tables::DeltaTable::Open(*store_, "", clock_, options);
      if (opened.ok()) {
        table_ = std::move(*opened);
      } else if (opened.status().code() == StatusCode::kNotFound) {
        tables::CreateTableRequest create;
        create.schema = schema();
        create.properties = properties_;
        TY_ASSIGN_OR_RETURN(table_,
                            tables::DeltaTable::Create(*store_, "", clock_, create, options));
      } else {
        return opened.status();
      }
    }
    auto committed = overwrite ? table_->Overwrite(rows) : table_->Append(rows);
    if (!committed.ok()) {
      return Status(committed.status().code(),
                    "writing " + dir_ + ": " + committed.status().message());
    }
    return committed->version;
  }

 private:
  std::string dir_;
  std::map<std::string, std::string> properties_;
  std::unique_ptr<blob::BlobStore> store_;
  std::string commit_metadata_;
  SystemClock clock_;
  std::unique_ptr<tables::DeltaTable> table_;
};

class CatalogWriter : public BufferedWriter {
 public:
  CatalogWriter(ServerEndpoint server, std::string table, std::shared_ptr<arrow::Schema> schema,
                std::string run_id, int64_t flush_rows, std::string column_lineage,
                std::string commit_metadata)
      : BufferedWriter(std::move(schema), flush_rows),
        server_(std::move(server)),
        table_(std::move(table)),
        run_id_(std::move(run_id)),
        column_lineage_(std::move(column_lineage)),
        commit_metadata_(std::move(commit_metadata)) {}

  std::string Describe() const override { return table_; }

 protected:
  Result<int64_t> Commit(const arrow::Table& rows, bool overwrite) override {
    std::string body;
    arrow::TableBatchReader reader(rows);
    TY_RETURN_IF_ERROR(tables::ExportRecords(reader, tables::ExportFormat::kParquet,
                                             [&body](std::string_view bytes) {
                                               body.append(bytes);
                                               return Status::Ok();
                                             })
                           .status());
    std::string path = TablePath(table_) +
                       "/import?format=parquet&mode=" + (overwrite ? "overwrite" : "append") +
                       "&source_name=prep";
    if (!run_id_.empty()) path += "&run_id=" + UrlEncode(run_id_);
    if (!column_lineage_.empty()) path += "&column_lineage=" + UrlEncode(column_lineage_);
    if (!commit_metadata_.empty()) path += "&user_metadata=" + UrlEncode(commit_metadata_);
    auto r = CallServer(server_, "POST", path, body, "application/vnd.apache.parquet",
                        "writing " + table_);
    if (!r.ok()) return Explain(r.status(), table_, true);
    auto answer = ParseJsonObject(r->body);
    if (!answer.ok()) return Status::Unavailable("writing " + table_ + ": invalid answer");
    auto version = OptionalInt64(*answer, "version");
    if (!version.ok() || !*version) {
      return Status::Unavailable("writing " + table_ + ": the answer has no version");
    }
    return **version;
  }

 private:
  ServerEndpoint server_;
  std::string table_;
  std::string run_id_;
  std::string column_lineage_;
  std::string commit_metadata_;
};

}  // namespace

Status SourceBatch::Parse() {
  if (rows || !chunk) return Status::Ok();
  TY_ASSIGN_OR_RETURN(rows, parser->ParseChunk(*chunk));
  chunk.reset();
  parser.reset();
  return Status::Ok();
}

Result<std::unique_ptr<BatchSource>> OpenFileSource(std::vector<std::string> paths,
                                                    std::vector<std::string> names,
                                                    int64_t batch_rows) {
  auto source = std::make_unique<FileSource>(std::move(paths), std::move(names), batch_rows);
  TY_RETURN_IF_ERROR(source->Open());
  return std::unique_ptr<BatchSource>(std::move(source));
}

Result<std::unique_ptr<BatchSource>> OpenTableSource(const ServerEndpoint& server,
                                                     const std::string& table,
                                                     std::optional<int64_t> version,
                                                     const std::string& run_id) {
  if (server.empty()) {
    return Status::FailedPrecondition(
        "source.table reads the catalog table " + table +
        " through the Trainyard server: pass --url and --token (or set TRAINYARD_URL and "
        "TRAINYARD_TOKEN; a job gets both), or read local files with source.files");
  }
  auto source = std::make_unique<TableSource>(server, table, run_id);
  TY_RETURN_IF_ERROR(source->Open(version));
  return std::unique_ptr<BatchSource>(std::move(source));
}

Result<std::unique_ptr<OutputWriter>> OpenLocalOutput(const std::string& dir,
                                                      std::shared_ptr<arrow::Schema> schema,
                                                      std::map<std::string, std::string> properties,
                                                      int64_t flush_rows,
                                                      std::string commit_metadata) {
  auto store = blob::OpenBlobStore(dir);
  if (!store.ok()) {
    return Status(store.status().code(), "output " + dir + ": " + store.status().message());
  }
  return std::unique_ptr<OutputWriter>(
      std::make_unique<LocalWriter>(dir, std::move(schema), std::move(properties), flush_rows,
                                    std::move(*store), std::move(commit_metadata)));
}

std::unique_ptr<OutputWriter> OpenCatalogOutput(const ServerEndpoint& server,
                                                const std::string& table,
                                                std::shared_ptr<arrow::Schema> schema,
                                                const std::string& run_id, int64_t flush_rows,
                                                std::string column_lineage,
                                                std::string commit_metadata) {
  return std::make_unique<CatalogWriter>(server, table, std::move(schema), run_id, flush_rows,
                                         std::move(column_lineage), std::move(commit_metadata));
}

Status CheckCatalogOutput(const ServerEndpoint& server, const std::string& output,
                          const std::string& table, const std::string& run_id) {
  if (server.empty()) {
    return Status::FailedPrecondition(
        "outputs." + output + " writes the catalog table " + table +
        " through the Trainyard server: pass --url and --token (or set TRAINYARD_URL and "
        "TRAINYARD_TOKEN), or write a local directory with {path: DIR}");
  }
  // The first commit overwrites (BufferedWriter), so that is the mode to check.
  std::string path = TablePath(table) + "/import?dry_run=true&mode=overwrite";
  if (!run_id.empty()) path += "&run_id=" + UrlEncode(run_id);
  auto r = CallServerJson(server, "POST", path, {}, "writing " + table);
  if (!r.ok()) return Explain(r.status(), table, true);
  return Status::Ok();
}

}  // namespace trainyard::prep
