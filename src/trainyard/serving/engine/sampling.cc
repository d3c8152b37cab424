#include "trainyard/serving/engine/sampling.h"

#include <limits>

namespace trainyard::serving {

int32_t SampleToken(const torch::Tensor& logits, const SamplingParams& params,
                    at::Generator& generator) {
  torch::NoGradGuard no_grad;
  if (params.temperature == 0.0 || params.top_k == 1) {
    return static_cast<int32_t>(logits.argmax(-1).item<int64_t>());
  }
  const float neg_inf = -std::numeric_limits<float>::infinity();
  torch::Tensor x = logits.to(torch::kCPU, torch::kFloat32) / params.temperature;
  int64_t vocab = x.size(0);
  if (params.top_k > 0 && params.top_k < vocab) {
    torch::Tensor kth = std::get<0>(x.topk(params.top_k)).select(0, params.top_k - 1);
    x = x.masked_fill(x < kth, neg_inf);
  }
  if (params.top_p < 1.0) {
    auto [sorted, order] = x.sort(/*dim=*/0, /*descending=*/true);
    torch::Tensor probs = torch::softmax(sorted, 0);
    // A token stays while the tokens before it hold less than top_p (the first always does).
    torch::Tensor drop = (probs.cumsum(0) - probs) > params.top_p;
    sorted = sorted.masked_fill(drop, neg_inf);
    x = torch::full_like(x, neg_inf).scatter(0, order, sorted);
  }
  torch::Tensor probs = torch::softmax(x, 0);
  return static_cast<int32_t>(torch::multinomial(probs, 1, false, generator).item<int64_t>());
}

}  // namespace trainyard::serving
