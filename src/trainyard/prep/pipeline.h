// The native data-preparation engine (issue 18, docs/prep.md): runs a PipelineSpec over its
// source and writes its outputs, accounting for every row.
//
// Two passes over the source, so memory does not grow with the text (a source larger than RAM
// works): pass 1 runs the steps on each row and keeps only per-document decisions (dropped at
// which step and why, the exact-dedup hash, the MinHash band keys, the length for
// `keep: longest`); the global decisions (duplicates, near-duplicate clusters) are made between
// the passes; pass 2 reads the source again, re-applies the deterministic transforms to the
// rows that remain and writes them, and the dropped rows' (doc_id, step, reason, duplicate_of:
// the kept row a duplicate stands for), in batches.
// Batches go through `threads` workers; results are consumed in source order, so the outputs
// are the same for any number of threads. For file sources the workers also parse (JSON lines,
// CSV) or decode (Parquet): the driving thread only cuts the file into chunks of records
// (tables/import_chunks.h). The first write of each output overwrites it, so a rerun after a
// kill leaves the same outputs and never duplicates rows.
//
// Every output row starts with `doc_id` (doc_id.h): the source's `id_column` or the row's
// ordinal, with the file name or "table@version" as the source.
//
// RunPipeline is one call; it starts and joins its own workers.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "trainyard/common/json.h"
#include "trainyard/common/status.h"
#include "trainyard/prep/pipeline_spec.h"
#include "trainyard/prep/server_client.h"

namespace trainyard::prep {

struct PipelineOptions {
  int threads = 0;              // 0 = the machine's cores
  int64_t batch_rows = 4096;    // rows per batch a worker takes
  int64_t flush_rows = 100000;  // rows per commit of an output
  ServerEndpoint server;        // for catalog sources and outputs
  std::string run_id;           // the MLflow run (lineage of reads and writes), "" = none
  // The most bytes the per-document state kept between the passes may take (0 = no limit):
  // a source too large for it fails early with the figure to raise it to.
  int64_t memory_limit = 0;
  // Progress: the pass (1 or 2) and the rows it has finished; called from the driving thread.
  std::function<void(int pass, int64_t rows)> progress;
};

struct ReasonReport {
  int64_t rows = 0;
  std::vector<std::string> examples;  // up to 3 doc ids, the first in source order
};

struct StepReport {
  std::string label;  // "0_filter"
  StepKind kind = StepKind::kFilter;
  int line = 0;
  int64_t rows_in = 0;
  int64_t rows_out = 0;
  std::map<std::string, ReasonReport> dropped;  // by reason
  int64_t rows_changed = 0;                     // redact_pii: rows with a replacement
  std::map<std::string, int64_t> changed;       // redact_pii: replacements by kind
  std::map<std::string, int64_t> split_rows;    // split: rows per split
  int64_t dropped_rows() const;
};

struct OutputReport {
  std::string name;
  std::string target;  // the table's name or the directory
  int64_t rows = 0;
  std::optional<int64_t> version;
};

struct PipelineReport {
  std::string pipeline;
  std::string version;  // the spec's SHA-256
  std::string source;   // "a.jsonl" or "cat.sch.tbl@3"
  std::optional<int64_t> source_version;
  int64_t rows_in = 0;
  int64_t rows_out = 0;  // rows in the split/rows outputs
  int64_t rows_dropped = 0;
  std::vector<StepReport> steps;
  std::vector<OutputReport> outputs;
  double seconds = 0;
  int threads = 1;
  std::string master;  // the Spark engine's master ("local[2]"); "" for the native engine
};

Result<PipelineReport> RunPipeline(const PipelineSpec& spec, const PipelineOptions& options);

json::object ReportToJson(const PipelineReport& report);
// MLflow metrics of a report: prep.rows_in, prep.<label>.rows_out, prep.<label>.dropped...
std::map<std::string, double> ReportMetrics(const PipelineReport& report);

}  // namespace trainyard::prep
