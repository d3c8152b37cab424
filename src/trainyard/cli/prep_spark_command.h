// `trainyard prep SPEC.yaml --engine spark [--master local[*]|spark://HOST:PORT] [--report FILE]`:
// runs a data preparation pipeline on Spark (issue 18, docs/prep.md "Spark engine"). The spec is
// parsed and checked here with the native parser first (file:line errors, no JVM started for a
// bad spec, a clear error for what the Spark engine does not do yet), then the PySpark program
// src/trainyard/prep/spark/prep_spark.py runs it with the same spec:
//  - the program: $TRAINYARD_PREP_SPARK, else <repo>/src/trainyard/prep/spark/prep_spark.py next
//    to the binary's build directory;
//  - Python: $TRAINYARD_PYTHON, else <repo>/.venv/bin/python when it exists, else python3 (it
//    needs pyspark, delta-spark, numpy, pandas, pyyaml and xxhash; scripts/install-deps).
#pragma once

#include <string>

namespace trainyard::cli {

struct PrepSparkOptions {
  std::string spec;
  std::string master = "local[*]";
  std::string report;  // "" = none
};

// Returns the process's exit code (2 for a spec the Spark engine cannot run); on success the
// Spark program's own (it prints the per-step report).
int RunPrepOnSpark(const PrepSparkOptions& options);

}  // namespace trainyard::cli
