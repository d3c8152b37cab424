#include "trainyard/model/nn/lora.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "trainyard/common/json.h"
#include "trainyard/model/nn/model_test_util.h"

namespace trainyard::model {
namespace {

using testutil::FixtureDir;
using testutil::LoadReference;
using testutil::MaxAbsDiff;

std::shared_ptr<CausalLM> Load(const std::string& name) {
  auto model = LoadPretrained(FixtureDir(name), torch::kCPU, torch::kFloat32);
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  return *model;
}

torch::Tensor SomeIds() { return torch::tensor({{5, 17, 99, 3, 42, 8}}, torch::kInt64); }

TEST(LoraTest, FreshAdapterLeavesTheModelUnchangedAndOnlyItTrains) {
  auto model = Load("llama");
  torch::NoGradGuard no_grad;
  torch::Tensor before = model->Forward(SomeIds());
  LoraConfig config;
  config.rank = 4;
  config.target_modules = {"q_proj", "v_proj"};
  auto n = ApplyLora(*model, config, 5);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 4);  // 2 layers × {q_proj, v_proj}
  EXPECT_TRUE(torch::equal(model->Forward(SomeIds()), before));
  int trainable = 0;
  for (const auto& p : model->named_parameters()) {
    bool lora = p.key().find(".lora_") != std::string::npos;
    EXPECT_EQ(p.value().requires_grad(), lora) << p.key();
    trainable += lora;
  }
  EXPECT_EQ(trainable, 8);
  auto sd = LoraStateDict(*model);
  ASSERT_TRUE(sd.count("base_model.model.model.layers.1.self_attn.v_proj.lora_A.weight"));
  torch::Tensor a = sd["base_model.model.model.layers.1.self_attn.v_proj.lora_A.weight"];
  EXPECT_EQ(a.sizes(), (std::vector<int64_t>{4, 64}));
  EXPECT_LE(a.abs().max().item<double>(), 1.0 / std::sqrt(64.0));  // Kaiming-uniform a=sqrt(5)
  EXPECT_GT(a.abs().max().item<double>(), 0.5 / std::sqrt(64.0));
  EXPECT_EQ(sd["base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight"]
                .abs()
                .sum()
                .item<double>(),
            0.0);
  EXPECT_EQ(ApplyLora(*model, config, 5).status().code(), StatusCode::kFailedPrecondition);
}

TEST(LoraTest, UnknownTargetNamesTheLayers) {
  auto model = Load("gpt2");
  LoraConfig config;
  config.target_modules = {"q_proj"};
  auto n = ApplyLora(*model, config, 1);
  ASSERT_TRUE(n.status().IsInvalidArgument());
  EXPECT_NE(n.status().message().find("c_attn"), std::string::npos) << n.status().ToString();
}

class PeftParityTest : public ::testing::TestWithParam<const char*> {};

TEST_P(PeftParityTest, LoadedAdapterMatchesPeftAndMergesExactly) {
  auto model = Load(GetParam());
  auto config = LoadPeftAdapter(*model, FixtureDir(std::string(GetParam()) + "_lora"));
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->rank, 4);
  model->eval();
  torch::NoGradGuard no_grad;
  auto cases = LoadReference(FixtureDir(std::string(GetParam()) + "_lora"));
  std::vector<torch::Tensor> unmerged;
  for (const auto& c : cases) {
    torch::Tensor logits = model->Forward(c.input_ids, c.position_ids);
    EXPECT_LT(MaxAbsDiff(logits, c.logits), 1e-4) << GetParam();
    // The adapter changes the output: the comparison is not vacuous.
    unmerged.push_back(logits);
  }
  auto base = Load(GetParam());
  EXPECT_GT(MaxAbsDiff(base->Forward(cases[0].input_ids), unmerged[0]), 1e-3);
  ASSERT_TRUE(MergeLora(*model).ok());
  EXPECT_TRUE(LoraStateDict(*model).empty());
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_LT(MaxAbsDiff(model->Forward(cases[i].input_ids, cases[i].position_ids), unmerged[i]),
              1e-5);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PeftParityTest, ::testing::Values("llama", "gpt2"));

class LoraFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("lora_test_" + std::to_string(::getpid()));
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_F(LoraFilesTest, SavedAdapterRoundTripsInPeftFormat) {
  auto model = Load("gpt2");
  LoraConfig config;
  config.rank = 2;
  config.alpha = 6;
  config.target_modules = {"c_attn", "c_fc"};
  ASSERT_TRUE(ApplyLora(*model, config, 3).ok());
  {
    torch::NoGradGuard no_grad;
    for (auto& [name, t] : LoraStateDict(*model)) t.normal_(0.0, 0.3);
  }
  ASSERT_FALSE(SavePretrained(*model, (dir_ / "merged").string()).ok());  // merge first
  ASSERT_TRUE(SavePeftAdapter(*model, config, dir_.string(), "gpt2-tiny").ok());
  std::ifstream in(dir_ / "adapter_config.json");
  std::stringstream text;
  text << in.rdbuf();
  json::object o = json::parse(text.str()).as_object();
  EXPECT_EQ(o.at("peft_type").as_string(), "LORA");
  EXPECT_EQ(o.at("task_type").as_string(), "CAUSAL_LM");
  EXPECT_TRUE(o.at("fan_in_fan_out").as_bool());
  EXPECT_EQ(o.at("base_model_name_or_path").as_string(), "gpt2-tiny");
  EXPECT_EQ(o.at("r").to_number<int64_t>(), 2);

  auto other = Load("gpt2");
  auto loaded = LoadPeftAdapter(*other, dir_.string());
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->target_modules, config.target_modules);
  EXPECT_DOUBLE_EQ(loaded->alpha, 6.0);
  torch::NoGradGuard no_grad;
  EXPECT_EQ(MaxAbsDiff(model->Forward(SomeIds()), other->Forward(SomeIds())), 0.0);

  auto wrong_rank = Load("gpt2");
  config.rank = 3;
  ASSERT_TRUE(ApplyLora(*wrong_rank, config, 1).ok());
  auto file_tensors = LoraStateDict(*other);
  Status s = LoadLoraStateDict(*wrong_rank, file_tensors);
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_NE(s.message().find("rank"), std::string::npos);
}

TEST(LoraCheckpointingTest, GradientsWithDropoutEqualThePlainOnes) {
  auto model = Load("llama");
  LoraConfig config;
  config.rank = 4;
  config.dropout = 0.3;  // recomputation must replay the same dropout masks
  config.target_modules = {"q_proj", "v_proj", "down_proj"};
  ASSERT_TRUE(ApplyLora(*model, config, 9).ok());
  {
    torch::NoGradGuard no_grad;
    for (auto& [name, t] : LoraStateDict(*model)) t.normal_(0.0, 0.1);
  }
  model->train();
  torch::Tensor ids = torch::tensor({{5, 17, 99, 3, 42, 8, 11, 250}}, torch::kInt64);
  auto grads = [&](bool checkpoint) {
    model->SetActivationCheckpointing(checkpoint);
    model->zero_grad();
    torch::manual_seed(42);
    torch::Tensor logits = model->Forward(ids);
    logits.pow(2).mean().backward();
    std::map<std::string, torch::Tensor> out;
    for (const auto& p : model->named_parameters()) {
      if (p.value().requires_grad()) out[p.key()] = p.value().grad().clone();
    }
    return out;
  };
  auto plain = grads(false);
  auto checkpointed = grads(true);
  ASSERT_EQ(plain.size(), 12u);
  for (const auto& [name, g] : plain) {
    EXPECT_GT(g.abs().sum().item<double>(), 0.0) << name;
    EXPECT_LT(MaxAbsDiff(g, checkpointed.at(name)), 1e-6) << name;
  }
}

}  // namespace
}  // namespace trainyard::model
