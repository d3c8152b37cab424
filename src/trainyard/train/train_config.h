// TrainConfig: what `trainyard train config.yaml` does, parsed from YAML (or JSON).
//
//   model:
//     path: models/llama-1b          # Hugging Face dir: config.json, *.safetensors, tokenizer.json
//     # or, to start from random weights:
//     config: tiny-llama/config.json  # a config.json, plus
//     tokenizer: tiny-llama/tokenizer.json
//   method: lora                      # lora | full
//   lora: {rank: 8, alpha: 16, dropout: 0.05, target_modules: [q_proj, v_proj]}
//   data:
//     train: data/train.jsonl         # a JSONL file, or a catalog table at a version:
//     # train: {table: main.support.train, version: 7, columns: {message: text, label: intent}}
//     validation: data/val.jsonl      # or val_fraction: 0.1 of train
//     template: mistral               # mistral | chatml | alpaca
//     system_prompt: "Classify the support ticket."
//     max_seq_len: 256
//     packing: true
//   training:
//     epochs: 3                       # or max_steps
//     micro_batch_size: 8
//     grad_accum_steps: 1
//     learning_rate: 2.0e-4
//     weight_decay: 0.0
//     lr_schedule: cosine             # cosine | linear | constant
//     warmup_steps: 10
//     max_grad_norm: 1.0
//     seed: 42
//     precision: auto                 # auto (bf16 autocast on GPU, fp32 on CPU) | fp32 | bf16
//     activation_checkpointing: false
//     device: auto                    # auto | cpu | cuda | cuda:N
//   eval: {every_steps: 50, max_examples: 200, accuracy: true, max_new_tokens: 8}
//   checkpoint: {every_steps: 100, async: true}
//   output: {dir: outputs, adapter: true, merged: true}
//   logging: {every_steps: 10}
//
// A table source (data.train / data.validation as a mapping) has `table` (catalog.schema.table,
// required), `version` (a Delta version) or `timestamp` (the version current at that time,
// ISO-8601 or epoch milliseconds), neither meaning the latest version when the run first
// starts, and `columns` (which column fills which record field; see TableSource).
//
// Relative paths (model.*, data.train, data.validation, output.dir, and the default
// output.dir "outputs") are resolved against the config file's directory. model.path excludes
// model.config; data.validation excludes data.val_fraction. Unknown keys, wrong types and
// out-of-range values are InvalidArgument "file:line: key.path ...". Plain value type.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "trainyard/common/status.h"

namespace trainyard::train {

// Training data in a catalog table, read through the server's tables API at one version.
struct TableSource {
  std::string table;               // catalog.schema.table; empty: no table (a file instead)
  std::optional<int64_t> version;  // nullopt: the version at `timestamp`, else the latest
  std::string timestamp;           // ISO-8601 or epoch milliseconds; "" = none
  // Record field (message, label, instruction, input, response) -> the column that fills it;
  // a field not named reads the column of its own name. Classification fields (message,
  // label) and instruction fields (instruction, input, response) are not mixed.
  std::map<std::string, std::string> columns;

  bool empty() const { return table.empty(); }
  // "main.support.train@7", "main.support.train@latest", "main.support.train@<timestamp>".
  std::string ToString() const;
};

struct TrainConfig {
  // model
  std::string model_path;
  std::string model_config_path;
  std::string tokenizer_path;  // default: <model_path>/tokenizer.json
  // method
  std::string method = "lora";
  int64_t lora_rank = 8;
  double lora_alpha = 16.0;
  double lora_dropout = 0.05;
  std::vector<std::string> lora_target_modules = {"q_proj", "v_proj"};
  // data: train_path or train_table (exactly one); validation_path or validation_table (at
  // most one)
  std::string train_path;
  TableSource train_table;
  std::string validation_path;
  TableSource validation_table;
  double val_fraction = 0.0;
  std::string prompt_template = "mistral";
  std::string system_prompt;
  int64_t max_seq_len = 256;
  bool packing = true;
  // training
  double epochs = 1.0;
  int64_t max_steps = 0;  // 0: from epochs
  int64_t micro_batch_size = 8;
  int64_t grad_accum_steps = 1;
  double learning_rate = 2e-4;
  double weight_decay = 0.0;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.999;
  double adam_eps = 1e-8;
  std::string lr_schedule = "cosine";
  int64_t warmup_steps = 0;
  double min_lr_ratio = 0.0;
  double max_grad_norm = 1.0;  // 0: no clipping
  uint64_t seed = 42;
  std::string precision = "auto";
  bool activation_checkpointing = false;
  std::string device = "auto";
  // eval
  int64_t eval_every_steps = 0;  // 0: only at the end (and before training)
  int64_t eval_max_examples = 200;
  bool eval_accuracy = true;  // exact-match of the generated label (classification data)
  int64_t max_new_tokens = 16;
  // checkpoints
  int64_t checkpoint_every_steps = 0;  // 0: only on SIGTERM and at the end
  bool checkpoint_async = true;
  // outputs
  std::string output_dir = "outputs";
  bool save_adapter = true;
  bool save_merged = true;
  int64_t log_every_steps = 1;

  bool has_validation() const { return !validation_path.empty() || !validation_table.empty(); }

  // The config as a flat list of {"section.key", value} (the YAML key paths), for logging as
  // MLflow params. Empty values are left out, and lora.* when method is full. A table source
  // is data.train.table, data.train.version, data.train.timestamp and data.train.columns
  // ("label=intent,message=text").
  std::vector<std::pair<std::string, std::string>> ToParams() const;
};

// `base_dir` resolves relative paths (the config file's directory); `source` names the file
// in errors.
Result<TrainConfig> ParseTrainConfig(std::string_view text, std::string_view source,
                                     const std::string& base_dir);
Result<TrainConfig> LoadTrainConfig(const std::string& path);

}  // namespace trainyard::train
