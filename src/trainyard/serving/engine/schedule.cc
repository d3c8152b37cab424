#include "trainyard/serving/engine/schedule.h"

#include <algorithm>
#include <numeric>

namespace trainyard::serving {

size_t AdmitCount(int running, const std::vector<int>& waiting, int max_batch) {
  size_t admitted = 0;
  int sequences = running;
  for (int need : waiting) {
    if (sequences > 0 && sequences + need > max_batch) break;
    sequences += need;
    ++admitted;
  }
  return admitted;
}

std::vector<std::vector<size_t>> PlanPrefill(const std::vector<int64_t>& lengths,
                                             const PrefillBudget& budget) {
  std::vector<size_t> order(lengths.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return lengths[a] < lengths[b]; });
  std::vector<std::vector<size_t>> groups;
  int64_t tokens = 0;  // the last group's real (unpadded) tokens
  for (size_t i : order) {
    int64_t n = lengths[i];  // the longest so far: prompts come shortest first
    if (!groups.empty()) {
      auto count = static_cast<int64_t>(groups.back().size()) + 1;
      if (n * count <= 2 * (tokens + n) && n * count <= budget.tokens &&
          count * budget.heads * n * n <= budget.scores) {
        groups.back().push_back(i);
        tokens += n;
        continue;
      }
    }
    groups.push_back({i});
    tokens = n;
  }
  return groups;
}

PrefillBudget DefaultPrefillBudget(bool cpu, int64_t heads) {
  PrefillBudget b;
  // A CPU's matrix products are saturated by a few hundred rows (bench/serving: oneDNN peaks
  // near 200), a GPU wants thousands.
  b.tokens = cpu ? 256 : 4096;
  b.heads = std::max<int64_t>(1, heads);
  return b;
}

}  // namespace trainyard::serving
