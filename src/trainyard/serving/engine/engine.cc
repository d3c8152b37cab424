#include "trainyard/serving/engine/engine.h"

#include <ATen/CPUGeneratorImpl.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <deque>
#include <filesystem>
#include <iterator>
#include <map>
#include <random>
#include <thread>

#include "trainyard/common/mutex.h"
#include "trainyard/model/nn/device.h"
#include "trainyard/serving/engine/runner.h"
#include "trainyard/serving/engine/sampling.h"
#include "trainyard/serving/engine/schedule.h"

namespace trainyard::serving {

std::string_view FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kError:
      return "error";
  }
  return "error";
}

Status ValidateSampling(const SamplingParams& p) {
  if (!std::isfinite(p.temperature) || p.temperature < 0 || p.temperature > 100) {
    return Status::InvalidArgument("temperature must be a number in [0, 100] (0 is greedy)");
  }
  if (!std::isfinite(p.top_p) || p.top_p <= 0 || p.top_p > 1) {
    return Status::InvalidArgument("top_p must be in (0, 1]");
  }
  if (p.top_k < 0) return Status::InvalidArgument("top_k must be 0 (all tokens) or positive");
  if (p.max_tokens <= 0) return Status::InvalidArgument("max_tokens must be positive");
  if (p.top_logprobs < -1 || p.top_logprobs > kMaxTopLogprobs) {
    return Status::InvalidArgument("top_logprobs must be between 0 and " +
                                   std::to_string(kMaxTopLogprobs));
  }
  for (const std::string& s : p.stop) {
    if (s.empty()) return Status::InvalidArgument("stop sequences must not be empty");
  }
  return Status::Ok();
}

namespace {

// Bytes at the end of `s` that begin a UTF-8 character not yet complete.
size_t IncompleteUtf8Tail(const std::string& s) {
  size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    auto c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: look further back
    size_t need = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
    return need > back ? back : 0;
  }
  return 0;
}

// Length of the longest suffix of `text` that is a proper prefix of a stop string: text that
// may still become a stop string is held back.
size_t StopPrefixTail(const std::string& text, const std::vector<std::string>& stops) {
  size_t hold = 0;
  for (const std::string& stop : stops) {
    for (size_t len = std::min(stop.size() - 1, text.size()); len > hold; --len) {
      if (text.compare(text.size() - len, len, stop, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  return hold;
}

// The events of one request's choices, in the order they were pushed.
class Stream : public GenerationStream {
 public:
  explicit Stream(int choices) : open_choices_(choices) {}

  bool Next(GenerationEvent* event) override {
    MutexLock lock(mu_);
    while (events_.empty() && open_choices_ > 0) cv_.Wait(mu_);
    if (events_.empty()) return false;
    *event = std::move(events_.front());
    events_.pop_front();
    if (event->finished) --open_choices_;
    return true;
  }
  void Cancel() override { cancelled_.store(true); }

  bool cancelled() const { return cancelled_.load(); }
  // Queues an event, merged into its choice's latest queued one when the reader has not taken
  // that yet (and it is not the choice's last).
  void Push(GenerationEvent e) {
    MutexLock lock(mu_);
    auto same = std::find_if(events_.rbegin(), events_.rend(),
                             [&](const GenerationEvent& q) { return q.index == e.index; });
    if (same != events_.rend() && !same->finished) {
      GenerationEvent& last = *same;
      last.token_ids.insert(last.token_ids.end(), e.token_ids.begin(), e.token_ids.end());
      last.logprobs.insert(last.logprobs.end(), std::make_move_iterator(e.logprobs.begin()),
                           std::make_move_iterator(e.logprobs.end()));
      last.text += e.text;
      last.finished = e.finished;
      last.finish_reason = e.finish_reason;
      last.completion_tokens = e.completion_tokens;
      last.error = e.error;
    } else {
      events_.push_back(std::move(e));
    }
    cv_.NotifyAll();
  }

 private:
  Mutex mu_;
  CondVar cv_;
  std::deque<GenerationEvent> events_ TY_GUARDED_BY(mu_);
  int open_choices_ TY_GUARDED_BY(mu_);  // choices whose last event is not taken yet
  std::atomic<bool> cancelled_{false};
};

struct Sequence {
  std::shared_ptr<Stream> stream;  // shared by a request's choices
  GenerationRequest request;
  int index = 0;  // the choice
  // The request's other choices, until this one's prefill: they copy its cache and sample
  // their first token from its logits, then run on their own.
  std::vector<std::unique_ptr<Sequence>> forks;
  int adapter = -1;
  KvCache cache;
  std::vector<int64_t> input;      // what the next forward step feeds
  std::vector<int32_t> generated;  // tokens so far (eos excluded)
  size_t emitted = 0;              // bytes of the decoded text already sent
  int64_t completion_tokens = 0;
  at::Generator generator;
  bool finished = false;
  FinishReason finish_reason = FinishReason::kStop;  // once finished
  Status error;
};

class EngineImpl : public Engine {
 public:
  EngineImpl(std::unique_ptr<ModelRunner> runner, std::shared_ptr<const model::Tokenizer> tok,
             std::map<std::string, int> adapters, std::vector<int32_t> eos, int max_batch)
      : runner_(std::move(runner)),
        tokenizer_(std::move(tok)),
        adapters_(std::move(adapters)),
        eos_(std::move(eos)),
        max_batch_(std::max(1, max_batch)) {
    loop_ = std::thread([this] { Loop(); });
  }
  ~EngineImpl() override {
    {
      MutexLock lock(mu_);
      stopping_ = true;
      cv_.NotifyAll();
    }
    loop_.join();
  }

  Result<std::shared_ptr<GenerationStream>> Submit(GenerationRequest request) override {
    TY_RETURN_IF_ERROR(ValidateSampling(request.sampling));
    if (request.n < 1 || request.n > kMaxChoices) {
      return Status::InvalidArgument("n must be between 1 and " + std::to_string(kMaxChoices));
    }
    const int64_t n = static_cast<int64_t>(request.prompt.size());
    if (n == 0) return Status::InvalidArgument("the prompt is empty");
    for (int32_t id : request.prompt) {
      if (id < 0 || id >= runner_->config().vocab_size) {
        return Status::InvalidArgument("the prompt has token id " + std::to_string(id) +
                                       " outside the vocabulary of " +
                                       std::to_string(runner_->config().vocab_size));
      }
    }
    int64_t ctx = context();
    if (n >= ctx) {
      return Status::InvalidArgument("the prompt has " + std::to_string(n) +
                                     " tokens, but this model's context is " + std::to_string(ctx) +
                                     " tokens (prompt and completion together): shorten it");
    }
    if (n + request.sampling.max_tokens > ctx) {
      return Status::InvalidArgument(
          "max_tokens is " + std::to_string(request.sampling.max_tokens) + ", but the prompt's " +
          std::to_string(n) + " tokens leave room for at most " + std::to_string(ctx - n) +
          " in this model's context of " + std::to_string(ctx) + " tokens");
    }
    if (!request.sampling.stop.empty() && !tokenizer_) {
      return Status::InvalidArgument("stop sequences need the model's tokenizer.json");
    }
    int adapter = -1;
    if (!request.adapter.empty()) {
      auto it = adapters_.find(request.adapter);
      if (it == adapters_.end()) {
        return Status::NotFound("no adapter named '" + request.adapter + "' on this replica");
      }
      adapter = it->second;
    }
    auto stream = std::make_shared<Stream>(request.n);
    std::random_device random;
    auto make = [&](int index) {
      auto seq = std::make_unique<Sequence>();
      seq->stream = stream;
      seq->index = index;
      seq->adapter = adapter;
      uint64_t seed = request.sampling.seed ? *request.sampling.seed + static_cast<uint64_t>(index)
                                            : (uint64_t{random()} << 32) | random();
      seq->generator = at::make_generator<at::CPUGeneratorImpl>(seed);
      seq->request = request;
      return seq;
    };
    auto seq = make(0);
    for (int i = 1; i < request.n; ++i) seq->forks.push_back(make(i));
    seq->input.assign(request.prompt.begin(), request.prompt.end());
    std::shared_ptr<GenerationStream> handle = stream;
    MutexLock lock(mu_);
    if (stopping_) return Status::Unavailable("the engine is shutting down");
    pending_.push_back(std::move(seq));
    cv_.NotifyAll();
    return handle;
  }

  const model::ModelConfig& config() const override { return runner_->config(); }
  const model::Tokenizer* tokenizer() const override { return tokenizer_.get(); }
  int64_t context() const override { return runner_->context(); }
  std::vector<std::string> adapter_names() const override {
    std::vector<std::string> out;
    for (const auto& [name, index] : adapters_) out.push_back(name);
    return out;
  }
  std::vector<int32_t> eos_ids() const override { return eos_; }
  std::string device_name() const override { return runner_->device().str(); }

 private:
  void Loop() {
    std::vector<std::unique_ptr<Sequence>> running;
    bool stopping = false;
    while (!stopping) {
      {
        MutexLock lock(mu_);
        while (!stopping_ && pending_.empty() && running.empty()) cv_.Wait(mu_);
      }
      // Every waiting request that fits is admitted and prefilled (in batched forwards,
      // shortest prompts first) before the next decode step. Requests that arrive during
      // those prefills wait for that decode step: prefilling them at once as well (vLLM's
      // prefill-first loop) measured no better under load here (bench/serving, C = 32):
      // they arrive a few at a time, so they ran as more, smaller forwards.
      std::vector<std::unique_ptr<Sequence>> admitted = Admit(running, &stopping);
      std::vector<Sequence*> prefill;
      for (auto& seq : admitted) {
        if (seq->stream->cancelled()) {
          Finish(*seq, FinishReason::kCancelled, "");
        } else {
          prefill.push_back(seq.get());
        }
      }
      for (const std::vector<Sequence*>& group : PrefillGroups(prefill)) Step(group);
      for (auto& seq : admitted) AddRunning(std::move(seq), running);
      if (stopping) break;
      std::vector<Sequence*> batch;
      for (auto& seq : running) {
        if (seq->stream->cancelled()) Finish(*seq, FinishReason::kCancelled, "");
        if (!seq->finished) batch.push_back(seq.get());
      }
      std::sort(batch.begin(), batch.end(), [](const Sequence* a, const Sequence* b) {
        return SlotIndex(a->cache) < SlotIndex(b->cache);
      });
      if (!batch.empty()) Step(batch);
      std::erase_if(running, [](const auto& s) { return s->finished; });
    }
    for (auto& seq : running) {
      if (seq->finished) continue;
      GenerationEvent e;
      e.index = seq->index;
      e.finished = true;
      e.finish_reason = FinishReason::kError;
      e.error = Status::Unavailable("the engine shut down before the request finished");
      e.prompt_tokens = static_cast<int64_t>(seq->request.prompt.size());
      seq->stream->Push(std::move(e));
    }
  }

  // Takes the waiting requests that fit beside `running` (a request counts its n choices), in
  // arrival order: the first that does not fit waits for sequences to finish. A request alone
  // is admitted even when its n exceeds max_batch. When the engine is stopping, every waiting
  // request joins `running` (to be ended) and `stopping` is set.
  std::vector<std::unique_ptr<Sequence>> Admit(std::vector<std::unique_ptr<Sequence>>& running,
                                               bool* stopping) {
    std::vector<std::unique_ptr<Sequence>> admitted;
    MutexLock lock(mu_);
    if (stopping_) {
      for (auto& s : pending_) AddRunning(std::move(s), running);
      pending_.clear();
      *stopping = true;
      return admitted;
    }
    int sequences = 0;
    for (const auto& seq : running) sequences += seq->finished ? 0 : 1;
    std::vector<int> waiting;
    for (const auto& seq : pending_) waiting.push_back(1 + static_cast<int>(seq->forks.size()));
    for (size_t n = AdmitCount(sequences, waiting, max_batch_); n > 0; --n) {
      admitted.push_back(std::move(pending_.front()));
      pending_.pop_front();
    }
    return admitted;
  }

  // Moves `seq` and the forks it still holds into `running`; those that already finished are
  // dropped. A fork that never ran (its request was cancelled or failed first) ends the same way.
  void AddRunning(std::unique_ptr<Sequence> seq, std::vector<std::unique_ptr<Sequence>>& running) {
    for (auto& fork : seq->forks) {
      if (seq->finished && !fork->finished && !fork->cache.slot) {
        Finish(*fork, seq->finish_reason, "", seq->error);
      }
      if (!fork->finished) running.push_back(std::move(fork));
    }
    seq->forks.clear();
    if (!seq->finished) running.push_back(std::move(seq));
  }

  // The prefill forwards of newly admitted sequences (PlanPrefill's groups).
  std::vector<std::vector<Sequence*>> PrefillGroups(const std::vector<Sequence*>& seqs) const {
    std::vector<int64_t> lengths;
    for (const Sequence* s : seqs) lengths.push_back(static_cast<int64_t>(s->input.size()));
    PrefillBudget budget =
        DefaultPrefillBudget(runner_->device().is_cpu(), runner_->config().num_attention_heads);
    std::vector<std::vector<Sequence*>> groups;
    for (const std::vector<size_t>& plan : PlanPrefill(lengths, budget)) {
      groups.emplace_back();
      for (size_t i : plan) groups.back().push_back(seqs[i]);
    }
    return groups;
  }

  // One forward step for `batch` (prefills of whole prompts, or decodes of one token each),
  // then one sampled token per sequence.
  void Step(const std::vector<Sequence*>& batch) {
    std::vector<SequenceStep> steps;
    for (Sequence* s : batch) steps.push_back({&s->input, &s->cache, s->adapter});
    torch::Tensor logits;
    try {
      logits = runner_->Forward(steps).to(torch::kCPU);
      // A prefilled sequence's forks continue from its cache (before its own token is
      // accepted: that may finish it).
      for (Sequence* s : batch) {
        for (auto& fork : s->forks) runner_->ForkCache(s->cache, &fork->cache);
      }
    } catch (const std::exception& e) {
      spdlog::error("forward step of {} sequences failed: {}", batch.size(), e.what());
      for (Sequence* s : batch) {
        Status error = Status::Internal(std::string("model error: ") + e.what());
        for (auto& fork : s->forks) Finish(*fork, FinishReason::kError, "", error);
        Finish(*s, FinishReason::kError, "", error);
      }
      return;
    }
    for (size_t i = 0; i < batch.size(); ++i) {
      Sequence& s = *batch[i];
      torch::Tensor row = logits[static_cast<int64_t>(i)];
      for (auto& fork : s.forks) {
        Accept(*fork, SampleToken(row, fork->request.sampling, fork->generator), row);
      }
      Accept(s, SampleToken(row, s.request.sampling, s.generator), row);
    }
  }

  // The sampled token's log-probability and the k most likely tokens' under `logits`.
  static TokenLogprob Logprob(const torch::Tensor& logits, int32_t token, int k) {
    torch::Tensor lp = torch::log_softmax(logits.to(torch::kFloat32), 0).contiguous();
    const float* v = lp.data_ptr<float>();
    TokenLogprob out;
    out.token = token;
    out.logprob = v[token];
    if (k > 0) {
      auto [values, ids] = lp.topk(std::min<int64_t>(k, lp.size(0)));
      auto va = values.accessor<float, 1>();
      auto ia = ids.accessor<int64_t, 1>();
      for (int64_t j = 0; j < values.size(0); ++j) {
        out.top.emplace_back(static_cast<int32_t>(ia[j]), va[j]);
      }
    }
    return out;
  }

  void Accept(Sequence& s, int32_t token, const torch::Tensor& logits) {
    const SamplingParams& p = s.request.sampling;
    ++s.completion_tokens;
    bool eos = !p.ignore_eos && (std::count(eos_.begin(), eos_.end(), token) > 0 ||
                                 std::count(s.request.extra_stop_ids.begin(),
                                            s.request.extra_stop_ids.end(), token) > 0);
    if (eos) return Finish(s, FinishReason::kStop, "");
    s.generated.push_back(token);
    s.input.assign(1, token);
    GenerationEvent e;
    e.index = s.index;
    e.token_ids = {token};
    if (p.top_logprobs >= 0) e.logprobs.push_back(Logprob(logits, token, p.top_logprobs));
    std::string text = DecodeText(s);
    if (!p.stop.empty()) {
      size_t cut = std::string::npos;
      for (const std::string& stop : p.stop) {
        size_t at = text.find(stop, s.emitted > stop.size() ? s.emitted - stop.size() : 0);
        cut = std::min(cut, at);
      }
      if (cut != std::string::npos) {
        std::string delta = cut > s.emitted ? text.substr(s.emitted, cut - s.emitted) : "";
        s.emitted = std::max(s.emitted, cut);
        return Finish(s, FinishReason::kStop, std::move(delta), Status::Ok(), {token},
                      std::move(e.logprobs));
      }
    }
    bool full = s.completion_tokens >= p.max_tokens || s.cache.length + 1 >= runner_->context();
    if (full) {
      std::string delta = text.size() > s.emitted ? text.substr(s.emitted) : "";
      s.emitted = text.size();
      return Finish(s, FinishReason::kLength, std::move(delta), Status::Ok(), {token},
                    std::move(e.logprobs));
    }
    size_t safe = text.size() - std::max(IncompleteUtf8Tail(text), StopPrefixTail(text, p.stop));
    if (safe > s.emitted) {
      e.text = text.substr(s.emitted, safe - s.emitted);
      s.emitted = safe;
    }
    e.prompt_tokens = static_cast<int64_t>(s.request.prompt.size());
    e.completion_tokens = s.completion_tokens;
    s.stream->Push(std::move(e));
  }

  std::string DecodeText(const Sequence& s) const {
    if (!tokenizer_) return "";
    std::vector<int32_t> ids;
    ids.reserve(s.generated.size());
    for (int32_t id : s.generated) {
      if (id < tokenizer_->VocabSize()) ids.push_back(id);
    }
    return tokenizer_->Decode(ids, /*skip_special_tokens=*/true);
  }

  // Ends `s`: its last event carries `text` (and, for a stop or eos, flushes the text held
  // back for a possible stop string).
  void Finish(Sequence& s, FinishReason reason, std::string text, Status error = Status::Ok(),
              std::vector<int32_t> tokens = {}, std::vector<TokenLogprob> logprobs = {}) {
    if (s.finished) return;
    s.finished = true;
    s.finish_reason = reason;
    s.error = error;
    if (reason == FinishReason::kStop && tokens.empty()) {
      std::string all = DecodeText(s);
      if (all.size() > s.emitted) text += all.substr(s.emitted);
      s.emitted = all.size();
    }
    GenerationEvent e;
    e.index = s.index;
    e.token_ids = std::move(tokens);
    e.logprobs = std::move(logprobs);
    e.text = std::move(text);
    e.finished = true;
    e.finish_reason = error.ok() ? reason : FinishReason::kError;
    e.error = std::move(error);
    e.prompt_tokens = static_cast<int64_t>(s.request.prompt.size());
    e.completion_tokens = s.completion_tokens;
    s.stream->Push(std::move(e));
  }

  std::unique_ptr<ModelRunner> runner_;
  std::shared_ptr<const model::Tokenizer> tokenizer_;
  const std::map<std::string, int> adapters_;
  const std::vector<int32_t> eos_;
  const int max_batch_;

  Mutex mu_;
  CondVar cv_;
  std::deque<std::unique_ptr<Sequence>> pending_ TY_GUARDED_BY(mu_);
  bool stopping_ TY_GUARDED_BY(mu_) = false;
  std::thread loop_;
};

Result<torch::Dtype> ResolveDtype(const std::string& name, const torch::Device& device) {
  if (name == "auto") return device.is_cuda() ? torch::kBFloat16 : torch::kFloat32;
  if (name == "float32") return torch::kFloat32;
  if (name == "bfloat16") return torch::kBFloat16;
  if (name == "float16") return torch::kFloat16;
  return Status::InvalidArgument("dtype must be auto, float32, bfloat16 or float16 (got '" + name +
                                 "')");
}

}  // namespace

Result<std::unique_ptr<Engine>> Engine::Load(const EngineOptions& options) {
  namespace fs = std::filesystem;
  TY_ASSIGN_OR_RETURN(torch::Device device, model::ResolveDevice(options.device));
  TY_ASSIGN_OR_RETURN(torch::Dtype dtype, ResolveDtype(options.dtype, device));
  if (options.threads < 0 || options.threads > 4096) {
    return Status::InvalidArgument("threads must be 0 (the cores but one) or 1..4096 (got " +
                                   std::to_string(options.threads) + ")");
  }
  if (device.is_cpu()) {
    // On 2 cores, two libtorch threads spinning between steps starved the server's own threads:
    // one thread served 1.7x the tokens/s at concurrency 1 and 1.3x at 32 (bench/serving).
    int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    torch::set_num_threads(options.threads > 0 ? options.threads : std::max(1, cores - 1));
  }
  TY_ASSIGN_OR_RETURN(auto model, model::LoadPretrained(options.model_dir, device, dtype));
  TY_ASSIGN_OR_RETURN(auto runner, ModelRunner::Create(model));
  std::shared_ptr<const model::Tokenizer> tok;
  std::string tok_path = (fs::path(options.model_dir) / "tokenizer.json").string();
  if (fs::exists(tok_path)) {
    TY_ASSIGN_OR_RETURN(tok, model::Tokenizer::FromFile(tok_path));
  }
  std::map<std::string, int> adapters;
  for (const auto& [name, dir] : options.adapters) {
    if (name.empty()) return Status::InvalidArgument("an adapter needs a name (NAME=DIR)");
    if (adapters.count(name)) {
      return Status::InvalidArgument("adapter name '" + name + "' is given twice");
    }
    auto index = runner->AddAdapter(dir);
    if (!index.ok()) return index.status().WithContext("adapter " + name);
    adapters[name] = *index;
  }
  const model::ModelConfig& c = runner->config();
  std::vector<int32_t> eos;
  for (int64_t id : c.eos_token_ids) eos.push_back(static_cast<int32_t>(id));
  if (eos.empty() && c.eos_token_id) eos.push_back(static_cast<int32_t>(*c.eos_token_id));
  if (eos.empty() && tok) {
    for (const char* name : {"<|end_of_text|>", "<|endoftext|>", "</s>", "<|eot_id|>"}) {
      if (auto id = tok->TokenToId(name)) eos.push_back(*id);
    }
  }
  return std::unique_ptr<Engine>(std::make_unique<EngineImpl>(
      std::move(runner), std::move(tok), std::move(adapters), std::move(eos), options.max_batch));
}

}  // namespace trainyard::serving
