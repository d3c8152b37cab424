#include "trainyard/serving/engine/runner.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <set>

#include "trainyard/model/nn/lora.h"
#include "trainyard/model/safetensors.h"

namespace trainyard::serving {

// The runner's KV buffers: per layer [slots, kv_heads, capacity, head_dim], one slot per
// live sequence, so a decode step writes its new keys/values in place and attends over a
// view (or one gather) of the batch's slots instead of concatenating per-sequence caches.
struct KvPool {
  std::vector<torch::Tensor> k, v;
  int64_t slots = 0, capacity = 0;
  std::set<int64_t> free;  // lowest first, so a batch's slots tend to be consecutive
};

struct KvSlot {
  std::shared_ptr<KvPool> pool;
  int64_t index = -1;
  ~KvSlot() {
    if (pool) pool->free.insert(index);
  }
};

int64_t SlotIndex(const KvCache& cache) { return cache.slot ? cache.slot->index : -1; }

namespace {

// A forward step's indices, on the model's device: each row's slot, each token's position
// [B, T], the number of key positions attended over, and the mask of keys a query may not
// see [B, 1, G·T, keys] (G query heads per kv head). first_slot >= 0 when the rows' slots are
// first_slot, first_slot + 1, ... (the buffers' rows are then a view).
struct BatchIndex {
  torch::Tensor slots, pos, blocked;
  int64_t first_slot = -1, keys = 0;
};

using model::ModelConfig;
using model::ModelFamily;

struct Lora {
  torch::Tensor a;  // [rank, in], float32
  torch::Tensor b;  // [out, rank], float32
  double scale = 0;
};

// The rows of a batch (sequences) that run with one adapter: `rows` on the model's device, or
// `all` when every row does.
struct AdapterGroup {
  int adapter = -1;
  bool all = false;
  torch::Tensor rows;
};

// Rows from which a float32 product on the CPU runs through oneDNN (which libtorch ships as
// MKL-DNN) rather than the BLAS libtorch was built with. Measured on this repository's 2-core
// AVX-512 machine (Debian's libtorch 1.13 with OpenBLAS, one thread, [rows, 512] x [512, 1365]):
// OpenBLAS 18-21 GFLOP/s from 32 rows up, oneDNN 35 at 32 rows and 50-79 at 200-1000; at one
// row (a lone decode step) oneDNN is slower (1.2 against 1.8), at 8 faster (9.3 against 6.4).
constexpr int64_t kDnnMinRows = 8;

// y = x · wᵀ (+ bias) for x [..., in] and w [out, in]; `dnn`, when defined, is w in oneDNN's
// layout (see DnnWeight) and takes products of at least kDnnMinRows rows (then `w` is not read).
torch::Tensor Linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& dnn,
                     const torch::Tensor& bias) {
  int64_t in = x.size(-1);
  int64_t rows = x.numel() / std::max<int64_t>(in, 1);
  if (!dnn.defined() || rows < kDnnMinRows) return torch::linear(x, w, bias);
  torch::Tensor y = at::mkldnn_linear(x.reshape({rows, in}).contiguous().to_mkldnn(), dnn,
                                      c10::optional<torch::Tensor>(bias))
                        .to_dense();
  auto sizes = x.sizes().vec();
  sizes.back() = y.size(1);
  return y.view(sizes);
}

// `w` [out, in] in oneDNN's layout when products with it should run there: float32 on a CPU
// with oneDNN whose libtorch's BLAS is not MKL; else undefined. A copy: the model keeps its own.
// With MKL (PyPI's libtorch, decision 0020) torch::linear is the faster path: the runner's
// decode step of 32 rows took 34 ms through MKL against 50 through oneDNN (bench/serving's
// step_bench, libtorch 2.11 on this 2-core machine).
torch::Tensor DnnWeight(const torch::Tensor& w) {
  if (!w.device().is_cpu() || w.scalar_type() != torch::kFloat32 || !at::hasMKLDNN() ||
      at::hasMKL()) {
    return {};
  }
  return w.contiguous().to_mkldnn();
}

// A linear layer: Linear ([out, in]) or GPT-2's Conv1D ([in, out]), with its adapters.
struct Proj {
  torch::Tensor w, bias;
  torch::Tensor dnn;  // [out, in] in oneDNN's layout (DnnWeight), or undefined
  bool conv1d = false;
  std::unordered_map<int, Lora> loras;  // by adapter index

  torch::Tensor Apply(const torch::Tensor& x, const std::vector<AdapterGroup>& groups) const {
    torch::Tensor y;
    if (dnn.defined() && x.numel() / x.size(-1) >= kDnnMinRows) {
      y = Linear(x, w, dnn, bias);
    } else if (conv1d) {
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
    // One low-rank update per adapter, over the rows (sequences) that use it.
    for (const AdapterGroup& g : groups) {
      auto it = loras.find(g.adapter);
      if (it == loras.end()) continue;
      const Lora& l = it->second;
      torch::Tensor xg = g.all ? x : x.index_select(0, g.rows);
      torch::Tensor delta =
          (torch::linear(torch::linear(xg.to(torch::kFloat32), l.a), l.b) * l.scale)
              .to(y.scalar_type());
      if (g.all) {
        y.add_(delta);
      } else {
        y.index_add_(0, g.rows, delta);
      }
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
  torch::Tensor lm_head_dnn;  // lm_head in oneDNN's layout (DnnWeight), or undefined
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

  // The KV buffers of every sequence; see KvPool.
  std::shared_ptr<KvPool> pool = std::make_shared<KvPool>();

  // Grows the buffers (doubling) to hold `slots` sequences of `capacity` positions each.
  void EnsurePool(int64_t slots, int64_t capacity) {
    KvPool& p = *pool;
    if (slots <= p.slots && capacity <= p.capacity && !p.k.empty()) return;
    int64_t new_slots = std::max(p.slots, slots);
    if (new_slots > p.slots) new_slots = std::max(new_slots, std::max<int64_t>(2 * p.slots, 8));
    int64_t new_cap = std::max(p.capacity, capacity);
    if (new_cap > p.capacity) {
      new_cap = std::max(
          new_cap, std::min(config.max_position_embeddings, std::max<int64_t>(2 * p.capacity, 64)));
    }
    // Zeros: positions past a sequence's length are masked, but their values still meet a
    // zero probability in the matmul, so they must be finite.
    auto opts = embed.options();
    if (p.k.empty()) p.k.resize(layers.size()), p.v.resize(layers.size());
    for (size_t l = 0; l < layers.size(); ++l) {
      for (torch::Tensor* buf : {&p.k[l], &p.v[l]}) {
        torch::Tensor grown =
            torch::zeros({new_slots, config.num_key_value_heads, new_cap, config.head_dim}, opts);
        if (buf->defined()) {
          grown.narrow(0, 0, p.slots).narrow(2, 0, p.capacity).copy_(*buf);
        }
        *buf = grown;
      }
    }
    for (int64_t s = p.slots; s < new_slots; ++s) p.free.insert(s);
    p.slots = new_slots;
    p.capacity = new_cap;
  }

  std::shared_ptr<KvSlot> TakeSlot() {
    if (pool->free.empty()) EnsurePool(pool->slots + 1, pool->capacity);
    auto slot = std::make_shared<KvSlot>();
    slot->pool = pool;
    slot->index = *pool->free.begin();
    pool->free.erase(pool->free.begin());
    return slot;
  }

  // q [B, H, T, D], k/v [B, KV, T, D] of the new tokens at positions `pos` [B, T]; writes
  // k/v into the slots' buffers and attends over the first `keys` positions of each slot
  // with `blocked` [B, 1, G·T, keys] masking what a query may not see. Returns [B, T, H·D].
  torch::Tensor Attend(size_t layer, const torch::Tensor& q, const torch::Tensor& k,
                       const torch::Tensor& v, const BatchIndex& ix) const {
    int64_t b = q.size(0), heads = q.size(1), t = q.size(2), d = q.size(3);
    int64_t kv_heads = k.size(1), groups = heads / kv_heads;
    const torch::Tensor& kbuf = pool->k[layer];
    const torch::Tensor& vbuf = pool->v[layer];
    // [slots, capacity, KV, D] views: index (slot, position) pairs, values [B, T, KV, D].
    kbuf.permute({0, 2, 1, 3}).index_put_({ix.slots.unsqueeze(1), ix.pos}, k.transpose(1, 2));
    vbuf.permute({0, 2, 1, 3}).index_put_({ix.slots.unsqueeze(1), ix.pos}, v.transpose(1, 2));
    torch::Tensor keys, values;  // [B, KV, L, D]
    if (ix.first_slot >= 0) {    // consecutive slots: a view, no copy
      keys = kbuf.narrow(0, ix.first_slot, b).narrow(2, 0, ix.keys);
      values = vbuf.narrow(0, ix.first_slot, b).narrow(2, 0, ix.keys);
    } else {
      keys = kbuf.narrow(2, 0, ix.keys).index_select(0, ix.slots);
      values = vbuf.narrow(2, 0, ix.keys).index_select(0, ix.slots);
    }
    // Heads h = kv·G + g share kv head kv: [B, KV, G·T, D] queries against [B, KV, L, D].
    torch::Tensor qg = q.reshape({b, kv_heads, groups * t, d});
    torch::Tensor scores =
        torch::matmul(qg, keys.transpose(2, 3)) / std::sqrt(static_cast<double>(d));
    scores =
        scores.to(torch::kFloat32).masked_fill(ix.blocked, -std::numeric_limits<float>::infinity());
    torch::Tensor probs = torch::softmax(scores, -1).to(values.scalar_type());
    return torch::matmul(probs, values)
        .view({b, heads, t, d})
        .transpose(1, 2)
        .reshape({b, t, heads * d});
  }

  torch::Tensor Forward(const std::vector<SequenceStep>& steps) {
    int64_t b = static_cast<int64_t>(steps.size());
    int64_t t = 0;
    for (const SequenceStep& s : steps) {
      TORCH_CHECK(!s.tokens->empty(), "every sequence of a step must bring a token");
      t = std::max(t, static_cast<int64_t>(s.tokens->size()));
    }
    int64_t keys = 0;  // positions the step's queries may look at, padding included
    for (const SequenceStep& s : steps) {
      if (!s.cache->slot) s.cache->slot = TakeSlot();
      keys = std::max(keys, s.cache->length + t);
    }
    EnsurePool(pool->slots, keys);
    // The step's ids [B, T], positions [B, T], slots [B] and last real token [B], in one
    // host buffer: one copy to the device.
    std::vector<int64_t> host(2 * b * t + 2 * b);
    int64_t* ids = host.data();
    int64_t* pos = ids + b * t;
    int64_t* slots = pos + b * t;
    int64_t* last = slots + b;
    std::map<int, std::vector<int64_t>> rows_of;
    bool consecutive = true;
    for (int64_t r = 0; r < b; ++r) {
      const SequenceStep& s = steps[r];
      int64_t n = static_cast<int64_t>(s.tokens->size());
      for (int64_t j = 0; j < t; ++j) {
        ids[r * t + j] = (*s.tokens)[std::min(j, n - 1)];  // padding repeats the last token
        pos[r * t + j] = s.cache->length + j;
      }
      last[r] = n - 1;
      slots[r] = s.cache->slot->index;
      consecutive = consecutive && slots[r] == slots[0] + r;
      rows_of[s.adapter].push_back(r);
    }
    auto long_opts = torch::TensorOptions().dtype(torch::kInt64);
    auto to_device = [&](std::vector<int64_t>& v, std::vector<int64_t> shape) {
      return torch::from_blob(v.data(), shape, long_opts).to(device);
    };
    torch::Tensor on_device = to_device(host, {static_cast<int64_t>(host.size())});
    torch::Tensor ids_t = on_device.narrow(0, 0, b * t).view({b, t});
    BatchIndex ix;
    ix.pos = on_device.narrow(0, b * t, b * t).view({b, t});
    ix.slots = on_device.narrow(0, 2 * b * t, b);
    torch::Tensor last_t = on_device.narrow(0, 2 * b * t + b, b);
    ix.first_slot = consecutive ? slots[0] : -1;
    ix.keys = keys;
    {
      torch::Tensor i = ix.pos.unsqueeze(-1);  // [B, T, 1]
      torch::Tensor j = torch::arange(keys, long_opts.device(device)).view({1, 1, keys});
      torch::Tensor allowed = j <= i;
      if (config.sliding_window > 0) allowed = allowed.logical_and((i - j) < config.sliding_window);
      int64_t groups = config.num_attention_heads / config.num_key_value_heads;
      ix.blocked = allowed.logical_not().unsqueeze(1).repeat({1, 1, groups, 1});  // [B,1,G·T,L]
    }
    std::vector<AdapterGroup> adapter_groups;
    for (auto& [adapter, rows] : rows_of) {
      if (adapter < 0) continue;
      AdapterGroup g;
      g.adapter = adapter;
      g.all = static_cast<int64_t>(rows.size()) == b;
      if (!g.all) g.rows = to_device(rows, {static_cast<int64_t>(rows.size())});
      adapter_groups.push_back(std::move(g));
    }

    torch::Tensor h = torch::embedding(embed, ids_t);
    torch::Tensor cos, sin;
    if (gpt2()) {
      // Padding may run past the learned positions; its outputs are never used.
      h = h + torch::embedding(pos_embed, ix.pos.clamp_max(config.max_position_embeddings - 1));
    } else {
      torch::Tensor freqs = ix.pos.to(torch::kFloat32).unsqueeze(-1) *
                            inv_freq.unsqueeze(0).unsqueeze(0);         // [B, T, D/2]
      torch::Tensor emb = torch::cat({freqs, freqs}, -1).unsqueeze(1);  // [B, 1, T, D]
      cos = emb.cos().to(embed.scalar_type());
      sin = emb.sin().to(embed.scalar_type());
    }
    int64_t heads = config.num_attention_heads, kv_heads = config.num_key_value_heads;
    int64_t d = config.head_dim;
    for (size_t l = 0; l < layers.size(); ++l) {
      const Layer& layer = layers[l];
      if (gpt2()) {
        torch::Tensor x = ApplyNorm(layer.norm1, h);
        auto qkv = layer.c_attn.Apply(x, adapter_groups).split(config.hidden_size, 2);
        auto split = [&](const torch::Tensor& y) {
          return y.view({b, t, heads, d}).transpose(1, 2);
        };
        torch::Tensor q = split(qkv[0]).contiguous();
        torch::Tensor attn = Attend(l, q, split(qkv[1]), split(qkv[2]), ix);
        h = h + layer.c_proj.Apply(attn, adapter_groups);
        torch::Tensor m = ApplyNorm(layer.norm2, h);
        h = h + layer.mlp_c_proj.Apply(torch::gelu(layer.c_fc.Apply(m, adapter_groups), "tanh"),
                                       adapter_groups);
      } else {
        torch::Tensor x = ApplyNorm(layer.norm1, h);
        torch::Tensor q = layer.q.Apply(x, adapter_groups).view({b, t, heads, d}).transpose(1, 2);
        torch::Tensor k =
            layer.k.Apply(x, adapter_groups).view({b, t, kv_heads, d}).transpose(1, 2);
        torch::Tensor v =
            layer.v.Apply(x, adapter_groups).view({b, t, kv_heads, d}).transpose(1, 2);
        q = q * cos + RotateHalf(q) * sin;
        k = k * cos + RotateHalf(k) * sin;
        h = h + layer.o.Apply(Attend(l, q, k, v, ix), adapter_groups);
        torch::Tensor m = ApplyNorm(layer.norm2, h);
        h = h + layer.down.Apply(torch::silu(layer.gate.Apply(m, adapter_groups)) *
                                     layer.up.Apply(m, adapter_groups),
                                 adapter_groups);
      }
    }
    for (const SequenceStep& s : steps) {
      s.cache->length += static_cast<int64_t>(s.tokens->size());
    }
    torch::Tensor hl;  // [B, hidden]: each sequence's last new token
    if (std::all_of(last, last + b, [&](int64_t x) { return x == t - 1; })) {
      hl = h.select(1, t - 1);
    } else {
      hl = h.index({torch::arange(b, long_opts.device(device)), last_t});
    }
    return Linear(ApplyNorm(final_norm, hl), lm_head, lm_head_dnn, {}).to(torch::kFloat32);
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
    p.dnn = DnnWeight(conv1d ? p.w.t() : p.w);
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
    impl->inv_freq = model::RopeInverseFrequencies(c).to(impl->device);
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
  impl->lm_head_dnn = DnnWeight(impl->lm_head);
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

void ModelRunner::ForkCache(const KvCache& from, KvCache* to) {
  TORCH_CHECK(from.slot && !to->slot, "a fork copies a used cache into an unused one");
  torch::InferenceMode inference;
  to->slot = impl_->TakeSlot();  // may grow the buffers; slot indices stay valid
  const KvPool& pool = *impl_->pool;
  for (size_t l = 0; l < pool.k.size(); ++l) {
    for (const torch::Tensor* buf : {&pool.k[l], &pool.v[l]}) {
      buf->select(0, to->slot->index)
          .narrow(1, 0, from.length)
          .copy_(buf->select(0, from.slot->index).narrow(1, 0, from.length));
    }
  }
  to->length = from.length;
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
