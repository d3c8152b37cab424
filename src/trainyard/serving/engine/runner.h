// ModelRunner: the inference forward pass of a loaded CausalLM, with a KV cache slot per sequence
// and several LoRA adapters on the one base, chosen per sequence.
//
// It reads the model's parameters by their Hugging Face names and repeats the training
// forward's operations (model/nn/model.cc: RMSNorm/LayerNorm, RoPE, grouped-query attention
// with the softmax in float32, SwiGLU/GELU), so the training path is untouched while the
// inference path reuses each step's keys and values instead of recomputing the prefix.
// Adapters are PEFT LoRA directories, kept unmerged: y = base(x) + scale · B(A(x)) for the
// rows whose sequence uses the adapter.
//
// On a CPU whose libtorch's BLAS is not MKL (Debian's libtorch 1.13 links OpenBLAS), float32
// products of 8 rows or more (prefills, batched decode steps) run through oneDNN, which libtorch
// ships, on a copy of each weight in its layout (the model's memory once more): 2-4x the GFLOP/s
// of that BLAS. With PyPI's libtorch (MKL, decision 0020) they stay on MKL (see runner.cc).
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

// A sequence's row in the runner's preallocated KV buffers; returned to the runner when the
// last KvCache holding it goes away.
struct KvSlot;

// Keys and values of one sequence: a slot of the runner's per-layer buffers
// [slots, kv_heads, capacity, head_dim] on the model's device, of which the first `length`
// positions are filled. Taken at the sequence's first forward step. Only ModelRunner::Forward
// changes it.
struct KvCache {
  std::shared_ptr<KvSlot> slot;
  int64_t length = 0;
};

// The cache's slot in the runner's buffers, -1 before its first step. A batch whose slots are
// consecutive, in order, attends over a view of the buffers instead of a gather.
int64_t SlotIndex(const KvCache& cache);

// One sequence's part of a forward step: new tokens (at least one; sequences of a step may
// bring different numbers), the cache they extend, and the adapter they run with (-1: the
// base model).
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
  // cache.length() + tokens.size() within context(). All sequences run as one batch: shorter
  // token lists are padded (the padding's keys/values land past the cache's length and are
  // never attended to), attention is one masked matmul over the slots' buffers, and each
  // adapter's LoRA update is one matmul over the rows that use it.
  torch::Tensor Forward(const std::vector<SequenceStep>& steps);

  // Gives `to` (a cache not used yet) a slot holding a copy of `from`'s keys and values, so a
  // sequence can continue from another's prefill (n completions of one prompt).
  void ForkCache(const KvCache& from, KvCache* to);

  const model::ModelConfig& config() const;
  int64_t context() const;  // max_position_embeddings
  torch::Device device() const;

 private:
  struct Impl;
  explicit ModelRunner(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainyard::serving
