#include "trainyard/serving/openai_json.h"

#include <gtest/gtest.h>

#include "trainyard/common/json.h"

namespace trainyard::serving {
namespace {

std::optional<OpenAiRequest> Parse(std::string_view body, bool chat, RequestError* error) {
  return ParseOpenAiRequest(body, chat, error);
}

TEST(OpenAiJsonTest, ParsesAChatRequest) {
  RequestError error;
  auto r = Parse(R"({"model": "m", "messages": [{"role": "system", "content": "be brief"},
      {"role": "user", "content": [{"type": "text", "text": "hi "}, {"type": "text",
      "text": "there"}]}], "temperature": 0.5, "top_p": 0.9, "max_completion_tokens": 7,
      "stop": "END", "seed": 3, "stream": true, "stream_options": {"include_usage": true}})",
                 true, &error);
  ASSERT_TRUE(r) << error.message;
  ASSERT_EQ(r->messages.size(), 2u);
  EXPECT_EQ(r->messages[1].content, "hi there");
  EXPECT_EQ(*r->max_tokens, 7);
  EXPECT_EQ(r->stop, std::vector<std::string>{"END"});
  EXPECT_TRUE(r->stream && r->include_usage);
  EXPECT_EQ(*r->seed, 3);
}

TEST(OpenAiJsonTest, ParsesPromptsAsTextOrTokens) {
  RequestError error;
  auto text = Parse(R"({"model": "m", "prompt": ["once"]})", false, &error);
  ASSERT_TRUE(text);
  EXPECT_EQ(text->prompt, "once");
  auto ids = Parse(R"({"model": "m", "prompt": [[1, 2, 3]]})", false, &error);
  ASSERT_TRUE(ids);
  EXPECT_EQ(ids->prompt_ids, (std::vector<int32_t>{1, 2, 3}));
}

TEST(OpenAiJsonTest, ErrorsNameTheField) {
  struct Case {
    const char* body;
    bool chat;
    const char* param;
  };
  for (const Case& c : std::vector<Case>{
           {"{not json", false, ""},
           {R"({"prompt": "x"})", false, "model"},
           {R"({"model": "m"})", false, "prompt"},
           {R"({"model": "m", "prompt": ["a", "b"]})", false, "prompt"},
           {R"({"model": "m", "prompt": "x", "temperature": 2.5})", false, "temperature"},
           {R"({"model": "m", "prompt": "x", "temperature": "hot"})", false, "temperature"},
           {R"({"model": "m", "prompt": "x", "top_p": 0})", false, "top_p"},
           {R"({"model": "m", "prompt": "x", "max_tokens": 0})", false, "max_tokens"},
           {R"({"model": "m", "prompt": "x", "n": 0})", false, "n"},
           {R"({"model": "m", "prompt": "x", "n": 9})", false, "n"},
           {R"({"model": "m", "prompt": "x", "logprobs": 6})", false, "logprobs"},
           {R"({"model": "m", "prompt": "x", "logprobs": true})", false, "logprobs"},
           {R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
               "logprobs": true, "top_logprobs": 21})",
            true, "top_logprobs"},
           {R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
               "top_logprobs": 2})",
            true, "top_logprobs"},
           {R"({"model": "m", "prompt": "x", "stop": ["a", "b", "c", "d", "e"]})", false, "stop"},
           {R"({"model": "m", "messages": []})", true, "messages"},
           {R"({"model": "m", "messages": [{"role": "robot", "content": "x"}]})", true,
            "messages[0].role"},
           {R"({"model": "m", "messages": [{"role": "user"}]})", true, "messages[0].content"},
       }) {
    RequestError error;
    EXPECT_FALSE(Parse(c.body, c.chat, &error)) << c.body;
    EXPECT_EQ(error.param, c.param) << c.body << ": " << error.message;
    EXPECT_NE(error.message.find(c.param), std::string::npos) << error.message;
  }
}

TEST(OpenAiJsonTest, ParsesNAndLogprobs) {
  RequestError error;
  auto chat = Parse(R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "n": 8,
      "logprobs": true, "top_logprobs": 20})",
                    true, &error);
  ASSERT_TRUE(chat) << error.message;
  EXPECT_EQ(chat->n, 8);
  EXPECT_EQ(chat->logprobs, 20);
  auto plain = Parse(R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
      "logprobs": false})",
                     true, &error);
  ASSERT_TRUE(plain) << error.message;
  EXPECT_EQ(plain->n, 1);
  EXPECT_EQ(plain->logprobs, -1);
  auto on = Parse(R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
      "logprobs": true})",
                  true, &error);
  ASSERT_TRUE(on) << error.message;
  EXPECT_EQ(on->logprobs, 0);
  auto text = Parse(R"({"model": "m", "prompt": "x", "logprobs": 0, "n": 2})", false, &error);
  ASSERT_TRUE(text) << error.message;
  EXPECT_EQ(text->logprobs, 0);
  EXPECT_EQ(text->n, 2);
}

TEST(OpenAiJsonTest, EncodesChoicesWithLogprobs) {
  Choice a{0, "hi", "length", true, {{"hi", -0.25, {{"hi", -0.25}, {"\xC3", -3.0}}}}, 0};
  Choice b{1, "yo", "stop", false, {}, 0};
  auto chat = ParseJsonObject(EncodeCompletion(true, "c", 5, "m", {a, b}, Usage{3, 4}));
  ASSERT_TRUE(chat.ok());
  const json::array& choices = chat->at("choices").as_array();
  ASSERT_EQ(choices.size(), 2u);
  EXPECT_EQ(choices[1].as_object().at("index").as_int64(), 1);
  EXPECT_TRUE(choices[1].as_object().at("logprobs").is_null());
  const json::object& entry =
      choices[0].as_object().at("logprobs").as_object().at("content").as_array()[0].as_object();
  EXPECT_EQ(entry.at("token").as_string(), "hi");
  EXPECT_DOUBLE_EQ(entry.at("logprob").as_double(), -0.25);
  const json::object& alt = entry.at("top_logprobs").as_array()[1].as_object();
  EXPECT_EQ(alt.at("token").as_string(), "\xEF\xBF\xBD");  // an incomplete character
  EXPECT_EQ(alt.at("bytes").as_array()[0].as_int64(), 0xC3);

  a.text_offset = 7;
  auto chunk = ParseJsonObject(EncodeChunk(false, "c", 5, "m", &a, false, nullptr));
  ASSERT_TRUE(chunk.ok());
  const json::object& lp =
      chunk->at("choices").as_array()[0].as_object().at("logprobs").as_object();
  EXPECT_EQ(lp.at("tokens").as_array()[0].as_string(), "hi");
  EXPECT_EQ(lp.at("text_offset").as_array()[0].as_int64(), 7);
  EXPECT_EQ(lp.at("top_logprobs").as_array()[0].as_object().size(), 2u);
}

TEST(OpenAiJsonTest, EncodesAsOpenAiDoes) {
  auto error = ParseJsonObject(EncodeError("bad", "invalid_request_error", "top_p", ""));
  ASSERT_TRUE(error.ok());
  const json::object& e = error->at("error").as_object();
  EXPECT_EQ(e.at("param").as_string(), "top_p");
  EXPECT_TRUE(e.at("code").is_null());
  Choice first;
  auto chunk = ParseJsonObject(EncodeChunk(true, "id1", 5, "m", &first, true, nullptr));
  ASSERT_TRUE(chunk.ok());
  const json::object& delta =
      chunk->at("choices").as_array()[0].as_object().at("delta").as_object();
  EXPECT_EQ(delta.at("role").as_string(), "assistant");
  EXPECT_EQ(chunk->at("object").as_string(), "chat.completion.chunk");
  Usage usage{3, 4};
  Choice hi;
  hi.text = "hi";
  hi.finish_reason = "length";
  auto done = ParseJsonObject(EncodeCompletion(false, "c", 5, "m", {hi}, usage));
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->at("usage").as_object().at("total_tokens").as_int64(), 7);
}

TEST(OpenAiJsonTest, SanitizeUtf8ReplacesInvalidBytes) {
  EXPECT_EQ(SanitizeUtf8("ok \xC3\xA9"), "ok \xC3\xA9");
  EXPECT_EQ(SanitizeUtf8("a\xFF"
                         "b"),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(SanitizeUtf8("\xE2\x82"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(SanitizeUtf8("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
}

}  // namespace
}  // namespace trainyard::serving
