#include "trainyard/train/nn/trainer.h"

#include <ATen/autocast_mode.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <optional>
#include <thread>

#include "trainyard/common/json.h"
#include "trainyard/common/strings.h"
#include "trainyard/model/model_config.h"
#include "trainyard/model/nn/device.h"
#include "trainyard/model/nn/generate.h"
#include "trainyard/model/nn/lora.h"
#include "trainyard/model/nn/model.h"
#include "trainyard/model/tokenizer.h"
#include "trainyard/train/data.h"
#include "trainyard/train/nn/distributed.h"
#include "trainyard/train/platform.h"
#include "trainyard/train/table_source.h"

namespace trainyard::train {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::atomic<int> g_signal{0};

void OnSignal(int sig) { g_signal.store(sig); }

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string FormatDuration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  int64_t t = static_cast<int64_t>(s + 0.5);
  if (t >= 3600) return fmt::format("{}h{:02d}m", t / 3600, (t % 3600) / 60);
  if (t >= 60) return fmt::format("{}m{:02d}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

// --- AdamW, written out so its state is plain tensors a checkpoint can hold. Same update
// as torch.optim.AdamW (decoupled weight decay, bias-corrected moments).
struct AdamW {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  int64_t steps = 0;
  std::vector<torch::Tensor> params;
  std::vector<torch::Tensor> exp_avg, exp_avg_sq;

  void Init(std::vector<torch::Tensor> ps) {
    params = std::move(ps);
    for (const auto& p : params) {
      exp_avg.push_back(torch::zeros_like(p, torch::MemoryFormat::Contiguous));
      exp_avg_sq.push_back(torch::zeros_like(p, torch::MemoryFormat::Contiguous));
    }
  }

  void Step(double lr) {
    torch::NoGradGuard no_grad;
    ++steps;
    double bc1 = 1.0 - std::pow(beta1, static_cast<double>(steps));
    double bc2 = 1.0 - std::pow(beta2, static_cast<double>(steps));
    for (size_t i = 0; i < params.size(); ++i) {
      auto& p = params[i];
      if (!p.grad().defined()) continue;
      const auto& g = p.grad();
      if (weight_decay != 0) p.mul_(1.0 - lr * weight_decay);
      exp_avg[i].mul_(beta1).add_(g, 1.0 - beta1);
      exp_avg_sq[i].mul_(beta2).addcmul_(g, g, 1.0 - beta2);
      auto denom = (exp_avg_sq[i].sqrt() / std::sqrt(bc2)).add_(eps);
      p.addcdiv_(exp_avg[i], denom, -lr / bc1);
    }
  }
};

double LearningRate(const TrainConfig& c, int64_t step, int64_t total) {
  double base = c.learning_rate;
  if (c.warmup_steps > 0 && step < c.warmup_steps) {
    return base * static_cast<double>(step + 1) / static_cast<double>(c.warmup_steps);
  }
  if (c.lr_schedule == "constant") return base;
  double span = static_cast<double>(std::max<int64_t>(1, total - c.warmup_steps));
  double progress = std::clamp(static_cast<double>(step - c.warmup_steps) / span, 0.0, 1.0);
  double floor = base * c.min_lr_ratio;
  if (c.lr_schedule == "linear") return floor + (base - floor) * (1.0 - progress);
  return floor + (base - floor) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

// --- tensors ↔ checkpoint blobs

Result<checkpoints::DType> BlobDType(const torch::Tensor& t) {
  switch (t.scalar_type()) {
    case torch::kFloat32:
      return checkpoints::DType::kF32;
    case torch::kFloat64:
      return checkpoints::DType::kF64;
    case torch::kFloat16:
      return checkpoints::DType::kF16;
    case torch::kBFloat16:
      return checkpoints::DType::kBF16;
    case torch::kInt64:
      return checkpoints::DType::kI64;
    case torch::kInt32:
      return checkpoints::DType::kI32;
    default:
      return Status::Internal("cannot checkpoint a tensor of this dtype");
  }
}

Result<torch::ScalarType> TorchDType(checkpoints::DType d) {
  switch (d) {
    case checkpoints::DType::kF32:
      return torch::kFloat32;
    case checkpoints::DType::kF64:
      return torch::kFloat64;
    case checkpoints::DType::kF16:
      return torch::kFloat16;
    case checkpoints::DType::kBF16:
      return torch::kBFloat16;
    case checkpoints::DType::kI64:
      return torch::kInt64;
    case checkpoints::DType::kI32:
      return torch::kInt32;
    default:
      return Status::InvalidArgument("checkpoint tensor has an unsupported dtype");
  }
}

// Copies a tensor into an owned blob (the snapshot an asynchronous save writes from).
Result<checkpoints::Blob> Snapshot(const std::string& name, const torch::Tensor& t) {
  TY_ASSIGN_OR_RETURN(auto dtype, BlobDType(t));
  torch::Tensor c = t.detach().to(torch::kCPU).contiguous();
  size_t bytes = static_cast<size_t>(c.numel()) * c.element_size();
  checkpoints::Bytes buf(bytes);
  if (bytes) std::memcpy(buf.data(), c.data_ptr(), bytes);
  std::vector<int64_t> shape(c.sizes().begin(), c.sizes().end());
  return checkpoints::Blob::OwnedTensor(name, dtype, std::move(shape), std::move(buf));
}

Status Restore(const checkpoints::CheckpointData& data, const std::string& name,
               torch::Tensor& into) {
  const checkpoints::Blob* b = data.Find(name);
  if (b == nullptr) return Status::InvalidArgument("the checkpoint has no tensor " + name);
  TY_ASSIGN_OR_RETURN(auto dtype, TorchDType(b->dtype));
  std::vector<int64_t> shape(into.sizes().begin(), into.sizes().end());
  if (b->shape != shape) {
    return Status::InvalidArgument("checkpoint tensor " + name +
                                   " has a different shape than the model's (was the model or "
                                   "the LoRA rank changed?)");
  }
  auto src = torch::from_blob(const_cast<std::byte*>(b->data()), shape,
                              torch::TensorOptions().dtype(dtype));
  torch::NoGradGuard no_grad;
  into.copy_(src);
  return Status::Ok();
}

// --- batches

struct DeviceBatch {
  torch::Tensor input_ids, targets, position_ids, segment_ids;
  int64_t loss_tokens = 0;
};

DeviceBatch ToDevice(const Batch& b, const torch::Device& device) {
  auto opts = torch::TensorOptions().dtype(torch::kInt64);
  auto make = [&](const std::vector<int64_t>& v) {
    return torch::from_blob(const_cast<int64_t*>(v.data()), {b.rows, b.seq_len}, opts)
        .clone()
        .to(device);
  };
  return {make(b.input_ids), make(b.targets), make(b.position_ids), make(b.segment_ids),
          b.loss_tokens};
}

// Padded rows, one example each (evaluation batches).
Batch PadExamples(const std::vector<const TokenizedExample*>& examples, int64_t pad_id) {
  Batch b;
  b.rows = static_cast<int64_t>(examples.size());
  for (const auto* e : examples) b.seq_len = std::max<int64_t>(b.seq_len, e->ids.size());
  b.seq_len = std::max<int64_t>(b.seq_len, 1);
  size_t n = static_cast<size_t>(b.rows * b.seq_len);
  b.input_ids.assign(n, pad_id);
  b.targets.assign(n, -100);
  b.position_ids.assign(n, 0);
  b.segment_ids.assign(n, -1);
  for (int64_t r = 0; r < b.rows; ++r) {
    const auto& e = *examples[r];
    for (size_t t = 0; t < e.ids.size(); ++t) {
      size_t i = static_cast<size_t>(r * b.seq_len) + t;
      b.input_ids[i] = e.ids[t];
      b.position_ids[i] = static_cast<int64_t>(t);
      b.segment_ids[i] = 0;
      if (t + 1 < e.ids.size() && e.loss_mask[t + 1]) {
        b.targets[i] = e.ids[t + 1];
        ++b.loss_tokens;
      }
    }
  }
  return b;
}

// Sum of the cross-entropy over the batch's targets, in float32.
torch::Tensor LossSum(model::CausalLM& model, const DeviceBatch& b, bool bf16) {
  torch::Tensor logits;
  if (bf16) {
    model::SetCudaAutocast(true, at::kBFloat16);
    logits = model.Forward(b.input_ids, b.position_ids, b.segment_ids);
    model::SetCudaAutocast(false, at::kBFloat16);
    at::autocast::clear_cache();
  } else {
    logits = model.Forward(b.input_ids, b.position_ids, b.segment_ids);
  }
  auto v = logits.size(-1);
  return torch::nn::functional::cross_entropy(
      logits.reshape({-1, v}).to(torch::kFloat32), b.targets.reshape({-1}),
      torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-100).reduction(torch::kSum));
}

struct EvalResult {
  double loss = NAN;
  double perplexity = NAN;
  double accuracy = NAN;  // NAN when the data has no labels
  int64_t examples = 0;
};

std::string TrimText(std::string s) {
  size_t a = s.find_first_not_of(" \t\r\n");
  if (a == std::string::npos) return "";
  size_t b = s.find_last_not_of(" \t\r\n");
  return s.substr(a, b - a + 1);
}

// The trainer's state, in one place.
struct Run {
  TrainConfig cfg;
  TrainerOptions opts;
  WorkloadEnv env;
  std::unique_ptr<DataParallel> dp;
  torch::Device device = torch::kCPU;
  bool bf16 = false;
  std::shared_ptr<const model::Tokenizer> tok;
  std::shared_ptr<model::CausalLM> model;
  model::LoraConfig lora;
  bool use_lora = true;
  std::vector<std::pair<std::string, torch::Tensor>> trainable;  // name → parameter
  AdamW optim;
  std::vector<TokenizedExample> train_examples, val_examples;
  std::vector<std::string> val_labels;  // per val example; empty when not classification
  std::unique_ptr<BatchIterator> it;
  int64_t pad_id = 0, bos_id = -1, eos_id = -1;
  std::string base_model_dir;
  std::unique_ptr<RunLogger> logger;
  std::unique_ptr<CheckpointSink> sink;
  std::optional<LoadedCheckpoint> resume;     // the checkpoint to continue from, until applied
  std::vector<DatasetInputSpec> data_inputs;  // the tables read, for the run's dataset inputs
  std::future<Result<std::string>> pending_save;
  int64_t step = 0, total_steps = 0;
  int64_t tokens_seen = 0;

  bool rank0() const { return dp->rank() == 0; }
  void Say(const std::string& line) const {
    if (rank0()) std::fprintf(stdout, "%s\n", line.c_str()), std::fflush(stdout);
  }
  void Warn(const Status& s) const {
    if (rank0()) std::fprintf(stderr, "warning: %s\n", s.ToString().c_str());
  }
};

Result<EvalResult> Evaluate(Run& r, bool with_accuracy) {
  EvalResult out;
  r.model->eval();
  torch::NoGradGuard no_grad;
  const int world = r.dp->world_size(), rank = r.dp->rank();
  int64_t limit = std::min<int64_t>(r.cfg.eval_max_examples, r.val_examples.size());
  std::vector<const TokenizedExample*> mine;
  std::vector<int64_t> mine_index;
  for (int64_t i = rank; i < limit; i += world) {
    mine.push_back(&r.val_examples[i]);
    mine_index.push_back(i);
  }
  double loss_sum = 0, tokens = 0, correct = 0;
  const int64_t rows = std::max<int64_t>(1, r.cfg.micro_batch_size);
  for (size_t start = 0; start < mine.size(); start += rows) {
    std::vector<const TokenizedExample*> part(mine.begin() + start,
                                              mine.begin() + std::min(mine.size(), start + rows));
    DeviceBatch b = ToDevice(PadExamples(part, r.pad_id), r.device);
    loss_sum += LossSum(*r.model, b, r.bf16).item<double>();
    tokens += static_cast<double>(b.loss_tokens);
  }
  bool accuracy = with_accuracy && !r.val_labels.empty();
  if (accuracy) {
    model::GenerateOptions gen;
    gen.max_new_tokens = r.cfg.max_new_tokens;
    gen.eos_ids = {r.eos_id};
    for (size_t start = 0; start < mine.size(); start += rows) {
      size_t end = std::min(mine.size(), start + rows);
      std::vector<std::vector<int64_t>> prompts;
      for (size_t k = start; k < end; ++k) {
        prompts.emplace_back(mine[k]->ids.begin(), mine[k]->ids.begin() + mine[k]->prompt_length);
      }
      TY_ASSIGN_OR_RETURN(auto generated, model::GenerateGreedy(*r.model, prompts, gen));
      for (size_t k = start; k < end; ++k) {
        const auto& answer = generated[k - start];
        std::vector<int32_t> ids(answer.begin(), answer.end());
        if (TrimText(r.tok->Decode(ids, true)) == TrimText(r.val_labels[mine_index[k]])) {
          correct += 1;
        }
      }
    }
  }
  loss_sum = r.dp->AllReduceSum(loss_sum);
  tokens = r.dp->AllReduceSum(tokens);
  correct = r.dp->AllReduceSum(correct);
  r.model->train();
  out.examples = limit;
  if (tokens > 0) {
    out.loss = loss_sum / tokens;
    out.perplexity = std::exp(out.loss);
  }
  if (accuracy && limit > 0) out.accuracy = correct / static_cast<double>(limit);
  return out;
}

// How the resume key names the training data: the file's name, or the table at its version.
std::string TrainDataKey(const TrainConfig& c) {
  if (!c.train_table.empty()) return c.train_table.ToString();
  return fs::path(c.train_path).filename().string();
}

// The configuration a checkpoint must agree with to be resumed exactly.
std::string ResumeKey(const Run& r) {
  const TrainConfig& c = r.cfg;
  return fmt::format(
      "method={} rank={} targets={} seq={} packing={} rows={} accum={} seed={} "
      "train={} template={}",
      c.method, r.use_lora ? c.lora_rank : 0, fmt::join(c.lora_target_modules, ","), c.max_seq_len,
      c.packing, c.micro_batch_size * r.dp->world_size(), c.grad_accum_steps, c.seed,
      TrainDataKey(c), c.prompt_template);
}

Result<checkpoints::CheckpointData> SnapshotState(Run& r, const std::map<std::string, double>& m) {
  checkpoints::CheckpointData data;
  for (size_t i = 0; i < r.trainable.size(); ++i) {
    const std::string& name = r.trainable[i].first;
    TY_ASSIGN_OR_RETURN(auto p, Snapshot("param/" + name, r.trainable[i].second));
    data.blobs.push_back(std::move(p));
    TY_ASSIGN_OR_RETURN(auto m1, Snapshot("optim/" + name + "/exp_avg", r.optim.exp_avg[i]));
    data.blobs.push_back(std::move(m1));
    TY_ASSIGN_OR_RETURN(auto m2, Snapshot("optim/" + name + "/exp_avg_sq", r.optim.exp_avg_sq[i]));
    data.blobs.push_back(std::move(m2));
  }
  auto pos = r.it->position();
  json::object meta{
      {"trainer", "trainyard-train"}, {"step", r.step},       {"optimizer_steps", r.optim.steps},
      {"epoch", pos.epoch},           {"cursor", pos.cursor}, {"tokens_seen", r.tokens_seen},
      {"resume_key", ResumeKey(r)}};
  json::object versions;
  if (r.cfg.train_table.version) versions["data.train"] = *r.cfg.train_table.version;
  if (r.cfg.validation_table.version) {
    versions["data.validation"] = *r.cfg.validation_table.version;
  }
  if (!versions.empty()) meta["data_versions"] = std::move(versions);
  data.user_metadata = json::serialize(meta);
  data.metrics = m;
  return data;
}

Status WaitForSave(Run& r) {
  if (!r.pending_save.valid()) return Status::Ok();
  auto result = r.pending_save.get();
  if (!result.ok()) return result.status();
  r.Say("checkpoint saved: " + *result);
  return Status::Ok();
}

// Rank 0 saves the whole state (every rank holds the same); `async` returns once the state
// is copied, while a background thread writes it.
Status SaveCheckpoint(Run& r, const std::map<std::string, double>& metrics, bool async) {
  if (!r.rank0()) return Status::Ok();
  TY_RETURN_IF_ERROR(WaitForSave(r));
  TY_ASSIGN_OR_RETURN(auto data, SnapshotState(r, metrics));
  CheckpointSink* sink = r.sink.get();
  int64_t step = r.step;
  r.pending_save = std::async(std::launch::async, [sink, step, d = std::move(data)]() mutable {
    return sink->Save(step, 0, 1, std::move(d));
  });
  if (!async) return WaitForSave(r);
  return Status::Ok();
}

Status ResumeFrom(Run& r, const LoadedCheckpoint& ck) {
  auto meta = ParseJsonObject(ck.data.user_metadata);
  if (!meta.ok()) return Status::InvalidArgument(ck.uri + " was not saved by trainyard train");
  TY_ASSIGN_OR_RETURN(auto key, OptionalString(*meta, "resume_key"));
  if (!key || *key != ResumeKey(r)) {
    return Status::FailedPrecondition(ck.uri + " was saved with a different configuration (" +
                                      (key ? *key : "?") + "; now " + ResumeKey(r) +
                                      "); an exact resume needs the same data, batch and method");
  }
  for (size_t i = 0; i < r.trainable.size(); ++i) {
    const std::string& name = r.trainable[i].first;
    TY_RETURN_IF_ERROR(Restore(ck.data, "param/" + name, r.trainable[i].second));
    TY_RETURN_IF_ERROR(Restore(ck.data, "optim/" + name + "/exp_avg", r.optim.exp_avg[i]));
    TY_RETURN_IF_ERROR(Restore(ck.data, "optim/" + name + "/exp_avg_sq", r.optim.exp_avg_sq[i]));
  }
  TY_ASSIGN_OR_RETURN(r.step, RequiredInt64(*meta, "step"));
  TY_ASSIGN_OR_RETURN(r.optim.steps, RequiredInt64(*meta, "optimizer_steps"));
  TY_ASSIGN_OR_RETURN(int64_t epoch, RequiredInt64(*meta, "epoch"));
  TY_ASSIGN_OR_RETURN(int64_t cursor, RequiredInt64(*meta, "cursor"));
  TY_ASSIGN_OR_RETURN(auto seen, OptionalInt64(*meta, "tokens_seen"));
  r.tokens_seen = seen.value_or(0);
  r.it->Seek(IteratorPosition{epoch, cursor});
  return Status::Ok();
}

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::string TokenizerPath(const TrainConfig& c) {
  return c.tokenizer_path.empty() ? c.model_path + "/tokenizer.json" : c.tokenizer_path;
}

// Reads the workload's environment, picks the device and joins the data-parallel group.
Status JoinWorld(Run& r) {
  TY_ASSIGN_OR_RETURN(r.env, WorkloadEnv::FromProcess());
  if (!r.opts.resume_from.empty()) r.env.resume_from = r.opts.resume_from;
  TY_ASSIGN_OR_RETURN(r.device, model::ResolveDevice(r.cfg.device));
  TY_ASSIGN_OR_RETURN(r.bf16, model::ResolveBf16(r.cfg.precision, r.device));
  TY_ASSIGN_OR_RETURN(r.dp, DataParallel::Join(r.env, r.device));
  // Ranks sharing a machine share its cores (unless OMP_NUM_THREADS says otherwise).
  if (r.env.local_world_size > 1 && r.device.is_cpu() &&
      std::getenv("OMP_NUM_THREADS") == nullptr) {
    int cores = static_cast<int>(std::thread::hardware_concurrency());
    torch::set_num_threads(std::max(1, cores / r.env.local_world_size));
  }
  return Status::Ok();
}

// Loads (or creates) the model and the tokenizer, and settles the special tokens.
Status LoadModelAndTokenizer(Run& r, const std::string& tok_path) {
  const TrainConfig& c = r.cfg;
  TY_ASSIGN_OR_RETURN(r.tok, model::Tokenizer::FromFile(tok_path));
  if (!c.model_path.empty()) {
    TY_ASSIGN_OR_RETURN(r.model, model::LoadPretrained(c.model_path, r.device, torch::kFloat32));
  } else {
    TY_ASSIGN_OR_RETURN(auto mc, model::ModelConfig::FromFile(c.model_config_path));
    TY_ASSIGN_OR_RETURN(r.model, model::CreateModel(mc, c.seed));
    r.model->to(r.device);
  }
  const model::ModelConfig& mc = r.model->config();
  if (r.tok->VocabSize() > mc.vocab_size) {
    return Status::InvalidArgument("the tokenizer has " + std::to_string(r.tok->VocabSize()) +
                                   " tokens but the model's vocab_size is " +
                                   std::to_string(mc.vocab_size));
  }
  // Special tokens: the model config's, else the tokenizer's conventional ones.
  auto first_token = [&](std::initializer_list<const char*> names) -> int64_t {
    for (const char* n : names) {
      if (auto id = r.tok->TokenToId(n)) return *id;
    }
    return -1;
  };
  r.bos_id = mc.bos_token_id.value_or(first_token({"<|begin_of_text|>", "<s>"}));
  r.eos_id = mc.eos_token_id.value_or(
      first_token({"<|end_of_text|>", "<|endoftext|>", "</s>", "<|im_end|>", "<|eot_id|>"}));
  if (r.eos_id < 0) {
    return Status::InvalidArgument(
        "neither the model config (eos_token_id) nor the tokenizer names an end-of-sequence "
        "token; set eos_token_id in config.json");
  }
  r.pad_id = r.tok->TokenToId("<|pad|>").value_or(r.eos_id >= 0 ? r.eos_id : 0);
  r.model->SetActivationCheckpointing(c.activation_checkpointing);
  return Status::Ok();
}

// Applies LoRA when asked, collects the trainable parameters, starts every rank from rank 0's
// weights and sets up the optimizer.
Status PrepareTrainableParameters(Run& r, const std::string& tok_path) {
  const TrainConfig& c = r.cfg;
  r.use_lora = c.method == "lora";
  r.base_model_dir = c.model_path;
  if (r.use_lora && c.save_adapter && c.model_path.empty() && r.rank0()) {
    // A random-init base exists nowhere else: keep it, so the adapter can be applied.
    r.base_model_dir = c.output_dir + "/base_model";
    TY_RETURN_IF_ERROR(model::SavePretrained(*r.model, r.base_model_dir, tok_path));
  }
  if (r.use_lora) {
    r.lora = model::LoraConfig{c.lora_rank, c.lora_alpha, c.lora_dropout, c.lora_target_modules};
    TY_ASSIGN_OR_RETURN(int wrapped, model::ApplyLora(*r.model, r.lora, Mix(c.seed)));
    r.Say(fmt::format("LoRA: rank {} alpha {} on {} layers ({})", c.lora_rank, c.lora_alpha,
                      wrapped, fmt::join(c.lora_target_modules, ", ")));
    r.model->to(r.device);
  }
  int64_t total_params = 0, trainable_params = 0;
  for (const auto& item : r.model->named_parameters()) {
    total_params += item.value().numel();
    if (item.value().requires_grad()) {
      r.trainable.emplace_back(item.key(), item.value());
      trainable_params += item.value().numel();
    }
  }
  if (r.trainable.empty()) return Status::InvalidArgument("the model has no trainable parameters");
  std::vector<torch::Tensor> params;
  for (auto& [name, p] : r.trainable) params.push_back(p);
  r.dp->Broadcast(params);  // every rank starts from rank 0's weights
  r.optim.beta1 = c.adam_beta1;
  r.optim.beta2 = c.adam_beta2;
  r.optim.eps = c.adam_eps;
  r.optim.weight_decay = c.weight_decay;
  r.optim.Init(params);
  const model::ModelConfig& mc = r.model->config();
  r.Say(
      fmt::format("model: {} ({} layers, hidden {}), {:.2f}M parameters, {:.3f}M trainable; "
                  "device {}{}; {} rank(s)",
                  mc.model_type, mc.num_hidden_layers, mc.hidden_size, total_params / 1e6,
                  trainable_params / 1e6, r.device.str(), r.bf16 ? " (bf16 autocast)" : "",
                  r.dp->world_size()));
  return Status::Ok();
}

// The table version a checkpoint being resumed read for `field` (data.train), if it names one.
std::optional<int64_t> CheckpointDataVersion(const LoadedCheckpoint& ck, const std::string& field) {
  auto meta = ParseJsonObject(ck.data.user_metadata);
  if (!meta.ok()) return std::nullopt;
  const json::value* versions = meta->if_contains("data_versions");
  if (versions == nullptr || !versions->is_object()) return std::nullopt;
  auto v = OptionalInt64(versions->as_object(), field);
  if (!v.ok() || !*v) return std::nullopt;
  return **v;
}

// Rank 0's choice of the version of `t` (the table source at `field`): the config's; else the
// checkpoint being resumed read (an exact resume reads the same rows); else what an earlier
// attempt of this run recorded (its `field`.version param); else the server's version at the
// timestamp, or its latest. A version from the config is checked with the server up front.
Result<int64_t> ChooseTableVersion(Run& r, const TableSource& t, const std::string& field) {
  if (!t.version) {
    if (r.resume) {
      if (auto v = CheckpointDataVersion(*r.resume, field)) {
        r.Say(fmt::format("{}: {}@{}, as the checkpoint being resumed read", field, t.table, *v));
        return *v;
      }
    }
    auto param = r.logger->params().find(field + ".version");
    if (param != r.logger->params().end()) {
      if (auto v = ParseInt64(param->second); v && *v >= 0) {
        r.Say(fmt::format("{}: {}@{}, as an earlier attempt of run {} read", field, t.table, *v,
                          r.logger->run_id()));
        return *v;
      }
    }
  }
  TY_ASSIGN_OR_RETURN(int64_t v, ResolveTableVersion(r.env, t, field));
  if (!t.version) r.Say(fmt::format("{}: {} is {}@{}", field, t.ToString(), t.table, v));
  return v;
}

// Settles the version of every table source once, on rank 0, and gives it to every rank
// (AllReduceSum of rank 0's value: exact for versions below 2^53), so all ranks read the same
// rows. Afterwards each table source's `version` is set: the params, the resume key and the
// checkpoints name it, and a resumed attempt reads it again.
Status PinTableVersions(Run& r) {
  for (auto [t, field] : {std::pair{&r.cfg.train_table, std::string("data.train")},
                          std::pair{&r.cfg.validation_table, std::string("data.validation")}}) {
    if (t->empty()) continue;
    Status chosen;
    double value = 0;
    if (r.rank0()) {
      Result<int64_t> v = ChooseTableVersion(r, *t, field);
      chosen = v.status();
      value = v.ok() ? static_cast<double>(*v) : -1.0;
    }
    value = r.dp->AllReduceSum(value);
    TY_RETURN_IF_ERROR(chosen);
    if (value < 0) {
      return Status::FailedPrecondition("rank 0 could not settle the version of " + t->table +
                                        " (" + field + "); see rank 0's log");
    }
    t->version = static_cast<int64_t>(value);
  }
  return Status::Ok();
}

// The records of a data source: a JSONL file, or a table at its pinned version (whose read is
// also kept as one of the run's dataset inputs).
Result<std::vector<Record>> ReadRecords(Run& r, const std::string& path, const TableSource& t,
                                        const std::string& field, const std::string& context) {
  if (t.empty()) return OpenJsonl(path)->ReadAll();
  auto source = OpenTable(r.env, t, *t.version, field, r.logger->run_id());
  TY_ASSIGN_OR_RETURN(auto records, source->ReadAll());
  r.Say(fmt::format("{}: {} rows of {}", field, records.size(), source->Describe()));
  r.data_inputs.push_back(
      TableDatasetInput(t.table, *t.version, context, static_cast<int64_t>(records.size())));
  return records;
}

// Reads, splits and tokenizes the data, and sets up the batch iterator and the step count.
Status LoadData(Run& r) {
  const TrainConfig& c = r.cfg;
  TY_RETURN_IF_ERROR(PinTableVersions(r));
  TY_ASSIGN_OR_RETURN(auto all,
                      ReadRecords(r, c.train_path, c.train_table, "data.train", "training"));
  std::vector<Record> train, val;
  if (c.has_validation()) {
    train = std::move(all);
    TY_ASSIGN_OR_RETURN(val, ReadRecords(r, c.validation_path, c.validation_table,
                                         "data.validation", "validation"));
  } else {
    SplitRecords(std::move(all), c.val_fraction, c.seed, &train, &val);
  }
  if (train.empty()) {
    return Status::InvalidArgument(
        (c.train_table.empty() ? c.train_path : c.train_table.ToString()) + " has no examples");
  }
  TY_ASSIGN_OR_RETURN(auto tmpl, model::ParsePromptTemplate(c.prompt_template));
  TokenizeOptions to{c.max_seq_len, r.bos_id >= 0, static_cast<int32_t>(r.bos_id),
                     static_cast<int32_t>(r.eos_id)};
  for (const auto& rec : train) {
    r.train_examples.push_back(TokenizeExample(*r.tok, Render(rec, tmpl, c.system_prompt), to));
  }
  bool labelled = !val.empty();
  for (const auto& rec : val) labelled = labelled && !rec.label.empty();
  for (const auto& rec : val) {
    r.val_examples.push_back(TokenizeExample(*r.tok, Render(rec, tmpl, c.system_prompt), to));
    if (labelled && c.eval_accuracy) r.val_labels.push_back(rec.label);
  }
  BatchOptions bo;
  bo.rows_per_batch = c.micro_batch_size;
  bo.seq_len = c.max_seq_len;
  bo.packing = c.packing;
  bo.pad_id = r.pad_id;
  bo.seed = c.seed;
  bo.rank = r.dp->rank();
  bo.world_size = r.dp->world_size();
  size_t n_train = r.train_examples.size();
  r.it = std::make_unique<BatchIterator>(r.train_examples, bo);
  int64_t rows_per_step = c.micro_batch_size * c.grad_accum_steps * r.dp->world_size();
  r.total_steps = c.max_steps > 0
                      ? c.max_steps
                      : std::max<int64_t>(
                            1, static_cast<int64_t>(std::ceil(c.epochs * r.it->rows_per_epoch() /
                                                              static_cast<double>(rows_per_step))));
  r.Say(
      fmt::format("data: {} training examples ({} rows of {} tokens per epoch{}), {} "
                  "validation; {} steps of {} rows",
                  n_train, r.it->rows_per_epoch(), c.max_seq_len, c.packing ? ", packed" : "",
                  r.val_examples.size(), r.total_steps, rows_per_step));
  return Status::Ok();
}

// Opens the run logger and the checkpoint sink (the server's in a job, else a local one).
Status OpenPlatform(Run& r) {
  TY_ASSIGN_OR_RETURN(r.logger, RunLogger::Open(r.env, "trainyard-train"));
  if (r.env.in_job()) {
    r.sink = ServerCheckpoints(r.env);
  } else {
    std::string resume = r.env.resume_from.empty() && r.opts.resume ? "latest" : r.env.resume_from;
    TY_ASSIGN_OR_RETURN(r.sink,
                        LocalCheckpoints(r.cfg.output_dir + "/checkpoints", "train", resume));
  }
  return Status::Ok();
}

// The platform and the checkpoint to resume come before the data: a resumed run reads the
// table versions its checkpoint read.
Status Setup(Run& r) {
  TY_RETURN_IF_ERROR(JoinWorld(r));
  const std::string tok_path = TokenizerPath(r.cfg);
  TY_RETURN_IF_ERROR(LoadModelAndTokenizer(r, tok_path));
  TY_RETURN_IF_ERROR(PrepareTrainableParameters(r, tok_path));
  TY_RETURN_IF_ERROR(OpenPlatform(r));
  TY_ASSIGN_OR_RETURN(r.resume, r.sink->LoadResume(r.dp->rank()));
  return LoadData(r);
}

void LogFinal(Run& r, const std::string& prefix, const EvalResult& e, int64_t step,
              std::vector<MetricPoint>* points) {
  int64_t now = NowMs();
  if (std::isfinite(e.loss)) {
    points->push_back({prefix + "loss", e.loss, step, now});
    points->push_back({prefix + "perplexity", e.perplexity, step, now});
  }
  if (std::isfinite(e.accuracy)) points->push_back({prefix + "accuracy", e.accuracy, step, now});
}

std::string DescribeEval(const EvalResult& e) {
  std::string s = fmt::format("eval loss {:.4f}, perplexity {:.2f}", e.loss, e.perplexity);
  if (std::isfinite(e.accuracy)) s += fmt::format(", accuracy {:.1f}%", 100 * e.accuracy);
  return s;
}

void LogMetricsOnRank0(Run& r, const std::vector<MetricPoint>& points) {
  if (r.rank0()) {
    if (auto s = r.logger->LogMetrics(points); !s.ok()) r.Warn(s);
  }
}

// The config (with the table versions settled) as params, and the tables read as dataset
// inputs (which the server also records in lineage: table@version -read-> run).
void LogRunParams(Run& r) {
  if (r.rank0()) {
    auto params = r.cfg.ToParams();
    params.emplace_back("world_size", std::to_string(r.dp->world_size()));
    params.emplace_back("device", r.device.str());
    if (auto s = r.logger->LogParams(params); !s.ok()) r.Warn(s);
    if (auto s = r.logger->LogInputs(r.data_inputs); !s.ok()) r.Warn(s);
  }
}

// Resumes from the sink's checkpoint when there is one; otherwise evaluates the untrained
// model and returns that baseline.
Result<std::optional<EvalResult>> ResumeOrEvaluateBaseline(Run& r) {
  std::optional<LoadedCheckpoint> resume = std::move(r.resume);
  r.resume.reset();
  std::optional<EvalResult> before;
  if (resume) {
    TY_RETURN_IF_ERROR(ResumeFrom(r, *resume));
    r.Say(fmt::format("resumed from {} at step {}", resume->uri, r.step));
  } else {
    TY_ASSIGN_OR_RETURN(before, Evaluate(r, r.cfg.eval_accuracy));
    r.Say("before training: " + DescribeEval(*before));
    std::vector<MetricPoint> points;
    LogFinal(r, "eval_", *before, 0, &points);
    LogFinal(r, "baseline_eval_", *before, 0, &points);
    LogMetricsOnRank0(r, points);
  }
  return before;
}

// What one optimizer step did.
struct StepResult {
  double lr = 0;
  double loss = 0;  // the step's loss per response token, over all ranks
  double grad_norm = 0;
  int64_t tokens = 0;  // rows × sequence length over all ranks, padding included
};

// Runs one optimizer step over grad_accum_steps micro-batches on every rank.
StepResult TrainStep(Run& r) {
  const TrainConfig& c = r.cfg;
  StepResult out;
  out.lr = LearningRate(c, r.step, r.total_steps);
  // Fetch the step's micro-batches first: the loss is normalised by the global step's
  // response-token count.
  std::vector<Batch> micro;
  double local_tokens = 0;
  for (int64_t k = 0; k < c.grad_accum_steps; ++k) {
    micro.push_back(r.it->Next());
    local_tokens += static_cast<double>(micro.back().loss_tokens);
  }
  double global_tokens = r.dp->AllReduceSum(local_tokens);
  double denom = std::max(1.0, global_tokens);
  double loss_sum = 0;
  for (int64_t k = 0; k < c.grad_accum_steps; ++k) {
    torch::manual_seed(Mix(Mix(c.seed) ^ Mix(static_cast<uint64_t>(r.step) * 1024 + k) ^
                           static_cast<uint64_t>(r.dp->rank())));
    DeviceBatch b = ToDevice(micro[k], r.device);
    auto loss = LossSum(*r.model, b, r.bf16);
    (loss / denom).backward();
    loss_sum += loss.item<double>();
  }
  std::vector<torch::Tensor> grads;
  for (auto& [name, p] : r.trainable) {
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    grads.push_back(p.grad());
  }
  r.dp->AllReduceSum(grads);
  loss_sum = r.dp->AllReduceSum(loss_sum);
  // One reduction and one device-to-host read for the global norm, not one per tensor.
  std::vector<torch::Tensor> squares;
  squares.reserve(grads.size());
  for (const auto& g : grads) squares.push_back(g.pow(2).sum());
  out.grad_norm = std::sqrt(torch::stack(squares).sum().item<double>());
  if (c.max_grad_norm > 0 && out.grad_norm > c.max_grad_norm) {
    torch::NoGradGuard no_grad;
    double scale = c.max_grad_norm / (out.grad_norm + 1e-6);
    for (auto& g : grads) g.mul_(scale);
  }
  r.optim.Step(out.lr);
  for (auto& [name, p] : r.trainable) p.mutable_grad().zero_();
  ++r.step;
  out.loss = loss_sum / denom;
  // Every rank runs the same number of rows of the same length (padding included).
  for (const auto& b : micro) out.tokens += b.rows * b.seq_len;
  out.tokens *= r.dp->world_size();
  return out;
}

// The training loop's running figures between progress reports.
struct Progress {
  Clock::time_point t_start = Clock::now();
  Clock::time_point t_last = t_start;
  int64_t start_step = 0;
  int64_t steps_this_process = 0;
  int64_t tokens_since = 0, steps_since = 0;
  double loss_since = 0;
  std::optional<EvalResult> last_eval;
};

// Prints the progress line and, on rank 0, logs the step metrics and a heartbeat; then starts
// the next reporting interval.
void ReportProgress(Run& r, Progress& p, const StepResult& s) {
  double secs = Seconds(Clock::now() - p.t_last);
  double tps = secs > 0 ? p.tokens_since / secs : 0;
  double elapsed = Seconds(Clock::now() - p.t_start);
  double eta = elapsed / std::max<int64_t>(1, r.step - p.start_step) *
               static_cast<double>(r.total_steps - r.step);
  r.Say(
      fmt::format("step {:>5}/{} | loss {:.4f} | lr {:.2e} | grad {:.3f} | {:.0f} tok/s | "
                  "eta {}",
                  r.step, r.total_steps, p.loss_since / p.steps_since, s.lr, s.grad_norm, tps,
                  FormatDuration(eta)));
  if (r.rank0()) {
    int64_t now = NowMs();
    std::vector<MetricPoint> pts{{"loss", p.loss_since / p.steps_since, r.step, now},
                                 {"learning_rate", s.lr, r.step, now},
                                 {"grad_norm", s.grad_norm, r.step, now},
                                 {"tokens_per_second", tps, r.step, now},
                                 {"epoch",
                                  static_cast<double>(r.it->position().epoch) +
                                      static_cast<double>(r.it->position().cursor) /
                                          std::max<int64_t>(1, r.it->rows_per_epoch()),
                                  r.step, now}};
    if (auto st = r.logger->LogMetrics(pts); !st.ok()) r.Warn(st);
    if (auto st = r.sink->Heartbeat(); !st.ok()) r.Warn(st);
  }
  p.t_last = Clock::now();
  p.tokens_since = 0;
  p.loss_since = 0;
  p.steps_since = 0;
}

// After a step: evaluates and checkpoints when due. Returns the process's exit code when it
// must stop now (a signal, or --exit-after-steps), else nothing.
Result<std::optional<int>> AfterStep(Run& r, Progress& p, const StepResult& s, bool last) {
  const TrainConfig& c = r.cfg;
  // Report an asynchronous save as soon as it is durable.
  if (r.pending_save.valid() &&
      r.pending_save.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
    TY_RETURN_IF_ERROR(WaitForSave(r));
  }
  std::map<std::string, double> ck_metrics{{"loss", s.loss}};
  if (c.eval_every_steps > 0 && r.step % c.eval_every_steps == 0 && !last) {
    TY_ASSIGN_OR_RETURN(auto e, Evaluate(r, c.eval_accuracy));
    r.Say(fmt::format("step {}: {}", r.step, DescribeEval(e)));
    std::vector<MetricPoint> pts;
    LogFinal(r, "eval_", e, r.step, &pts);
    LogMetricsOnRank0(r, pts);
    p.last_eval = e;
  }
  if (p.last_eval && std::isfinite(p.last_eval->loss)) ck_metrics["eval_loss"] = p.last_eval->loss;
  int sig = g_signal.load();
  if (sig != 0) {
    r.Say(
        fmt::format("signal {} received: saving a checkpoint at step {} and exiting", sig, r.step));
    TY_RETURN_IF_ERROR(SaveCheckpoint(r, ck_metrics, /*async=*/false));
    r.dp->Barrier();
    return 128 + sig;
  }
  if (c.checkpoint_every_steps > 0 && r.step % c.checkpoint_every_steps == 0 && !last) {
    TY_RETURN_IF_ERROR(SaveCheckpoint(r, ck_metrics, c.checkpoint_async));
  }
  if (r.opts.stop_after_steps > 0 && p.steps_this_process >= r.opts.stop_after_steps && !last) {
    TY_RETURN_IF_ERROR(WaitForSave(r));
    r.Say(
        fmt::format("stopping after {} steps (--exit-after-steps): exit 3", p.steps_this_process));
    std::fflush(stdout);
    return 3;
  }
  return std::nullopt;
}

// Trains up to total_steps. Returns the process's exit code when it stopped early, else
// nothing.
Result<std::optional<int>> TrainSteps(Run& r) {
  r.model->train();
  Progress p;
  p.start_step = r.step;
  while (r.step < r.total_steps) {
    StepResult s = TrainStep(r);
    ++p.steps_this_process;
    r.tokens_seen += s.tokens;
    p.tokens_since += s.tokens;
    p.loss_since += s.loss;
    ++p.steps_since;

    bool last = r.step == r.total_steps;
    if (r.step % std::max<int64_t>(1, r.cfg.log_every_steps) == 0 || last) {
      ReportProgress(r, p, s);
    }
    TY_ASSIGN_OR_RETURN(std::optional<int> exit_code, AfterStep(r, p, s, last));
    if (exit_code) return exit_code;
  }
  return std::nullopt;
}

// On rank 0: writes the adapter and/or merged model and train_summary.json, and ends the run.
Status WriteOutputs(Run& r, const std::optional<EvalResult>& before, const EvalResult& after) {
  const TrainConfig& c = r.cfg;
  std::error_code ec;
  fs::create_directories(c.output_dir, ec);
  json::object summary{{"steps", r.step}, {"tokens_seen", r.tokens_seen}};
  auto put = [&](const char* k, double v) {
    if (std::isfinite(v)) summary[k] = v;
  };
  if (before) {
    put("eval_loss_before", before->loss);
    put("eval_accuracy_before", before->accuracy);
  }
  put("eval_loss", after.loss);
  put("eval_perplexity", after.perplexity);
  put("eval_accuracy", after.accuracy);
  if (r.use_lora && c.save_adapter) {
    std::string dir = c.output_dir + "/adapter";
    TY_RETURN_IF_ERROR(model::SavePeftAdapter(*r.model, r.lora, dir, r.base_model_dir));
    summary["adapter_dir"] = dir;
    r.Say("adapter (PEFT format): " + dir);
    if (auto s = r.logger->LogArtifacts(dir, "adapter"); !s.ok()) r.Warn(s);
  }
  if (c.save_merged) {
    std::string dir = c.output_dir + "/model";
    if (r.use_lora) TY_RETURN_IF_ERROR(model::MergeLora(*r.model));
    TY_RETURN_IF_ERROR(model::SavePretrained(*r.model, dir, TokenizerPath(c)));
    summary["model_dir"] = dir;
    r.Say("model (Hugging Face format): " + dir);
    if (auto s = r.logger->LogArtifacts(dir, "model"); !s.ok()) r.Warn(s);
  }
  if (r.logger->enabled()) summary["run_id"] = r.logger->run_id();
  std::ofstream(c.output_dir + "/train_summary.json") << json::serialize(summary) << "\n";
  if (auto s = r.logger->End("FINISHED"); !s.ok()) r.Warn(s);
  return Status::Ok();
}

// The final evaluation, checkpoint and outputs.
Status FinishTraining(Run& r, const std::optional<EvalResult>& before) {
  TY_ASSIGN_OR_RETURN(auto after, Evaluate(r, r.cfg.eval_accuracy));
  r.Say("after training: " + DescribeEval(after));
  std::vector<MetricPoint> pts;
  LogFinal(r, "eval_", after, r.step, &pts);
  LogMetricsOnRank0(r, pts);
  std::map<std::string, double> ck_metrics;
  if (std::isfinite(after.loss)) ck_metrics["eval_loss"] = after.loss;
  TY_RETURN_IF_ERROR(SaveCheckpoint(r, ck_metrics, /*async=*/false));
  if (r.rank0()) TY_RETURN_IF_ERROR(WriteOutputs(r, before, after));
  r.dp->Barrier();
  return Status::Ok();
}

Result<int> Train(Run& r) {
  LogRunParams(r);
  TY_ASSIGN_OR_RETURN(std::optional<EvalResult> before, ResumeOrEvaluateBaseline(r));
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  TY_ASSIGN_OR_RETURN(std::optional<int> stopped, TrainSteps(r));
  if (stopped) return *stopped;
  TY_RETURN_IF_ERROR(FinishTraining(r, before));
  return 0;
}

}  // namespace

Result<int> RunTrainer(const TrainConfig& config, const TrainerOptions& options) {
  Run r;
  r.cfg = config;
  r.opts = options;
  try {
    if (Status s = Setup(r); !s.ok()) {
      if (r.dp && r.rank0() && r.logger) (void)r.logger->End("FAILED");
      return s;
    }
    auto code = Train(r);
    if (r.pending_save.valid()) {
      auto s = WaitForSave(r);
      if (code.ok() && !s.ok()) return s;
    }
    if (!code.ok() && r.rank0() && r.logger) (void)r.logger->End("FAILED");
    return code;
  } catch (const c10::Error& e) {
    return Status::Internal(std::string("libtorch: ") + e.what_without_backtrace());
  } catch (const std::exception& e) {
    return Status::Internal(std::string("training failed: ") + e.what());
  }
}

}  // namespace trainyard::train
