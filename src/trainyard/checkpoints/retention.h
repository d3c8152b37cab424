// Retention: which checkpoints of a job to delete, given a policy. Pure functions over
// already-listed checkpoints, so the caller decides when and how to delete (and the
// policy can be tested without storage). Thread-safe (no state).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainyard/checkpoints/types.h"
#include "trainyard/common/status.h"

namespace trainyard::checkpoints {

// A checkpoint is kept when any rule keeps it; the latest complete one is always kept.
// A policy with every rule off keeps everything.
struct RetentionPolicy {
  int keep_last = 0;   // the N highest steps
  int keep_best = 0;   // the K best by `metric` (checkpoints without it never count)
  std::string metric;  // rank 0's metric, e.g. "eval_loss"
  bool higher_is_better = false;
  int64_t keep_every_steps = 0;  // steps that are multiples of this
};

Status ValidateRetentionPolicy(const RetentionPolicy& policy);

// Steps of `complete` (any order) that the policy does not keep, ascending. Incomplete
// steps below the latest complete one are dead (an interrupted save); they are added when
// given in `incomplete` (an incomplete step above it may be a save in progress: kept).
Result<std::vector<int64_t>> StepsToDelete(const std::vector<CheckpointInfo>& complete,
                                           const std::vector<int64_t>& incomplete,
                                           const RetentionPolicy& policy);

}  // namespace trainyard::checkpoints
