// Chat templates: a conversation of {role, content} messages rendered into the text a model is
// given, the same text for the same messages in the trainer (train/data.h renders each record
// through here) and in the inference engine, so a served model sees prompts exactly as it was
// trained on them.
//
// The rendering is text only: bos and eos are token ids the caller adds (the trainer tokenizes
// a turn as [bos] + Encode(prompt) + Encode(response) + [eos], each part without special
// tokens). Pure functions; thread-safe.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "trainyard/common/status.h"

namespace trainyard::model {

enum class PromptTemplate { kMistral, kChatML, kAlpaca };
// mistral|chatml|alpaca; anything else is InvalidArgument naming the name and the choices.
Result<PromptTemplate> ParsePromptTemplate(std::string_view name);
std::string_view PromptTemplateName(PromptTemplate t);

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

// One exchange: the text up to where the assistant's reply starts, and the reply as the
// template writes it. For a system prompt S, a user message U and a reply A:
//   Mistral: "[INST] S\n\nU [/INST]" + " A"             ("[INST] U [/INST]" without S)
//   ChatML:  "<|im_start|>system\nS<|im_end|>\n" (only with S) +
//            "<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n" + "A<|im_end|>"
//   Alpaca:  "S\n\n" (only with S) + "### Instruction:\nU\n\n### Response:\n" + "A"
// An empty system prompt is no system prompt.
struct RenderedTurn {
  std::string prompt;
  std::string response;  // empty for a turn whose reply is to be generated
};

// Renders `messages`: an optional first "system" message, then "user" and "assistant" messages
// alternating, starting with a user message. Each user message starts a turn; the system prompt
// is part of the first turn's prompt only, and later turns render as a first turn would without
// one. The last turn has an empty response when the conversation ends with a user message (the
// prompt ends where the model's reply starts: what inference generates from). Tokens of a
// conversation: [bos] + for each turn Encode(prompt) + Encode(response), with eos after each
// response that was given. Anything else (no user message, an unknown role, a system message
// after the first, two user or assistant messages in a row) is InvalidArgument naming
// messages[i].role.
Result<std::vector<RenderedTurn>> RenderChat(PromptTemplate t,
                                             std::span<const ChatMessage> messages);

// The user message of an instruction with an optional input (Alpaca's "input" field), so that
// both sides render instruction data the same way: "{instruction}\n\n{input}" for Mistral and
// ChatML, "{instruction}\n\n### Input:\n{input}" for Alpaca; just the instruction without an
// input.
std::string InstructionMessage(PromptTemplate t, std::string_view instruction,
                               std::string_view input);

}  // namespace trainyard::model
