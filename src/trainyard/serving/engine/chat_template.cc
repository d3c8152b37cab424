#include "trainyard/serving/engine/chat_template.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "trainyard/common/json.h"

namespace trainyard::serving {

Result<ChatFormat> ResolveChatFormat(const std::string& name, const std::string& model_dir,
                                     const model::ModelConfig& config,
                                     const model::Tokenizer& tokenizer) {
  ChatFormat f;
  if (!name.empty()) {
    auto t = model::ParsePromptTemplate(name);
    if (!t.ok()) return t.status().WithContext("--chat-template");
    f.prompt_template = *t;
  } else {
    std::string chat_template;
    std::ifstream in(std::filesystem::path(model_dir) / "tokenizer_config.json");
    if (in) {
      std::stringstream text;
      text << in.rdbuf();
      if (auto o = ParseJsonObject(text.str()); o.ok()) {
        if (auto t = OptionalString(*o, "chat_template"); t.ok() && *t) chat_template = **t;
      }
    }
    if (chat_template.find("<|im_start|>") != std::string::npos) {
      f.prompt_template = model::PromptTemplate::kChatML;
    } else if (chat_template.find("[INST]") != std::string::npos) {
      f.prompt_template = model::PromptTemplate::kMistral;
    } else if (config.model_type == "mistral") {
      f.prompt_template = model::PromptTemplate::kMistral;
    } else if (config.model_type == "qwen2" || tokenizer.TokenToId("<|im_start|>")) {
      f.prompt_template = model::PromptTemplate::kChatML;
    } else {
      f.prompt_template = model::PromptTemplate::kAlpaca;
    }
  }
  auto first_token = [&](std::initializer_list<const char*> names) -> int32_t {
    for (const char* n : names) {
      if (auto id = tokenizer.TokenToId(n)) return *id;
    }
    return -1;
  };
  // As the trainer picks them (train/nn/trainer.cc): the config's, else conventional names.
  f.bos_id = config.bos_token_id ? static_cast<int32_t>(*config.bos_token_id)
                                 : first_token({"<|begin_of_text|>", "<s>"});
  f.eos_id =
      config.eos_token_id
          ? static_cast<int32_t>(*config.eos_token_id)
          : first_token({"<|end_of_text|>", "<|endoftext|>", "</s>", "<|im_end|>", "<|eot_id|>"});
  if (f.bos_id >= tokenizer.VocabSize()) f.bos_id = -1;
  if (f.prompt_template == model::PromptTemplate::kChatML) {
    if (auto id = tokenizer.TokenToId("<|im_end|>")) f.stop_ids.push_back(*id);
  }
  return f;
}

Result<std::vector<int32_t>> RenderChat(const std::vector<ChatMessage>& messages,
                                        const ChatFormat& format,
                                        const model::Tokenizer& tokenizer) {
  // OpenAI clients send several system messages or several user messages in a row: each run
  // of them is one message of the conversation the trainer's templates render (model/).
  std::vector<model::ChatMessage> conversation;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role != "system" && m.role != "user" && m.role != "assistant") {
      return Status::InvalidArgument("messages[" + std::to_string(i) + "].role: \"" + m.role +
                                     "\" is not one of system, user, assistant");
    }
    if (!conversation.empty() && conversation.back().role == m.role && m.role != "assistant") {
      conversation.back().content += "\n\n" + m.content;
    } else {
      conversation.push_back({m.role, m.content});
    }
  }
  if (conversation.empty() || conversation.back().role != "user") {
    return Status::InvalidArgument(
        "messages[" + std::to_string(messages.empty() ? 0 : messages.size() - 1) +
        "]: the last message must be a user message (the model answers it)");
  }
  Result<std::vector<model::RenderedTurn>> turns =
      model::RenderChat(format.prompt_template, conversation);
  if (!turns.ok()) return turns.status();
  // As the trainer tokenizes a conversation: [bos] + per turn prompt + response (+ eos after
  // each response that was given), each part without special tokens.
  std::vector<int32_t> ids;
  if (format.bos_id >= 0) ids.push_back(format.bos_id);
  auto append = [&](const std::string& text) {
    std::vector<int32_t> part = tokenizer.Encode(text, /*add_special_tokens=*/false);
    ids.insert(ids.end(), part.begin(), part.end());
  };
  for (const model::RenderedTurn& turn : *turns) {
    append(turn.prompt);
    if (turn.response.empty()) break;
    append(turn.response);
    if (format.eos_id >= 0) ids.push_back(format.eos_id);
  }
  return ids;
}

}  // namespace trainyard::serving
