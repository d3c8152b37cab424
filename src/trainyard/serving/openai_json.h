// The OpenAI API's JSON, torch-free: request bodies of POST /v1/chat/completions and
// POST /v1/completions decoded into plain structs (with the checks OpenAI makes, each error
// naming its field), and the response, streaming-chunk, model-list and error bodies as OpenAI
// writes them. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "trainyard/common/status.h"

namespace trainyard::serving {

inline constexpr int kMaxChoicesPerRequest = 8;   // n
inline constexpr int kMaxChatTopLogprobs = 20;    // chat: top_logprobs
inline constexpr int kMaxCompletionLogprobs = 5;  // completions: logprobs

struct ChatMessage {
  std::string role;  // system | user | assistant
  std::string content;
};

struct OpenAiRequest {
  bool chat = false;
  std::string model;
  std::vector<ChatMessage> messages;  // chat
  std::string prompt;                 // completions: text, or
  std::vector<int32_t> prompt_ids;    // completions: a token array
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int64_t> top_k;  // an extension (vLLM's); -1 or 0: all tokens
  std::optional<int64_t> max_tokens;
  std::optional<int64_t> seed;
  std::vector<std::string> stop;
  bool ignore_eos = false;  // an extension (vLLM's)
  int n = 1;                // completions of the prompt, 1..kMaxChoicesPerRequest
  // -1: no log-probabilities; else how many alternatives each token's entry lists (chat:
  // top_logprobs with logprobs: true; completions: logprobs).
  int logprobs = -1;
};

// A request error: OpenAI's message and the field it is about (`param`, may be empty).
struct RequestError {
  std::string message;
  std::string param;
};

// Decodes and checks a body. On error, fills `error` and returns nullopt.
std::optional<OpenAiRequest> ParseOpenAiRequest(std::string_view body, bool chat,
                                                RequestError* error);

// {"error": {"message", "type", "param", "code"}}; `param`/`code` empty are null.
std::string EncodeError(std::string_view message, std::string_view type, std::string_view param,
                        std::string_view code);

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};

// A generated token's log-probability as answers carry it: the token's text as the tokenizer
// decodes it (raw bytes: a byte-level token may be part of a UTF-8 character; chat answers give
// the bytes too) and the most likely tokens', most likely first.
struct LogprobToken {
  std::string token;
  double logprob = 0;
  std::vector<std::pair<std::string, double>> top;
};

// One choice of an answer, or its piece in a streamed chunk.
struct Choice {
  int index = 0;
  std::string text;
  std::string finish_reason;           // empty: null
  bool with_logprobs = false;          // false: "logprobs": null
  std::vector<LogprobToken> logprobs;  // this piece's tokens
  int64_t text_offset = 0;  // completions: where this piece starts in the choice's whole text
};

// A whole (non-streamed) chat.completion or text_completion.
std::string EncodeCompletion(bool chat, std::string_view id, int64_t created,
                             std::string_view model, const std::vector<Choice>& choices,
                             const Usage& usage);
// One chunk of a stream (without the "data: " framing), with one choice, or none (`choice`
// null: a usage chunk). `role_chunk`: a chat stream's first chunk of the choice, delta
// {"role":"assistant","content":""}. `usage`: the chunk carries usage.
std::string EncodeChunk(bool chat, std::string_view id, int64_t created, std::string_view model,
                        const Choice* choice, bool role_chunk, const Usage* usage);

struct ModelEntry {
  std::string id;
  std::string parent;  // the base model of an adapter; empty for the base
};
std::string EncodeModelList(const std::vector<ModelEntry>& models, int64_t created,
                            std::string_view owned_by);

// `s` with every invalid UTF-8 sequence replaced by U+FFFD (JSON strings must be UTF-8).
std::string SanitizeUtf8(std::string_view s);

}  // namespace trainyard::serving
