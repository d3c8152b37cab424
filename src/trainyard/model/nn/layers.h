// Building blocks shared by the model and LoRA code (internal to trainyard_nn).
//
// Projection is the one linear layer type of our models: Linear ([out, in] weight) or GPT-2's
// Conv1D ([in, out] weight, as Hugging Face stores it), with an optional LoRA branch whose
// parameters are registered as the submodules "lora_A" / "lora_B" (each holding "weight"),
// so the names match PEFT's once its "base_model.model." prefix is stripped.
//
// Not thread-safe (torch::nn::Module).
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace trainyard::model::nn_internal {

class Projection : public torch::nn::Module {
 public:
  // `conv1d`: weight stored [in, out] and applied as x @ W (GPT-2's Conv1D).
  Projection(int64_t in, int64_t out, bool bias, bool conv1d, const torch::TensorOptions& opts);

  torch::Tensor forward(const torch::Tensor& x);

  // Adds a LoRA branch: A [rank, in] uniform(±1/sqrt(in)) from `gen` (PEFT's Kaiming-uniform
  // with a = sqrt(5)), B [out, rank] zero, kept in float32.
  void AddLora(int64_t rank, double scale, double dropout, at::Generator& gen);
  bool has_lora() const { return lora_a_ != nullptr; }
  // W += scale · B·A (transposed for Conv1D); removes the branch.
  void MergeLora();

  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  bool conv1d() const { return conv1d_; }
  torch::Tensor weight;
  torch::Tensor bias;  // undefined when the layer has none

 private:
  int64_t in_;
  int64_t out_;
  bool conv1d_;
  std::shared_ptr<torch::nn::Module> lora_a_;  // holds "weight" [rank, in]
  std::shared_ptr<torch::nn::Module> lora_b_;  // holds "weight" [out, rank]
  torch::Tensor lora_a_weight_;                // the registered parameters themselves
  torch::Tensor lora_b_weight_;
  double lora_scale_ = 0.0;
  double lora_dropout_ = 0.0;
};

}  // namespace trainyard::model::nn_internal
