#include "trainyard/train/train_config.h"

#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "trainyard/common/strings.h"
#include "trainyard/common/yaml_reader.h"

namespace trainyard::train {
namespace {

constexpr size_t kMaxConfigBytes = 1 << 20;

// Reads one TrainConfig section; all its errors carry file:line and the key path.
class ConfigReader : public YamlReader {
 public:
  ConfigReader(std::string_view filename, std::string base_dir)
      : YamlReader(filename), base_dir_(std::move(base_dir)) {}

  // A section: absent is fine (defaults: an undefined node), otherwise a mapping of the known
  // keys.
  Result<YAML::Node> Section(const YAML::Node& root, const std::string& name,
                             const std::set<std::string>& known) const {
    YAML::Node n = root[name];
    if (!n) return n;
    if (!n.IsMap()) {
      return Error(n, name, "must be a mapping of keys to values (got " + Describe(n) + ")");
    }
    TY_RETURN_IF_ERROR(OnlyKeys(n, name, known));
    return n;
  }

  // A non-empty path, made absolute against the config file's directory when relative.
  Result<std::string> Path(const YAML::Node& n, const std::string& path) const {
    TY_ASSIGN_OR_RETURN(std::string p, String(n, path));
    if (p.empty()) return Error(n, path, "must be a non-empty path");
    std::filesystem::path fp(p);
    if (fp.is_relative() && !base_dir_.empty()) fp = std::filesystem::path(base_dir_) / fp;
    return fp.lexically_normal().string();
  }

  // One of `choices`.
  Result<std::string> Choice(const YAML::Node& n, const std::string& path,
                             const std::vector<std::string>& choices) const {
    TY_ASSIGN_OR_RETURN(std::string v, String(n, path));
    for (const auto& c : choices) {
      if (v == c) return v;
    }
    std::string list;
    for (size_t i = 0; i < choices.size(); ++i) {
      list += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + choices[i];
    }
    return Error(n, path, "must be " + list + " (got " + Describe(n) + ")");
  }

 private:
  std::string base_dir_;
};

constexpr int64_t kMaxInt = INT64_C(1) << 53;  // any larger step count is a typo

Status ReadModel(const ConfigReader& r, const YAML::Node& root, TrainConfig& c) {
  TY_ASSIGN_OR_RETURN(const YAML::Node m,
                      r.Section(root, "model", {"path", "config", "tokenizer"}));
  if (!m) {
    return r.Error(root, "model",
                   "is required: give model.path (a Hugging Face model directory) or "
                   "model.config and model.tokenizer (to start from random weights)");
  }
  if (auto v = m["path"]) {
    TY_ASSIGN_OR_RETURN(c.model_path, r.Path(v, "model.path"));
  }
  if (auto v = m["config"]) {
    TY_ASSIGN_OR_RETURN(c.model_config_path, r.Path(v, "model.config"));
  }
  if (auto v = m["tokenizer"]) {
    TY_ASSIGN_OR_RETURN(c.tokenizer_path, r.Path(v, "model.tokenizer"));
  }
  if (!c.model_path.empty() && !c.model_config_path.empty()) {
    return r.Error(m["config"], "model.config",
                   "cannot be combined with model.path; give model.path (pretrained weights) or "
                   "model.config and model.tokenizer (random weights)");
  }
  if (c.model_path.empty()) {
    if (c.model_config_path.empty()) {
      return r.Error(m, "model",
                     "needs model.path (a Hugging Face model directory) or model.config and "
                     "model.tokenizer");
    }
    if (c.tokenizer_path.empty()) {
      return r.Error(m, "model.tokenizer", "is required with model.config");
    }
  } else if (c.tokenizer_path.empty()) {
    c.tokenizer_path = (std::filesystem::path(c.model_path) / "tokenizer.json").string();
  }
  return Status::Ok();
}

Status ReadLora(const ConfigReader& r, const YAML::Node& root, TrainConfig& c) {
  TY_ASSIGN_OR_RETURN(const YAML::Node l,
                      r.Section(root, "lora", {"rank", "alpha", "dropout", "target_modules"}));
  if (!l) return Status::Ok();
  if (auto v = l["rank"]) {
    TY_ASSIGN_OR_RETURN(c.lora_rank,
                        r.Integer(v, "lora.rank", 1, 1024, "an integer from 1 to 1024"));
  }
  if (auto v = l["alpha"]) {
    TY_ASSIGN_OR_RETURN(c.lora_alpha, r.Number(v, "lora.alpha", 0, 1e6, true, false,
                                               "a positive number (at most 1e6)"));
  }
  if (auto v = l["dropout"]) {
    TY_ASSIGN_OR_RETURN(c.lora_dropout,
                        r.Number(v, "lora.dropout", 0, 1, false, true, "a number in [0, 1)"));
  }
  if (auto v = l["target_modules"]) {
    if (!v.IsSequence() || v.size() == 0) {
      return r.Error(v, "lora.target_modules",
                     "must be a non-empty list of module names such as [q_proj, v_proj] (got " +
                         ConfigReader::Describe(v) + ")");
    }
    c.lora_target_modules.clear();
    // [A-Za-z0-9_.]{1,128}, as a loop: no regex on user input.
    auto valid_module = [](const std::string& name) {
      if (name.empty() || name.size() > 128) return false;
      for (char ch : name) {
        bool ok = (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
                  (ch >= '0' && ch <= '9') || ch == '_' || ch == '.';
        if (!ok) return false;
      }
      return true;
    };
    for (size_t i = 0; i < v.size(); ++i) {
      std::string path = "lora.target_modules[" + std::to_string(i) + "]";
      TY_ASSIGN_OR_RETURN(std::string name, r.String(v[i], path));
      if (!valid_module(name)) {
        return r.Error(v[i], path,
                       "must be a module name of letters, digits, '_' and '.' such as q_proj "
                       "(got \"" +
                           Abbreviate(name, 140) + "\")");
      }
      c.lora_target_modules.push_back(std::move(name));
    }
  }
  return Status::Ok();
}

// The record fields a table source's `columns` may map, classification's and instruction's.
const std::set<std::string> kClassificationFields = {"message", "label"};
const std::set<std::string> kInstructionFields = {"instruction", "input", "response"};

// One level of a catalog name, as the catalog accepts it: 1-255 letters, digits, '_', '-', '@'.
bool ValidNameLevel(std::string_view level) {
  if (level.empty() || level.size() > 255) return false;
  for (char ch : level) {
    bool ok = (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
              ch == '_' || ch == '-' || ch == '@';
    if (!ok) return false;
  }
  return true;
}

bool ValidTableName(std::string_view name) {
  std::vector<std::string> levels = SplitString(std::string(name), '.');
  if (levels.size() != 3) return false;
  for (const auto& level : levels) {
    if (!ValidNameLevel(level)) return false;
  }
  return true;
}

// A column name the rows API can project: no ',' (its separator), no control characters.
bool ValidColumnName(std::string_view name) {
  if (name.empty() || name.size() > 255) return false;
  for (unsigned char ch : name) {
    if (ch < 0x20 || ch == 0x7f || ch == ',') return false;
  }
  return true;
}

// An ISO-8601 time or epoch milliseconds, as text; the server checks the format.
bool ValidTimestampText(std::string_view text) {
  if (text.empty() || text.size() > 64) return false;
  for (char ch : text) {
    bool ok = (ch >= '0' && ch <= '9') || (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
              ch == ':' || ch == '-' || ch == '+' || ch == '.' || ch == ' ';
    if (!ok) return false;
  }
  return true;
}

Result<TableSource> ReadTableSource(const ConfigReader& r, const YAML::Node& n,
                                    const std::string& path) {
  TY_RETURN_IF_ERROR(r.OnlyKeys(n, path, {"table", "version", "timestamp", "columns"}));
  TableSource t;
  if (!n["table"]) {
    return r.Error(n, path + ".table",
                   "is required in a table source (a catalog table such as main.support.train)");
  }
  TY_ASSIGN_OR_RETURN(t.table, r.String(n["table"], path + ".table"));
  if (!ValidTableName(t.table)) {
    return r.Error(n["table"], path + ".table",
                   "must be a catalog table's full name catalog.schema.table (letters, digits, "
                   "'_', '-', '@'), such as main.support.train (got " +
                       ConfigReader::Describe(n["table"]) + ")");
  }
  if (auto v = n["version"]) {
    TY_ASSIGN_OR_RETURN(t.version, r.Integer(v, path + ".version", 0, kMaxInt,
                                             "a non-negative integer (a version of the table, "
                                             "as 'trainyard tables history' lists them)"));
  }
  if (auto v = n["timestamp"]) {
    if (t.version) {
      return r.Error(v, path + ".timestamp",
                     "cannot be combined with " + path + ".version; give one of them");
    }
    TY_ASSIGN_OR_RETURN(t.timestamp, r.String(v, path + ".timestamp"));
    if (!ValidTimestampText(t.timestamp)) {
      return r.Error(v, path + ".timestamp",
                     "must be an ISO-8601 time such as 2026-01-31T12:00:00Z or epoch "
                     "milliseconds (got " +
                         ConfigReader::Describe(v) + ")");
    }
  }
  if (auto v = n["columns"]) {
    const std::string cpath = path + ".columns";
    if (!v.IsMap()) {
      return r.Error(v, cpath,
                     "must be a mapping of record fields to the table's columns, such as "
                     "{message: text, label: intent} (got " +
                         ConfigReader::Describe(v) + ")");
    }
    TY_RETURN_IF_ERROR(
        r.OnlyKeys(v, cpath, {"message", "label", "instruction", "input", "response"}));
    for (const auto& kv : v) {
      const std::string field = kv.first.Scalar();
      TY_ASSIGN_OR_RETURN(std::string column, r.String(kv.second, cpath + "." + field));
      if (!ValidColumnName(column)) {
        return r.Error(kv.second, cpath + "." + field,
                       "must be a column name of 1-255 characters without ',' or control "
                       "characters (got " +
                           ConfigReader::Describe(kv.second) + ")");
      }
      t.columns[field] = std::move(column);
    }
    bool classification = false, instruction = false;
    for (const auto& [field, column] : t.columns) {
      classification = classification || kClassificationFields.count(field) > 0;
      instruction = instruction || kInstructionFields.count(field) > 0;
    }
    if (classification && instruction) {
      return r.Error(v, cpath,
                     "mixes classification fields (message, label) with instruction fields "
                     "(instruction, input, response); a table holds one kind of record");
    }
  }
  return t;
}

// data.train / data.validation: a JSONL path or a table source.
Status ReadDataSource(const ConfigReader& r, const YAML::Node& n, const std::string& path,
                      std::string& file, TableSource& table) {
  if (n.IsMap()) {
    TY_ASSIGN_OR_RETURN(table, ReadTableSource(r, n, path));
    return Status::Ok();
  }
  if (!n.IsScalar()) {
    return r.Error(n, path,
                   "must be a JSONL file or a table source such as {table: main.support.train, "
                   "version: 7} (got " +
                       ConfigReader::Describe(n) + ")");
  }
  TY_ASSIGN_OR_RETURN(file, r.Path(n, path));
  return Status::Ok();
}

Status ReadData(const ConfigReader& r, const YAML::Node& root, TrainConfig& c) {
  TY_ASSIGN_OR_RETURN(const YAML::Node d,
                      r.Section(root, "data",
                                {"train", "validation", "val_fraction", "template", "system_prompt",
                                 "max_seq_len", "packing"}));
  if (!d || !d["train"]) {
    return r.Error(d ? d : root, "data.train",
                   "is required (a JSONL file of training records, or a catalog table such as "
                   "{table: main.support.train, version: 7})");
  }
  TY_RETURN_IF_ERROR(ReadDataSource(r, d["train"], "data.train", c.train_path, c.train_table));
  if (auto v = d["validation"]) {
    TY_RETURN_IF_ERROR(
        ReadDataSource(r, v, "data.validation", c.validation_path, c.validation_table));
  }
  if (auto v = d["val_fraction"]) {
    TY_ASSIGN_OR_RETURN(c.val_fraction, r.Number(v, "data.val_fraction", 0, 0.5, false, false,
                                                 "a number from 0 to 0.5"));
    if (c.val_fraction > 0 && c.has_validation()) {
      return r.Error(v, "data.val_fraction",
                     "cannot be combined with data.validation; give one of them");
    }
  }
  if (auto v = d["template"]) {
    TY_ASSIGN_OR_RETURN(c.prompt_template,
                        r.Choice(v, "data.template", {"mistral", "chatml", "alpaca"}));
  }
  if (auto v = d["system_prompt"]) {
    TY_ASSIGN_OR_RETURN(c.system_prompt, r.String(v, "data.system_prompt"));
  }
  if (auto v = d["max_seq_len"]) {
    TY_ASSIGN_OR_RETURN(c.max_seq_len,
                        r.Integer(v, "data.max_seq_len", 8, 131072, "an integer from 8 to 131072"));
  }
  if (auto v = d["packing"]) {
    TY_ASSIGN_OR_RETURN(c.packing, r.Bool(v, "data.packing"));
  }
  return Status::Ok();
}

Status ReadTraining(const ConfigReader& r, const YAML::Node& root, TrainConfig& c) {
  TY_ASSIGN_OR_RETURN(
      const YAML::Node t,
      r.Section(root, "training",
                {"epochs", "max_steps", "micro_batch_size", "grad_accum_steps", "learning_rate",
                 "weight_decay", "adam_beta1", "adam_beta2", "adam_eps", "lr_schedule",
                 "warmup_steps", "min_lr_ratio", "max_grad_norm", "seed", "precision",
                 "activation_checkpointing", "device"}));
  if (!t) return Status::Ok();
  if (auto v = t["epochs"]) {
    TY_ASSIGN_OR_RETURN(c.epochs, r.Number(v, "training.epochs", 0, 1e6, false, false,
                                           "a non-negative number (at most 1e6)"));
  }
  if (auto v = t["max_steps"]) {
    TY_ASSIGN_OR_RETURN(c.max_steps, r.Integer(v, "training.max_steps", 0, kMaxInt,
                                               "a non-negative integer (0: from epochs)"));
  }
  if (c.epochs <= 0 && c.max_steps <= 0) {
    return r.Error(t["epochs"] ? t["epochs"] : t, "training.epochs",
                   "or training.max_steps must be positive (how long to train)");
  }
  if (auto v = t["micro_batch_size"]) {
    TY_ASSIGN_OR_RETURN(c.micro_batch_size, r.Integer(v, "training.micro_batch_size", 1, 4096,
                                                      "an integer from 1 to 4096"));
  }
  if (auto v = t["grad_accum_steps"]) {
    TY_ASSIGN_OR_RETURN(c.grad_accum_steps, r.Integer(v, "training.grad_accum_steps", 1, 65536,
                                                      "an integer from 1 to 65536"));
  }
  if (auto v = t["learning_rate"]) {
    TY_ASSIGN_OR_RETURN(c.learning_rate, r.Number(v, "training.learning_rate", 0, 1, true, false,
                                                  "a number in (0, 1] such as 2.0e-4"));
  }
  if (auto v = t["weight_decay"]) {
    TY_ASSIGN_OR_RETURN(c.weight_decay, r.Number(v, "training.weight_decay", 0, 10, false, false,
                                                 "a number from 0 to 10"));
  }
  if (auto v = t["adam_beta1"]) {
    TY_ASSIGN_OR_RETURN(
        c.adam_beta1, r.Number(v, "training.adam_beta1", 0, 1, false, true, "a number in [0, 1)"));
  }
  if (auto v = t["adam_beta2"]) {
    TY_ASSIGN_OR_RETURN(
        c.adam_beta2, r.Number(v, "training.adam_beta2", 0, 1, false, true, "a number in [0, 1)"));
  }
  if (auto v = t["adam_eps"]) {
    TY_ASSIGN_OR_RETURN(c.adam_eps, r.Number(v, "training.adam_eps", 0, 1, true, false,
                                             "a number in (0, 1] such as 1e-8"));
  }
  if (auto v = t["lr_schedule"]) {
    TY_ASSIGN_OR_RETURN(c.lr_schedule,
                        r.Choice(v, "training.lr_schedule", {"cosine", "linear", "constant"}));
  }
  if (auto v = t["warmup_steps"]) {
    TY_ASSIGN_OR_RETURN(c.warmup_steps, r.Integer(v, "training.warmup_steps", 0, kMaxInt,
                                                  "a non-negative integer"));
  }
  if (auto v = t["min_lr_ratio"]) {
    TY_ASSIGN_OR_RETURN(c.min_lr_ratio, r.Number(v, "training.min_lr_ratio", 0, 1, false, false,
                                                 "a number from 0 to 1"));
  }
  if (auto v = t["max_grad_norm"]) {
    TY_ASSIGN_OR_RETURN(c.max_grad_norm, r.Number(v, "training.max_grad_norm", 0, 1e9, false, false,
                                                  "a non-negative number (0: no clipping)"));
  }
  if (auto v = t["seed"]) {
    TY_ASSIGN_OR_RETURN(int64_t seed,
                        r.Integer(v, "training.seed", 0, INT64_MAX, "a non-negative integer"));
    c.seed = static_cast<uint64_t>(seed);
  }
  if (auto v = t["precision"]) {
    TY_ASSIGN_OR_RETURN(c.precision, r.Choice(v, "training.precision", {"auto", "fp32", "bf16"}));
  }
  if (auto v = t["activation_checkpointing"]) {
    TY_ASSIGN_OR_RETURN(c.activation_checkpointing, r.Bool(v, "training.activation_checkpointing"));
  }
  if (auto v = t["device"]) {
    TY_ASSIGN_OR_RETURN(c.device, r.String(v, "training.device"));
    // auto|cpu|cuda|cuda:[0-9]{1,3}
    const std::string& d = c.device;
    bool cuda_n = d.size() >= 6 && d.size() <= 8 && d.compare(0, 5, "cuda:") == 0 &&
                  d.find_first_not_of("0123456789", 5) == std::string::npos;
    if (d != "auto" && d != "cpu" && d != "cuda" && !cuda_n) {
      return r.Error(v, "training.device",
                     "must be auto, cpu, cuda or cuda:N (got " + ConfigReader::Describe(v) + ")");
    }
  }
  return Status::Ok();
}

Status ReadRest(const ConfigReader& r, const YAML::Node& root, TrainConfig& c) {
  TY_ASSIGN_OR_RETURN(
      const YAML::Node e,
      r.Section(root, "eval", {"every_steps", "max_examples", "accuracy", "max_new_tokens"}));
  if (e) {
    if (auto v = e["every_steps"]) {
      TY_ASSIGN_OR_RETURN(c.eval_every_steps,
                          r.Integer(v, "eval.every_steps", 0, kMaxInt,
                                    "a non-negative integer (0: only before and after training)"));
    }
    if (auto v = e["max_examples"]) {
      TY_ASSIGN_OR_RETURN(c.eval_max_examples, r.Integer(v, "eval.max_examples", 0, 100000000,
                                                         "a non-negative integer"));
    }
    if (auto v = e["accuracy"]) {
      TY_ASSIGN_OR_RETURN(c.eval_accuracy, r.Bool(v, "eval.accuracy"));
    }
    if (auto v = e["max_new_tokens"]) {
      TY_ASSIGN_OR_RETURN(c.max_new_tokens, r.Integer(v, "eval.max_new_tokens", 1, 4096,
                                                      "an integer from 1 to 4096"));
    }
  }
  TY_ASSIGN_OR_RETURN(const YAML::Node k, r.Section(root, "checkpoint", {"every_steps", "async"}));
  if (k) {
    if (auto v = k["every_steps"]) {
      TY_ASSIGN_OR_RETURN(c.checkpoint_every_steps,
                          r.Integer(v, "checkpoint.every_steps", 0, kMaxInt,
                                    "a non-negative integer (0: only on SIGTERM and at the end)"));
    }
    if (auto v = k["async"]) {
      TY_ASSIGN_OR_RETURN(c.checkpoint_async, r.Bool(v, "checkpoint.async"));
    }
  }
  TY_ASSIGN_OR_RETURN(const YAML::Node o, r.Section(root, "output", {"dir", "adapter", "merged"}));
  if (o) {
    if (auto v = o["dir"]) {
      TY_ASSIGN_OR_RETURN(c.output_dir, r.Path(v, "output.dir"));
    }
    if (auto v = o["adapter"]) {
      TY_ASSIGN_OR_RETURN(c.save_adapter, r.Bool(v, "output.adapter"));
    }
    if (auto v = o["merged"]) {
      TY_ASSIGN_OR_RETURN(c.save_merged, r.Bool(v, "output.merged"));
    }
  }
  TY_ASSIGN_OR_RETURN(const YAML::Node g, r.Section(root, "logging", {"every_steps"}));
  if (g) {
    if (auto v = g["every_steps"]) {
      TY_ASSIGN_OR_RETURN(c.log_every_steps,
                          r.Integer(v, "logging.every_steps", 1, kMaxInt, "a positive integer"));
    }
  }
  return Status::Ok();
}

Result<TrainConfig> ParseRoot(const ConfigReader& r, const YAML::Node& root,
                              const std::string& base_dir) {
  if (!root.IsMap()) {
    return r.Error(root, "the training config", "must be a mapping of keys to values");
  }
  TY_RETURN_IF_ERROR(r.OnlyKeys(
      root, "",
      {"model", "method", "lora", "data", "training", "eval", "checkpoint", "output", "logging"}));
  TrainConfig c;
  // The default output directory sits beside the config, as every other relative path.
  if (!base_dir.empty()) {
    c.output_dir = (std::filesystem::path(base_dir) / c.output_dir).lexically_normal().string();
  }
  TY_RETURN_IF_ERROR(ReadModel(r, root, c));
  if (auto v = root["method"]) {
    TY_ASSIGN_OR_RETURN(c.method, r.Choice(v, "method", {"lora", "full"}));
  }
  TY_RETURN_IF_ERROR(ReadLora(r, root, c));
  TY_RETURN_IF_ERROR(ReadData(r, root, c));
  TY_RETURN_IF_ERROR(ReadTraining(r, root, c));
  TY_RETURN_IF_ERROR(ReadRest(r, root, c));
  return c;
}

// The shortest text that reads back as `v`, positional where Python's repr is (0.0002,
// 16.0 → "16"), scientific otherwise (1e-08).
std::string FormatDouble(double v) {
  char buf[400];
  const double a = std::fabs(v);
  const bool positional = a == 0 || (a >= 1e-4 && a < 1e16);
  auto [end, ec] = positional ? std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed)
                              : std::to_chars(buf, buf + sizeof buf, v);
  if (ec != std::errc()) return "nan";
  return std::string(buf, end);
}

}  // namespace

std::string TableSource::ToString() const {
  if (version) return table + "@" + std::to_string(*version);
  return table + "@" + (timestamp.empty() ? "latest" : timestamp);
}

std::vector<std::pair<std::string, std::string>> TrainConfig::ToParams() const {
  auto b = [](bool v) { return std::string(v ? "true" : "false"); };
  auto i = [](int64_t v) { return std::to_string(v); };
  std::string modules;
  for (const auto& m : lora_target_modules) modules += (modules.empty() ? "" : ",") + m;
  std::vector<std::pair<std::string, std::string>> p = {
      {"model.path", model_path},
      {"model.config", model_config_path},
      {"model.tokenizer", tokenizer_path},
      {"method", method},
  };
  if (method == "lora") {
    p.insert(p.end(), {{"lora.rank", i(lora_rank)},
                       {"lora.alpha", FormatDouble(lora_alpha)},
                       {"lora.dropout", FormatDouble(lora_dropout)},
                       {"lora.target_modules", modules}});
  }
  auto data_source = [&](const std::string& key, const std::string& file,
                         const TableSource& table) {
    if (table.empty()) {
      p.emplace_back(key, file);
      return;
    }
    std::string columns;
    for (const auto& [field, column] : table.columns) {
      columns += (columns.empty() ? "" : ",") + field + "=" + column;
    }
    p.insert(p.end(), {{key + ".table", table.table},
                       {key + ".version", table.version ? i(*table.version) : ""},
                       {key + ".timestamp", table.timestamp},
                       {key + ".columns", columns}});
  };
  data_source("data.train", train_path, train_table);
  data_source("data.validation", validation_path, validation_table);
  p.insert(p.end(), {
                        {"data.val_fraction", FormatDouble(val_fraction)},
                        {"data.template", prompt_template},
                        {"data.system_prompt", system_prompt},
                        {"data.max_seq_len", i(max_seq_len)},
                        {"data.packing", b(packing)},
                        {"training.epochs", FormatDouble(epochs)},
                        {"training.max_steps", i(max_steps)},
                        {"training.micro_batch_size", i(micro_batch_size)},
                        {"training.grad_accum_steps", i(grad_accum_steps)},
                        {"training.learning_rate", FormatDouble(learning_rate)},
                        {"training.weight_decay", FormatDouble(weight_decay)},
                        {"training.adam_beta1", FormatDouble(adam_beta1)},
                        {"training.adam_beta2", FormatDouble(adam_beta2)},
                        {"training.adam_eps", FormatDouble(adam_eps)},
                        {"training.lr_schedule", lr_schedule},
                        {"training.warmup_steps", i(warmup_steps)},
                        {"training.min_lr_ratio", FormatDouble(min_lr_ratio)},
                        {"training.max_grad_norm", FormatDouble(max_grad_norm)},
                        {"training.seed", std::to_string(seed)},
                        {"training.precision", precision},
                        {"training.activation_checkpointing", b(activation_checkpointing)},
                        {"training.device", device},
                        {"eval.every_steps", i(eval_every_steps)},
                        {"eval.max_examples", i(eval_max_examples)},
                        {"eval.accuracy", b(eval_accuracy)},
                        {"eval.max_new_tokens", i(max_new_tokens)},
                        {"checkpoint.every_steps", i(checkpoint_every_steps)},
                        {"checkpoint.async", b(checkpoint_async)},
                        {"output.dir", output_dir},
                        {"output.adapter", b(save_adapter)},
                        {"output.merged", b(save_merged)},
                        {"logging.every_steps", i(log_every_steps)},
                    });
  std::erase_if(p, [](const auto& kv) { return kv.second.empty(); });
  return p;
}

Result<TrainConfig> ParseTrainConfig(std::string_view text, std::string_view source,
                                     const std::string& base_dir) {
  TY_ASSIGN_OR_RETURN(YAML::Node root, LoadYamlDocument(text, source, "the training config"));
  ConfigReader reader(source, base_dir);
  try {
    return ParseRoot(reader, root, base_dir);
  } catch (const YAML::Exception& e) {
    std::string prefix = source.empty() ? "" : std::string(source) + ": ";
    return Status::InvalidArgument(prefix + "invalid training config: " + e.msg);
  }
}

Result<TrainConfig> LoadTrainConfig(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    if (!std::filesystem::exists(path, ec)) {
      return Status::NotFound(path + ": no such training config file");
    }
    return Status::InvalidArgument(path + ": not a regular file");
  }
  auto size = std::filesystem::file_size(path, ec);
  if (!ec && size > kMaxConfigBytes) {
    return Status::InvalidArgument(path + ": the training config is larger than 1 MiB");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IOError(path + ": cannot open for reading");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return Status::IOError(path + ": read error");
  std::string base = std::filesystem::path(path).parent_path().string();
  return ParseTrainConfig(text.str(), path, base);
}

}  // namespace trainyard::train
