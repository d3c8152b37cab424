#include "trainyard/prep/split.h"

#include <xxhash.h>

#include <cmath>
#include <set>
#include <string>

namespace trainyard::prep {

Status ValidateSplit(const SplitSpec& spec, std::string_view field) {
  std::string f(field);
  if (spec.ratios.empty()) {
    return Status::InvalidArgument(f +
                                   ".ratios: name at least one split, e.g. {train: 0.9, val: 0.1}");
  }
  std::set<std::string> names;
  double sum = 0.0;
  for (const auto& [name, ratio] : spec.ratios) {
    if (name.empty() ||
        name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") != std::string::npos) {
      return Status::InvalidArgument(f + ".ratios: split name \"" + name +
                                     "\" must be non-empty lowercase letters, digits and '_'");
    }
    if (!names.insert(name).second) {
      return Status::InvalidArgument(f + ".ratios." + name + ": the split is named twice");
    }
    if (!std::isfinite(ratio) || ratio <= 0.0) {
      return Status::InvalidArgument(f + ".ratios." + name + ": must be a number > 0 (got " +
                                     std::to_string(ratio) + ")");
    }
    sum += ratio;
  }
  if (std::fabs(sum - 1.0) > 1e-9) {
    return Status::InvalidArgument(f + ".ratios: the ratios must sum to 1 (they sum to " +
                                   std::to_string(sum) + ")");
  }
  return Status::Ok();
}

int AssignSplit(const SplitSpec& spec, std::string_view group_key) {
  const uint64_t h = XXH3_64bits_withSeed(group_key.data(), group_key.size(), spec.seed);
  const double u = static_cast<double>(h >> 11) * 0x1.0p-53;
  double cumulative = 0.0;
  const int n = static_cast<int>(spec.ratios.size());
  for (int i = 0; i < n; ++i) {
    cumulative += spec.ratios[i].second;
    if (u < cumulative) return i;
  }
  return n - 1;
}

}  // namespace trainyard::prep
