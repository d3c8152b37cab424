#include "trainyard/model/chat_template.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "trainyard/testing/status_matchers.h"

namespace trainyard::model {
namespace {

std::vector<RenderedTurn> Render(PromptTemplate t, const std::vector<ChatMessage>& messages) {
  Result<std::vector<RenderedTurn>> turns = RenderChat(t, messages);
  EXPECT_TRUE(turns.ok()) << turns.status().ToString();
  return turns.ok() ? turns.value() : std::vector<RenderedTurn>{};
}

TEST(ChatTemplateTest, ParsesTemplateNames) {
  EXPECT_EQ(*ParsePromptTemplate("mistral"), PromptTemplate::kMistral);
  EXPECT_EQ(*ParsePromptTemplate("chatml"), PromptTemplate::kChatML);
  EXPECT_EQ(*ParsePromptTemplate("alpaca"), PromptTemplate::kAlpaca);
  TY_EXPECT_ERROR(ParsePromptTemplate("llama2"), StatusCode::kInvalidArgument, "llama2");
  for (auto t : {PromptTemplate::kMistral, PromptTemplate::kChatML, PromptTemplate::kAlpaca}) {
    EXPECT_EQ(*ParsePromptTemplate(PromptTemplateName(t)), t);
  }
}

TEST(ChatTemplateTest, RendersOneExchangePerTemplate) {
  std::vector<ChatMessage> m = {{"system", "Be brief."}, {"user", "hi"}, {"assistant", "hello"}};
  auto turns = Render(PromptTemplate::kMistral, m);
  ASSERT_EQ(turns.size(), 1u);
  EXPECT_EQ(turns[0].prompt, "[INST] Be brief.\n\nhi [/INST]");
  EXPECT_EQ(turns[0].response, " hello");
  turns = Render(PromptTemplate::kChatML, m);
  ASSERT_EQ(turns.size(), 1u);
  EXPECT_EQ(turns[0].prompt,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(turns[0].response, "hello<|im_end|>");
  turns = Render(PromptTemplate::kAlpaca, m);
  ASSERT_EQ(turns.size(), 1u);
  EXPECT_EQ(turns[0].prompt, "Be brief.\n\n### Instruction:\nhi\n\n### Response:\n");
  EXPECT_EQ(turns[0].response, "hello");
}

TEST(ChatTemplateTest, NoOrEmptySystemPromptRendersTheSame) {
  for (auto t : {PromptTemplate::kMistral, PromptTemplate::kChatML, PromptTemplate::kAlpaca}) {
    auto without = Render(t, {{"user", "hi"}});
    auto empty = Render(t, {{"system", ""}, {"user", "hi"}});
    ASSERT_EQ(without.size(), 1u);
    ASSERT_EQ(empty.size(), 1u);
    EXPECT_EQ(without[0].prompt, empty[0].prompt) << PromptTemplateName(t);
  }
  EXPECT_EQ(Render(PromptTemplate::kMistral, {{"user", "hi"}})[0].prompt, "[INST] hi [/INST]");
}

TEST(ChatTemplateTest, OpenTurnEndsWhereTheReplyStarts) {
  // What inference generates from: the prompt the trainer put before the response.
  auto turns = Render(PromptTemplate::kChatML, {{"system", "S"}, {"user", "q"}});
  ASSERT_EQ(turns.size(), 1u);
  EXPECT_EQ(turns[0].prompt,
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nq<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(turns[0].response, "");
}

TEST(ChatTemplateTest, LaterTurnsHaveNoSystemPrompt) {
  auto turns = Render(PromptTemplate::kMistral,
                      {{"system", "S"}, {"user", "a"}, {"assistant", "b"}, {"user", "c"}});
  ASSERT_EQ(turns.size(), 2u);
  EXPECT_EQ(turns[0].prompt, "[INST] S\n\na [/INST]");
  EXPECT_EQ(turns[0].response, " b");
  EXPECT_EQ(turns[1].prompt, "[INST] c [/INST]");
  EXPECT_EQ(turns[1].response, "");
}

TEST(ChatTemplateTest, RefusesMalformedConversations) {
  using M = std::vector<ChatMessage>;
  const PromptTemplate t = PromptTemplate::kChatML;
  TY_EXPECT_ERROR(RenderChat(t, M{}), StatusCode::kInvalidArgument, "user message");
  TY_EXPECT_ERROR(RenderChat(t, M{{"system", "S"}}), StatusCode::kInvalidArgument, "user message");
  TY_EXPECT_ERROR(RenderChat(t, M{{"assistant", "x"}}), StatusCode::kInvalidArgument,
                  "messages[0].role");
  TY_EXPECT_ERROR(RenderChat(t, M{{"user", "x"}, {"user", "y"}}), StatusCode::kInvalidArgument,
                  "messages[1].role");
  TY_EXPECT_ERROR(RenderChat(t, M{{"user", "x"}, {"assistant", "y"}, {"assistant", "z"}}),
                  StatusCode::kInvalidArgument, "messages[2].role");
  TY_EXPECT_ERROR(RenderChat(t, M{{"user", "x"}, {"system", "y"}}), StatusCode::kInvalidArgument,
                  "messages[1].role");
  TY_EXPECT_ERROR(RenderChat(t, M{{"tool", "x"}}), StatusCode::kInvalidArgument, "\"tool\"");
}

TEST(ChatTemplateTest, InstructionMessageJoinsTheInput) {
  EXPECT_EQ(InstructionMessage(PromptTemplate::kMistral, "Sum", ""), "Sum");
  EXPECT_EQ(InstructionMessage(PromptTemplate::kMistral, "Sum", "1 2"), "Sum\n\n1 2");
  EXPECT_EQ(InstructionMessage(PromptTemplate::kChatML, "Sum", "1 2"), "Sum\n\n1 2");
  auto turns = Render(PromptTemplate::kAlpaca,
                      {{"user", InstructionMessage(PromptTemplate::kAlpaca, "Sum", "1 2")}});
  ASSERT_EQ(turns.size(), 1u);
  EXPECT_EQ(turns[0].prompt, "### Instruction:\nSum\n\n### Input:\n1 2\n\n### Response:\n");
}

}  // namespace
}  // namespace trainyard::model
