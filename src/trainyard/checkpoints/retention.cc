#include "trainyard/checkpoints/retention.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace trainyard::checkpoints {

Status ValidateRetentionPolicy(const RetentionPolicy& p) {
  if (p.keep_last < 0) return Status::InvalidArgument("keep_last must not be negative");
  if (p.keep_best < 0) return Status::InvalidArgument("keep_best must not be negative");
  if (p.keep_every_steps < 0) {
    return Status::InvalidArgument("keep_every_steps must not be negative");
  }
  if (p.keep_best > 0 && p.metric.empty()) {
    return Status::InvalidArgument("keep_best needs a metric to rank checkpoints by");
  }
  return Status::Ok();
}

Result<std::vector<int64_t>> StepsToDelete(const std::vector<CheckpointInfo>& complete,
                                           const std::vector<int64_t>& incomplete,
                                           const RetentionPolicy& policy) {
  TY_RETURN_IF_ERROR(ValidateRetentionPolicy(policy));
  std::vector<int64_t> deleted;
  if (complete.empty()) return deleted;
  std::vector<const CheckpointInfo*> by_step;
  for (const CheckpointInfo& c : complete) by_step.push_back(&c);
  std::sort(by_step.begin(), by_step.end(),
            [](const CheckpointInfo* a, const CheckpointInfo* b) { return a->step < b->step; });
  const int64_t latest = by_step.back()->step;

  std::set<int64_t> keep{latest};
  bool any_rule = policy.keep_last > 0 || policy.keep_best > 0 || policy.keep_every_steps > 0;
  if (!any_rule) {
    for (const CheckpointInfo* c : by_step) keep.insert(c->step);
  }
  for (int i = 0; i < policy.keep_last && i < static_cast<int>(by_step.size()); ++i) {
    keep.insert(by_step[by_step.size() - 1 - static_cast<size_t>(i)]->step);
  }
  if (policy.keep_every_steps > 0) {
    for (const CheckpointInfo* c : by_step) {
      if (c->step % policy.keep_every_steps == 0) keep.insert(c->step);
    }
  }
  if (policy.keep_best > 0) {
    std::vector<std::pair<double, int64_t>> scored;
    for (const CheckpointInfo* c : by_step) {
      if (c->ranks.empty()) continue;
      auto it = c->metrics().find(policy.metric);
      if (it == c->metrics().end() || std::isnan(it->second)) continue;
      scored.emplace_back(policy.higher_is_better ? -it->second : it->second, c->step);
    }
    // Ties go to the later step.
    std::sort(scored.begin(), scored.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first < b.first : a.second > b.second;
    });
    for (size_t i = 0; i < scored.size() && i < static_cast<size_t>(policy.keep_best); ++i) {
      keep.insert(scored[i].second);
    }
  }
  for (const CheckpointInfo* c : by_step) {
    if (keep.count(c->step) == 0) deleted.push_back(c->step);
  }
  for (int64_t s : incomplete) {
    if (s < latest) deleted.push_back(s);
  }
  std::sort(deleted.begin(), deleted.end());
  return deleted;
}

}  // namespace trainyard::checkpoints
