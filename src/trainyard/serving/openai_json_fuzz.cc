// Fuzzes the OpenAI request decoder: any body must decode or give an error with a message,
// never crash; a decoded request's strings re-encode as valid JSON.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "trainyard/common/json.h"
#include "trainyard/serving/openai_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace trainyard::serving;
  std::string_view body(reinterpret_cast<const char*>(data), size);
  for (bool chat : {false, true}) {
    RequestError error;
    auto request = ParseOpenAiRequest(body, chat, &error);
    if (!request) {
      if (error.message.empty()) std::abort();
      auto encoded = trainyard::ParseJsonObject(
          EncodeError(error.message, "invalid_request_error", error.param, ""));
      if (!encoded.ok()) std::abort();
      continue;
    }
    if (request->model.empty() || (chat && request->messages.empty())) std::abort();
    std::string text = chat ? request->messages.back().content : request->prompt;
    if (request->n < 1 || request->n > kMaxChoicesPerRequest) std::abort();
    if (request->logprobs < -1 ||
        request->logprobs > (chat ? kMaxChatTopLogprobs : kMaxCompletionLogprobs)) {
      std::abort();
    }
    Choice choice{1, text, "stop", true, {{text, -0.5, {{text, -0.5}, {"\xff", -2.0}}}}, 0};
    auto encoded = trainyard::ParseJsonObject(
        EncodeCompletion(chat, "id", 0, request->model, {choice}, Usage{1, 2}));
    if (!encoded.ok()) std::abort();
  }
  return 0;
}
