// Fuzzes the training-config parser: any input must give a TrainConfig whose values are in
// their documented ranges, or an InvalidArgument status, never a crash; ToParams of a parsed
// config never fails and has no duplicate keys. A table source names a three-level table, a
// version or a timestamp (not both), and projectable column names.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string_view>

#include "trainyard/train/train_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto c = trainyard::train::ParseTrainConfig(text, "fuzz.yaml", "base");
  if (!c.ok()) {
    if (!c.status().IsInvalidArgument()) std::abort();
    return 0;
  }
  bool in_range =
      c->lora_rank >= 1 && c->lora_rank <= 1024 && c->lora_alpha > 0 && c->lora_dropout >= 0 &&
      c->lora_dropout < 1 && !c->lora_target_modules.empty() && c->max_seq_len >= 8 &&
      c->max_seq_len <= 131072 && c->micro_batch_size >= 1 && c->micro_batch_size <= 4096 &&
      c->grad_accum_steps >= 1 && c->grad_accum_steps <= 65536 && c->learning_rate > 0 &&
      c->learning_rate <= 1 && c->warmup_steps >= 0 && c->max_grad_norm >= 0 &&
      (c->epochs > 0 || c->max_steps > 0) && (c->train_path.empty() != c->train_table.empty()) &&
      (c->validation_path.empty() || c->validation_table.empty()) && c->val_fraction >= 0 &&
      c->val_fraction <= 0.5 && !c->tokenizer_path.empty() &&
      (!c->model_path.empty() || !c->model_config_path.empty());
  if (!in_range) std::abort();
  for (const auto* t : {&c->train_table, &c->validation_table}) {
    if (t->empty()) continue;
    if ((t->version && *t->version < 0) || (t->version && !t->timestamp.empty())) std::abort();
    if (std::count(t->table.begin(), t->table.end(), '.') != 2) std::abort();
    for (const auto& [field, column] : t->columns) {
      if (column.empty() || column.find(',') != std::string::npos) std::abort();
    }
    (void)t->ToString();
  }
  std::set<std::string> keys;
  for (const auto& kv : c->ToParams()) {
    if (!keys.insert(kv.first).second) std::abort();
  }
  return 0;
}
