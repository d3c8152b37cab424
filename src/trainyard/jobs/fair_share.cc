#include "trainyard/jobs/fair_share.h"

#include <cmath>

namespace trainyard::jobs {

FairShareUsage::FairShareUsage(int64_t half_life_ms) : half_life_ms_(half_life_ms) {}

double FairShareUsage::Decayed(const Entry& e, int64_t now_ms) const {
  if (half_life_ms_ <= 0 || now_ms <= e.as_of_ms) return e.value;
  double half_lives = static_cast<double>(now_ms - e.as_of_ms) / static_cast<double>(half_life_ms_);
  return e.value * std::exp2(-half_lives);
}

void FairShareUsage::Add(const std::string& project, double amount, int64_t now_ms) {
  auto [it, inserted] = usage_.try_emplace(project, Entry{0, now_ms});
  Entry& e = it->second;
  e.value = Decayed(e, now_ms) + amount;
  if (now_ms > e.as_of_ms) e.as_of_ms = now_ms;
}

double FairShareUsage::Get(const std::string& project, int64_t now_ms) const {
  auto it = usage_.find(project);
  return it == usage_.end() ? 0.0 : Decayed(it->second, now_ms);
}

std::unordered_map<std::string, double> FairShareUsage::Snapshot(int64_t now_ms) const {
  std::unordered_map<std::string, double> out;
  out.reserve(usage_.size());
  for (const auto& [project, entry] : usage_) out.emplace(project, Decayed(entry, now_ms));
  return out;
}

}  // namespace trainyard::jobs
