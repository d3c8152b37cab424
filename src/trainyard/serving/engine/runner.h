// ModelRunner: the inference forward pass of a loaded CausalLM, with a per-sequence KV cache
// and several LoRA adapters on the one base, chosen per sequence.
//
// It reads the model's parameters by their Hugging Face names and repeats the training
// forward's operations (model/nn/model.cc: RMSNorm/LayerNorm, RoPE, grouped-query attention
// with the softmax in float32, SwiGLU/GELU), so the training path is untouched while the
// inference path reuses each step's keys and values instead of recomputing the prefix.
// Adapters are PEFT LoRA directories, kept unmerged: y = base(x) + scale · B(A(x)) for the
// rows whose sequence uses the adapter.
//
// Not thread-safe: one thread (the engine loop) runs it. The runner keeps the model alive.
#pragma once

#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "trainyard/common/status.h"
#include "trainyard/model/model_config.h"
#include "trainyard/model/nn/model.h"

namespace trainyard::serving {

// Keys and values of one sequence: per layer [kv_heads, capacity, head_dim] on the model's
// device, of which the first `length` positions are filled. Grows by doubling up to the
// model's context. Only ModelRunner::Forward changes it.
struct KvCache {
  std::vector<torch::Tensor> k, v;
  int64_t length = 0;
};

// One sequence's part of a forward step: new tokens (all sequences of a step bring the same
// number), the cache they extend, and the adapter they run with (-1: the base model).
struct SequenceStep {
  const std::vector<int64_t>* tokens = nullptr;
  KvCache* cache = nullptr;
  int adapter = -1;
};

class ModelRunner {
 public:
  // `model` must be a Llama-family or GPT-2 model from model::LoadPretrained.
  static Result<std::unique_ptr<ModelRunner>> Create(std::shared_ptr<model::CausalLM> model);
  ~ModelRunner();
  ModelRunner(const ModelRunner&) = delete;
  ModelRunner& operator=(const ModelRunner&) = delete;

  // Loads a PEFT LoRA adapter directory (adapter_config.json + adapter_model.safetensors)
  // and returns its index for SequenceStep::adapter. InvalidArgument when it does not fit
  // the base (a module the model lacks, a shape mismatch, DoRA/rsLoRA).
  Result<int> AddAdapter(const std::string& dir);

  // Runs the steps' tokens at positions cache.length().. of each sequence, appends their
  // keys/values to the caches, and returns the logits of each sequence's last new token,
  // [batch, vocab] in float32 on the model's device. The caller keeps every
  // cache.length() + tokens.size() within context().
  torch::Tensor Forward(const std::vector<SequenceStep>& steps);

  const model::ModelConfig& config() const;
  int64_t context() const;  // max_position_embeddings
  torch::Device device() const;

 private:
  struct Impl;
  explicit ModelRunner(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainyard::serving
