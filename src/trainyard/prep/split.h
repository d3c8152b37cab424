// Train/val/test splits (issue 18): a document's split is a pure function of its group key and
// the spec, so every engine assigns the same rows, and documents with one group key (one
// customer, one near-duplicate cluster; the engine chooses the key) always land together.
// Thread-safe: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "trainyard/common/status.h"

namespace trainyard::prep {

struct SplitSpec {
  // Split names and their shares, in order (the order matters: it lays out [0, 1)).
  std::vector<std::pair<std::string, double>> ratios;
  uint64_t seed = 0;
};

// InvalidArgument naming the field ("<field>.ratios.val: ..."): at least one split, names
// non-empty, unique and of [a-z0-9_], every ratio > 0 and finite, the ratios summing to 1 within
// 1e-9.
Status ValidateSplit(const SplitSpec& spec, std::string_view field);

// The index (into spec.ratios) of the split of the documents with `group_key`:
// u = (XXH3_64bits(group_key, seed) >> 11) * 2^-53, in [0, 1); the first split whose cumulative
// ratio (summed in order, in double) exceeds u; the last split when rounding leaves u at or past
// the sum. `spec` must have passed ValidateSplit.
int AssignSplit(const SplitSpec& spec, std::string_view group_key);

}  // namespace trainyard::prep
