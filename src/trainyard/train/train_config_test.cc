#include "trainyard/train/train_config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

namespace trainyard::train {
namespace {

constexpr const char* kMinimal = R"yaml(
model: {path: models/llama}
data: {train: data/train.jsonl}
)yaml";

Result<TrainConfig> Parse(const std::string& text) {
  return ParseTrainConfig(text, "finetune.yaml", "/cfg");
}

// Expects an InvalidArgument whose message contains `expect`.
void ExpectError(const std::string& text, const std::string& expect) {
  auto c = Parse(text);
  ASSERT_FALSE(c.ok()) << "accepted:\n" << text;
  EXPECT_TRUE(c.status().IsInvalidArgument()) << c.status().ToString();
  EXPECT_NE(c.status().message().find(expect), std::string::npos)
      << "message: " << c.status().message() << "\nexpected to contain: " << expect;
}

TEST(TrainConfigTest, ParsesAFullConfig) {
  auto c = Parse(R"yaml(
model:
  config: tiny/config.json
  tokenizer: /abs/tokenizer.json
method: lora
lora: {rank: 16, alpha: 32, dropout: 0.1, target_modules: [q_proj, k_proj, v_proj, o_proj]}
data:
  train: ../data/train.jsonl
  val_fraction: 0.1
  template: chatml
  system_prompt: "Classify the ticket."
  max_seq_len: 128
  packing: false
training:
  epochs: 2.5
  max_steps: 100
  micro_batch_size: 4
  grad_accum_steps: 2
  learning_rate: 3.0e-4
  weight_decay: 0.01
  adam_beta1: 0.8
  adam_beta2: 0.95
  adam_eps: 1e-6
  lr_schedule: linear
  warmup_steps: 5
  min_lr_ratio: 0.1
  max_grad_norm: 0
  seed: 7
  precision: bf16
  activation_checkpointing: true
  device: cuda:1
eval: {every_steps: 50, max_examples: 20, accuracy: false, max_new_tokens: 4}
checkpoint: {every_steps: 25, async: false}
output: {dir: out, adapter: true, merged: false}
logging: {every_steps: 5}
)yaml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->model_path, "");
  EXPECT_EQ(c->model_config_path, "/cfg/tiny/config.json");
  EXPECT_EQ(c->tokenizer_path, "/abs/tokenizer.json");
  EXPECT_EQ(c->lora_rank, 16);
  EXPECT_EQ(c->lora_alpha, 32.0);
  EXPECT_EQ(c->lora_dropout, 0.1);
  EXPECT_EQ(c->lora_target_modules,
            (std::vector<std::string>{"q_proj", "k_proj", "v_proj", "o_proj"}));
  EXPECT_EQ(c->train_path, "/data/train.jsonl");
  EXPECT_EQ(c->val_fraction, 0.1);
  EXPECT_EQ(c->prompt_template, "chatml");
  EXPECT_EQ(c->system_prompt, "Classify the ticket.");
  EXPECT_EQ(c->max_seq_len, 128);
  EXPECT_FALSE(c->packing);
  EXPECT_EQ(c->epochs, 2.5);
  EXPECT_EQ(c->max_steps, 100);
  EXPECT_EQ(c->micro_batch_size, 4);
  EXPECT_EQ(c->grad_accum_steps, 2);
  EXPECT_EQ(c->learning_rate, 3.0e-4);
  EXPECT_EQ(c->weight_decay, 0.01);
  EXPECT_EQ(c->adam_beta1, 0.8);
  EXPECT_EQ(c->adam_beta2, 0.95);
  EXPECT_EQ(c->adam_eps, 1e-6);
  EXPECT_EQ(c->lr_schedule, "linear");
  EXPECT_EQ(c->warmup_steps, 5);
  EXPECT_EQ(c->min_lr_ratio, 0.1);
  EXPECT_EQ(c->max_grad_norm, 0.0);
  EXPECT_EQ(c->seed, 7u);
  EXPECT_EQ(c->precision, "bf16");
  EXPECT_TRUE(c->activation_checkpointing);
  EXPECT_EQ(c->device, "cuda:1");
  EXPECT_EQ(c->eval_every_steps, 50);
  EXPECT_EQ(c->eval_max_examples, 20);
  EXPECT_FALSE(c->eval_accuracy);
  EXPECT_EQ(c->max_new_tokens, 4);
  EXPECT_EQ(c->checkpoint_every_steps, 25);
  EXPECT_FALSE(c->checkpoint_async);
  EXPECT_EQ(c->output_dir, "/cfg/out");
  EXPECT_TRUE(c->save_adapter);
  EXPECT_FALSE(c->save_merged);
  EXPECT_EQ(c->log_every_steps, 5);
}

TEST(TrainConfigTest, DefaultsAndDerivedPaths) {
  auto c = Parse(kMinimal);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->model_path, "/cfg/models/llama");
  EXPECT_EQ(c->tokenizer_path, "/cfg/models/llama/tokenizer.json");
  EXPECT_EQ(c->train_path, "/cfg/data/train.jsonl");
  EXPECT_EQ(c->output_dir, "/cfg/outputs");
  EXPECT_EQ(c->method, "lora");
  EXPECT_EQ(c->epochs, 1.0);
  EXPECT_EQ(c->prompt_template, "mistral");

  // No base directory: relative paths stay relative.
  auto rel = ParseTrainConfig(kMinimal, "finetune.yaml", "");
  ASSERT_TRUE(rel.ok());
  EXPECT_EQ(rel->train_path, "data/train.jsonl");
  EXPECT_EQ(rel->output_dir, "outputs");
}

TEST(TrainConfigTest, AcceptsJson) {
  auto c = Parse(R"({"model": {"path": "/m"}, "data": {"train": "/t.jsonl", "max_seq_len": 64},
                     "training": {"learning_rate": 0.001}})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->max_seq_len, 64);
  EXPECT_EQ(c->learning_rate, 0.001);
}

TEST(TrainConfigTest, ErrorsNameFileLineAndKey) {
  const std::string base = "model: {path: m}\ndata: {train: t.jsonl}\n";
  ExpectError(base + "lora:\n  rank: 0\n",
              "finetune.yaml:4: lora.rank must be an integer from 1 to 1024 (got 0)");
  ExpectError(base + "lora:\n  rank: 2000\n", "finetune.yaml:4: lora.rank");
  ExpectError(base + "lora: {alpha: 0}\n", "finetune.yaml:3: lora.alpha must be a positive number");
  ExpectError(base + "lora: {dropout: 1}\n", "lora.dropout must be a number in [0, 1)");
  ExpectError(base + "lora: {target_modules: []}\n",
              "lora.target_modules must be a non-empty list");
  ExpectError(base + "lora: {target_modules: [q_proj, \"\"]}\n",
              "lora.target_modules[1] must be a module name");
  ExpectError(base + "method: qlora\n", "finetune.yaml:3: method must be lora or full (got qlora)");
  ExpectError(base + "training:\n  epochs: 1\n  learnng_rate: 0.1\n",
              "finetune.yaml:5: training.learnng_rate is not a known key (known keys of training:");
  ExpectError(base + "colour: blue\n", "finetune.yaml:3: colour is not a known key");
  ExpectError(base + "training: {learning_rate: 0}\n",
              "training.learning_rate must be a number in (0, 1]");
  ExpectError(base + "training: {learning_rate: 2}\n", "training.learning_rate");
  ExpectError(base + "training: {learning_rate: \"0.1\"}\n",
              "training.learning_rate must be a number in (0, 1] such as 2.0e-4 (got \"0.1\")");
  ExpectError(base + "training: {learning_rate: .nan}\n", "training.learning_rate");
  ExpectError(base + "training: {micro_batch_size: 0}\n",
              "training.micro_batch_size must be an integer from 1 to 4096");
  ExpectError(base + "training: {micro_batch_size: 1.5}\n", "training.micro_batch_size");
  ExpectError(base + "training: {grad_accum_steps: 65537}\n", "training.grad_accum_steps");
  ExpectError(base + "training: {warmup_steps: -1}\n",
              "training.warmup_steps must be a non-negative integer");
  ExpectError(base + "training: {lr_schedule: step}\n",
              "training.lr_schedule must be cosine, linear or constant");
  ExpectError(base + "training: {max_grad_norm: -1}\n", "training.max_grad_norm");
  ExpectError(base + "training: {precision: fp16}\n",
              "training.precision must be auto, fp32 or bf16");
  ExpectError(base + "training: {device: tpu}\n",
              "training.device must be auto, cpu, cuda or cuda:N");
  ExpectError(base + "training: {activation_checkpointing: yes}\n",
              "training.activation_checkpointing must be true or false");
  ExpectError(base + "training:\n  epochs: 0\n",
              "finetune.yaml:4: training.epochs or training.max_steps must be positive");
  ExpectError(base + "training: {epochs: 0, max_steps: 0}\n",
              "training.epochs or training.max_steps");
  ExpectError(base + "data2: 1\n", "data2 is not a known key");
  ExpectError(base + "training: [1, 2]\n", "finetune.yaml:3: training must be a mapping");
  ExpectError(base + "eval: {max_new_tokens: 0}\n", "eval.max_new_tokens");
  ExpectError(base + "logging: {every_steps: 0}\n",
              "logging.every_steps must be a positive integer");
}

TEST(TrainConfigTest, DataErrors) {
  ExpectError("model: {path: m}\n", "data.train is required");
  ExpectError("model: {path: m}\ndata:\n  template: mistral\n",
              "finetune.yaml:3: data.train is required");
  ExpectError("model: {path: m}\ndata: {train: ''}\n", "data.train must be a non-empty path");
  ExpectError("model: {path: m}\ndata: {train: t, template: llama2}\n",
              "data.template must be mistral, chatml or alpaca (got llama2)");
  ExpectError("model: {path: m}\ndata: {train: t, max_seq_len: 4}\n",
              "data.max_seq_len must be an integer from 8 to 131072");
  ExpectError("model: {path: m}\ndata: {train: t, max_seq_len: 131073}\n", "data.max_seq_len");
  ExpectError("model: {path: m}\ndata: {train: t, val_fraction: 0.6}\n",
              "data.val_fraction must be a number from 0 to 0.5");
  ExpectError("model: {path: m}\ndata: {train: t, validation: v, val_fraction: 0.1}\n",
              "data.val_fraction cannot be combined with data.validation");
  ExpectError("model: {path: m}\ndata: {train: [a, b]}\n",
              "data.train must be a JSONL file or a table source such as {table: "
              "main.support.train, version: 7} (got a list)");
  ExpectError("model: {path: m}\ndata: {train: t, packing: 1}\n",
              "data.packing must be true or false (got 1)");
}

TEST(TrainConfigTest, ParsesTableSources) {
  auto c = Parse(R"yaml(
model: {path: m}
data:
  train:
    table: main.support.train
    version: 7
    columns: {message: text, label: intent}
  validation: {table: Main.Support.val-2, timestamp: "2026-01-31T12:00:00Z"}
)yaml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->train_path.empty());
  EXPECT_EQ(c->train_table.table, "main.support.train");
  EXPECT_EQ(c->train_table.version, 7);
  EXPECT_EQ(c->train_table.columns,
            (std::map<std::string, std::string>{{"message", "text"}, {"label", "intent"}}));
  EXPECT_EQ(c->train_table.ToString(), "main.support.train@7");
  EXPECT_TRUE(c->validation_path.empty());
  EXPECT_EQ(c->validation_table.table, "Main.Support.val-2");
  EXPECT_FALSE(c->validation_table.version);
  EXPECT_EQ(c->validation_table.ToString(), "Main.Support.val-2@2026-01-31T12:00:00Z");
  EXPECT_TRUE(c->has_validation());

  std::map<std::string, std::string> params;
  for (const auto& [k, v] : c->ToParams()) EXPECT_TRUE(params.emplace(k, v).second) << k;
  EXPECT_EQ(params.at("data.train.table"), "main.support.train");
  EXPECT_EQ(params.at("data.train.version"), "7");
  EXPECT_EQ(params.at("data.train.columns"), "label=intent,message=text");
  EXPECT_EQ(params.at("data.validation.timestamp"), "2026-01-31T12:00:00Z");
  EXPECT_EQ(params.count("data.validation.version"), 0u);  // settled when the run starts
  EXPECT_EQ(params.count("data.train"), 0u);

  // A table without a version (the latest when the run first starts), a file for validation,
  // an epoch-milliseconds timestamp.
  auto latest = Parse("model: {path: m}\ndata: {train: {table: a.b.c}, validation: v.jsonl}\n");
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  EXPECT_EQ(latest->train_table.ToString(), "a.b.c@latest");
  EXPECT_EQ(latest->validation_path, "/cfg/v.jsonl");
  auto ms = Parse("model: {path: m}\ndata: {train: {table: a.b.c, timestamp: 1767225600000}}\n");
  ASSERT_TRUE(ms.ok()) << ms.status().ToString();
  EXPECT_EQ(ms->train_table.timestamp, "1767225600000");
}

TEST(TrainConfigTest, TableSourceErrors) {
  const std::string m = "model: {path: m}\n";
  ExpectError(m + "data:\n  train:\n    version: 3\n",
              "finetune.yaml:4: data.train.table is required in a table source");
  ExpectError(m + "data:\n  train: {table: support.train}\n",
              "finetune.yaml:3: data.train.table must be a catalog table's full name "
              "catalog.schema.table");
  ExpectError(m + "data: {train: {table: main.support.train.x}}\n", "data.train.table must be");
  ExpectError(m + "data: {train: {table: main..train}}\n", "data.train.table must be");
  ExpectError(m + "data: {train: {table: main.sup port.train}}\n", "data.train.table must be");
  ExpectError(m + "data: {train: {table: [a]}}\n", "data.train.table must be a string");
  ExpectError(m + "data: {train: {table: a.b.c, version: -1}}\n",
              "data.train.version must be a non-negative integer");
  ExpectError(m + "data: {train: {table: a.b.c, version: latest}}\n",
              "data.train.version must be a non-negative integer");
  ExpectError(m + "data: {train: {table: a.b.c, version: 1, timestamp: \"2026-01-01\"}}\n",
              "data.train.timestamp cannot be combined with data.train.version");
  ExpectError(m + "data: {train: {table: a.b.c, timestamp: \"x;y\"}}\n",
              "data.train.timestamp must be an ISO-8601 time");
  ExpectError(m + "data:\n  train: {table: a.b.c}\n  validation: {table: a.b.d, path: x}\n",
              "finetune.yaml:4: data.validation.path is not a known key");
  ExpectError(m + "data: {train: {table: a.b.c, columns: [text]}}\n",
              "data.train.columns must be a mapping of record fields to the table's columns");
  ExpectError(m + "data: {train: {table: a.b.c, columns: {text: message}}}\n",
              "data.train.columns.text is not a known key");
  ExpectError(m + "data: {train: {table: a.b.c, columns: {message: \"a,b\"}}}\n",
              "data.train.columns.message must be a column name");
  ExpectError(m + "data: {train: {table: a.b.c, columns: {message: \"\"}}}\n",
              "data.train.columns.message must be a column name");
  ExpectError(m + "data: {train: {table: a.b.c, columns: {message: t, response: r}}}\n",
              "data.train.columns mixes classification fields");
  ExpectError(m + "data: {train: {table: a.b.c}, validation: {table: a.b.d}, val_fraction: 0.1}\n",
              "data.val_fraction cannot be combined with data.validation");
}

TEST(TrainConfigTest, ModelErrors) {
  const std::string data = "data: {train: t}\n";
  ExpectError(data, "model is required");
  ExpectError(data + "model: {}\n", "model needs model.path");
  ExpectError(data + "model: {config: c.json}\n", "model.tokenizer is required with model.config");
  ExpectError(data + "model: {path: m, config: c.json}\n",
              "model.config cannot be combined with model.path");
  ExpectError(data + "model: {weights: w}\n", "finetune.yaml:2: model.weights is not a known key");
  ExpectError(data + "model: models/llama\n", "model must be a mapping");
}

TEST(TrainConfigTest, DocumentErrors) {
  ExpectError("model: [unclosed\n", "finetune.yaml:");
  ExpectError("model: [unclosed\n", "not valid YAML");
  ExpectError("- a\n- b\n", "the training config must be a mapping");
  ExpectError(std::string("model: a\0b", 10), "contains a NUL byte");
  ExpectError(std::string(2 << 20, '#'), "larger than 1 MiB");
}

TEST(TrainConfigTest, ToParamsIsFlatAndComplete) {
  auto c = Parse(std::string(kMinimal) + "training: {learning_rate: 2.0e-4, seed: 9}\n");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  std::map<std::string, std::string> params;
  for (const auto& [k, v] : c->ToParams()) {
    EXPECT_TRUE(params.emplace(k, v).second) << "duplicate " << k;
    EXPECT_FALSE(v.empty()) << k;
  }
  EXPECT_EQ(params.at("method"), "lora");
  EXPECT_EQ(params.at("lora.rank"), "8");
  EXPECT_EQ(params.at("lora.target_modules"), "q_proj,v_proj");
  EXPECT_EQ(params.at("training.learning_rate"), "0.0002");
  EXPECT_EQ(params.at("training.seed"), "9");
  EXPECT_EQ(params.at("data.packing"), "true");
  EXPECT_EQ(params.at("model.path"), "/cfg/models/llama");
  EXPECT_EQ(params.count("data.system_prompt"), 0u);  // empty values are left out

  // Full fine-tuning has no LoRA params.
  auto full = Parse(std::string(kMinimal) + "method: full\n");
  ASSERT_TRUE(full.ok());
  for (const auto& kv : full->ToParams()) EXPECT_NE(kv.first.rfind("lora.", 0), 0u) << kv.first;
}

TEST(TrainConfigTest, LoadsAFileRelativeToItsDirectory) {
  auto dir =
      std::filesystem::temp_directory_path() / ("ty-train-config-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "sub");
  const auto path = (dir / "sub" / "finetune.yaml").string();
  std::ofstream(path) << kMinimal << "lora:\n  rank: -3\n";
  auto bad = LoadTrainConfig(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(path + ":5: lora.rank"), std::string::npos)
      << bad.status().message();

  std::ofstream(path) << kMinimal;
  auto c = LoadTrainConfig(path);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->train_path, (dir / "sub" / "data" / "train.jsonl").string());

  auto missing = LoadTrainConfig((dir / "nope.yaml").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(missing.status().IsNotFound());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace trainyard::train
