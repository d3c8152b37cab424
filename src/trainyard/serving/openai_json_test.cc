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
           {R"({"model": "m", "prompt": "x", "n": 3})", false, "n"},
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

TEST(OpenAiJsonTest, EncodesAsOpenAiDoes) {
  auto error = ParseJsonObject(EncodeError("bad", "invalid_request_error", "top_p", ""));
  ASSERT_TRUE(error.ok());
  const json::object& e = error->at("error").as_object();
  EXPECT_EQ(e.at("param").as_string(), "top_p");
  EXPECT_TRUE(e.at("code").is_null());
  auto chunk = ParseJsonObject(EncodeChunk(true, "id1", 5, "m", "", true, "", nullptr, false));
  ASSERT_TRUE(chunk.ok());
  const json::object& delta =
      chunk->at("choices").as_array()[0].as_object().at("delta").as_object();
  EXPECT_EQ(delta.at("role").as_string(), "assistant");
  EXPECT_EQ(chunk->at("object").as_string(), "chat.completion.chunk");
  Usage usage{3, 4};
  auto done = ParseJsonObject(EncodeCompletion(false, "c", 5, "m", "hi", "length", usage));
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
