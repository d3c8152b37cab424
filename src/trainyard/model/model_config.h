// ModelConfig: a causal language model's architecture, read from (and written back to) a
// Hugging Face `config.json`. Families: "llama" (model_type llama, mistral, qwen2 where
// they match: RMSNorm, RoPE with optional llama3 / linear scaling, SwiGLU, grouped-query
// attention, optional q/k/v bias as in Qwen2) and "gpt2" (learned positions, LayerNorm,
// GELU-tanh MLP, fused c_attn in Conv1D layout).
//
// Parsing never crashes on hostile input: wrong types, missing required fields, absurd
// sizes (e.g. hidden_size not divisible by num_attention_heads, more than 1e6 layers) are
// InvalidArgument naming the field. Plain value type; thread-compatible.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "trainyard/common/status.h"

namespace trainyard::model {

enum class ModelFamily { kLlama, kGpt2 };

struct RopeScaling {
  std::string type;  // "" (none), "llama3", "linear"
  double factor = 1.0;
  double low_freq_factor = 1.0;                  // llama3
  double high_freq_factor = 4.0;                 // llama3
  int64_t original_max_position_embeddings = 0;  // llama3
};

struct ModelConfig {
  ModelFamily family = ModelFamily::kLlama;
  std::string model_type = "llama";  // as in config.json: llama, mistral, qwen2, gpt2
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;                 // gpt2: n_embd
  int64_t intermediate_size = 0;           // gpt2: n_inner or 4 * n_embd
  int64_t num_hidden_layers = 0;           // gpt2: n_layer
  int64_t num_attention_heads = 0;         // gpt2: n_head
  int64_t num_key_value_heads = 0;         // = num_attention_heads when absent
  int64_t head_dim = 0;                    // = hidden_size / num_attention_heads when absent
  int64_t max_position_embeddings = 2048;  // gpt2: n_positions
  double norm_eps = 1e-6;                  // rms_norm_eps, or layer_norm_epsilon for gpt2
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool attention_bias = false;  // llama attention_bias; qwen2 always has q/k/v bias
  bool mlp_bias = false;
  bool tie_word_embeddings = false;  // gpt2 always ties
  int64_t sliding_window = 0;        // mistral: attend to this many latest tokens; 0: all
  std::string hidden_act = "silu";   // silu (llama) or gelu_new (gpt2)
  double initializer_range = 0.02;
  std::optional<int64_t> bos_token_id;
  std::optional<int64_t> eos_token_id;  // the first when config.json has a list
  std::vector<int64_t> eos_token_ids;   // all of them (Llama 3 lists several); stop ids
  std::string torch_dtype = "float32";

  // Parses config.json text; `source` names it in errors.
  static Result<ModelConfig> FromJson(std::string_view json_text,
                                      std::string_view source = "config.json");
  static Result<ModelConfig> FromFile(const std::string& path);
  // config.json text that transformers' AutoConfig reads back as this architecture.
  std::string ToJson() const;
};

}  // namespace trainyard::model
