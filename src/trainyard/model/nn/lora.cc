#include "trainyard/model/nn/lora.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "trainyard/common/json.h"
#include "trainyard/model/nn/layers.h"
#include "trainyard/model/safetensors.h"

namespace trainyard::model {
namespace {

using nn_internal::Projection;

constexpr const char* kPeftPrefix = "base_model.model.";

bool IsLoraName(const std::string& name) {
  return name.find(".lora_A.") != std::string::npos || name.find(".lora_B.") != std::string::npos;
}

// PEFT's rule: a target matches a module whose full name equals it or ends with "." + it.
bool MatchesTarget(const std::string& module, const std::vector<std::string>& targets) {
  for (const std::string& t : targets) {
    if (module == t) return true;
    if (module.size() > t.size() && module.compare(module.size() - t.size(), t.size(), t) == 0 &&
        module[module.size() - t.size() - 1] == '.') {
      return true;
    }
  }
  return false;
}

std::string SafetensorsDtype(torch::Dtype dtype) {
  switch (dtype) {
    case torch::kFloat16:
      return "F16";
    case torch::kBFloat16:
      return "BF16";
    default:
      return "F32";
  }
}

Status WriteTextAtomically(const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << text;
    if (!f) return Status::IOError("cannot write " + tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return Status::IOError("cannot write " + path + ": " + ec.message());
  return Status::Ok();
}

}  // namespace

Result<int> ApplyLora(CausalLM& model, const LoraConfig& config, uint64_t seed) {
  if (config.rank < 1 || config.rank > 4096) {
    return Status::InvalidArgument("lora.rank must be between 1 and 4096 (got " +
                                   std::to_string(config.rank) + ")");
  }
  if (!std::isfinite(config.alpha) || config.alpha <= 0) {
    return Status::InvalidArgument("lora.alpha must be a positive number");
  }
  if (!(config.dropout >= 0.0 && config.dropout < 1.0)) {
    return Status::InvalidArgument("lora.dropout must be in [0, 1)");
  }
  std::vector<std::pair<std::string, std::shared_ptr<Projection>>> targets;
  std::set<std::string> available;
  for (const auto& item : model.named_modules()) {
    auto p = std::dynamic_pointer_cast<Projection>(item.value());
    if (!p) continue;
    const std::string& name = item.key();
    available.insert(name.substr(name.rfind('.') + 1));
    if (MatchesTarget(name, config.target_modules)) targets.emplace_back(name, p);
  }
  if (targets.empty()) {
    std::string names;
    for (const std::string& n : available) names += (names.empty() ? "" : ", ") + n;
    return Status::InvalidArgument("lora.target_modules matches no layer of this " +
                                   model.config().model_type + " model; its layers are " + names);
  }
  for (const auto& t : targets) {
    if (t.second->has_lora()) {
      return Status::FailedPrecondition(t.first + " already has a LoRA adapter");
    }
  }
  for (auto& p : model.parameters()) p.set_requires_grad(false);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  double scale = config.alpha / static_cast<double>(config.rank);
  for (auto& t : targets) t.second->AddLora(config.rank, scale, config.dropout, gen);
  return static_cast<int>(targets.size());
}

std::map<std::string, torch::Tensor> LoraStateDict(CausalLM& model) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& p : model.named_parameters(true)) {
    if (IsLoraName(p.key())) out[kPeftPrefix + p.key()] = p.value();
  }
  return out;
}

Status LoadLoraStateDict(CausalLM& model, const std::map<std::string, torch::Tensor>& tensors) {
  torch::NoGradGuard no_grad;
  auto params = model.named_parameters(true);
  std::set<std::string> loaded;
  for (const auto& [key, src] : tensors) {
    std::string name = key;
    if (name.rfind(kPeftPrefix, 0) == 0) name = name.substr(std::string(kPeftPrefix).size());
    // PEFT's in-memory names carry the adapter name ("lora_A.default.weight").
    for (const char* part : {".lora_A.default.", ".lora_B.default."}) {
      size_t at = name.find(part);
      if (at != std::string::npos) name.replace(at, std::string(part).size(), std::string(part, 8));
    }
    torch::Tensor* dst = IsLoraName(name) ? params.find(name) : nullptr;
    if (!dst) {
      return Status::InvalidArgument(
          "adapter tensor " + key +
          " matches no LoRA layer of the model; apply LoRA with the adapter's target_modules "
          "first");
    }
    if (dst->sizes() != src.sizes()) {
      return Status::InvalidArgument("adapter tensor " + key + " has shape " +
                                     c10::str(src.sizes()) + " but the model's is " +
                                     c10::str(dst->sizes()) + "; is the rank the same?");
    }
    dst->copy_(src);
    loaded.insert(name);
  }
  for (const auto& p : params) {
    if (IsLoraName(p.key()) && !loaded.count(p.key())) {
      return Status::InvalidArgument("the adapter has no tensor " + std::string(kPeftPrefix) +
                                     p.key());
    }
  }
  return Status::Ok();
}

Status MergeLora(CausalLM& model) {
  for (const auto& item : model.named_modules()) {
    if (auto p = std::dynamic_pointer_cast<Projection>(item.value())) p->MergeLora();
  }
  return Status::Ok();
}

Status SavePeftAdapter(CausalLM& model, const LoraConfig& config, const std::string& dir,
                       const std::string& base_model_name_or_path) {
  auto tensors = LoraStateDict(model);
  if (tensors.empty()) {
    return Status::FailedPrecondition("the model has no LoRA adapters to save (ApplyLora first)");
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::IOError("cannot create " + dir + ": " + ec.message());
  std::vector<torch::Tensor> keep;
  std::vector<TensorToWrite> out;
  for (const auto& [name, t] : tensors) {
    torch::Tensor c = t.detach().to(torch::kCPU).contiguous();
    keep.push_back(c);
    out.push_back({name,
                   SafetensorsDtype(c.scalar_type()),
                   c.sizes().vec(),
                   {static_cast<const std::byte*>(c.data_ptr()), c.nbytes()}});
  }
  TY_RETURN_IF_ERROR(WriteSafetensors(dir + "/adapter_model.safetensors", out, {{"format", "pt"}}));

  json::object o;
  o["peft_type"] = "LORA";
  o["task_type"] = "CAUSAL_LM";
  o["base_model_name_or_path"] = base_model_name_or_path;
  o["r"] = config.rank;
  o["lora_alpha"] = config.alpha;
  o["lora_dropout"] = config.dropout;
  json::array targets;
  for (const std::string& t : config.target_modules) targets.emplace_back(t);
  o["target_modules"] = std::move(targets);
  o["fan_in_fan_out"] = model.config().family == ModelFamily::kGpt2;
  o["bias"] = "none";
  o["inference_mode"] = true;
  o["init_lora_weights"] = true;
  o["use_rslora"] = false;
  o["use_dora"] = false;
  o["modules_to_save"] = nullptr;
  o["layers_to_transform"] = nullptr;
  o["layers_pattern"] = nullptr;
  o["rank_pattern"] = json::object();
  o["alpha_pattern"] = json::object();
  o["revision"] = nullptr;
  return WriteTextAtomically(dir + "/adapter_config.json", json::serialize(o) + "\n");
}

Result<LoraConfig> ReadPeftAdapterConfig(const std::string& dir) {
  std::string path = dir + "/adapter_config.json";
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(path + " does not exist; is " + dir + " a PEFT adapter?");
  std::stringstream text;
  text << in.rdbuf();
  auto parsed = ParseJsonObject(text.str());
  if (!parsed.ok()) return parsed.status().WithContext(path);
  const json::object& o = *parsed;
  auto field = [&](const Status& s) { return s.WithContext(path); };
  auto peft_type = OptionalString(o, "peft_type");
  if (!peft_type.ok()) return field(peft_type.status());
  if (peft_type->value_or("") != "LORA") {
    return Status::InvalidArgument(path + ": peft_type must be LORA (got \"" +
                                   peft_type->value_or("") + "\")");
  }
  LoraConfig c;
  auto r = RequiredInt64(o, "r");
  if (!r.ok()) return field(r.status());
  c.rank = *r;
  auto alpha = RequiredDouble(o, "lora_alpha");
  if (!alpha.ok()) return field(alpha.status());
  c.alpha = *alpha;
  auto dropout = OptionalDouble(o, "lora_dropout");
  if (!dropout.ok()) return field(dropout.status());
  c.dropout = dropout->value_or(0.0);
  auto targets = OptionalArray(o, "target_modules");
  if (!targets.ok()) return field(targets.status());
  if (!*targets) {
    return Status::InvalidArgument(path + ": target_modules must be a list of module names");
  }
  c.target_modules.clear();
  for (const auto& t : **targets) {
    auto s = AsString(t, "target_modules[]");
    if (!s.ok()) return field(s.status());
    c.target_modules.push_back(*s);
  }
  for (const char* unsupported : {"use_dora", "use_rslora"}) {
    auto flag = OptionalBool(o, unsupported);
    if (flag.ok() && flag->value_or(false)) {
      return Status::InvalidArgument(path + ": " + unsupported + " adapters are not supported");
    }
  }
  return c;
}

Result<LoraConfig> LoadPeftAdapter(CausalLM& model, const std::string& dir, uint64_t seed) {
  TY_ASSIGN_OR_RETURN(LoraConfig config, ReadPeftAdapterConfig(dir));
  std::string path = dir + "/adapter_model.safetensors";
  TY_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(path));
  std::map<std::string, torch::Tensor> tensors;
  for (const SafetensorsEntry& e : file->header().tensors) {
    torch::Dtype dtype;
    if (e.dtype == "F32") {
      dtype = torch::kFloat32;
    } else if (e.dtype == "BF16") {
      dtype = torch::kBFloat16;
    } else if (e.dtype == "F16") {
      dtype = torch::kFloat16;
    } else {
      return Status::InvalidArgument(path + ": tensor " + e.name + " has dtype " + e.dtype +
                                     "; adapters must be F32, F16 or BF16");
    }
    auto bytes = file->Data(e);
    torch::Tensor t = torch::empty(e.shape, torch::TensorOptions().dtype(dtype));
    std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
    tensors[e.name] = t;
  }
  TY_RETURN_IF_ERROR(ApplyLora(model, config, seed).status());
  Status s = LoadLoraStateDict(model, tensors);
  if (!s.ok()) return s.WithContext(path);
  return config;
}

}  // namespace trainyard::model
