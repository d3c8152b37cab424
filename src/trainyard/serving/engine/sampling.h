// Choosing the next token from a row of logits: greedy (temperature 0), or temperature,
// top-k and top-p (nucleus) filtering, then a draw from the request's own generator, so the
// same seed gives the same tokens. Pure function of its inputs; thread-compatible.
#pragma once

#include <ATen/core/Generator.h>
#include <torch/torch.h>

#include "trainyard/serving/engine/engine.h"

namespace trainyard::serving {

// `logits`: [vocab] float32 (on any device). Greedy ignores `generator`.
int32_t SampleToken(const torch::Tensor& logits, const SamplingParams& params,
                    at::Generator& generator);

}  // namespace trainyard::serving
