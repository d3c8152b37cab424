// `trainyard prep SPEC.yaml --engine spark [--master local[*]|spark://HOST:PORT] [--report FILE]`:
// runs a data preparation pipeline on Spark (issue 18, docs/prep.md "Spark engine"). The spec is
// parsed and checked here with the native parser first (file:line errors, no JVM started for a
// bad spec), then the PySpark program src/trainyard/prep/spark/prep_spark.py runs it with the
// same spec:
//  - the program: $TRAINYARD_PREP_SPARK, else <repo>/src/trainyard/prep/spark/prep_spark.py next
//    to the binary's build directory;
//  - Python: $TRAINYARD_PYTHON, else <repo>/.venv/bin/python when it exists, else python3 (it
//    needs pyspark, delta-spark, numpy, pandas, pyyaml, xxhash and tokenizers;
//    scripts/install-deps).
// Catalog tables go through the server here, around the Spark program (prep/spark_bridge.h): a
// source table is staged at one version through the rows API into a Parquet file with each
// row's ordinal, and outputs Spark writes as Parquet are imported into their catalog tables
// through the tables import API, with lineage under the job's run. The staging directory is
// $TRAINYARD_PREP_STAGING (default the system's temporary directory; on a cluster, a directory
// every executor sees), removed afterwards.
#pragma once

#include <string>

#include "trainyard/common/status.h"

namespace trainyard::prep {
struct PipelineReport;
}

namespace trainyard::cli {

struct PrepSparkOptions {
  std::string spec;
  std::string master = "local[*]";
  std::string url, token;       // the server, for catalog sources and outputs
  std::string run_id;           // the MLflow run lineage records, "" = none
  int64_t flush_rows = 100000;  // rows per commit of a catalog output
};

// The report, as the native engine's (the caller prints it, writes --report and logs it to the
// job's run). A spec the Spark engine cannot run is an error before Spark starts; when the
// Spark program fails, it has printed its error and the status says so.
Result<prep::PipelineReport> RunPrepOnSpark(const PrepSparkOptions& options);

}  // namespace trainyard::cli
