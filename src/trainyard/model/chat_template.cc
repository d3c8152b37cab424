#include "trainyard/model/chat_template.h"

namespace trainyard::model {
namespace {

std::string TurnPrompt(PromptTemplate t, std::string_view system, std::string_view user) {
  std::string out;
  switch (t) {
    case PromptTemplate::kMistral:
      out = "[INST] ";
      if (!system.empty()) out.append(system).append("\n\n");
      out.append(user).append(" [/INST]");
      break;
    case PromptTemplate::kChatML:
      if (!system.empty()) out.append("<|im_start|>system\n").append(system).append("<|im_end|>\n");
      out.append("<|im_start|>user\n").append(user).append("<|im_end|>\n<|im_start|>assistant\n");
      break;
    case PromptTemplate::kAlpaca:
      if (!system.empty()) out.append(system).append("\n\n");
      out.append("### Instruction:\n").append(user).append("\n\n### Response:\n");
      break;
  }
  return out;
}

std::string TurnResponse(PromptTemplate t, std::string_view reply) {
  switch (t) {
    case PromptTemplate::kMistral:
      return " " + std::string(reply);
    case PromptTemplate::kChatML:
      return std::string(reply) + "<|im_end|>";
    case PromptTemplate::kAlpaca:
      break;
  }
  return std::string(reply);
}

Status BadRole(size_t i, const ChatMessage& m, std::string_view expected) {
  return Status::InvalidArgument("messages[" + std::to_string(i) + "].role: expected " +
                                 std::string(expected) + ", got \"" + m.role + "\"");
}

}  // namespace

Result<PromptTemplate> ParsePromptTemplate(std::string_view name) {
  if (name == "mistral") return PromptTemplate::kMistral;
  if (name == "chatml") return PromptTemplate::kChatML;
  if (name == "alpaca") return PromptTemplate::kAlpaca;
  return Status::InvalidArgument("unknown prompt template \"" + std::string(name) +
                                 "\"; use mistral, chatml or alpaca");
}

std::string_view PromptTemplateName(PromptTemplate t) {
  switch (t) {
    case PromptTemplate::kMistral:
      return "mistral";
    case PromptTemplate::kChatML:
      return "chatml";
    case PromptTemplate::kAlpaca:
      return "alpaca";
  }
  return "mistral";
}

Result<std::vector<RenderedTurn>> RenderChat(PromptTemplate t,
                                             std::span<const ChatMessage> messages) {
  std::string_view system;
  size_t i = 0;
  if (!messages.empty() && messages[0].role == "system") {
    system = messages[0].content;
    i = 1;
  }
  if (i == messages.size()) {
    return Status::InvalidArgument("messages: a conversation needs a user message");
  }
  std::vector<RenderedTurn> turns;
  for (; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role != "user")
      return BadRole(i, m, turns.empty() ? "\"user\"" : "\"user\" after \"assistant\"");
    RenderedTurn turn;
    turn.prompt = TurnPrompt(t, turns.empty() ? system : std::string_view(), m.content);
    if (i + 1 < messages.size()) {
      ++i;
      if (messages[i].role != "assistant") {
        return BadRole(i, messages[i], "\"assistant\" after \"user\"");
      }
      turn.response = TurnResponse(t, messages[i].content);
    }
    turns.push_back(std::move(turn));
  }
  return turns;
}

std::string InstructionMessage(PromptTemplate t, std::string_view instruction,
                               std::string_view input) {
  std::string out(instruction);
  if (input.empty()) return out;
  out += t == PromptTemplate::kAlpaca ? "\n\n### Input:\n" : "\n\n";
  out.append(input);
  return out;
}

}  // namespace trainyard::model
