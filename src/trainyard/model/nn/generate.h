// Greedy decoding for evaluation (exact-match accuracy): each prompt is continued with the
// arg-max token until an eos id or `max_new_tokens`. No KV cache: every step re-runs the full
// forward over prompt + generated tokens, which is exact and cheap at evaluation sizes.
//
// Prompts of different lengths run as one batch, left-padded; padding is a separate segment
// (see CausalLM::Forward), so it never influences the real tokens. Runs under NoGradGuard
// with the model in eval mode (its previous mode is restored). Not thread-safe (the model).
#pragma once

#include <cstdint>
#include <vector>

#include "trainyard/common/status.h"
#include "trainyard/model/nn/model.h"

namespace trainyard::model {

struct GenerateOptions {
  int64_t max_new_tokens = 16;
  std::vector<int64_t> eos_ids;  // generation stops after any of these (it is not returned)
};

// The new tokens for each prompt. InvalidArgument for an empty prompt or a token id outside
// the vocabulary; generation also stops at the model's max_position_embeddings.
Result<std::vector<std::vector<int64_t>>> GenerateGreedy(
    CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
    const GenerateOptions& options);

}  // namespace trainyard::model
