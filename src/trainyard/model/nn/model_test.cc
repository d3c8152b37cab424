#include "trainyard/model/nn/model.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "trainyard/common/json.h"
#include "trainyard/model/nn/generate.h"
#include "trainyard/model/nn/model_test_util.h"
#include "trainyard/model/safetensors.h"

namespace trainyard::model {
namespace {

using testutil::FixtureDir;
using testutil::LoadReference;
using testutil::MaxAbsDiff;
using testutil::ReferenceCase;
using testutil::ShiftedLoss;

class HfParityTest : public ::testing::TestWithParam<const char*> {};

TEST_P(HfParityTest, LogitsAndLossMatchTransformers) {
  auto model = LoadPretrained(FixtureDir(GetParam()), torch::kCPU, torch::kFloat32);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  (*model)->eval();
  torch::NoGradGuard no_grad;
  auto cases = LoadReference(FixtureDir(GetParam()));
  ASSERT_EQ(cases.size(), 2u);
  for (const ReferenceCase& c : cases) {
    torch::Tensor logits = (*model)->Forward(c.input_ids, c.position_ids);
    ASSERT_EQ(logits.sizes(), c.logits.sizes());
    EXPECT_LT(MaxAbsDiff(logits, c.logits), 1e-4) << GetParam();
    EXPECT_NEAR(ShiftedLoss(logits, c.labels), c.loss, 1e-4) << GetParam();
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HfParityTest, ::testing::Values("llama", "qwen2", "gpt2"));

ModelConfig TinyLlama() {
  ModelConfig c;
  c.model_type = "llama";
  c.vocab_size = 48;
  c.hidden_size = 32;
  c.intermediate_size = 64;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.max_position_embeddings = 64;
  c.norm_eps = 1e-6;
  return c;
}

TEST(CausalLMTest, PackedSegmentsEqualSeparateSequences) {
  for (const char* name : {"llama", "gpt2"}) {
    auto model = LoadPretrained(FixtureDir(name), torch::kCPU, torch::kFloat32);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    torch::NoGradGuard no_grad;
    torch::Tensor a = torch::tensor({5, 17, 99, 3}, torch::kInt64).unsqueeze(0);
    torch::Tensor b = torch::tensor({42, 8, 250}, torch::kInt64).unsqueeze(0);
    torch::Tensor packed = torch::cat({a, b}, 1);
    torch::Tensor pos = torch::tensor({0, 1, 2, 3, 0, 1, 2}, torch::kInt64).unsqueeze(0);
    torch::Tensor seg = torch::tensor({0, 0, 0, 0, 1, 1, 1}, torch::kInt64).unsqueeze(0);
    torch::Tensor together = (*model)->Forward(packed, pos, seg);
    torch::Tensor expected = torch::cat({(*model)->Forward(a), (*model)->Forward(b)}, 1);
    EXPECT_LT(MaxAbsDiff(together, expected), 1e-5) << name;
    // Without segment ids the second sequence sees the first, so the logits differ.
    EXPECT_GT(MaxAbsDiff((*model)->Forward(packed, pos), expected), 1e-3) << name;
  }
}

TEST(CausalLMTest, MistralSlidingWindowHidesOlderTokens) {
  ModelConfig c = TinyLlama();
  c.model_type = "mistral";
  c.sliding_window = 2;     // a token sees itself and the one before
  c.num_hidden_layers = 1;  // one layer: the window is not widened by stacking
  auto model = CreateModel(c, 4);
  ASSERT_TRUE(model.ok());
  torch::NoGradGuard no_grad;
  torch::Tensor a = torch::tensor({{5, 17, 9, 3, 42}}, torch::kInt64);
  torch::Tensor b = a.clone();
  b[0][0] = 30;  // change the first token only
  torch::Tensor la = (*model)->Forward(a), lb = (*model)->Forward(b);
  EXPECT_GT(MaxAbsDiff(la.select(1, 1), lb.select(1, 1)), 1e-4);       // position 1 sees token 0
  EXPECT_EQ(MaxAbsDiff(la.narrow(1, 2, 3), lb.narrow(1, 2, 3)), 0.0);  // the rest do not
}

class ScratchDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("model_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

using SavePretrainedTest = ScratchDirTest;

TEST_F(SavePretrainedTest, RoundTripsAndWritesTiedWeightsOnce) {
  for (const char* name : {"gpt2", "llama"}) {
    auto model = LoadPretrained(FixtureDir(name), torch::kCPU, torch::kFloat32);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    std::string out = (dir_ / name).string();
    ASSERT_TRUE(SavePretrained(**model, out).ok());
    auto again = LoadPretrained(out, torch::kCPU, torch::kFloat32);
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    torch::NoGradGuard no_grad;
    torch::Tensor ids = torch::tensor({{3, 9, 27, 81}}, torch::kInt64);
    EXPECT_EQ(MaxAbsDiff((*model)->Forward(ids), (*again)->Forward(ids)), 0.0) << name;
    auto file = SafetensorsFile::Open(out + "/model.safetensors");
    ASSERT_TRUE(file.ok());
    bool has_lm_head = false;
    for (const auto& e : (*file)->header().tensors) has_lm_head |= e.name == "lm_head.weight";
    EXPECT_EQ(has_lm_head, std::string(name) == "llama") << name;
    EXPECT_EQ((*file)->header().metadata.at("format"), "pt");
  }
}

TEST_F(SavePretrainedTest, LoadsGpt2CheckpointsWithBaseModelNames) {
  // openai-community/gpt2 stores "h.0.attn.c_attn.weight" (no "transformer.") and the old
  // causal-mask buffers "h.N.attn.bias"; both load.
  auto file = SafetensorsFile::Open(FixtureDir("gpt2") + "/model.safetensors");
  ASSERT_TRUE(file.ok());
  std::vector<TensorToWrite> renamed;
  std::vector<float> mask(4, 1.0f);
  for (const auto& e : (*file)->header().tensors) {
    renamed.push_back(
        {e.name.substr(std::string("transformer.").size()), e.dtype, e.shape, (*file)->Data(e)});
  }
  renamed.push_back({"h.0.attn.bias", "F32", {2, 2}, std::as_bytes(std::span(mask))});
  std::filesystem::copy_file(FixtureDir("gpt2") + "/config.json", dir_ / "config.json");
  ASSERT_TRUE(WriteSafetensors((dir_ / "model.safetensors").string(), renamed).ok());
  auto legacy = LoadPretrained(dir_.string(), torch::kCPU);
  ASSERT_TRUE(legacy.ok()) << legacy.status().ToString();
  auto current = LoadPretrained(FixtureDir("gpt2"), torch::kCPU);
  ASSERT_TRUE(current.ok());
  torch::NoGradGuard no_grad;
  torch::Tensor ids = torch::tensor({{3, 9, 27}}, torch::kInt64);
  EXPECT_EQ(MaxAbsDiff((*legacy)->Forward(ids), (*current)->Forward(ids)), 0.0);
}

TEST_F(SavePretrainedTest, Bf16LoadKeepsTheRequestedDtype) {
  auto model = LoadPretrained(FixtureDir("llama"), torch::kCPU, torch::kBFloat16);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  for (const auto& p : (*model)->parameters()) EXPECT_EQ(p.scalar_type(), torch::kBFloat16);
  torch::NoGradGuard no_grad;
  torch::Tensor logits = (*model)->Forward(torch::tensor({{3, 9, 27}}, torch::kInt64));
  EXPECT_EQ(logits.scalar_type(), torch::kFloat32);
  ASSERT_TRUE(SavePretrained(**model, (dir_ / "bf16").string()).ok());
  auto cfg = ModelConfig::FromFile((dir_ / "bf16" / "config.json").string());
  ASSERT_TRUE(cfg.ok());
  EXPECT_EQ(cfg->torch_dtype, "bfloat16");
}

TEST(LoadStateDictTest, NamesTheMismatchedTensor) {
  auto model = CreateModel(TinyLlama(), 1);
  ASSERT_TRUE(model.ok());
  std::map<std::string, torch::Tensor> bad = {
      {"model.layers.0.self_attn.q_proj.weight", torch::zeros({3, 3})}};
  Status s = LoadStateDict(**model, bad, true, false);
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_NE(s.message().find("model.layers.0.self_attn.q_proj.weight"), std::string::npos);
  s = LoadStateDict(**model, {{"model.layers.9.mlp.up_proj.weight", torch::zeros({1})}}, true,
                    false);
  EXPECT_NE(s.message().find("layers.9"), std::string::npos);
  EXPECT_TRUE(LoadStateDict(**model, {}, false, false).IsInvalidArgument());
  EXPECT_TRUE(LoadStateDict(**model, {}, true, false).ok());
  EXPECT_TRUE(LoadPretrained("/nonexistent", torch::kCPU).status().IsNotFound());
}

TEST(CreateModelTest, SeededAndNamedLikeTransformers) {
  auto a = CreateModel(TinyLlama(), 7);
  auto b = CreateModel(TinyLlama(), 7);
  ASSERT_TRUE(a.ok() && b.ok());
  auto pa = (*a)->named_parameters();
  auto pb = (*b)->named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (const auto& p : pa) EXPECT_TRUE(torch::equal(p.value(), pb[p.key()])) << p.key();
  EXPECT_NE(pa.find("model.layers.1.mlp.down_proj.weight"), nullptr);
  EXPECT_NE(pa.find("lm_head.weight"), nullptr);
  EXPECT_NEAR(pa["model.layers.0.self_attn.q_proj.weight"].std().item<double>(), 0.02, 0.005);
  EXPECT_EQ(pa["model.norm.weight"].sum().item<double>(), 32.0);
}

torch::Tensor LossOf(CausalLM& model, const torch::Tensor& ids) {
  torch::Tensor logits = model.Forward(ids);
  return torch::nn::functional::cross_entropy(
      logits.narrow(1, 0, ids.size(1) - 1).reshape({-1, logits.size(-1)}),
      ids.narrow(1, 1, ids.size(1) - 1).reshape({-1}));
}

TEST(CheckpointingTest, GradientsEqualThePlainOnes) {
  for (const char* family : {"llama", "gpt2"}) {
    auto model = LoadPretrained(FixtureDir(family), torch::kCPU, torch::kFloat32);
    ASSERT_TRUE(model.ok());
    CausalLM& m = **model;
    m.train();
    torch::Tensor ids = torch::tensor({{5, 17, 99, 3, 42, 8}, {1, 2, 3, 4, 5, 6}}, torch::kInt64);
    m.zero_grad();
    LossOf(m, ids).backward();
    std::map<std::string, torch::Tensor> plain;
    for (const auto& p : m.named_parameters()) plain[p.key()] = p.value().grad().clone();
    m.zero_grad();
    m.SetActivationCheckpointing(true);
    LossOf(m, ids).backward();
    for (const auto& p : m.named_parameters()) {
      ASSERT_TRUE(p.value().grad().defined()) << p.key();
      EXPECT_LT(MaxAbsDiff(p.value().grad(), plain[p.key()]), 1e-6) << family << " " << p.key();
    }
    EXPECT_GT(plain["lm_head.weight"].defined() ? plain["lm_head.weight"].abs().sum().item<double>()
                                                : 1.0,
              0.0);
  }
}

TEST(TrainingTest, AdamWOverfitsAShortSequenceAndGreedyDecodingRecallsIt) {
  auto model = CreateModel(TinyLlama(), 3);
  ASSERT_TRUE(model.ok());
  CausalLM& m = **model;
  m.train();
  std::vector<int64_t> seq = {1, 7, 33, 12, 40, 5, 19, 27, 2};
  torch::Tensor ids = torch::tensor(seq, torch::kInt64).unsqueeze(0);
  torch::optim::AdamW opt(m.parameters(), torch::optim::AdamWOptions(3e-3).weight_decay(0.0));
  double first = 0, last = 0;
  for (int step = 0; step < 200; ++step) {
    opt.zero_grad();
    torch::Tensor loss = LossOf(m, ids);
    loss.backward();
    opt.step();
    if (step == 0) first = loss.item<double>();
    last = loss.item<double>();
  }
  EXPECT_GT(first, 3.0);  // ~ln(48) at random init
  EXPECT_LT(last, 0.05);  // memorised
  GenerateOptions options;
  options.max_new_tokens = 20;
  options.eos_ids = {2};
  auto out = GenerateGreedy(m, {{1, 7, 33}, {1, 7, 33, 12, 40, 5}}, options);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ((*out)[0], (std::vector<int64_t>{12, 40, 5, 19, 27}));
  EXPECT_EQ((*out)[1], (std::vector<int64_t>{19, 27}));
  EXPECT_TRUE(m.is_training());  // restored
  options.max_new_tokens = 2;
  auto capped = GenerateGreedy(m, {{1, 7, 33}}, options);
  ASSERT_TRUE(capped.ok());
  EXPECT_EQ((*capped)[0], (std::vector<int64_t>{12, 40}));
  EXPECT_TRUE(GenerateGreedy(m, {{}}, options).status().IsInvalidArgument());
  EXPECT_TRUE(GenerateGreedy(m, {{48}}, options).status().IsInvalidArgument());
}

}  // namespace
}  // namespace trainyard::model
