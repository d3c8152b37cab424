#include "trainyard/serving/engine/engine.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "trainyard/model/nn/model.h"
#include "trainyard/serving/engine/runner.h"
#include "trainyard/testing/status_matchers.h"

namespace trainyard::serving {
namespace {

std::string Fixture(const std::string& name) {
  return std::string(TRAINYARD_SOURCE_DIR) + "/tests/fixtures/train/models/" + name;
}

struct Output {
  std::vector<int32_t> tokens;
  FinishReason reason = FinishReason::kError;
  int64_t completion_tokens = 0;
};

Output Drain(GenerationStream& stream) {
  Output out;
  GenerationEvent e;
  while (stream.Next(&e)) {
    EXPECT_TRUE(e.error.ok()) << e.error.ToString();
    out.tokens.insert(out.tokens.end(), e.token_ids.begin(), e.token_ids.end());
    if (e.finished) {
      out.reason = e.finish_reason;
      out.completion_tokens = e.completion_tokens;
    }
  }
  return out;
}

std::unique_ptr<Engine> LoadEngine(const std::string& model, int max_batch,
                                   std::vector<std::pair<std::string, std::string>> adapters = {}) {
  EngineOptions options;
  options.model_dir = Fixture(model);
  options.device = "cpu";
  options.max_batch = max_batch;
  options.adapters = std::move(adapters);
  auto engine = Engine::Load(options);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  return engine.ok() ? std::move(*engine) : nullptr;
}

GenerationRequest Greedy(std::vector<int32_t> prompt, int64_t max_tokens,
                         std::string adapter = "") {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.adapter = std::move(adapter);
  r.sampling.temperature = 0;
  r.sampling.max_tokens = max_tokens;
  r.sampling.ignore_eos = true;
  return r;
}

const std::vector<std::vector<int32_t>> kPrompts = {
    {5, 17, 99, 3, 42, 8, 11, 250}, {1, 2, 3}, {7}, {300, 12, 44, 9, 81, 100, 2, 6, 19, 23, 4}};

// The cached forward (prefill, then one token at a time) gives the logits of the training
// forward over the whole sequence.
TEST(ModelRunnerTest, CachedDecodingMatchesTheFullForward) {
  for (const char* name : {"llama", "qwen2", "gpt2"}) {
    SCOPED_TRACE(name);
    TY_ASSERT_OK_AND_ASSIGN(auto model,
                            model::LoadPretrained(Fixture(name), torch::kCPU, torch::kFloat32));
    TY_ASSERT_OK_AND_ASSIGN(auto runner, ModelRunner::Create(model));
    std::vector<int64_t> seq = {5, 17, 99, 3, 42, 8, 11, 250, 31, 77};
    KvCache cache;
    std::vector<int64_t> prefix(seq.begin(), seq.begin() + 6);
    torch::Tensor logits = runner->Forward({{&prefix, &cache, -1}});
    for (size_t i = 6; i < seq.size(); ++i) {
      std::vector<int64_t> one = {seq[i]};
      logits = runner->Forward({{&one, &cache, -1}});
    }
    EXPECT_EQ(cache.length, static_cast<int64_t>(seq.size()));
    torch::NoGradGuard no_grad;
    torch::Tensor full = model->Forward(torch::tensor(seq).unsqueeze(0));
    torch::Tensor expected = full.select(1, full.size(1) - 1);
    EXPECT_LT((logits - expected).abs().max().item<double>(), 1e-4);
  }
}

// One batched step over sequences of different lengths, adapters and (out of order) cache
// slots gives each sequence the logits it gets alone: padding never leaks into attention,
// the grouped LoRA update reaches only its rows, and freed slots are reused cleanly.
TEST(ModelRunnerTest, BatchedStepsMatchEachSequenceAlone) {
  for (const char* name : {"llama", "qwen2", "gpt2"}) {
    SCOPED_TRACE(name);
    TY_ASSERT_OK_AND_ASSIGN(auto model,
                            model::LoadPretrained(Fixture(name), torch::kCPU, torch::kFloat32));
    TY_ASSERT_OK_AND_ASSIGN(auto runner, ModelRunner::Create(model));
    int tuned = -1;
    if (std::string(name) != "qwen2") {
      TY_ASSERT_OK_AND_ASSIGN(tuned, runner->AddAdapter(Fixture(std::string(name) + "_lora")));
    }
    std::vector<std::vector<int64_t>> prompts = {
        {5, 17, 99, 3, 42, 8, 11, 250}, {1, 2, 3}, {7}, {300, 12, 44, 9, 81, 100, 2, 6, 19}};
    std::vector<int> adapters = {-1, tuned, tuned, -1};
    const int decode_steps = 3;
    // Alone: each sequence with its own cache, one at a time; its caches die before the batch
    // runs, so the batch reuses their slots.
    std::vector<std::vector<torch::Tensor>> alone(prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
      KvCache cache;
      torch::Tensor logits = runner->Forward({{&prompts[i], &cache, adapters[i]}});
      alone[i].push_back(logits[0]);
      for (int s = 0; s < decode_steps; ++s) {
        std::vector<int64_t> next = {logits[0].argmax().item<int64_t>()};
        logits = runner->Forward({{&next, &cache, adapters[i]}});
        alone[i].push_back(logits[0]);
      }
    }
    std::vector<KvCache> caches(prompts.size());
    std::vector<SequenceStep> steps;
    for (size_t i = 0; i < prompts.size(); ++i) {
      steps.push_back({&prompts[i], &caches[i], adapters[i]});
    }
    torch::Tensor logits = runner->Forward(steps);
    std::vector<std::vector<int64_t>> next(prompts.size());
    for (int s = 0; s <= decode_steps; ++s) {
      for (size_t i = 0; i < prompts.size(); ++i) {
        auto row = static_cast<int64_t>(i);
        EXPECT_LT((logits[row] - alone[i][s]).abs().max().item<double>(), 1e-4)
            << "sequence " << i << ", step " << s;
        next[i] = {logits[row].argmax().item<int64_t>()};
      }
      if (s == decode_steps) break;
      // Decode in reverse order: the slots are then not consecutive in the batch's order.
      std::vector<SequenceStep> decode;
      for (size_t i = prompts.size(); i-- > 0;)
        decode.push_back({&next[i], &caches[i], adapters[i]});
      torch::Tensor reversed = runner->Forward(decode);
      logits = reversed.flip(0);
    }
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(caches[i].length, static_cast<int64_t>(prompts[i].size()) + decode_steps);
    }
  }
}

// Continuous batching changes nothing: each prompt alone and all of them in one batch (some
// with an adapter) give the same greedy tokens.
TEST(EngineTest, BatchedGreedyEqualsUnbatched) {
  auto engine = LoadEngine("llama", 8, {{"tuned", Fixture("llama_lora")}});
  ASSERT_TRUE(engine);
  std::vector<Output> alone;
  for (size_t i = 0; i < kPrompts.size() * 2; ++i) {
    std::string adapter = i % 2 ? "tuned" : "";
    TY_ASSERT_OK_AND_ASSIGN(auto s,
                            engine->Submit(Greedy(kPrompts[i / 2], 12 + int64_t(i), adapter)));
    alone.push_back(Drain(*s));
    EXPECT_EQ(alone.back().tokens.size(), 12 + i);
    EXPECT_EQ(alone.back().reason, FinishReason::kLength);
  }
  // The adapter changes the output, so equality below is not vacuous.
  EXPECT_NE(alone[0].tokens,
            std::vector<int32_t>(alone[1].tokens.begin(), alone[1].tokens.begin() + 12));
  std::vector<std::shared_ptr<GenerationStream>> streams;
  for (size_t i = 0; i < kPrompts.size() * 2; ++i) {
    std::string adapter = i % 2 ? "tuned" : "";
    TY_ASSERT_OK_AND_ASSIGN(auto s,
                            engine->Submit(Greedy(kPrompts[i / 2], 12 + int64_t(i), adapter)));
    streams.push_back(s);
  }
  for (size_t i = 0; i < streams.size(); ++i) {
    EXPECT_EQ(Drain(*streams[i]).tokens, alone[i].tokens) << "request " << i;
  }
}

// A request that arrives while others decode joins the running batch and still gets its own
// greedy output.
TEST(EngineTest, LateRequestsJoinTheRunningBatch) {
  auto engine = LoadEngine("llama", 4);
  ASSERT_TRUE(engine);
  TY_ASSERT_OK_AND_ASSIGN(auto ref_stream, engine->Submit(Greedy(kPrompts[1], 20)));
  Output reference = Drain(*ref_stream);
  // 200 decode steps: the late request (20 tokens) runs inside them.
  TY_ASSERT_OK_AND_ASSIGN(auto long_stream, engine->Submit(Greedy(kPrompts[0], 200)));
  GenerationEvent first;
  ASSERT_TRUE(long_stream->Next(&first));  // the long request is running now
  TY_ASSERT_OK_AND_ASSIGN(auto late, engine->Submit(Greedy(kPrompts[1], 20)));
  EXPECT_EQ(Drain(*late).tokens, reference.tokens);
  Output rest = Drain(*long_stream);
  EXPECT_EQ(first.token_ids.size() + rest.tokens.size(), 200u);
}

TEST(EngineTest, SameSeedSameSampleDifferentSeedDifferent) {
  auto engine = LoadEngine("qwen2", 4);
  ASSERT_TRUE(engine);
  auto sample = [&](uint64_t seed) {
    GenerationRequest r = Greedy(kPrompts[0], 24);
    r.sampling.temperature = 1.5;
    r.sampling.top_k = 100;
    r.sampling.top_p = 0.95;
    r.sampling.seed = seed;
    auto s = engine->Submit(std::move(r));
    EXPECT_TRUE(s.ok());
    return s.ok() ? Drain(**s).tokens : std::vector<int32_t>{};
  };
  std::vector<int32_t> a = sample(7);
  EXPECT_EQ(a.size(), 24u);
  EXPECT_EQ(sample(7), a);
  EXPECT_NE(sample(8), a);
}

// Each choice's events, by index.
std::vector<Output> DrainChoices(GenerationStream& stream, int n) {
  std::vector<Output> out(static_cast<size_t>(n));
  GenerationEvent e;
  while (stream.Next(&e)) {
    EXPECT_TRUE(e.error.ok()) << e.error.ToString();
    Output& o = out.at(static_cast<size_t>(e.index));
    EXPECT_EQ(o.reason, FinishReason::kError) << "an event after choice " << e.index << "'s last";
    o.tokens.insert(o.tokens.end(), e.token_ids.begin(), e.token_ids.end());
    if (e.finished) {
      o.reason = e.finish_reason;
      o.completion_tokens = e.completion_tokens;
    }
  }
  return out;
}

// n choices share one prefill (the forks copy its cache) and sample with seed + index: choice
// i is what a lone request with seed + i gives, with an adapter too, and greedy choices are
// the greedy output.
TEST(EngineTest, ChoicesAreLoneRequestsWithSeedPlusIndex) {
  auto engine = LoadEngine("llama", 8, {{"tuned", Fixture("llama_lora")}});
  ASSERT_TRUE(engine);
  auto sampled = [](uint64_t seed, int n) {
    GenerationRequest r = Greedy(kPrompts[3], 16, "tuned");
    r.sampling.temperature = 1.3;
    r.sampling.seed = seed;
    r.n = n;
    return r;
  };
  std::vector<std::vector<int32_t>> alone;
  for (uint64_t seed = 7; seed < 10; ++seed) {
    TY_ASSERT_OK_AND_ASSIGN(auto s, engine->Submit(sampled(seed, 1)));
    alone.push_back(Drain(*s).tokens);
  }
  EXPECT_NE(alone[0], alone[1]);
  // Beside another request, so the choices run in a batch with a stranger.
  TY_ASSERT_OK_AND_ASSIGN(auto other, engine->Submit(Greedy(kPrompts[0], 20)));
  TY_ASSERT_OK_AND_ASSIGN(auto s, engine->Submit(sampled(7, 3)));
  std::vector<Output> choices = DrainChoices(*s, 3);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(choices[i].tokens, alone[i]) << "choice " << i;
    EXPECT_EQ(choices[i].reason, FinishReason::kLength);
    EXPECT_EQ(choices[i].completion_tokens, 16);
  }
  EXPECT_EQ(Drain(*other).tokens.size(), 20u);

  TY_ASSERT_OK_AND_ASSIGN(auto g1, engine->Submit(Greedy(kPrompts[1], 9)));
  std::vector<int32_t> greedy = Drain(*g1).tokens;
  GenerationRequest two = Greedy(kPrompts[1], 9);
  two.n = 2;
  TY_ASSERT_OK_AND_ASSIGN(auto g2, engine->Submit(two));
  for (const Output& o : DrainChoices(*g2, 2)) EXPECT_EQ(o.tokens, greedy);
}

// Log-probabilities are the log-softmax of the full forward's logits at each generated
// position, the greedy token is the most likely, and the top list is sorted.
TEST(EngineTest, LogprobsAreTheModelsLogSoftmax) {
  auto engine = LoadEngine("llama", 4);
  ASSERT_TRUE(engine);
  GenerationRequest r = Greedy(kPrompts[0], 6);
  r.sampling.top_logprobs = 3;
  TY_ASSERT_OK_AND_ASSIGN(auto s, engine->Submit(r));
  std::vector<TokenLogprob> got;
  std::vector<int32_t> tokens;
  GenerationEvent e;
  while (s->Next(&e)) {
    ASSERT_EQ(e.logprobs.size(), e.token_ids.size());
    tokens.insert(tokens.end(), e.token_ids.begin(), e.token_ids.end());
    got.insert(got.end(), e.logprobs.begin(), e.logprobs.end());
  }
  ASSERT_EQ(got.size(), 6u);
  TY_ASSERT_OK_AND_ASSIGN(auto model,
                          model::LoadPretrained(Fixture("llama"), torch::kCPU, torch::kFloat32));
  std::vector<int64_t> all(kPrompts[0].begin(), kPrompts[0].end());
  all.insert(all.end(), tokens.begin(), tokens.end());
  torch::NoGradGuard no_grad;
  torch::Tensor lp = torch::log_softmax(model->Forward(torch::tensor(all).unsqueeze(0))[0], -1);
  for (size_t j = 0; j < got.size(); ++j) {
    torch::Tensor row = lp[static_cast<int64_t>(kPrompts[0].size() + j - 1)];
    EXPECT_EQ(got[j].token, tokens[j]);
    EXPECT_NEAR(got[j].logprob, row[tokens[j]].item<float>(), 1e-4);
    ASSERT_EQ(got[j].top.size(), 3u);
    EXPECT_EQ(got[j].top[0].first, tokens[j]);
    auto [values, ids] = row.topk(3);
    for (int64_t k = 0; k < 3; ++k) {
      EXPECT_EQ(got[j].top[static_cast<size_t>(k)].first, ids[k].item<int64_t>());
      EXPECT_NEAR(got[j].top[static_cast<size_t>(k)].second, values[k].item<float>(), 1e-4);
    }
  }
}

TEST(EngineTest, CancelledRequestEndsWithCancelled) {
  auto engine = LoadEngine("llama", 4);
  ASSERT_TRUE(engine);
  TY_ASSERT_OK_AND_ASSIGN(auto s, engine->Submit(Greedy(kPrompts[0], 240)));
  s->Cancel();  // seen at admission or at the next decode step, long before 240 tokens
  Output out = Drain(*s);
  EXPECT_EQ(out.reason, FinishReason::kCancelled);
  EXPECT_LT(out.tokens.size(), 240u);
  // The engine goes on serving.
  TY_ASSERT_OK_AND_ASSIGN(auto next, engine->Submit(Greedy(kPrompts[1], 5)));
  EXPECT_EQ(Drain(*next).tokens.size(), 5u);
}

TEST(EngineTest, RefusesWhatCannotRun) {
  auto engine = LoadEngine("gpt2", 4);  // context 64
  ASSERT_TRUE(engine);
  TY_EXPECT_ERROR(engine->Submit(Greedy(std::vector<int32_t>(64, 5), 1)),
                  StatusCode::kInvalidArgument, "context is 64");
  TY_EXPECT_ERROR(engine->Submit(Greedy({1, 2, 3}, 62)), StatusCode::kInvalidArgument,
                  "at most 61");
  TY_EXPECT_ERROR(engine->Submit(Greedy({1, 2, 999}, 4)), StatusCode::kInvalidArgument,
                  "outside the vocabulary");
  TY_EXPECT_ERROR(engine->Submit(Greedy({1, 2}, 4, "nope")), StatusCode::kNotFound, "nope");
  GenerationRequest bad = Greedy({1}, 4);
  bad.sampling.top_p = 0;
  TY_EXPECT_ERROR(engine->Submit(bad), StatusCode::kInvalidArgument, "top_p");
  GenerationRequest none = Greedy({1}, 4);
  none.n = 0;
  TY_EXPECT_ERROR(engine->Submit(none), StatusCode::kInvalidArgument, "n must be");
  GenerationRequest many = Greedy({1}, 4);
  many.sampling.top_logprobs = kMaxTopLogprobs + 1;
  TY_EXPECT_ERROR(engine->Submit(many), StatusCode::kInvalidArgument, "top_logprobs");
  // The whole context can be used: 61 new tokens after 3.
  TY_ASSERT_OK_AND_ASSIGN(auto s, engine->Submit(Greedy({1, 2, 3}, 61)));
  EXPECT_EQ(Drain(*s).tokens.size(), 61u);
}

TEST(EngineTest, ThreadsAreValidatedAndSet) {
  EngineOptions options;
  options.model_dir = Fixture("gpt2");
  options.device = "cpu";
  options.threads = -1;
  TY_EXPECT_ERROR(Engine::Load(options), StatusCode::kInvalidArgument, "threads");
  options.threads = 1;
  TY_ASSERT_OK_AND_ASSIGN(auto engine, Engine::Load(options));
  EXPECT_EQ(torch::get_num_threads(), 1);
  options.threads = 2;
  TY_ASSERT_OK_AND_ASSIGN(engine, Engine::Load(options));
  EXPECT_EQ(torch::get_num_threads(), 2);
}

}  // namespace
}  // namespace trainyard::serving
