#include "trainyard/model/nn/generate.h"

#include <algorithm>

namespace trainyard::model {

Result<std::vector<std::vector<int64_t>>> GenerateGreedy(
    CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
    const GenerateOptions& options) {
  const ModelConfig& config = model.config();
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (prompts[i].empty()) {
      return Status::InvalidArgument("prompt " + std::to_string(i) + " is empty");
    }
    for (int64_t id : prompts[i]) {
      if (id < 0 || id >= config.vocab_size) {
        return Status::InvalidArgument("prompt " + std::to_string(i) + " has token id " +
                                       std::to_string(id) + " outside the vocabulary of " +
                                       std::to_string(config.vocab_size));
      }
    }
  }
  std::vector<std::vector<int64_t>> out(prompts.size());
  if (prompts.empty()) return out;

  bool was_training = model.is_training();
  model.eval();
  torch::NoGradGuard no_grad;
  torch::Device device = model.parameters().front().device();
  std::vector<std::vector<int64_t>> seqs = prompts;
  std::vector<bool> done(prompts.size(), false);
  for (int64_t step = 0; step < options.max_new_tokens; ++step) {
    size_t longest = 0;
    for (const auto& s : seqs) longest = std::max(longest, s.size());
    if (static_cast<int64_t>(longest) >= config.max_position_embeddings) break;
    int64_t b = static_cast<int64_t>(seqs.size()), t = static_cast<int64_t>(longest);
    std::vector<int64_t> ids(b * t, 0), pos(b * t, 0), seg(b * t, 0);
    for (int64_t r = 0; r < b; ++r) {
      int64_t pad = t - static_cast<int64_t>(seqs[r].size());
      for (int64_t j = pad; j < t; ++j) {
        ids[r * t + j] = seqs[r][j - pad];
        pos[r * t + j] = j - pad;
        seg[r * t + j] = 1;
      }
    }
    auto opts = torch::TensorOptions().dtype(torch::kInt64);
    auto as_tensor = [&](const std::vector<int64_t>& v) {
      return torch::from_blob(const_cast<int64_t*>(v.data()), {b, t}, opts).to(device);
    };
    torch::Tensor logits = model.Forward(as_tensor(ids), as_tensor(pos), as_tensor(seg));
    torch::Tensor next = logits.select(1, t - 1).argmax(-1).to(torch::kCPU);
    bool all_done = true;
    for (int64_t r = 0; r < b; ++r) {
      if (done[r]) continue;
      int64_t tok = next[r].item<int64_t>();
      if (std::find(options.eos_ids.begin(), options.eos_ids.end(), tok) != options.eos_ids.end()) {
        done[r] = true;
        continue;
      }
      out[r].push_back(tok);
      seqs[r].push_back(tok);
      all_done = false;
    }
    if (all_done) break;
  }
  model.train(was_training);
  return out;
}

}  // namespace trainyard::model
