// What the CLI does around the Spark engine (prep/spark/prep_spark.py, a separate Python
// process; cli/prep_spark_command.cc drives it) so that it reads and writes catalog tables
// exactly as the native engine does:
//  - StageTableSource reads a catalog table at ONE version through the server's rows API, with
//    the native engine's reader (data_io.h OpenTableSource: the same row order, so the same
//    ordinals and doc ids; the catalog's row filters and column masks applied for the caller;
//    the read recorded in lineage under the run), into one local Parquet file with each row's
//    ordinal in kStagedOrdinalColumn, which Spark reads.
//  - ImportStagedOutput writes the Parquet files Spark wrote for an output into a catalog table
//    through the tables import API (data_io.h OpenCatalogOutput: MODIFY checked by the server,
//    the first commit overwrites, so a rerun never duplicates rows; the write and the columns'
//    lineage recorded under the run).
//  - ReportFromJson reads the Spark program's report back into a PipelineReport, so the CLI
//    prints it, logs it to a job's MLflow run and writes --report as for the native engine.
//
// Functions without shared state; safe from any thread.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "trainyard/common/json.h"
#include "trainyard/common/status.h"
#include "trainyard/prep/data_io.h"
#include "trainyard/prep/pipeline.h"
#include "trainyard/prep/pipeline_spec.h"
#include "trainyard/prep/server_client.h"

namespace trainyard::prep {

inline constexpr char kStagedOrdinalColumn[] = "_trainyard_prep_ordinal";

struct StagedSource {
  std::string doc_source;  // "cat.sch.tbl@3": the source name of its doc ids
  int64_t version = 0;     // the table version read
  int64_t rows = 0;
  std::vector<std::string> columns;  // the table's columns, without the ordinal
};

Result<StagedSource> StageTableSource(const ServerEndpoint& server, const std::string& table,
                                      std::optional<int64_t> version, const std::string& run_id,
                                      const std::string& parquet_path);

// `parquet_dir` holds Spark's part-*.parquet files of one output, read in name order.
// `column_lineage` is the import API's JSON ("" = none), sent with every commit.
Result<OutputResult> ImportStagedOutput(const ServerEndpoint& server,
                                        const std::string& parquet_dir, const std::string& table,
                                        const std::string& run_id, int64_t flush_rows,
                                        const std::string& column_lineage);

// The report prep_spark.py writes (ReportToJson's fields); steps are matched to `spec`'s in
// order. An error names what is missing.
Result<PipelineReport> ReportFromJson(const json::object& report, const PipelineSpec& spec);

}  // namespace trainyard::prep
