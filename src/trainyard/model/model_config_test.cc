#include "trainyard/model/model_config.h"

#include <gtest/gtest.h>

namespace trainyard::model {
namespace {

constexpr const char* kLlama = R"({
  "model_type": "llama", "vocab_size": 320, "hidden_size": 64, "intermediate_size": 128,
  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
  "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "tie_word_embeddings": false,
  "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                   "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
  "eos_token_id": [2, 3], "bos_token_id": 1, "torch_dtype": "bfloat16"})";

TEST(ModelConfigTest, ParsesLlamaWithLlama3Scaling) {
  auto c = ModelConfig::FromJson(kLlama);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->family, ModelFamily::kLlama);
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->num_key_value_heads, 2);
  EXPECT_EQ(c->rope_scaling.type, "llama3");
  EXPECT_DOUBLE_EQ(c->rope_scaling.factor, 8.0);
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 64);
  EXPECT_EQ(c->eos_token_id, 2);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{2, 3}));
  EXPECT_FALSE(c->attention_bias);
  EXPECT_EQ(c->torch_dtype, "bfloat16");
  auto again = ModelConfig::FromJson(c->ToJson());
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->rope_scaling.type, "llama3");
  EXPECT_DOUBLE_EQ(again->rope_theta, 500000.0);
  EXPECT_EQ(again->num_key_value_heads, 2);
  EXPECT_EQ(again->eos_token_ids, (std::vector<int64_t>{2, 3}));
}

TEST(ModelConfigTest, Qwen2HasAttentionBiasAndGpt2Defaults) {
  auto q = ModelConfig::FromJson(
      R"({"model_type":"qwen2","vocab_size":10,"hidden_size":8,"intermediate_size":16,
          "num_hidden_layers":1,"num_attention_heads":2,"tie_word_embeddings":true})");
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_TRUE(q->attention_bias);
  EXPECT_TRUE(q->tie_word_embeddings);
  auto g = ModelConfig::FromJson(
      R"({"model_type":"gpt2","vocab_size":10,"n_embd":8,"n_layer":1,"n_head":2,
          "n_inner":null,"activation_function":"gelu_new"})");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->family, ModelFamily::kGpt2);
  EXPECT_EQ(g->intermediate_size, 32);
  EXPECT_EQ(g->max_position_embeddings, 1024);
  EXPECT_TRUE(g->tie_word_embeddings);
  EXPECT_DOUBLE_EQ(g->norm_eps, 1e-5);
  auto again = ModelConfig::FromJson(g->ToJson());
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->intermediate_size, 32);
  EXPECT_EQ(again->family, ModelFamily::kGpt2);
}

TEST(ModelConfigTest, MistralSlidingWindowRoundTrips) {
  auto m = ModelConfig::FromJson(
      R"({"model_type":"mistral","vocab_size":10,"hidden_size":8,"intermediate_size":16,
          "num_hidden_layers":1,"num_attention_heads":2,"sliding_window":4096})");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->sliding_window, 4096);
  auto again = ModelConfig::FromJson(m->ToJson());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->sliding_window, 4096);
  auto none = ModelConfig::FromJson(
      R"({"model_type":"mistral","vocab_size":10,"hidden_size":8,"intermediate_size":16,
          "num_hidden_layers":1,"num_attention_heads":2,"sliding_window":null})");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->sliding_window, 0);
}

TEST(ModelConfigTest, HostileInputNamesTheField) {
  struct Case {
    const char* json;
    const char* field;
  };
  const Case cases[] = {
      {"[1,2]", "JSON object"},
      {"{not json", "not valid JSON"},
      {R"({"vocab_size": 3})", "model_type"},
      {R"({"model_type": "bert"})", "model_type"},
      {R"({"model_type":"llama","vocab_size":10,"hidden_size":10,"intermediate_size":4,
          "num_hidden_layers":1,"num_attention_heads":3})",
       "hidden_size"},
      {R"({"model_type":"llama","vocab_size":10,"hidden_size":8,"intermediate_size":4,
          "num_hidden_layers":2000000,"num_attention_heads":2})",
       "num_hidden_layers"},
      {R"({"model_type":"llama","vocab_size":"many","hidden_size":8,"intermediate_size":4,
          "num_hidden_layers":1,"num_attention_heads":2})",
       "vocab_size"},
      {R"({"model_type":"llama","vocab_size":10,"hidden_size":8,"intermediate_size":4,
          "num_hidden_layers":1,"num_attention_heads":2,"num_key_value_heads":3})",
       "num_key_value_heads"},
      {R"({"model_type":"llama","vocab_size":10,"hidden_size":8,"intermediate_size":4,
          "num_hidden_layers":1,"num_attention_heads":2,"rope_scaling":{"rope_type":"yarn",
          "factor":2}})",
       "rope_scaling.rope_type"},
      {R"({"model_type":"llama","vocab_size":10,"hidden_size":8,"intermediate_size":4,
          "num_hidden_layers":1,"num_attention_heads":2,"rms_norm_eps":-1})",
       "rms_norm_eps"},
      {R"({"model_type":"llama","vocab_size":10,"hidden_size":8,"intermediate_size":4,
          "num_hidden_layers":1,"num_attention_heads":2,"eos_token_id":99})",
       "eos_token_id"},
      {R"({"model_type":"gpt2","vocab_size":10,"n_embd":8,"n_layer":1,"n_head":2,
          "activation_function":"relu"})",
       "activation_function"},
  };
  for (const Case& c : cases) {
    auto r = ModelConfig::FromJson(c.json, "m/config.json");
    ASSERT_FALSE(r.ok()) << c.json;
    EXPECT_TRUE(r.status().IsInvalidArgument()) << r.status().ToString();
    EXPECT_NE(r.status().message().find(c.field), std::string::npos) << r.status().ToString();
  }
}

TEST(ModelConfigTest, ReadsTheFixtureFiles) {
  for (const char* name : {"llama", "qwen2", "gpt2"}) {
    auto c = ModelConfig::FromFile(std::string(TRAINYARD_SOURCE_DIR) +
                                   "/tests/fixtures/train/models/" + name + "/config.json");
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(c->model_type, name);
    EXPECT_EQ(c->vocab_size, 320);
  }
  EXPECT_TRUE(ModelConfig::FromFile("/nonexistent/config.json").status().IsNotFound());
}

}  // namespace
}  // namespace trainyard::model
