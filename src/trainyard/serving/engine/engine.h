// Engine: an inference replica's model, its adapters and the loop that runs every request.
//
// Requests are submitted from any thread and answered through their GenerationStream. One loop
// thread owns the model: between decode steps it admits waiting requests (up to max_batch
// running at once), prefills them together, then decodes all running sequences as one batch, each
// with its own sampling parameters, random generator, adapter and KV cache (continuous batching).
// A sequence ends at an eos token, a stop string (matched on the decoded text; the stop string
// is not returned), max_tokens, the model's context, or when its stream is cancelled. A request
// for n completions runs n sequences that share the prompt's prefill (its keys and values are
// copied into each sibling's cache) and answer on one stream, each event naming its choice.
//
// Thread-safe: Submit, the accessors and every GenerationStream method may be called from any
// thread. The destructor stops the loop; streams still open then end with an Unavailable error.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "trainyard/common/status.h"
#include "trainyard/model/model_config.h"
#include "trainyard/model/tokenizer.h"

namespace trainyard::serving {

struct EngineOptions {
  std::string model_dir;  // a Hugging Face directory: config.json, safetensors, tokenizer.json
  std::vector<std::pair<std::string, std::string>> adapters;  // name -> PEFT LoRA directory
  std::string device = "auto";                                // auto | cpu | cuda | cuda:N
  std::string dtype = "auto";  // auto (bfloat16 on CUDA, float32 on CPU) | float32 | ...
  int max_batch = 32;          // sequences decoded together
  // libtorch's threads for the forward steps on a CPU; 0: one fewer than the machine's cores
  // (at least 1), leaving one to the HTTP server, the tokenizer and the streams.
  int threads = 0;
};

struct SamplingParams {
  double temperature = 1.0;       // 0: greedy (arg-max)
  double top_p = 1.0;             // (0, 1]
  int64_t top_k = 0;              // 0: all tokens
  std::optional<uint64_t> seed;   // same seed, prompt and parameters: same output
  int64_t max_tokens = 16;        // > 0
  std::vector<std::string> stop;  // stop strings (need a tokenizer)
  bool ignore_eos = false;
  // -1: no log-probabilities; 0..kMaxTopLogprobs: each generated token's log-probability under
  // the model (log-softmax of its logits, before temperature, top-k and top-p) and this many of
  // the most likely tokens with theirs.
  int top_logprobs = -1;
};

inline constexpr int kMaxTopLogprobs = 20;
inline constexpr int kMaxChoices = 64;  // the engine's limit on GenerationRequest::n

struct GenerationRequest {
  std::vector<int32_t> prompt;  // token ids, not empty
  std::string adapter;          // "" for the base model, else an adapter's name
  SamplingParams sampling;
  std::vector<int32_t> extra_stop_ids;  // stop tokens besides the model's eos (chat templates)
  // Completions of the prompt, 1..kMaxChoices. Choice i samples with seed + i when a seed is
  // given, so choices differ and each is reproducible.
  int n = 1;
};

enum class FinishReason { kStop, kLength, kCancelled, kError };
std::string_view FinishReasonName(FinishReason r);  // "stop", "length", "cancelled", "error"

// A generated token's log-probability and the most likely tokens' (most likely first).
struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;
};

// A piece of one choice's output. The last event of each choice has `finished` set.
struct GenerationEvent {
  int index = 0;                       // the choice, 0..n-1
  std::vector<int32_t> token_ids;      // new tokens (the stop/eos token included in counts only)
  std::vector<TokenLogprob> logprobs;  // one per token_ids entry, when asked for
  std::string text;                    // new text (empty without a tokenizer)
  bool finished = false;
  FinishReason finish_reason = FinishReason::kStop;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;  // so far
  Status error;                   // finish_reason kError
};

class GenerationStream {
 public:
  virtual ~GenerationStream() = default;
  // Waits for the next event (a choice's events not yet taken are merged); false once the final
  // event of every choice has been returned.
  virtual bool Next(GenerationEvent* event) = 0;
  // The client is gone: the request's sequences leave the batch at the next step and each
  // choice ends with kCancelled.
  virtual void Cancel() = 0;
};

class Engine {
 public:
  static Result<std::unique_ptr<Engine>> Load(const EngineOptions& options);
  virtual ~Engine() = default;

  // InvalidArgument naming the problem: an empty prompt, a token outside the vocabulary, a
  // prompt + max_tokens longer than the context, stop strings without a tokenizer, bad
  // sampling parameters, n outside 1..kMaxChoices; NotFound for an unknown adapter.
  virtual Result<std::shared_ptr<GenerationStream>> Submit(GenerationRequest request) = 0;

  virtual const model::ModelConfig& config() const = 0;
  // Null when the model directory has no tokenizer.json (token ids only).
  virtual const model::Tokenizer* tokenizer() const = 0;
  virtual int64_t context() const = 0;
  virtual std::vector<std::string> adapter_names() const = 0;
  virtual std::vector<int32_t> eos_ids() const = 0;
  virtual std::string device_name() const = 0;
};

// Checks sampling parameters; InvalidArgument names the field ("temperature must be ...").
Status ValidateSampling(const SamplingParams& p);

}  // namespace trainyard::serving
