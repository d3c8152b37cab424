// hf_roundtrip_tool: test-only program for tests/test_hf_interop.py. Loads a Hugging Face
// model directory, applies LoRA with random (non-zero) A and B, writes the PEFT adapter to
// <out>/adapter and the merged model to <out>/merged, and prints one JSON object:
// {"input_ids": [[...]], "shape": [B, T, V], "adapter_logits": [...], "merged_logits": [...]}.
//
//   hf_roundtrip_tool <model_dir> <out_dir> <target,target,...>
#include <cstdio>
#include <string>
#include <vector>

#include "trainyard/common/json.h"
#include "trainyard/model/nn/lora.h"
#include "trainyard/model/nn/model.h"

namespace {

using namespace trainyard;
using namespace trainyard::model;

json::array Flat(const torch::Tensor& t) {
  torch::Tensor c = t.to(torch::kFloat64).contiguous().reshape({-1});
  json::array out;
  const double* p = c.data_ptr<double>();
  for (int64_t i = 0; i < c.numel(); ++i) out.push_back(p[i]);
  return out;
}

int Fail(const Status& s) {
  std::fprintf(stderr, "hf_roundtrip_tool: %s\n", s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: hf_roundtrip_tool <model_dir> <out_dir> <targets>\n");
    return 2;
  }
  std::string model_dir = argv[1], out_dir = argv[2];
  LoraConfig lora;
  lora.rank = 4;
  lora.alpha = 8;
  lora.target_modules.clear();
  for (std::string rest = argv[3]; !rest.empty();) {
    size_t comma = rest.find(',');
    lora.target_modules.push_back(rest.substr(0, comma));
    rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
  }
  auto model = LoadPretrained(model_dir, torch::kCPU, torch::kFloat32);
  if (!model.ok()) return Fail(model.status());
  CausalLM& m = **model;
  auto wrapped = ApplyLora(m, lora, 11);
  if (!wrapped.ok()) return Fail(wrapped.status());
  {
    torch::NoGradGuard no_grad;
    auto gen = at::make_generator<at::CPUGeneratorImpl>(12);
    for (auto& [name, t] : LoraStateDict(m)) {
      if (name.find("lora_B") != std::string::npos) t.normal_(0.0, 0.2, gen);
    }
  }
  m.eval();
  torch::NoGradGuard no_grad;
  torch::Tensor ids =
      torch::tensor({{5, 17, 99, 3, 42, 8, 11, 250}, {1, 2, 3, 4, 5, 6, 7, 8}}, torch::kInt64);
  torch::Tensor adapter_logits = m.Forward(ids);
  Status s = SavePeftAdapter(m, lora, out_dir + "/adapter", model_dir);
  if (!s.ok()) return Fail(s);
  s = MergeLora(m);
  if (!s.ok()) return Fail(s);
  torch::Tensor merged_logits = m.Forward(ids);
  s = SavePretrained(m, out_dir + "/merged");
  if (!s.ok()) return Fail(s);

  json::object out;
  json::array id_rows;
  for (int64_t r = 0; r < ids.size(0); ++r) {
    json::array row;
    for (int64_t c = 0; c < ids.size(1); ++c) row.push_back(ids[r][c].item<int64_t>());
    id_rows.push_back(std::move(row));
  }
  out["input_ids"] = std::move(id_rows);
  out["shape"] =
      json::array{adapter_logits.size(0), adapter_logits.size(1), adapter_logits.size(2)};
  out["adapter_logits"] = Flat(adapter_logits);
  out["merged_logits"] = Flat(merged_logits);
  std::printf("%s\n", json::serialize(out).c_str());
  return 0;
}
