// PriceCatalog: what an hour of a compute pool's capacity costs, so that every
// job attempt can be priced (GPU-seconds × $/GPU-hour, or CPU-seconds × $/CPU-hour
// for CPU-only work). Loaded from YAML (see examples/prices-2026.yaml):
//
//   pools:
//     local:                    # the pool's name (the local executor's is "local")
//       provider: aws
//       gpu_type: H100-80GB
//       gpu_hour_on_demand: 3.93
//       gpu_hour_spot: 2.10
//       cpu_hour: 0.05           # optional; for jobs without GPUs
//
// Preemptible jobs are billed at the spot rate (they run on capacity that may be
// reclaimed); others at the on-demand rate. An immutable value; thread-safe.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "trainyard/common/status.h"

namespace trainyard::cost {

struct PoolPrice {
  std::string provider = "unpriced";
  std::string gpu_type;
  double gpu_hour_on_demand = 0;
  double gpu_hour_spot = 0;
  double cpu_hour = 0;
};

class PriceCatalog {
 public:
  PriceCatalog() = default;
  // Errors name the file, line and key.
  static Result<PriceCatalog> Parse(std::string_view yaml, std::string_view filename);
  static Result<PriceCatalog> Load(const std::string& path);

  // The pool's prices; a zero price when the pool is not in the catalog.
  const PoolPrice& Pool(const std::string& pool) const;
  // The cost in dollars of holding `gpus` GPUs and `cpus` CPUs for `seconds`.
  double Cost(const std::string& pool, int gpus, int cpus, double seconds, bool spot) const;

 private:
  std::map<std::string, PoolPrice> pools_;
};

}  // namespace trainyard::cost
