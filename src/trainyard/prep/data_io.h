// Where a pipeline's rows come from and go to (the engine, pipeline.h, drives them):
//  - BatchSource: local files (.jsonl/.csv/.parquet through tables/import.h; one schema, the
//    first file's; they come as chunks of records that the engine's workers parse, or for
//    Parquet decode: tables/import_chunks.h) or a
//    catalog table read through the server's tables API
//    (GET /api/trainyard/v1/tables/{name}/rows?format=arrow) at ONE version resolved when it is
//    opened. Rewind() starts the same read again (the engine's second pass).
//  - OutputWriter: a local Delta table directory (tables/table.h) or a catalog table written
//    through POST /api/trainyard/v1/tables/{name}/import (a Parquet body). Rows are buffered
//    and committed in batches of `flush_rows`; the FIRST commit of a run overwrites what the
//    table held (so a rerun after a kill never duplicates rows), later ones append. Finish()
//    overwrites with no rows when nothing was written.
//
// Not thread-safe: one thread drives a source or a writer.
#pragma once

#include <arrow/api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainyard/common/status.h"
#include "trainyard/prep/server_client.h"
#include "trainyard/tables/import_chunks.h"

namespace trainyard::prep {

struct SourceBatch {
  std::shared_ptr<arrow::RecordBatch> rows;  // null until Parse() for a chunk
  // What DocId calls the source of these rows ("file.jsonl", "cat.sch.tbl@3"), and the
  // ordinal of the first row within it (from 0).
  std::string doc_source;
  int64_t first_ordinal = 0;
  int64_t num_rows = 0;  // known before parsing
  // Records of a file not parsed yet (parsing is most of reading them): Parse(), on a worker,
  // turns them into `rows` and releases the chunk.
  std::optional<tables::RecordChunk> chunk;
  std::shared_ptr<const tables::ChunkedImporter> parser;
  Status Parse();
};

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual std::shared_ptr<arrow::Schema> schema() const = 0;
  // The next batch, or nullopt at the end.
  virtual Result<std::optional<SourceBatch>> Next() = 0;
  virtual Status Rewind() = 0;
  // "raw/a.jsonl, raw/b.jsonl" or "main.s.t@3".
  virtual std::string Describe() const = 0;
  // The table's version read (tables only).
  virtual std::optional<int64_t> version() const { return std::nullopt; }
};

// `paths` are opened; `names` (as the spec wrote them) name the files in ids and errors.
Result<std::unique_ptr<BatchSource>> OpenFileSource(std::vector<std::string> paths,
                                                    std::vector<std::string> names,
                                                    int64_t batch_rows);

// Resolves `version` (latest when unset) once; `run_id` ("" = none) names the run in lineage.
Result<std::unique_ptr<BatchSource>> OpenTableSource(const ServerEndpoint& server,
                                                     const std::string& table,
                                                     std::optional<int64_t> version,
                                                     const std::string& run_id);

struct OutputResult {
  int64_t rows = 0;
  std::optional<int64_t> version;  // the table's version after the last commit
};

class OutputWriter {
 public:
  virtual ~OutputWriter() = default;
  virtual Status Write(const std::shared_ptr<arrow::RecordBatch>& rows) = 0;
  virtual Result<OutputResult> Finish() = 0;
  virtual std::string Describe() const = 0;
};

// A local Delta table at `dir` (created when absent, with `properties`).
// `commit_metadata` ("" = none) is every commit's Delta commitInfo.userMetadata.
Result<std::unique_ptr<OutputWriter>> OpenLocalOutput(const std::string& dir,
                                                      std::shared_ptr<arrow::Schema> schema,
                                                      std::map<std::string, std::string> properties,
                                                      int64_t flush_rows,
                                                      std::string commit_metadata = "");

// A catalog table through the server (created by the first import when absent).
// `column_lineage` (the import API's JSON, "" = none) goes with every commit, so each
// version written has its columns' lineage; `commit_metadata` ("" = none) too, as the
// import API's user_metadata (the commit's Delta commitInfo.userMetadata).
std::unique_ptr<OutputWriter> OpenCatalogOutput(const ServerEndpoint& server,
                                                const std::string& table,
                                                std::shared_ptr<arrow::Schema> schema,
                                                const std::string& run_id, int64_t flush_rows,
                                                std::string column_lineage = "",
                                                std::string commit_metadata = "");

// Whether the server would take OpenCatalogOutput's writes to `table` (outputs.`output`):
// the import API's own checks (MODIFY on the table, or CREATE TABLE on its schema for a new
// one; the run), asked with dry_run before any rows are computed, so that a missing grant fails
// in seconds with the error the first write would give.
Status CheckCatalogOutput(const ServerEndpoint& server, const std::string& output,
                          const std::string& table, const std::string& run_id);

}  // namespace trainyard::prep
