#include "trainyard/cost/price_catalog.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <fstream>
#include <sstream>

namespace trainyard::cost {
namespace {

// A price is dollars per hour of one GPU or CPU; one at or above this is a typo (a per-month
// or per-cluster figure), refused.
constexpr double kMaxHourlyPrice = 1e6;
constexpr double kSecondsPerHour = 3600;

Status At(std::string_view filename, const YAML::Node& n, const std::string& path,
          const std::string& message) {
  std::string where(filename);
  if (n.IsDefined() && n.Mark().line >= 0) where += ":" + std::to_string(n.Mark().line + 1);
  return Status::InvalidArgument(where + ": " + path + " " + message);
}

Result<double> Price(std::string_view filename, const YAML::Node& n, const std::string& path) {
  if (n.IsScalar() && n.Tag() != "!") {
    try {
      double v = n.as<double>();
      if (std::isfinite(v) && v >= 0 && v < kMaxHourlyPrice) return v;
    } catch (const YAML::Exception&) {
    }
  }
  return At(filename, n, path, "must be a non-negative number of dollars");
}

}  // namespace

Result<PriceCatalog> PriceCatalog::Parse(std::string_view yaml, std::string_view filename) {
  PriceCatalog catalog;
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(std::string(filename) + ":" + std::to_string(e.mark.line + 1) +
                                   ": not valid YAML: " + e.msg);
  }
  try {
    if (!root.IsMap() || !root["pools"] || !root["pools"].IsMap()) {
      return At(filename, root, "pools", "must be a mapping of pool names to prices");
    }
    for (const auto& kv : root["pools"]) {
      std::string name = kv.first.Scalar();
      std::string path = "pools." + name;
      if (!kv.second.IsMap()) return At(filename, kv.second, path, "must be a mapping");
      PoolPrice p;
      for (const auto& field : kv.second) {
        std::string key = field.first.Scalar();
        std::string fpath = path + "." + key;
        if (key == "provider" || key == "gpu_type") {
          if (!field.second.IsScalar())
            return At(filename, field.second, fpath, "must be a string");
          (key == "provider" ? p.provider : p.gpu_type) = field.second.Scalar();
        } else if (key == "gpu_hour_on_demand") {
          TY_ASSIGN_OR_RETURN(p.gpu_hour_on_demand, Price(filename, field.second, fpath));
        } else if (key == "gpu_hour_spot") {
          TY_ASSIGN_OR_RETURN(p.gpu_hour_spot, Price(filename, field.second, fpath));
        } else if (key == "cpu_hour") {
          TY_ASSIGN_OR_RETURN(p.cpu_hour, Price(filename, field.second, fpath));
        } else if (key == "notes") {
          continue;
        } else {
          return At(filename, field.first, fpath,
                    "is not a known key (known: provider, gpu_type, gpu_hour_on_demand, "
                    "gpu_hour_spot, cpu_hour, notes)");
        }
      }
      if (p.gpu_hour_spot == 0) p.gpu_hour_spot = p.gpu_hour_on_demand;
      catalog.pools_[name] = p;
    }
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(std::string(filename) + ": invalid price catalog: " + e.msg);
  }
  return catalog;
}

Result<PriceCatalog> PriceCatalog::Load(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::InvalidArgument("cannot read the price catalog " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return Parse(ss.str(), path);
}

const PoolPrice& PriceCatalog::Pool(const std::string& pool) const {
  static const PoolPrice kFree;
  auto it = pools_.find(pool);
  return it == pools_.end() ? kFree : it->second;
}

double PriceCatalog::Cost(const std::string& pool, int gpus, int cpus, double seconds,
                          bool spot) const {
  const PoolPrice& p = Pool(pool);
  double hours = seconds / kSecondsPerHour;
  if (gpus > 0) return gpus * hours * (spot ? p.gpu_hour_spot : p.gpu_hour_on_demand);
  return cpus * hours * p.cpu_hour;
}

}  // namespace trainyard::cost
