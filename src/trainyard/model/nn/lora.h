// LoRA: low-rank adapters on a CausalLM's linear layers (Hu et al. 2021), in PEFT's layout
// so adapters round-trip with Hugging Face PEFT.
//
// ApplyLora freezes every base parameter and wraps each linear layer whose module name ends
// with one of `target_modules` (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj,
// down_proj for Llama; c_attn, c_proj, c_fc for GPT-2): y = base(x) + (alpha / rank) ·
// B(A(dropout(x))), A initialised as PEFT does (Kaiming-uniform, a = sqrt(5)), B zero, so a
// fresh adapter leaves the model's output unchanged.
//
// Adapter tensor names follow PEFT: "base_model.model.<module>.lora_A.weight" [rank, in] and
// "...lora_B.weight" [out, rank]. Not thread-safe (see CausalLM).
#pragma once

#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "trainyard/common/status.h"
#include "trainyard/model/nn/model.h"

namespace trainyard::model {

struct LoraConfig {
  int64_t rank = 8;
  double alpha = 16.0;
  double dropout = 0.0;
  std::vector<std::string> target_modules = {"q_proj", "v_proj"};
};

// Returns the number of wrapped layers; InvalidArgument when no module matches.
Result<int> ApplyLora(CausalLM& model, const LoraConfig& config, uint64_t seed);
// The adapters' parameters in PEFT naming (what a LoRA checkpoint holds).
std::map<std::string, torch::Tensor> LoraStateDict(CausalLM& model);
// Loads adapter tensors in PEFT naming (from LoraStateDict or adapter_model.safetensors).
Status LoadLoraStateDict(CausalLM& model, const std::map<std::string, torch::Tensor>& tensors);
// Folds every adapter into its base weight (W += scale · B·A) and removes the adapters.
Status MergeLora(CausalLM& model);
// Writes adapter_config.json + adapter_model.safetensors that peft.PeftModel.from_pretrained
// loads onto the base model. `base_model_name_or_path` goes into adapter_config.json.
Status SavePeftAdapter(CausalLM& model, const LoraConfig& config, const std::string& dir,
                       const std::string& base_model_name_or_path);
// Reads a PEFT adapter_config.json (peft_type LORA; DoRA and rsLoRA are rejected).
Result<LoraConfig> ReadPeftAdapterConfig(const std::string& dir);
// ApplyLora with the adapter's config, then loads adapter_model.safetensors: a model ready to
// continue training the adapter or to run with it. Returns the adapter's config.
Result<LoraConfig> LoadPeftAdapter(CausalLM& model, const std::string& dir, uint64_t seed = 0);

}  // namespace trainyard::model
