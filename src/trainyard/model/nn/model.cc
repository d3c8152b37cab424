// Llama-family and GPT-2 causal LMs, written to match Hugging Face transformers 4.44's eager
// implementations operation for operation (so float32 logits agree to ~1e-6), plus loading
// and saving in the Hugging Face layout.
#include "trainyard/model/nn/model.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>

#include "trainyard/model/nn/device.h"
#include "trainyard/model/nn/layers.h"
#include "trainyard/model/safetensors.h"

namespace trainyard::model {

namespace nn_internal {

Projection::Projection(int64_t in, int64_t out, bool with_bias, bool conv1d,
                       const torch::TensorOptions& opts)
    : in_(in), out_(out), conv1d_(conv1d) {
  weight = register_parameter(
      "weight", conv1d ? torch::empty({in, out}, opts) : torch::empty({out, in}, opts));
  if (with_bias) bias = register_parameter("bias", torch::zeros({out}, opts));
}

torch::Tensor Projection::forward(const torch::Tensor& x) {
  torch::Tensor y;
  if (conv1d_) {
    y = bias.defined() ? torch::addmm(bias, x.reshape({-1, in_}), weight)
                       : torch::mm(x.reshape({-1, in_}), weight);
    auto sizes = x.sizes().vec();
    sizes.back() = out_;
    y = y.view(sizes);
  } else {
    y = torch::linear(x, weight, bias);
  }
  if (!lora_a_) return y;
  torch::Tensor in = x.to(lora_a_weight_.scalar_type());
  if (lora_dropout_ > 0.0 && is_training()) in = torch::dropout(in, lora_dropout_, true);
  torch::Tensor delta =
      torch::linear(torch::linear(in, lora_a_weight_), lora_b_weight_) * lora_scale_;
  return y + delta.to(y.scalar_type());
}

void Projection::AddLora(int64_t rank, double scale, double dropout, at::Generator& gen) {
  TORCH_CHECK(!lora_a_, "this layer already has a LoRA adapter");
  double bound = 1.0 / std::sqrt(static_cast<double>(in_));
  auto f32 = torch::TensorOptions().dtype(torch::kFloat32);
  torch::Tensor a = torch::empty({rank, in_}, f32).uniform_(-bound, bound, gen);
  lora_a_ = std::make_shared<torch::nn::Module>("LoraA");
  lora_b_ = std::make_shared<torch::nn::Module>("LoraB");
  lora_a_weight_ = lora_a_->register_parameter("weight", a.to(weight.device()));
  lora_b_weight_ = lora_b_->register_parameter(
      "weight", torch::zeros({out_, rank}, f32.device(weight.device())));
  register_module("lora_A", lora_a_);
  register_module("lora_B", lora_b_);
  lora_scale_ = scale;
  lora_dropout_ = dropout;
}

void Projection::MergeLora() {
  if (!lora_a_) return;
  torch::NoGradGuard no_grad;
  torch::Tensor delta = torch::mm(lora_b_weight_, lora_a_weight_) * lora_scale_;  // [out, in]
  if (conv1d_) delta = delta.t();
  weight.add_(delta.to(weight.scalar_type()));
  unregister_module("lora_A");
  unregister_module("lora_B");
  lora_a_.reset();
  lora_b_.reset();
  lora_a_weight_ = torch::Tensor();
  lora_b_weight_ = torch::Tensor();
}

}  // namespace nn_internal

// Rotary frequencies as transformers computes them (float32), with llama3 / linear scaling.
torch::Tensor RopeInverseFrequencies(const ModelConfig& c) {
  auto f32 = torch::TensorOptions().dtype(torch::kFloat32);
  torch::Tensor exponents =
      torch::arange(0, c.head_dim, 2, torch::TensorOptions().dtype(torch::kInt64))
          .to(torch::kFloat32) /
      static_cast<double>(c.head_dim);
  torch::Tensor inv_freq = 1.0 / torch::pow(torch::scalar_tensor(c.rope_theta, f32), exponents);
  const RopeScaling& rs = c.rope_scaling;
  if (rs.type == "linear") return inv_freq / rs.factor;
  if (rs.type != "llama3") return inv_freq;
  double old_len = static_cast<double>(rs.original_max_position_embeddings);
  double low_freq_wavelen = old_len / rs.low_freq_factor;
  double high_freq_wavelen = old_len / rs.high_freq_factor;
  torch::Tensor wavelen = 2.0 * M_PI / inv_freq;
  torch::Tensor scaled = torch::where(wavelen > low_freq_wavelen, inv_freq / rs.factor, inv_freq);
  torch::Tensor smooth =
      (old_len / wavelen - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor);
  torch::Tensor smoothed = (1 - smooth) * scaled / rs.factor + smooth * scaled;
  torch::Tensor medium =
      (wavelen < high_freq_wavelen).logical_not() * (wavelen > low_freq_wavelen).logical_not();
  return torch::where(medium, smoothed, scaled);
}

namespace {

using nn_internal::Projection;

class RmsNorm : public torch::nn::Module {
 public:
  RmsNorm(int64_t dim, double eps, const torch::TensorOptions& opts) : eps_(eps) {
    weight = register_parameter("weight", torch::ones({dim}, opts));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor xf = x.to(torch::kFloat32);
    xf = xf * torch::rsqrt(xf.pow(2).mean(-1, true) + eps_);
    return weight * xf.to(x.scalar_type());
  }
  torch::Tensor weight;

 private:
  double eps_;
};

class LayerNorm : public torch::nn::Module {
 public:
  LayerNorm(int64_t dim, double eps, const torch::TensorOptions& opts) : dim_(dim), eps_(eps) {
    weight = register_parameter("weight", torch::ones({dim}, opts));
    bias = register_parameter("bias", torch::zeros({dim}, opts));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return torch::layer_norm(x, {dim_}, weight, bias, eps_);
  }
  torch::Tensor weight, bias;

 private:
  int64_t dim_;
  double eps_;
};

class Embedding : public torch::nn::Module {
 public:
  Embedding(int64_t n, int64_t dim, const torch::TensorOptions& opts) {
    weight = register_parameter("weight", torch::empty({n, dim}, opts));
  }
  torch::Tensor forward(const torch::Tensor& ids) { return torch::embedding(weight, ids); }
  torch::Tensor weight;
};

// Scaled dot-product attention with a boolean mask ([B, 1, T, T], true = may attend),
// softmax in float32 as transformers' eager attention does. q [B, H, T, D], k/v [B, KV, T, D].
torch::Tensor Attend(const torch::Tensor& q, torch::Tensor k, torch::Tensor v,
                     const torch::Tensor& allowed) {
  int64_t heads = q.size(1);
  int64_t kv_heads = k.size(1);
  if (kv_heads != heads) {  // grouped-query attention: query head h reads kv head h / groups
    int64_t groups = heads / kv_heads;
    auto expand = [&](const torch::Tensor& t) {
      return t.unsqueeze(2)
          .expand({t.size(0), kv_heads, groups, t.size(2), t.size(3)})
          .reshape({t.size(0), heads, t.size(2), t.size(3)});
    };
    k = expand(k);
    v = expand(v);
  }
  torch::Tensor scores =
      torch::matmul(q, k.transpose(2, 3)) / std::sqrt(static_cast<double>(q.size(-1)));
  scores = scores.to(torch::kFloat32)
               .masked_fill(allowed.logical_not(), -std::numeric_limits<float>::infinity());
  torch::Tensor probs = torch::softmax(scores, -1).to(v.scalar_type());
  torch::Tensor out = torch::matmul(probs, v);  // [B, H, T, D]
  return out.transpose(1, 2).reshape({q.size(0), q.size(2), heads * q.size(3)});
}

torch::Tensor RotateHalf(const torch::Tensor& x) {
  int64_t half = x.size(-1) / 2;
  return torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

// One transformer block. `cos`/`sin` are [B, 1, T, D] (empty for GPT-2).
class DecoderLayer : public torch::nn::Module {
 public:
  virtual torch::Tensor forward(const torch::Tensor& h, const torch::Tensor& cos,
                                const torch::Tensor& sin, const torch::Tensor& allowed) = 0;
};

// --- Llama family ---------------------------------------------------------------------

class LlamaAttention : public torch::nn::Module {
 public:
  LlamaAttention(const ModelConfig& c, const torch::TensorOptions& opts)
      : heads_(c.num_attention_heads), kv_heads_(c.num_key_value_heads), dim_(c.head_dim) {
    int64_t hidden = c.hidden_size;
    bool qkv_bias = c.attention_bias;
    bool o_bias = c.attention_bias && c.model_type != "qwen2";
    q_proj = Reg("q_proj", hidden, heads_ * dim_, qkv_bias, opts);
    k_proj = Reg("k_proj", hidden, kv_heads_ * dim_, qkv_bias, opts);
    v_proj = Reg("v_proj", hidden, kv_heads_ * dim_, qkv_bias, opts);
    o_proj = Reg("o_proj", heads_ * dim_, hidden, o_bias, opts);
  }
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        const torch::Tensor& allowed) {
    int64_t b = x.size(0), t = x.size(1);
    torch::Tensor q = q_proj->forward(x).view({b, t, heads_, dim_}).transpose(1, 2);
    torch::Tensor k = k_proj->forward(x).view({b, t, kv_heads_, dim_}).transpose(1, 2);
    torch::Tensor v = v_proj->forward(x).view({b, t, kv_heads_, dim_}).transpose(1, 2);
    torch::Tensor c = cos.to(q.scalar_type()), s = sin.to(q.scalar_type());
    q = q * c + RotateHalf(q) * s;
    k = k * c + RotateHalf(k) * s;
    return o_proj->forward(Attend(q, k, v, allowed));
  }
  std::shared_ptr<Projection> q_proj, k_proj, v_proj, o_proj;

 private:
  std::shared_ptr<Projection> Reg(const char* name, int64_t in, int64_t out, bool bias,
                                  const torch::TensorOptions& opts) {
    return register_module(name, std::make_shared<Projection>(in, out, bias, false, opts));
  }
  int64_t heads_, kv_heads_, dim_;
};

class LlamaMlp : public torch::nn::Module {
 public:
  LlamaMlp(const ModelConfig& c, const torch::TensorOptions& opts) {
    int64_t h = c.hidden_size, i = c.intermediate_size;
    gate_proj =
        register_module("gate_proj", std::make_shared<Projection>(h, i, c.mlp_bias, false, opts));
    up_proj =
        register_module("up_proj", std::make_shared<Projection>(h, i, c.mlp_bias, false, opts));
    down_proj =
        register_module("down_proj", std::make_shared<Projection>(i, h, c.mlp_bias, false, opts));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return down_proj->forward(torch::silu(gate_proj->forward(x)) * up_proj->forward(x));
  }
  std::shared_ptr<Projection> gate_proj, up_proj, down_proj;
};

class LlamaLayer : public DecoderLayer {
 public:
  LlamaLayer(const ModelConfig& c, const torch::TensorOptions& opts) {
    self_attn = register_module("self_attn", std::make_shared<LlamaAttention>(c, opts));
    mlp = register_module("mlp", std::make_shared<LlamaMlp>(c, opts));
    input_layernorm = register_module("input_layernorm",
                                      std::make_shared<RmsNorm>(c.hidden_size, c.norm_eps, opts));
    post_attention_layernorm = register_module(
        "post_attention_layernorm", std::make_shared<RmsNorm>(c.hidden_size, c.norm_eps, opts));
  }
  torch::Tensor forward(const torch::Tensor& h, const torch::Tensor& cos, const torch::Tensor& sin,
                        const torch::Tensor& allowed) override {
    torch::Tensor x = h + self_attn->forward(input_layernorm->forward(h), cos, sin, allowed);
    return x + mlp->forward(post_attention_layernorm->forward(x));
  }
  std::shared_ptr<LlamaAttention> self_attn;
  std::shared_ptr<LlamaMlp> mlp;
  std::shared_ptr<RmsNorm> input_layernorm, post_attention_layernorm;
};

// --- Activation checkpointing ---------------------------------------------------------

// Runs a decoder layer without keeping its activations and recomputes them in backward. The
// layer's trainable parameters are inputs of the node, so their gradients flow through
// autograd (and its hooks) even when the hidden state itself needs no gradient (LoRA on a
// frozen embedding). RNG and autocast state are replayed so dropout masks and dtypes match.
class CheckpointedLayer : public torch::autograd::Function<CheckpointedLayer> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                DecoderLayer* layer, const torch::Tensor& h,
                                                const torch::Tensor& cos, const torch::Tensor& sin,
                                                const torch::Tensor& allowed,
                                                at::TensorList params) {
    // The layer is owned by the model, which outlives any graph built from its forward.
    ctx->saved_data["layer"] = reinterpret_cast<int64_t>(layer);
    ctx->saved_data["cpu_rng"] = at::detail::getDefaultCPUGenerator().get_state();
    if (h.is_cuda()) {
      ctx->saved_data["cuda_rng"] = at::globalContext().defaultGenerator(h.device()).get_state();
    }
    ctx->saved_data["autocast"] = CudaAutocastEnabled();
    ctx->saved_data["autocast_dtype"] = static_cast<int64_t>(CudaAutocastDtype());
    ctx->save_for_backward({h, cos, sin, allowed});
    ctx->saved_data["num_params"] = static_cast<int64_t>(params.size());
    std::vector<torch::Tensor> kept(params.begin(), params.end());
    ctx->saved_data["params"] = c10::List<torch::Tensor>(kept);
    return {layer->forward(h, cos, sin, allowed)};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    auto* layer = reinterpret_cast<DecoderLayer*>(ctx->saved_data["layer"].toInt());
    auto saved = ctx->get_saved_variables();
    std::vector<torch::Tensor> params = ctx->saved_data["params"].toTensorVector();

    at::Generator cpu_gen = at::detail::getDefaultCPUGenerator();  // a handle: shares the state
    torch::Tensor cpu_now = cpu_gen.get_state();
    cpu_gen.set_state(ctx->saved_data["cpu_rng"].toTensor());
    torch::Tensor cuda_now;
    if (ctx->saved_data.count("cuda_rng")) {
      at::Generator gen = at::globalContext().defaultGenerator(saved[0].device());
      cuda_now = gen.get_state();
      gen.set_state(ctx->saved_data["cuda_rng"].toTensor());
    }
    bool autocast_was = CudaAutocastEnabled();
    at::ScalarType autocast_dtype_was = CudaAutocastDtype();
    SetCudaAutocast(ctx->saved_data["autocast"].toBool(),
                    static_cast<at::ScalarType>(ctx->saved_data["autocast_dtype"].toInt()));

    torch::Tensor h = saved[0].detach().requires_grad_(true);
    std::vector<torch::Tensor> inputs = {h};
    inputs.insert(inputs.end(), params.begin(), params.end());
    std::vector<torch::Tensor> grads;
    {
      torch::AutoGradMode enable(true);
      torch::Tensor out = layer->forward(h, saved[1], saved[2], saved[3]);
      grads = torch::autograd::grad({out}, inputs, {grad_out[0]}, /*retain_graph=*/false,
                                    /*create_graph=*/false, /*allow_unused=*/true);
    }

    SetCudaAutocast(autocast_was, autocast_dtype_was);
    cpu_gen.set_state(cpu_now);
    if (cuda_now.defined()) {
      at::Generator gen = at::globalContext().defaultGenerator(saved[0].device());
      gen.set_state(cuda_now);
    }

    // One gradient per forward argument: layer, h, cos, sin, allowed, then each parameter.
    torch::autograd::variable_list result = {torch::Tensor(), grads[0], torch::Tensor(),
                                             torch::Tensor(), torch::Tensor()};
    result.insert(result.end(), grads.begin() + 1, grads.end());
    return result;
  }
};

// --- Shared model body ------------------------------------------------------------------

class DecoderLM : public CausalLM {
 public:
  explicit DecoderLM(ModelConfig config) : config_(std::move(config)) {}

  torch::Tensor Forward(const torch::Tensor& input_ids, const torch::Tensor& position_ids,
                        const torch::Tensor& segment_ids) override {
    TORCH_CHECK(input_ids.dim() == 2, "input_ids must be [batch, time]");
    int64_t b = input_ids.size(0), t = input_ids.size(1);
    auto long_opts = torch::TensorOptions().dtype(torch::kInt64).device(input_ids.device());
    torch::Tensor pos = position_ids.defined()
                            ? position_ids.to(long_opts)
                            : torch::arange(t, long_opts).unsqueeze(0).expand({b, t});
    TORCH_CHECK(pos.sizes() == input_ids.sizes(), "position_ids must have input_ids' shape");
    torch::Tensor allowed =
        torch::ones({t, t}, long_opts.dtype(torch::kBool)).tril().unsqueeze(0);  // [1, T, T]
    if (segment_ids.defined()) {
      TORCH_CHECK(segment_ids.sizes() == input_ids.sizes(),
                  "segment_ids must have input_ids' shape");
      torch::Tensor seg = segment_ids.to(long_opts);
      allowed = allowed.logical_and(seg.unsqueeze(2) == seg.unsqueeze(1));
    }
    if (config_.sliding_window > 0) {
      torch::Tensor i = torch::arange(t, long_opts);
      allowed = allowed.logical_and((i.unsqueeze(1) - i.unsqueeze(0)) < config_.sliding_window);
    }
    allowed = allowed.unsqueeze(1);  // [B or 1, 1, T, T]

    torch::Tensor h = Embed(input_ids, pos);
    torch::Tensor cos, sin;
    Rope(pos, cos, sin);
    bool checkpoint = checkpointing_ && is_training() && torch::GradMode::is_enabled();
    for (const auto& layer : layers_) {
      if (checkpoint) {
        std::vector<torch::Tensor> trainable;
        for (const auto& p : layer->parameters()) {
          if (p.requires_grad()) trainable.push_back(p);
        }
        h = CheckpointedLayer::apply(layer.get(), h, cos, sin, allowed,
                                     at::TensorList(trainable))[0];
      } else {
        h = layer->forward(h, cos, sin, allowed);
      }
    }
    return Head(h).to(torch::kFloat32);
  }

  const ModelConfig& config() const override { return config_; }
  void SetActivationCheckpointing(bool on) override { checkpointing_ = on; }

 protected:
  virtual torch::Tensor Embed(const torch::Tensor& ids, const torch::Tensor& pos) = 0;
  virtual void Rope(const torch::Tensor& pos, torch::Tensor& cos, torch::Tensor& sin) = 0;
  virtual torch::Tensor Head(const torch::Tensor& h) = 0;

  ModelConfig config_;
  std::vector<std::shared_ptr<DecoderLayer>> layers_;
  bool checkpointing_ = false;
};

class LlamaForCausalLM : public DecoderLM {
 public:
  LlamaForCausalLM(const ModelConfig& c, const torch::TensorOptions& opts)
      : DecoderLM(c), inv_freq_(RopeInverseFrequencies(c)) {
    auto model = register_module("model", std::make_shared<torch::nn::Module>("LlamaModel"));
    embed_tokens_ = model->register_module(
        "embed_tokens", std::make_shared<Embedding>(c.vocab_size, c.hidden_size, opts));
    torch::nn::ModuleList layers;
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
      auto layer = std::make_shared<LlamaLayer>(c, opts);
      layers->push_back(layer);
      layers_.push_back(layer);
    }
    model->register_module("layers", layers.ptr());
    norm_ =
        model->register_module("norm", std::make_shared<RmsNorm>(c.hidden_size, c.norm_eps, opts));
    if (!c.tie_word_embeddings) {
      lm_head_ = register_module(
          "lm_head", std::make_shared<Projection>(c.hidden_size, c.vocab_size, false, false, opts));
    }
  }

 protected:
  torch::Tensor Embed(const torch::Tensor& ids, const torch::Tensor&) override {
    return embed_tokens_->forward(ids);
  }
  void Rope(const torch::Tensor& pos, torch::Tensor& cos, torch::Tensor& sin) override {
    torch::Tensor freqs = pos.to(torch::kFloat32).unsqueeze(-1) *
                          inv_freq_.to(pos.device()).unsqueeze(0).unsqueeze(0);  // [B, T, D/2]
    torch::Tensor emb = torch::cat({freqs, freqs}, -1).unsqueeze(1);             // [B, 1, T, D]
    cos = emb.cos();
    sin = emb.sin();
  }
  torch::Tensor Head(const torch::Tensor& h) override {
    torch::Tensor x = norm_->forward(h);
    return lm_head_ ? lm_head_->forward(x) : torch::linear(x, embed_tokens_->weight);
  }

 private:
  torch::Tensor inv_freq_;  // not a parameter: derived from the config, as in transformers
  std::shared_ptr<Embedding> embed_tokens_;
  std::shared_ptr<RmsNorm> norm_;
  std::shared_ptr<Projection> lm_head_;
};

// --- GPT-2 ----------------------------------------------------------------------------

class Gpt2Attention : public torch::nn::Module {
 public:
  Gpt2Attention(const ModelConfig& c, const torch::TensorOptions& opts)
      : heads_(c.num_attention_heads), dim_(c.head_dim), hidden_(c.hidden_size) {
    c_attn = register_module("c_attn",
                             std::make_shared<Projection>(hidden_, 3 * hidden_, true, true, opts));
    c_proj =
        register_module("c_proj", std::make_shared<Projection>(hidden_, hidden_, true, true, opts));
  }
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& allowed) {
    int64_t b = x.size(0), t = x.size(1);
    auto qkv = c_attn->forward(x).split(hidden_, 2);
    auto heads = [&](const torch::Tensor& y) {
      return y.view({b, t, heads_, dim_}).transpose(1, 2);
    };
    return c_proj->forward(Attend(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]), allowed));
  }
  std::shared_ptr<Projection> c_attn, c_proj;

 private:
  int64_t heads_, dim_, hidden_;
};

class Gpt2Mlp : public torch::nn::Module {
 public:
  Gpt2Mlp(const ModelConfig& c, const torch::TensorOptions& opts) {
    c_fc = register_module(
        "c_fc", std::make_shared<Projection>(c.hidden_size, c.intermediate_size, true, true, opts));
    c_proj = register_module("c_proj", std::make_shared<Projection>(
                                           c.intermediate_size, c.hidden_size, true, true, opts));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return c_proj->forward(torch::gelu(c_fc->forward(x), "tanh"));
  }
  std::shared_ptr<Projection> c_fc, c_proj;
};

class Gpt2Block : public DecoderLayer {
 public:
  Gpt2Block(const ModelConfig& c, const torch::TensorOptions& opts) {
    ln_1 = register_module("ln_1", std::make_shared<LayerNorm>(c.hidden_size, c.norm_eps, opts));
    attn = register_module("attn", std::make_shared<Gpt2Attention>(c, opts));
    ln_2 = register_module("ln_2", std::make_shared<LayerNorm>(c.hidden_size, c.norm_eps, opts));
    mlp = register_module("mlp", std::make_shared<Gpt2Mlp>(c, opts));
  }
  torch::Tensor forward(const torch::Tensor& h, const torch::Tensor&, const torch::Tensor&,
                        const torch::Tensor& allowed) override {
    torch::Tensor x = h + attn->forward(ln_1->forward(h), allowed);
    return x + mlp->forward(ln_2->forward(x));
  }
  std::shared_ptr<LayerNorm> ln_1, ln_2;
  std::shared_ptr<Gpt2Attention> attn;
  std::shared_ptr<Gpt2Mlp> mlp;
};

class Gpt2LMHeadModel : public DecoderLM {
 public:
  Gpt2LMHeadModel(const ModelConfig& c, const torch::TensorOptions& opts) : DecoderLM(c) {
    auto tr = register_module("transformer", std::make_shared<torch::nn::Module>("GPT2Model"));
    wte_ =
        tr->register_module("wte", std::make_shared<Embedding>(c.vocab_size, c.hidden_size, opts));
    wpe_ = tr->register_module(
        "wpe", std::make_shared<Embedding>(c.max_position_embeddings, c.hidden_size, opts));
    torch::nn::ModuleList h;
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
      auto block = std::make_shared<Gpt2Block>(c, opts);
      h->push_back(block);
      layers_.push_back(block);
    }
    tr->register_module("h", h.ptr());
    ln_f_ =
        tr->register_module("ln_f", std::make_shared<LayerNorm>(c.hidden_size, c.norm_eps, opts));
    if (!c.tie_word_embeddings) {
      lm_head_ = register_module(
          "lm_head", std::make_shared<Projection>(c.hidden_size, c.vocab_size, false, false, opts));
    }
  }

 protected:
  torch::Tensor Embed(const torch::Tensor& ids, const torch::Tensor& pos) override {
    TORCH_CHECK(pos.numel() == 0 || (pos.min().item<int64_t>() >= 0 &&
                                     pos.max().item<int64_t>() < config_.max_position_embeddings),
                "GPT-2 position ids must be in [0, n_positions = ", config_.max_position_embeddings,
                ")");
    return wte_->forward(ids) + wpe_->forward(pos);
  }
  // No rotary embeddings; empty (not undefined) so they can be autograd-function inputs.
  void Rope(const torch::Tensor& pos, torch::Tensor& cos, torch::Tensor& sin) override {
    cos = sin = torch::empty({0}, pos.options().dtype(torch::kFloat32));
  }
  torch::Tensor Head(const torch::Tensor& h) override {
    torch::Tensor x = ln_f_->forward(h);
    return lm_head_ ? lm_head_->forward(x) : torch::linear(x, wte_->weight);
  }

 private:
  std::shared_ptr<Embedding> wte_, wpe_;
  std::shared_ptr<LayerNorm> ln_f_;
  std::shared_ptr<Projection> lm_head_;
};

std::shared_ptr<CausalLM> Build(const ModelConfig& c, const torch::TensorOptions& opts) {
  if (c.family == ModelFamily::kGpt2) return std::make_shared<Gpt2LMHeadModel>(c, opts);
  return std::make_shared<LlamaForCausalLM>(c, opts);
}

Result<torch::Dtype> SafetensorsToTorch(const std::string& dtype, const std::string& name) {
  if (dtype == "F32") return torch::kFloat32;
  if (dtype == "F16") return torch::kFloat16;
  if (dtype == "BF16") return torch::kBFloat16;
  if (dtype == "F64") return torch::kFloat64;
  return Status::InvalidArgument("tensor " + name + " has dtype " + dtype +
                                 "; model weights must be F32, F16, BF16 or F64");
}

std::string TorchToSafetensors(torch::Dtype dtype) {
  switch (dtype) {
    case torch::kFloat16:
      return "F16";
    case torch::kBFloat16:
      return "BF16";
    case torch::kFloat64:
      return "F64";
    default:
      return "F32";
  }
}

std::string TorchDtypeName(torch::Dtype dtype) {
  switch (dtype) {
    case torch::kFloat16:
      return "float16";
    case torch::kBFloat16:
      return "bfloat16";
    default:
      return "float32";
  }
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Maps names from older or base-model checkpoints onto ours; "" drops the tensor.
std::string NormalizeCheckpointName(const ModelConfig& c, const std::string& name) {
  if (EndsWith(name, "rotary_emb.inv_freq")) return "";  // derived, never a parameter
  if (c.family == ModelFamily::kGpt2) {
    if (EndsWith(name, ".attn.bias") || EndsWith(name, ".attn.masked_bias")) return "";
    if (name.rfind("transformer.", 0) != 0 && name != "lm_head.weight") {
      return "transformer." + name;  // openai-community/gpt2 stores the base model's names
    }
  } else if (name.rfind("model.", 0) != 0 && name != "lm_head.weight") {
    return "model." + name;
  }
  return name;
}

}  // namespace

Result<std::shared_ptr<CausalLM>> CreateModel(const ModelConfig& config, uint64_t seed) {
  auto model = Build(config, torch::TensorOptions().dtype(torch::kFloat32));
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  torch::NoGradGuard no_grad;
  double gpt2_proj_std =
      config.initializer_range / std::sqrt(2.0 * static_cast<double>(config.num_hidden_layers));
  for (const auto& item : model->named_modules()) {
    const std::string& name = item.key();
    if (auto p = std::dynamic_pointer_cast<Projection>(item.value())) {
      bool scaled = config.family == ModelFamily::kGpt2 && EndsWith(name, "c_proj");
      p->weight.normal_(0.0, scaled ? gpt2_proj_std : config.initializer_range, gen);
      if (p->bias.defined()) p->bias.zero_();
    } else if (auto e = std::dynamic_pointer_cast<Embedding>(item.value())) {
      e->weight.normal_(0.0, config.initializer_range, gen);
    }
  }
  return model;
}

Status LoadStateDict(CausalLM& model, const std::map<std::string, torch::Tensor>& tensors,
                     bool allow_missing, bool allow_unexpected) {
  torch::NoGradGuard no_grad;
  auto params = model.named_parameters(true);
  std::set<std::string> loaded;
  for (const auto& [name, src] : tensors) {
    torch::Tensor* dst = params.find(name);
    if (!dst) {
      if (name == "lm_head.weight" && model.config().tie_word_embeddings) continue;
      if (allow_unexpected) continue;
      return Status::InvalidArgument("tensor " + name + " has no parameter of that name in this " +
                                     model.config().model_type + " model; is it the right model?");
    }
    if (dst->sizes() != src.sizes()) {
      return Status::InvalidArgument("tensor " + name + " has shape " + c10::str(src.sizes()) +
                                     " but the model expects " + c10::str(dst->sizes()) +
                                     "; config.json does not match");
    }
    dst->copy_(src);
    loaded.insert(name);
  }
  if (!allow_missing) {
    for (const auto& p : params) {
      bool lora = p.key().find(".lora_A.") != std::string::npos ||
                  p.key().find(".lora_B.") != std::string::npos;
      if (!lora && !loaded.count(p.key())) {
        return Status::InvalidArgument("the checkpoint has no tensor " + p.key());
      }
    }
  }
  return Status::Ok();
}

Result<std::shared_ptr<CausalLM>> LoadPretrained(const std::string& dir, torch::Device device,
                                                 torch::Dtype dtype) {
  TY_ASSIGN_OR_RETURN(ModelConfig config,
                      ModelConfig::FromFile((std::filesystem::path(dir) / "config.json").string()));
  TY_ASSIGN_OR_RETURN(auto weight_map, ResolveSafetensorsWeightMap(dir));
  std::map<std::string, std::unique_ptr<SafetensorsFile>> files;
  for (const auto& [name, path] : weight_map) {
    if (files.count(path)) continue;
    TY_ASSIGN_OR_RETURN(files[path], SafetensorsFile::Open(path));
  }
  std::map<std::string, torch::Tensor> tensors;
  for (const auto& [path, file] : files) {
    for (const SafetensorsEntry& e : file->header().tensors) {
      std::string name = NormalizeCheckpointName(config, e.name);
      if (name.empty()) continue;
      TY_ASSIGN_OR_RETURN(torch::Dtype st, SafetensorsToTorch(e.dtype, e.name));
      auto bytes = file->Data(e);
      // Read-only view of the mapping; copy_ below only reads it. Unaligned data is copied.
      void* ptr = const_cast<std::byte*>(bytes.data());
      torch::Tensor t;
      if (reinterpret_cast<uintptr_t>(ptr) % torch::elementSize(st) == 0) {
        t = torch::from_blob(ptr, e.shape, torch::TensorOptions().dtype(st));
      } else {
        t = torch::empty(e.shape, torch::TensorOptions().dtype(st));
        std::memcpy(t.data_ptr(), ptr, bytes.size());
      }
      tensors[name] = t;
    }
  }
  auto model = Build(config, torch::TensorOptions().dtype(dtype).device(device));
  Status s = LoadStateDict(*model, tensors, false, false);
  if (!s.ok()) return s.WithContext(dir);
  return model;
}

Status SavePretrained(CausalLM& model, const std::string& dir,
                      const std::string& tokenizer_json_path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::IOError("cannot create " + dir + ": " + ec.message());
  std::vector<torch::Tensor> keep;
  std::vector<TensorToWrite> out;
  torch::Dtype dtype = torch::kFloat32;
  for (const auto& p : model.named_parameters(true)) {
    if (p.key().find(".lora_") != std::string::npos) {
      return Status::FailedPrecondition("the model still has LoRA adapters (" + p.key() +
                                        "); call MergeLora before SavePretrained");
    }
    torch::Tensor t = p.value().detach().to(torch::kCPU).contiguous();
    dtype = t.scalar_type();
    keep.push_back(t);
    out.push_back({p.key(),
                   TorchToSafetensors(t.scalar_type()),
                   t.sizes().vec(),
                   {static_cast<const std::byte*>(t.data_ptr()), t.nbytes()}});
  }
  TY_RETURN_IF_ERROR(
      WriteSafetensors((fs::path(dir) / "model.safetensors").string(), out, {{"format", "pt"}}));
  ModelConfig config = model.config();
  config.torch_dtype = TorchDtypeName(dtype);
  std::string tmp = (fs::path(dir) / "config.json.tmp").string();
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << config.ToJson() << "\n";
    if (!f) return Status::IOError("cannot write " + tmp);
  }
  fs::rename(tmp, fs::path(dir) / "config.json", ec);
  if (ec) return Status::IOError("cannot write " + dir + "/config.json: " + ec.message());
  if (!tokenizer_json_path.empty()) {
    fs::copy_file(tokenizer_json_path, fs::path(dir) / "tokenizer.json",
                  fs::copy_options::overwrite_existing, ec);
    if (ec) {
      return Status::IOError("cannot copy " + tokenizer_json_path + " into " + dir + ": " +
                             ec.message());
    }
  }
  return Status::Ok();
}

}  // namespace trainyard::model
