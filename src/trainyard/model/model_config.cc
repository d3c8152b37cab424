#include "trainyard/model/model_config.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "trainyard/common/json.h"

namespace trainyard::model {
namespace {

// Bounds far above any real model, low enough that products of them cannot overflow int64.
constexpr int64_t kMaxVocab = int64_t{1} << 24;
constexpr int64_t kMaxHidden = int64_t{1} << 18;
constexpr int64_t kMaxIntermediate = int64_t{1} << 20;
constexpr int64_t kMaxLayers = 100000;
constexpr int64_t kMaxPositions = int64_t{1} << 26;

class Reader {
 public:
  Reader(const json::object& o, std::string_view source) : o_(o), source_(source) {}

  Status Error(std::string_view field, const std::string& what) const {
    return Status::InvalidArgument(std::string(source_) + ": " + std::string(field) + " " + what);
  }
  Status Wrap(const Status& s) const { return s.WithContext(source_); }

  // An integer in [lo, hi]; `fallback` when absent or null (nullopt: required).
  Result<int64_t> Int(std::string_view field, int64_t lo, int64_t hi,
                      std::optional<int64_t> fallback = std::nullopt) const {
    auto v = OptionalInt64(o_, field);
    if (!v.ok()) return Wrap(v.status());
    if (!v->has_value()) {
      if (!fallback) return Error(field, "is required (a positive integer)");
      return *fallback;
    }
    int64_t x = **v;
    if (x < lo || x > hi) {
      return Error(field, "must be between " + std::to_string(lo) + " and " + std::to_string(hi) +
                              " (got " + std::to_string(x) + ")");
    }
    return x;
  }

  // A finite number in (lo, hi] (or [lo, hi] when `lo_inclusive`).
  Result<double> Double(std::string_view field, double lo, double hi, double fallback,
                        bool lo_inclusive = false) const {
    auto v = OptionalDouble(o_, field);
    if (!v.ok()) return Wrap(v.status());
    if (!v->has_value()) return fallback;
    double x = **v;
    bool above = lo_inclusive ? x >= lo : x > lo;
    if (!std::isfinite(x) || !above || x > hi) {
      std::ostringstream msg;
      msg << "must be a number in " << (lo_inclusive ? "[" : "(") << lo << ", " << hi << "] (got "
          << x << ")";
      return Error(field, msg.str());
    }
    return x;
  }

  Result<bool> Bool(std::string_view field, bool fallback) const {
    auto v = OptionalBool(o_, field);
    if (!v.ok()) return Wrap(v.status());
    return v->value_or(fallback);
  }

  Result<std::string> String(std::string_view field, std::string fallback) const {
    auto v = OptionalString(o_, field);
    if (!v.ok()) return Wrap(v.status());
    return v->value_or(std::move(fallback));
  }

  // bos/eos token ids: an integer, or a list whose first element counts.
  Result<std::optional<int64_t>> TokenId(std::string_view field, int64_t vocab) const {
    auto it = o_.find(field);
    if (it == o_.end() || it->value().is_null()) return std::optional<int64_t>();
    const json::value* v = &it->value();
    if (v->is_array()) {
      if (v->as_array().empty()) return std::optional<int64_t>();
      v = &v->as_array()[0];
    }
    auto id = AsInt64(*v, field);
    if (!id.ok()) return Wrap(id.status());
    if (*id < 0 || *id >= vocab) {
      return Error(field, "must be a token id below vocab_size " + std::to_string(vocab) +
                              " (got " + std::to_string(*id) + ")");
    }
    return std::optional<int64_t>(*id);
  }

 private:
  const json::object& o_;
  std::string_view source_;
};

Status ParseRopeScaling(const json::object& root, std::string_view source, ModelConfig& c) {
  auto it = root.find("rope_scaling");
  if (it == root.end() || it->value().is_null()) return Status::Ok();
  if (!it->value().is_object()) {
    return Status::InvalidArgument(std::string(source) +
                                   ": rope_scaling must be an object or null (got " +
                                   DescribeJson(it->value()) + ")");
  }
  const json::object& o = it->value().as_object();
  std::string prefix = std::string(source) + ": rope_scaling";
  Reader r(o, prefix);
  TY_ASSIGN_OR_RETURN(std::string type, r.String("rope_type", ""));
  if (type.empty()) {
    TY_ASSIGN_OR_RETURN(type, r.String("type", "default"));
  }
  if (type == "default") return Status::Ok();
  if (type != "llama3" && type != "linear") {
    return Status::InvalidArgument(prefix + ".rope_type must be default, linear or llama3 (got \"" +
                                   type + "\"); other RoPE scalings are not supported");
  }
  c.rope_scaling.type = type;
  TY_ASSIGN_OR_RETURN(double factor, r.Double("factor", 0.0, 1e6, -1.0));
  if (factor < 0) return Status::InvalidArgument(prefix + ".factor is required");
  c.rope_scaling.factor = factor;
  if (type == "llama3") {
    TY_ASSIGN_OR_RETURN(c.rope_scaling.low_freq_factor, r.Double("low_freq_factor", 0.0, 1e6, 1.0));
    TY_ASSIGN_OR_RETURN(c.rope_scaling.high_freq_factor,
                        r.Double("high_freq_factor", 0.0, 1e6, 4.0));
    if (c.rope_scaling.high_freq_factor <= c.rope_scaling.low_freq_factor) {
      return Status::InvalidArgument(prefix +
                                     ".high_freq_factor must be greater than low_freq_factor");
    }
    TY_ASSIGN_OR_RETURN(c.rope_scaling.original_max_position_embeddings,
                        r.Int("original_max_position_embeddings", 1, kMaxPositions));
  }
  return Status::Ok();
}

Status ParseLlama(const Reader& r, const json::object& root, std::string_view source,
                  ModelConfig& c) {
  c.family = ModelFamily::kLlama;
  TY_ASSIGN_OR_RETURN(c.vocab_size, r.Int("vocab_size", 1, kMaxVocab));
  TY_ASSIGN_OR_RETURN(c.hidden_size, r.Int("hidden_size", 1, kMaxHidden));
  TY_ASSIGN_OR_RETURN(c.intermediate_size, r.Int("intermediate_size", 1, kMaxIntermediate));
  TY_ASSIGN_OR_RETURN(c.num_hidden_layers, r.Int("num_hidden_layers", 1, kMaxLayers));
  TY_ASSIGN_OR_RETURN(c.num_attention_heads, r.Int("num_attention_heads", 1, kMaxHidden));
  TY_ASSIGN_OR_RETURN(c.num_key_value_heads,
                      r.Int("num_key_value_heads", 1, kMaxHidden, c.num_attention_heads));
  TY_ASSIGN_OR_RETURN(c.head_dim, r.Int("head_dim", 1, kMaxHidden, int64_t{0}));
  if (c.head_dim == 0) {
    if (c.hidden_size % c.num_attention_heads != 0) {
      return r.Error("hidden_size", "(" + std::to_string(c.hidden_size) +
                                        ") must be divisible by num_attention_heads (" +
                                        std::to_string(c.num_attention_heads) + ")");
    }
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  if (c.head_dim % 2 != 0) {
    return r.Error("head_dim",
                   "must be even for rotary embeddings (got " + std::to_string(c.head_dim) + ")");
  }
  if (c.num_attention_heads * c.head_dim > kMaxHidden) {
    return r.Error("num_attention_heads", "× head_dim is too large");
  }
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    return r.Error("num_key_value_heads", "(" + std::to_string(c.num_key_value_heads) +
                                              ") must divide num_attention_heads (" +
                                              std::to_string(c.num_attention_heads) + ")");
  }
  TY_ASSIGN_OR_RETURN(c.max_position_embeddings,
                      r.Int("max_position_embeddings", 1, kMaxPositions, int64_t{2048}));
  TY_ASSIGN_OR_RETURN(c.norm_eps, r.Double("rms_norm_eps", 0.0, 1.0, 1e-6));
  TY_ASSIGN_OR_RETURN(c.rope_theta, r.Double("rope_theta", 0.0, 1e12, 10000.0));
  TY_RETURN_IF_ERROR(ParseRopeScaling(root, source, c));
  // Qwen2 always has q/k/v biases (and none on o_proj); Llama's attention_bias covers all four.
  TY_ASSIGN_OR_RETURN(c.attention_bias, r.Bool("attention_bias", c.model_type == "qwen2"));
  if (c.model_type == "qwen2") c.attention_bias = true;
  TY_ASSIGN_OR_RETURN(c.mlp_bias, r.Bool("mlp_bias", false));
  TY_ASSIGN_OR_RETURN(c.tie_word_embeddings, r.Bool("tie_word_embeddings", false));
  // Mistral: a token attends to the previous `sliding_window` tokens only, as transformers'
  // eager mask does. (Qwen2's use_sliding_window only affects its flash-attention path.)
  if (c.model_type == "mistral") {
    TY_ASSIGN_OR_RETURN(c.sliding_window, r.Int("sliding_window", 1, kMaxPositions, int64_t{0}));
  }
  TY_ASSIGN_OR_RETURN(c.hidden_act, r.String("hidden_act", "silu"));
  if (c.hidden_act != "silu") {
    return r.Error("hidden_act",
                   "must be silu for " + c.model_type + " (got \"" + c.hidden_act + "\")");
  }
  return Status::Ok();
}

Status ParseGpt2(const Reader& r, ModelConfig& c) {
  c.family = ModelFamily::kGpt2;
  TY_ASSIGN_OR_RETURN(c.vocab_size, r.Int("vocab_size", 1, kMaxVocab));
  TY_ASSIGN_OR_RETURN(c.hidden_size, r.Int("n_embd", 1, kMaxHidden));
  TY_ASSIGN_OR_RETURN(c.num_hidden_layers, r.Int("n_layer", 1, kMaxLayers));
  TY_ASSIGN_OR_RETURN(c.num_attention_heads, r.Int("n_head", 1, kMaxHidden));
  if (c.hidden_size % c.num_attention_heads != 0) {
    return r.Error("n_embd", "(" + std::to_string(c.hidden_size) +
                                 ") must be divisible by n_head (" +
                                 std::to_string(c.num_attention_heads) + ")");
  }
  c.num_key_value_heads = c.num_attention_heads;
  c.head_dim = c.hidden_size / c.num_attention_heads;
  TY_ASSIGN_OR_RETURN(c.intermediate_size,
                      r.Int("n_inner", 1, kMaxIntermediate, 4 * c.hidden_size));
  TY_ASSIGN_OR_RETURN(c.max_position_embeddings,
                      r.Int("n_positions", 1, kMaxPositions, int64_t{1024}));
  TY_ASSIGN_OR_RETURN(c.norm_eps, r.Double("layer_norm_epsilon", 0.0, 1.0, 1e-5));
  TY_ASSIGN_OR_RETURN(c.hidden_act, r.String("activation_function", "gelu_new"));
  if (c.hidden_act == "gelu_pytorch_tanh") c.hidden_act = "gelu_new";  // the same function
  if (c.hidden_act != "gelu_new") {
    return r.Error("activation_function",
                   "must be gelu_new for gpt2 (got \"" + c.hidden_act + "\")");
  }
  TY_ASSIGN_OR_RETURN(bool inverse_layer_idx, r.Bool("scale_attn_by_inverse_layer_idx", false));
  if (inverse_layer_idx) {
    return r.Error("scale_attn_by_inverse_layer_idx", "true is not supported");
  }
  TY_ASSIGN_OR_RETURN(bool scale_weights, r.Bool("scale_attn_weights", true));
  if (!scale_weights) return r.Error("scale_attn_weights", "false is not supported");
  TY_ASSIGN_OR_RETURN(c.tie_word_embeddings, r.Bool("tie_word_embeddings", true));
  c.attention_bias = true;
  c.mlp_bias = true;
  return Status::Ok();
}

std::string ArchitectureName(const std::string& model_type) {
  if (model_type == "mistral") return "MistralForCausalLM";
  if (model_type == "qwen2") return "Qwen2ForCausalLM";
  if (model_type == "gpt2") return "GPT2LMHeadModel";
  return "LlamaForCausalLM";
}

}  // namespace

Result<ModelConfig> ModelConfig::FromJson(std::string_view json_text, std::string_view source) {
  boost::system::error_code ec;
  json::value root = json::parse(json_text, ec);
  if (ec) {
    return Status::InvalidArgument(std::string(source) + " is not valid JSON (" + ec.message() +
                                   "); it should be a Hugging Face config.json");
  }
  if (!root.is_object()) {
    return Status::InvalidArgument(std::string(source) + " must hold a JSON object (got " +
                                   DescribeJson(root) + ")");
  }
  const json::object& o = root.as_object();
  Reader r(o, source);
  ModelConfig c;
  auto type = OptionalString(o, "model_type");
  if (!type.ok()) return r.Wrap(type.status());
  if (!type->has_value()) {
    return r.Error("model_type", "is required (llama, mistral, qwen2 or gpt2)");
  }
  c.model_type = **type;
  if (c.model_type == "llama" || c.model_type == "mistral" || c.model_type == "qwen2") {
    TY_RETURN_IF_ERROR(ParseLlama(r, o, source, c));
  } else if (c.model_type == "gpt2") {
    TY_RETURN_IF_ERROR(ParseGpt2(r, c));
  } else {
    return r.Error("model_type", "must be llama, mistral, qwen2 or gpt2 (got \"" +
                                     c.model_type.substr(0, 40) + "\")");
  }
  TY_ASSIGN_OR_RETURN(c.initializer_range, r.Double("initializer_range", 0.0, 10.0, 0.02, true));
  TY_ASSIGN_OR_RETURN(c.bos_token_id, r.TokenId("bos_token_id", c.vocab_size));
  TY_ASSIGN_OR_RETURN(c.eos_token_id, r.TokenId("eos_token_id", c.vocab_size));
  if (auto it = o.find("eos_token_id"); it != o.end() && it->value().is_array()) {
    for (const json::value& v : it->value().as_array()) {
      auto id = AsInt64(v, "eos_token_id[]");
      if (!id.ok()) return r.Wrap(id.status());
      if (*id < 0 || *id >= c.vocab_size) {
        return r.Error("eos_token_id", "entries must be token ids below vocab_size (got " +
                                           std::to_string(*id) + ")");
      }
      c.eos_token_ids.push_back(*id);
    }
  } else if (c.eos_token_id) {
    c.eos_token_ids.push_back(*c.eos_token_id);
  }
  TY_ASSIGN_OR_RETURN(c.torch_dtype, r.String("torch_dtype", "float32"));
  if (c.torch_dtype != "float32" && c.torch_dtype != "bfloat16" && c.torch_dtype != "float16") {
    return r.Error("torch_dtype", "must be float32, bfloat16 or float16 (got \"" +
                                      c.torch_dtype.substr(0, 40) + "\")");
  }
  return c;
}

Result<ModelConfig> ModelConfig::FromFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(path + " does not exist or cannot be read");
  std::ostringstream text;
  text << in.rdbuf();
  if (text.str().size() > (size_t{16} << 20)) {
    return Status::InvalidArgument(path + " is larger than 16 MB; it is not a config.json");
  }
  return FromJson(text.str(), path);
}

std::string ModelConfig::ToJson() const {
  json::object o;
  o["architectures"] = json::array{json::value(ArchitectureName(model_type))};
  o["model_type"] = model_type;
  o["vocab_size"] = vocab_size;
  if (family == ModelFamily::kGpt2) {
    o["n_embd"] = hidden_size;
    o["n_layer"] = num_hidden_layers;
    o["n_head"] = num_attention_heads;
    o["n_inner"] = intermediate_size;
    o["n_positions"] = max_position_embeddings;
    o["layer_norm_epsilon"] = norm_eps;
    o["activation_function"] = hidden_act;
  } else {
    o["hidden_size"] = hidden_size;
    o["intermediate_size"] = intermediate_size;
    o["num_hidden_layers"] = num_hidden_layers;
    o["num_attention_heads"] = num_attention_heads;
    o["num_key_value_heads"] = num_key_value_heads;
    o["head_dim"] = head_dim;
    o["max_position_embeddings"] = max_position_embeddings;
    o["rms_norm_eps"] = norm_eps;
    o["rope_theta"] = rope_theta;
    if (rope_scaling.type.empty()) {
      o["rope_scaling"] = nullptr;
    } else {
      json::object rs;
      rs["rope_type"] = rope_scaling.type;
      rs["type"] = rope_scaling.type;
      rs["factor"] = rope_scaling.factor;
      if (rope_scaling.type == "llama3") {
        rs["low_freq_factor"] = rope_scaling.low_freq_factor;
        rs["high_freq_factor"] = rope_scaling.high_freq_factor;
        rs["original_max_position_embeddings"] = rope_scaling.original_max_position_embeddings;
      }
      o["rope_scaling"] = std::move(rs);
    }
    if (model_type != "qwen2") o["attention_bias"] = attention_bias;
    o["mlp_bias"] = mlp_bias;
    o["hidden_act"] = hidden_act;
    if (model_type == "mistral") {
      o["sliding_window"] = sliding_window > 0 ? json::value(sliding_window) : json::value(nullptr);
    }
  }
  o["tie_word_embeddings"] = tie_word_embeddings;
  o["initializer_range"] = initializer_range;
  if (bos_token_id) o["bos_token_id"] = *bos_token_id;
  if (eos_token_ids.size() > 1) {
    json::array ids;
    for (int64_t id : eos_token_ids) ids.push_back(id);
    o["eos_token_id"] = std::move(ids);
  } else if (eos_token_id) {
    o["eos_token_id"] = *eos_token_id;
  }
  o["torch_dtype"] = torch_dtype;
  return json::serialize(o);
}

}  // namespace trainyard::model
