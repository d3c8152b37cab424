#include "trainyard/serving/engine/runner.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include "trainyard/model/nn/lora.h"
#include "trainyard/model/safetensors.h"

namespace trainyard::serving {

namespace {

using model::ModelConfig;
using model::ModelFamily;

struct Lora {
  torch::Tensor a;  // [rank, in], float32
  torch::Tensor b;  // [out, rank], float32
  double scale = 0;
};

// A linear layer: Linear ([out, in]) or GPT-2's Conv1D ([in, out]), with its adapters.
struct Proj {
  torch::Tensor w, bias;
  bool conv1d = false;
  std::unordered_map<int, Lora> loras;  // by adapter index

  torch::Tensor Apply(const torch::Tensor& x, const std::vector<int>& adapters) const {
    torch::Tensor y;
    if (conv1d) {
      int64_t in = w.size(0), out = w.size(1);
      y = bias.defined() ? torch::addmm(bias, x.reshape({-1, in}), w)
                         : torch::mm(x.reshape({-1, in}), w);
      auto sizes = x.sizes().vec();
      sizes.back() = out;
      y = y.view(sizes);
    } else {
      y = torch::linear(x, w, bias);
    }
    if (loras.empty()) return y;
    for (size_t r = 0; r < adapters.size(); ++r) {
      auto it = loras.find(adapters[r]);
      if (it == loras.end()) continue;
      const Lora& l = it->second;
      torch::Tensor xr = x.narrow(0, static_cast<int64_t>(r), 1).to(torch::kFloat32);
      torch::Tensor delta = torch::linear(torch::linear(xr, l.a), l.b) * l.scale;
      y.narrow(0, static_cast<int64_t>(r), 1).add_(delta.to(y.scalar_type()));
    }
    return y;
  }
};

struct Norm {
  torch::Tensor w, b;  // b undefined: RMSNorm
};

struct Layer {
  Norm norm1, norm2;
  Proj q, k, v, o;        // llama
  Proj gate, up, down;    // llama
  Proj c_attn, c_proj;    // gpt2 attention
  Proj c_fc, mlp_c_proj;  // gpt2 MLP
};

torch::Tensor RotateHalf(const torch::Tensor& x) {
  int64_t half = x.size(-1) / 2;
  return torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

// As model/nn/model.cc computes them (transformers' float32 rotary frequencies).
torch::Tensor RopeInverseFrequencies(const ModelConfig& c) {
  auto f32 = torch::TensorOptions().dtype(torch::kFloat32);
  torch::Tensor exponents =
      torch::arange(0, c.head_dim, 2, torch::TensorOptions().dtype(torch::kInt64))
          .to(torch::kFloat32) /
      static_cast<double>(c.head_dim);
  torch::Tensor inv_freq = 1.0 / torch::pow(torch::scalar_tensor(c.rope_theta, f32), exponents);
  const model::RopeScaling& rs = c.rope_scaling;
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

Result<torch::Dtype> SafetensorsDtype(const std::string& dtype, const std::string& name) {
  if (dtype == "F32") return torch::kFloat32;
  if (dtype == "F16") return torch::kFloat16;
  if (dtype == "BF16") return torch::kBFloat16;
  if (dtype == "F64") return torch::kFloat64;
  return Status::InvalidArgument("adapter tensor " + name + " has dtype " + dtype +
                                 "; LoRA weights must be F32, F16, BF16 or F64");
}

bool StripSuffix(std::string& s, const std::string& suffix) {
  if (s.size() < suffix.size() || s.compare(s.size() - suffix.size(), suffix.size(), suffix)) {
    return false;
  }
  s.resize(s.size() - suffix.size());
  return true;
}

}  // namespace

struct ModelRunner::Impl {
  std::shared_ptr<model::CausalLM> model;
  ModelConfig config;
  torch::Device device{torch::kCPU};
  torch::Tensor embed, pos_embed, lm_head, inv_freq;
  Norm final_norm;
  std::vector<Layer> layers;
  std::map<std::string, Proj*> projections;  // by module path, for adapters
  int adapters = 0;

  bool gpt2() const { return config.family == ModelFamily::kGpt2; }

  torch::Tensor ApplyNorm(const Norm& n, const torch::Tensor& x) const {
    if (n.b.defined()) return torch::layer_norm(x, {x.size(-1)}, n.w, n.b, config.norm_eps);
    torch::Tensor xf = x.to(torch::kFloat32);
    xf = xf * torch::rsqrt(xf.pow(2).mean(-1, true) + config.norm_eps);
    return n.w * xf.to(x.scalar_type());
  }

  void EnsureCapacity(KvCache& cache, int64_t needed, const torch::Tensor& like) const {
    if (cache.k.empty()) cache.k.resize(layers.size()), cache.v.resize(layers.size());
    for (size_t l = 0; l < layers.size(); ++l) {
      int64_t cap = cache.k[l].defined() ? cache.k[l].size(1) : 0;
      if (cap >= needed) continue;
      int64_t grown = std::min(config.max_position_embeddings,
                               std::max<int64_t>(needed, std::max<int64_t>(2 * cap, 64)));
      grown = std::max(grown, needed);
      auto opts = like.options();
      torch::Tensor k = torch::empty({like.size(0), grown, like.size(2)}, opts);
      torch::Tensor v = torch::empty({like.size(0), grown, like.size(2)}, opts);
      if (cache.length > 0) {
        k.narrow(1, 0, cache.length).copy_(cache.k[l].narrow(1, 0, cache.length));
        v.narrow(1, 0, cache.length).copy_(cache.v[l].narrow(1, 0, cache.length));
      }
      cache.k[l] = k;
      cache.v[l] = v;
    }
  }

  // q [B, H, T, D], k/v [B, KV, T, D] of the new tokens; returns [B, T, H·D].
  torch::Tensor Attend(size_t layer, const torch::Tensor& q, const torch::Tensor& k,
                       const torch::Tensor& v, const std::vector<SequenceStep>& steps) const {
    int64_t heads = q.size(1), t = q.size(2), d = q.size(3);
    std::vector<torch::Tensor> outs;
    outs.reserve(steps.size());
    for (size_t b = 0; b < steps.size(); ++b) {
      KvCache& cache = *steps[b].cache;
      int64_t past = cache.length, total = past + t;
      int64_t row = static_cast<int64_t>(b);
      cache.k[layer].narrow(1, past, t).copy_(k[row]);
      cache.v[layer].narrow(1, past, t).copy_(v[row]);
      torch::Tensor keys = cache.k[layer].narrow(1, 0, total).unsqueeze(0);  // [1, KV, L, D]
      torch::Tensor values = cache.v[layer].narrow(1, 0, total).unsqueeze(0);
      int64_t kv_heads = keys.size(1);
      if (kv_heads != heads) {
        int64_t groups = heads / kv_heads;
        auto expand = [&](const torch::Tensor& x) {
          return x.unsqueeze(2)
              .expand({1, kv_heads, groups, total, d})
              .reshape({1, heads, total, d});
        };
        keys = expand(keys);
        values = expand(values);
      }
      auto long_opts = torch::TensorOptions().dtype(torch::kInt64).device(q.device());
      torch::Tensor i = torch::arange(past, total, long_opts).unsqueeze(1);  // query positions
      torch::Tensor j = torch::arange(total, long_opts).unsqueeze(0);        // key positions
      torch::Tensor allowed = j <= i;
      if (config.sliding_window > 0) allowed = allowed.logical_and((i - j) < config.sliding_window);
      torch::Tensor qb = q.narrow(0, row, 1);
      torch::Tensor scores =
          torch::matmul(qb, keys.transpose(2, 3)) / std::sqrt(static_cast<double>(d));
      scores = scores.to(torch::kFloat32)
                   .masked_fill(allowed.logical_not(), -std::numeric_limits<float>::infinity());
      torch::Tensor probs = torch::softmax(scores, -1).to(values.scalar_type());
      outs.push_back(torch::matmul(probs, values).transpose(1, 2).reshape({1, t, heads * d}));
    }
    return torch::cat(outs, 0);
  }

  torch::Tensor Forward(const std::vector<SequenceStep>& steps) {
    int64_t b = static_cast<int64_t>(steps.size());
    int64_t t = static_cast<int64_t>(steps[0].tokens->size());
    std::vector<int64_t> ids(b * t), pos(b * t);
    std::vector<int> adapter_of(steps.size());
    for (int64_t r = 0; r < b; ++r) {
      const SequenceStep& s = steps[r];
      TORCH_CHECK(static_cast<int64_t>(s.tokens->size()) == t,
                  "every sequence of a step must bring the same number of tokens");
      for (int64_t j = 0; j < t; ++j) {
        ids[r * t + j] = (*s.tokens)[j];
        pos[r * t + j] = s.cache->length + j;
      }
      adapter_of[r] = s.adapter;
    }
    auto long_opts = torch::TensorOptions().dtype(torch::kInt64);
    torch::Tensor ids_t = torch::from_blob(ids.data(), {b, t}, long_opts).to(device);
    torch::Tensor pos_t = torch::from_blob(pos.data(), {b, t}, long_opts).to(device);

    torch::Tensor h = torch::embedding(embed, ids_t);
    torch::Tensor cos, sin;
    if (gpt2()) {
      h = h + torch::embedding(pos_embed, pos_t);
    } else {
      torch::Tensor freqs = pos_t.to(torch::kFloat32).unsqueeze(-1) *
                            inv_freq.unsqueeze(0).unsqueeze(0);         // [B, T, D/2]
      torch::Tensor emb = torch::cat({freqs, freqs}, -1).unsqueeze(1);  // [B, 1, T, D]
      cos = emb.cos();
      sin = emb.sin();
    }
    for (const SequenceStep& s : steps) {
      EnsureCapacity(
          *s.cache, s.cache->length + t,
          torch::empty({config.num_key_value_heads, 0, config.head_dim}, embed.options()));
    }
    int64_t heads = config.num_attention_heads, kv_heads = config.num_key_value_heads;
    int64_t d = config.head_dim;
    for (size_t l = 0; l < layers.size(); ++l) {
      const Layer& layer = layers[l];
      if (gpt2()) {
        torch::Tensor x = ApplyNorm(layer.norm1, h);
        auto qkv = layer.c_attn.Apply(x, adapter_of).split(config.hidden_size, 2);
        auto split = [&](const torch::Tensor& y) {
          return y.view({b, t, heads, d}).transpose(1, 2);
        };
        torch::Tensor attn = Attend(l, split(qkv[0]), split(qkv[1]), split(qkv[2]), steps);
        h = h + layer.c_proj.Apply(attn, adapter_of);
        torch::Tensor m = ApplyNorm(layer.norm2, h);
        h = h + layer.mlp_c_proj.Apply(torch::gelu(layer.c_fc.Apply(m, adapter_of), "tanh"),
                                       adapter_of);
      } else {
        torch::Tensor x = ApplyNorm(layer.norm1, h);
        torch::Tensor q = layer.q.Apply(x, adapter_of).view({b, t, heads, d}).transpose(1, 2);
        torch::Tensor k = layer.k.Apply(x, adapter_of).view({b, t, kv_heads, d}).transpose(1, 2);
        torch::Tensor v = layer.v.Apply(x, adapter_of).view({b, t, kv_heads, d}).transpose(1, 2);
        torch::Tensor c = cos.to(q.scalar_type()), s = sin.to(q.scalar_type());
        q = q * c + RotateHalf(q) * s;
        k = k * c + RotateHalf(k) * s;
        h = h + layer.o.Apply(Attend(l, q, k, v, steps), adapter_of);
        torch::Tensor m = ApplyNorm(layer.norm2, h);
        h = h + layer.down.Apply(
                    torch::silu(layer.gate.Apply(m, adapter_of)) * layer.up.Apply(m, adapter_of),
                    adapter_of);
      }
    }
    for (const SequenceStep& s : steps) s.cache->length += t;
    torch::Tensor last = ApplyNorm(final_norm, h.select(1, t - 1));  // [B, hidden]
    return torch::linear(last, lm_head).to(torch::kFloat32);
  }
};

Result<std::unique_ptr<ModelRunner>> ModelRunner::Create(std::shared_ptr<model::CausalLM> model) {
  auto impl = std::make_unique<Impl>();
  impl->config = model->config();
  const ModelConfig& c = impl->config;
  auto params = model->named_parameters(true);
  if (params.is_empty()) return Status::InvalidArgument("the model has no parameters");
  impl->device = params.begin()->value().device();
  auto get = [&](const std::string& name) -> Result<torch::Tensor> {
    const torch::Tensor* t = params.find(name);
    if (!t) return Status::InvalidArgument("the model has no parameter " + name);
    return t->detach();
  };
  auto opt = [&](const std::string& name) {
    const torch::Tensor* t = params.find(name);
    return t ? t->detach() : torch::Tensor();
  };
  auto proj = [&](const std::string& path, bool conv1d, Proj& p) -> Status {
    TY_ASSIGN_OR_RETURN(p.w, get(path + ".weight"));
    p.bias = opt(path + ".bias");
    p.conv1d = conv1d;
    impl->projections[path] = &p;
    return Status::Ok();
  };
  impl->layers.resize(static_cast<size_t>(c.num_hidden_layers));
  if (c.family == ModelFamily::kGpt2) {
    TY_ASSIGN_OR_RETURN(impl->embed, get("transformer.wte.weight"));
    TY_ASSIGN_OR_RETURN(impl->pos_embed, get("transformer.wpe.weight"));
    TY_ASSIGN_OR_RETURN(impl->final_norm.w, get("transformer.ln_f.weight"));
    TY_ASSIGN_OR_RETURN(impl->final_norm.b, get("transformer.ln_f.bias"));
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
      Layer& l = impl->layers[static_cast<size_t>(i)];
      std::string p = "transformer.h." + std::to_string(i);
      TY_ASSIGN_OR_RETURN(l.norm1.w, get(p + ".ln_1.weight"));
      TY_ASSIGN_OR_RETURN(l.norm1.b, get(p + ".ln_1.bias"));
      TY_ASSIGN_OR_RETURN(l.norm2.w, get(p + ".ln_2.weight"));
      TY_ASSIGN_OR_RETURN(l.norm2.b, get(p + ".ln_2.bias"));
      TY_RETURN_IF_ERROR(proj(p + ".attn.c_attn", true, l.c_attn));
      TY_RETURN_IF_ERROR(proj(p + ".attn.c_proj", true, l.c_proj));
      TY_RETURN_IF_ERROR(proj(p + ".mlp.c_fc", true, l.c_fc));
      TY_RETURN_IF_ERROR(proj(p + ".mlp.c_proj", true, l.mlp_c_proj));
    }
  } else {
    TY_ASSIGN_OR_RETURN(impl->embed, get("model.embed_tokens.weight"));
    TY_ASSIGN_OR_RETURN(impl->final_norm.w, get("model.norm.weight"));
    impl->inv_freq = RopeInverseFrequencies(c).to(impl->device);
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
      Layer& l = impl->layers[static_cast<size_t>(i)];
      std::string p = "model.layers." + std::to_string(i);
      TY_ASSIGN_OR_RETURN(l.norm1.w, get(p + ".input_layernorm.weight"));
      TY_ASSIGN_OR_RETURN(l.norm2.w, get(p + ".post_attention_layernorm.weight"));
      TY_RETURN_IF_ERROR(proj(p + ".self_attn.q_proj", false, l.q));
      TY_RETURN_IF_ERROR(proj(p + ".self_attn.k_proj", false, l.k));
      TY_RETURN_IF_ERROR(proj(p + ".self_attn.v_proj", false, l.v));
      TY_RETURN_IF_ERROR(proj(p + ".self_attn.o_proj", false, l.o));
      TY_RETURN_IF_ERROR(proj(p + ".mlp.gate_proj", false, l.gate));
      TY_RETURN_IF_ERROR(proj(p + ".mlp.up_proj", false, l.up));
      TY_RETURN_IF_ERROR(proj(p + ".mlp.down_proj", false, l.down));
    }
  }
  impl->lm_head = c.tie_word_embeddings ? impl->embed : opt("lm_head.weight");
  if (!impl->lm_head.defined()) return Status::InvalidArgument("the model has no lm_head.weight");
  impl->model = std::move(model);
  impl->model->eval();
  return std::unique_ptr<ModelRunner>(new ModelRunner(std::move(impl)));
}

ModelRunner::ModelRunner(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ModelRunner::~ModelRunner() = default;

const model::ModelConfig& ModelRunner::config() const { return impl_->config; }
int64_t ModelRunner::context() const { return impl_->config.max_position_embeddings; }
torch::Device ModelRunner::device() const { return impl_->device; }

torch::Tensor ModelRunner::Forward(const std::vector<SequenceStep>& steps) {
  TORCH_CHECK(!steps.empty(), "a forward step needs at least one sequence");
  torch::InferenceMode inference;
  return impl_->Forward(steps);
}

Result<int> ModelRunner::AddAdapter(const std::string& dir) {
  namespace fs = std::filesystem;
  TY_ASSIGN_OR_RETURN(model::LoraConfig lora, model::ReadPeftAdapterConfig(dir));
  double scale = lora.alpha / static_cast<double>(lora.rank);
  std::string path = (fs::path(dir) / "adapter_model.safetensors").string();
  TY_ASSIGN_OR_RETURN(auto file, model::SafetensorsFile::Open(path));
  std::map<Proj*, Lora> found;
  for (const model::SafetensorsEntry& e : file->header().tensors) {
    std::string module = e.name;
    const std::string prefix = "base_model.model.";
    if (module.rfind(prefix, 0) == 0) module = module.substr(prefix.size());
    bool is_a = StripSuffix(module, ".lora_A.weight");
    bool is_b = !is_a && StripSuffix(module, ".lora_B.weight");
    if (!is_a && !is_b) {
      return Status::InvalidArgument(path + ": tensor " + e.name +
                                     " is not a LoRA A/B weight; only LoRA adapters are served");
    }
    auto it = impl_->projections.find(module);
    if (it == impl_->projections.end()) {
      return Status::InvalidArgument(path + ": tensor " + e.name + " adapts " + module +
                                     ", which this " + impl_->config.model_type +
                                     " model has no linear layer of; is it the right base?");
    }
    TY_ASSIGN_OR_RETURN(torch::Dtype dtype, SafetensorsDtype(e.dtype, e.name));
    auto bytes = file->Data(e);
    torch::Tensor t = torch::empty(e.shape, torch::TensorOptions().dtype(dtype));
    if (!bytes.empty()) std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
    t = t.to(torch::kFloat32).to(impl_->device);
    Proj* p = it->second;
    int64_t in = p->conv1d ? p->w.size(0) : p->w.size(1);
    int64_t out = p->conv1d ? p->w.size(1) : p->w.size(0);
    bool ok = t.dim() == 2 && (is_a ? t.size(1) == in : t.size(0) == out);
    if (!ok) {
      return Status::InvalidArgument(path + ": tensor " + e.name + " has shape " +
                                     c10::str(t.sizes()) + ", which does not fit " + module +
                                     " (in " + std::to_string(in) + ", out " + std::to_string(out) +
                                     ")");
    }
    (is_a ? found[p].a : found[p].b) = t;
  }
  if (found.empty()) return Status::InvalidArgument(path + " holds no LoRA weights");
  for (auto& [p, l] : found) {
    if (!l.a.defined() || !l.b.defined() || l.a.size(0) != l.b.size(1)) {
      return Status::InvalidArgument(path +
                                     ": every adapted layer needs lora_A [r, in] and "
                                     "lora_B [out, r] of the same rank");
    }
  }
  int index = impl_->adapters++;
  for (auto& [p, l] : found) {
    l.scale = scale;
    p->loras[index] = l;
  }
  return index;
}

}  // namespace trainyard::serving
