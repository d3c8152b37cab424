// step_bench: the replica's forward steps alone (no HTTP, no sampling), to see where serving
// time goes and to compare changes to the runner: a C-prompt prefill planned as the engine
// plans it (PlanPrefill under DefaultPrefillBudget), then decode steps of the C sequences.
// Prints one JSON line: prefill ms and GFLOP/s, decode ms per step (median of the steps) and
// GFLOP/s. FLOPs count the matrix products (2 per weight per token) and attention.
//
//   step_bench <model_dir> [--concurrency 32] [--prompt-tokens 64,115] [--decode-steps 32]
//              [--rounds 3] [--device cpu] [--prefill-budget TOKENS]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "trainyard/model/nn/device.h"
#include "trainyard/model/nn/model.h"
#include "trainyard/serving/engine/runner.h"
#include "trainyard/serving/engine/schedule.h"

namespace {

using namespace trainyard;
using namespace trainyard::serving;
using Clock = std::chrono::steady_clock;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: step_bench <model_dir> [--concurrency C] [--prompt-tokens MIN,MAX] "
                 "[--decode-steps N] [--rounds R] [--device cpu|cuda] [--prefill-budget TOKENS]\n");
    return 2;
  }
  std::string dir = argv[1], device_name = "cpu";
  int64_t concurrency = 32, min_len = 64, max_len = 115, decode_steps = 32, rounds = 3;
  int64_t prefill_budget = 0;  // 0: the engine's DefaultPrefillBudget
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--concurrency")
      concurrency = std::stoll(value);
    else if (flag == "--decode-steps")
      decode_steps = std::stoll(value);
    else if (flag == "--rounds")
      rounds = std::stoll(value);
    else if (flag == "--device")
      device_name = value;
    else if (flag == "--prefill-budget")
      prefill_budget = std::stoll(value);
    else if (flag == "--prompt-tokens") {
      min_len = std::stoll(value.substr(0, value.find(',')));
      max_len = std::stoll(value.substr(value.find(',') + 1));
    } else {
      std::fprintf(stderr, "step_bench: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  auto device = model::ResolveDevice(device_name);
  if (!device.ok()) return std::fprintf(stderr, "%s\n", device.status().ToString().c_str()), 1;
  auto loaded = model::LoadPretrained(dir, *device, torch::kFloat32);
  if (!loaded.ok()) return std::fprintf(stderr, "%s\n", loaded.status().ToString().c_str()), 1;
  auto runner = ModelRunner::Create(*loaded);
  if (!runner.ok()) return std::fprintf(stderr, "%s\n", runner.status().ToString().c_str()), 1;
  const model::ModelConfig& c = (*runner)->config();
  // Parameters that every token multiplies: the projections and the lm_head (not embeddings).
  double per_token = 0;
  for (const auto& p : (*loaded)->named_parameters(true)) {
    if (p.value().dim() == 2 && p.key().find("embed") == std::string::npos &&
        p.key().find("wte") == std::string::npos && p.key().find("wpe") == std::string::npos) {
      per_token += 2.0 * static_cast<double>(p.value().numel());
    }
  }
  if (c.tie_word_embeddings) per_token += 2.0 * c.vocab_size * c.hidden_size;
  double attn_per_pair = 4.0 * c.num_attention_heads * c.head_dim * c.num_hidden_layers;

  std::mt19937_64 rng(7);
  std::vector<double> prefill_ms, decode_ms;
  double prefill_flops = 0, decode_flops_per_step = 0;
  int64_t forwards = 0;
  for (int64_t round = 0; round < rounds + 1; ++round) {  // round 0 warms up
    std::vector<std::vector<int64_t>> tokens(concurrency);
    std::vector<KvCache> caches(concurrency);
    std::vector<int64_t> lengths;
    for (auto& t : tokens) {
      int64_t n = min_len + static_cast<int64_t>(rng() % (max_len - min_len + 1));
      for (int64_t j = 0; j < n; ++j) t.push_back(static_cast<int64_t>(rng() % c.vocab_size));
      lengths.push_back(n);
    }
    PrefillBudget budget = DefaultPrefillBudget(device->is_cpu(), c.num_attention_heads);
    if (prefill_budget > 0) budget.tokens = prefill_budget;
    auto plan = PlanPrefill(lengths, budget);
    auto t0 = Clock::now();
    double flops = 0;
    for (const auto& group : plan) {
      std::vector<SequenceStep> steps;
      for (size_t i : group) {
        steps.push_back({&tokens[i], &caches[i], -1});
        double n = static_cast<double>(lengths[i]);
        flops += per_token * n + attn_per_pair * n * (n + 1) / 2;
      }
      (*runner)->Forward(steps).to(torch::kCPU);
    }
    if (round > 0) {
      prefill_ms.push_back(Ms(Clock::now() - t0));
      prefill_flops = flops;
      forwards = static_cast<int64_t>(plan.size());
    }
    for (int64_t s = 0; s < decode_steps; ++s) {
      std::vector<SequenceStep> steps;
      double f = 0;
      for (int64_t i = 0; i < concurrency; ++i) {
        tokens[i].assign(1, static_cast<int64_t>(rng() % c.vocab_size));
        steps.push_back({&tokens[i], &caches[i], -1});
        f += per_token + attn_per_pair * static_cast<double>(caches[i].length + 1);
      }
      auto d0 = Clock::now();
      (*runner)->Forward(steps).to(torch::kCPU);
      if (round > 0) decode_ms.push_back(Ms(Clock::now() - d0));
      decode_flops_per_step = f;
    }
  }
  double p = Median(prefill_ms), d = Median(decode_ms);
  std::printf(
      "{\"concurrency\": %lld, \"prefill_forwards\": %lld, \"prefill_ms\": %.1f, "
      "\"prefill_gflops\": %.1f, \"decode_step_ms\": %.2f, \"decode_gflops\": %.1f, "
      "\"decode_tokens_per_s\": %.1f}\n",
      static_cast<long long>(concurrency), static_cast<long long>(forwards), p,
      prefill_flops / p / 1e6, d, decode_flops_per_step / d / 1e6,
      static_cast<double>(concurrency) * 1000.0 / d);
  return 0;
}
