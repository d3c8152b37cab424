// CausalLM: decoder-only transformer language models in libtorch (Llama family and GPT-2),
// with parameter names equal to Hugging Face transformers' state_dict keys, so loading and
// saving `*.safetensors` is a name-for-name copy (GPT-2's Conv1D weights keep HF's [in, out]
// layout).
//
// Forward takes token ids [B, T] and optional position ids [B, T] (default 0..T-1) and
// segment ids [B, T] (packed sequences: a token attends only to earlier tokens of its own
// segment; default one segment per row) and returns logits [B, T, vocab] in float32.
//
// Not thread-safe: one training or inference thread at a time per model, like any
// torch::nn::Module.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>

#include "trainyard/common/status.h"
#include "trainyard/model/model_config.h"

namespace trainyard::model {

class CausalLM : public torch::nn::Module {
 public:
  virtual torch::Tensor Forward(const torch::Tensor& input_ids,
                                const torch::Tensor& position_ids = {},
                                const torch::Tensor& segment_ids = {}) = 0;
  virtual const ModelConfig& config() const = 0;
  // Recompute each decoder layer's activations in backward instead of keeping them.
  virtual void SetActivationCheckpointing(bool on) = 0;
};

// A model with freshly initialised weights (normal(0, initializer_range), as transformers
// initialises them), deterministic for a given seed.
Result<std::shared_ptr<CausalLM>> CreateModel(const ModelConfig& config, uint64_t seed);

// Rotary inverse frequencies as transformers computes them (float32; llama3 and linear
// scaling): what the models' attention uses, and the inference engine's (serving/engine).
torch::Tensor RopeInverseFrequencies(const ModelConfig& c);

// Loads a Hugging Face model directory: config.json and model.safetensors or the shards of
// model.safetensors.index.json. Weights are converted to `dtype` and moved to `device`.
// A missing or mis-shaped tensor is InvalidArgument naming it.
Result<std::shared_ptr<CausalLM>> LoadPretrained(const std::string& dir, torch::Device device,
                                                 torch::Dtype dtype = torch::kFloat32);

// Writes `model` as a Hugging Face model directory (config.json + model.safetensors) that
// transformers' AutoModelForCausalLM.from_pretrained loads. LoRA layers must be merged first
// (MergeLora). Copies tokenizer.json from `tokenizer_json_path` when it is not empty.
Status SavePretrained(CausalLM& model, const std::string& dir,
                      const std::string& tokenizer_json_path = "");

// Loads named tensors (from safetensors) into the model's parameters/buffers of the same
// name; tensors absent from the model are an error unless `allow_unexpected`.
Status LoadStateDict(CausalLM& model, const std::map<std::string, torch::Tensor>& tensors,
                     bool allow_missing, bool allow_unexpected);

}  // namespace trainyard::model
