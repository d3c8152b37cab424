// Engine: an inference replica's model, its adapters and the loop that runs every request.
//
// Requests are submitted from any thread and answered through their GenerationStream. One loop
// thread owns the model: between decode steps it admits waiting requests (up to max_batch
// running at once), prefills them together, then decodes all running sequences as one batch, each
// with its own sampling parameters, random generator, adapter and KV cache (continuous batching).
// A sequence ends at an eos token, a stop string (matched on the decoded text; the stop string
// is not returned), max_tokens, the model's context, or when its stream is cancelled.
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
};

struct SamplingParams {
  double temperature = 1.0;       // 0: greedy (arg-max)
  double top_p = 1.0;             // (0, 1]
  int64_t top_k = 0;              // 0: all tokens
  std::optional<uint64_t> seed;   // same seed, prompt and parameters: same output
  int64_t max_tokens = 16;        // > 0
  std::vector<std::string> stop;  // stop strings (need a tokenizer)
  bool ignore_eos = false;
};

struct GenerationRequest {
  std::vector<int32_t> prompt;  // token ids, not empty
  std::string adapter;          // "" for the base model, else an adapter's name
  SamplingParams sampling;
  std::vector<int32_t> extra_stop_ids;  // stop tokens besides the model's eos (chat templates)
};

enum class FinishReason { kStop, kLength, kCancelled, kError };
std::string_view FinishReasonName(FinishReason r);  // "stop", "length", "cancelled", "error"

// A piece of a request's output. The last event of a stream has `finished` set.
struct GenerationEvent {
  std::vector<int32_t> token_ids;  // new tokens (the stop/eos token included in counts only)
  std::string text;                // new text (empty without a tokenizer)
  bool finished = false;
  FinishReason finish_reason = FinishReason::kStop;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;  // so far
  Status error;                   // finish_reason kError
};

class GenerationStream {
 public:
  virtual ~GenerationStream() = default;
  // Waits for the next event (events of one step are merged); false once the final event has
  // been returned.
  virtual bool Next(GenerationEvent* event) = 0;
  // The client is gone: the sequence leaves the batch at the next step and its stream ends
  // with kCancelled.
  virtual void Cancel() = 0;
};

class Engine {
 public:
  static Result<std::unique_ptr<Engine>> Load(const EngineOptions& options);
  virtual ~Engine() = default;

  // InvalidArgument naming the problem: an empty prompt, a token outside the vocabulary, a
  // prompt + max_tokens longer than the context, stop strings without a tokenizer, bad
  // sampling parameters; NotFound for an unknown adapter.
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
