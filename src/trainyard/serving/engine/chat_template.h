// Chat messages to prompt token ids, with the trainer's prompt templates (model/chat_template.h),
// so a model fine-tuned by `trainyard train` is asked in the format it learned: each user turn (and
// the assistant's answer to it) is rendered as one training example is, [bos] + prompt +
// response + [eos], and the last user turn's prompt ends the ids for the model to continue.
// A leading system message is the system prompt of the first turn. Pure; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainyard/common/status.h"
#include "trainyard/model/chat_template.h"
#include "trainyard/model/model_config.h"
#include "trainyard/model/tokenizer.h"
#include "trainyard/serving/openai_json.h"

namespace trainyard::serving {

struct ChatFormat {
  model::PromptTemplate prompt_template = model::PromptTemplate::kChatML;
  int32_t bos_id = -1;            // -1: none
  int32_t eos_id = -1;            // ends each earlier assistant turn; -1: none
  std::vector<int32_t> stop_ids;  // end-of-turn tokens besides the model's eos (<|im_end|>)
};

// The chat format of a model: `name` (mistral | chatml | alpaca) when given, else the one
// tokenizer_config.json's chat_template obviously is, else by model type (mistral -> mistral,
// qwen2 -> chatml), else chatml when the tokenizer has <|im_start|>, else alpaca.
Result<ChatFormat> ResolveChatFormat(const std::string& name, const std::string& model_dir,
                                     const model::ModelConfig& config,
                                     const model::Tokenizer& tokenizer);

// InvalidArgument (naming messages[i]) when the chat does not end with a user message.
Result<std::vector<int32_t>> RenderChat(const std::vector<ChatMessage>& messages,
                                        const ChatFormat& format,
                                        const model::Tokenizer& tokenizer);

}  // namespace trainyard::serving
