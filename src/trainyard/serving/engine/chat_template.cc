#include "trainyard/serving/engine/chat_template.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "trainyard/common/json.h"

namespace trainyard::serving {

Result<ChatFormat> ResolveChatFormat(const std::string& name, const std::string& model_dir,
                                     const train::ModelConfig& config,
                                     const train::Tokenizer& tokenizer) {
  ChatFormat f;
  if (!name.empty()) {
    auto t = train::ParsePromptTemplate(name);
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
      f.prompt_template = train::PromptTemplate::kChatML;
    } else if (chat_template.find("[INST]") != std::string::npos) {
      f.prompt_template = train::PromptTemplate::kMistral;
    } else if (config.model_type == "mistral") {
      f.prompt_template = train::PromptTemplate::kMistral;
    } else if (config.model_type == "qwen2" || tokenizer.TokenToId("<|im_start|>")) {
      f.prompt_template = train::PromptTemplate::kChatML;
    } else {
      f.prompt_template = train::PromptTemplate::kAlpaca;
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
  if (f.prompt_template == train::PromptTemplate::kChatML) {
    if (auto id = tokenizer.TokenToId("<|im_end|>")) f.stop_ids.push_back(*id);
  }
  return f;
}

Result<std::vector<int32_t>> RenderChat(const std::vector<ChatMessage>& messages,
                                        const ChatFormat& format,
                                        const train::Tokenizer& tokenizer) {
  size_t i = 0;
  std::string system;
  while (i < messages.size() && messages[i].role == "system") {
    if (!system.empty()) system += "\n\n";
    system += messages[i++].content;
  }
  std::vector<int32_t> ids;
  if (format.bos_id >= 0) ids.push_back(format.bos_id);
  bool first = true;
  while (i < messages.size()) {
    if (messages[i].role != "user") {
      return Status::InvalidArgument("messages[" + std::to_string(i) + "] is a " +
                                     messages[i].role +
                                     " message where a user message was expected: after the "
                                     "system messages, turns alternate user, assistant, ...");
    }
    train::Record record;
    record.instruction = messages[i++].content;
    while (i < messages.size() && messages[i].role == "user") {
      record.instruction += "\n\n" + messages[i++].content;
    }
    bool answered = i < messages.size() && messages[i].role == "assistant";
    if (answered) record.response = messages[i++].content;
    train::RenderedExample ex =
        train::Render(record, format.prompt_template, first ? system : std::string());
    first = false;
    auto append = [&](const std::string& text) {
      std::vector<int32_t> part = tokenizer.Encode(text, /*add_special_tokens=*/false);
      ids.insert(ids.end(), part.begin(), part.end());
    };
    append(ex.prompt);
    if (!answered) {
      if (i < messages.size()) {
        return Status::InvalidArgument("messages[" + std::to_string(i) + "] is a " +
                                       messages[i].role + " message after a user message");
      }
      return ids;
    }
    append(ex.response);
    if (format.eos_id >= 0) ids.push_back(format.eos_id);
  }
  return Status::InvalidArgument("messages[" + std::to_string(messages.size() - 1) +
                                 "]: the last message must be a user message (the model answers "
                                 "it)");
}

}  // namespace trainyard::serving
