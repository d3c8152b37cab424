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

// A whole (non-streamed) chat.completion or text_completion.
std::string EncodeCompletion(bool chat, std::string_view id, int64_t created,
                             std::string_view model, std::string_view text,
                             std::string_view finish_reason, const Usage& usage);
// One chunk of a stream (without the "data: " framing). `role_chunk`: the chat stream's first
// chunk, delta {"role":"assistant","content":""}. `finish_reason` empty: null. `usage`: the
// chunk carries usage (with no choices when `usage_only`).
std::string EncodeChunk(bool chat, std::string_view id, int64_t created, std::string_view model,
                        std::string_view text, bool role_chunk, std::string_view finish_reason,
                        const Usage* usage, bool usage_only);

struct ModelEntry {
  std::string id;
  std::string parent;  // the base model of an adapter; empty for the base
};
std::string EncodeModelList(const std::vector<ModelEntry>& models, int64_t created,
                            std::string_view owned_by);

// `s` with every invalid UTF-8 sequence replaced by U+FFFD (JSON strings must be UTF-8).
std::string SanitizeUtf8(std::string_view s);

}  // namespace trainyard::serving
