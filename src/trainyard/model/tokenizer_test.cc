#include "trainyard/model/tokenizer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "trainyard/common/json.h"

namespace trainyard::model {
namespace {

std::string SourcePath(const std::string& relative) {
  return std::string(TRAINYARD_SOURCE_DIR) + "/" + relative;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string FixtureDir(const std::string& name) {
  return SourcePath("tests/fixtures/train/tokenizers/" + name);
}

std::vector<int32_t> Ids(const json::value& v) {
  std::vector<int32_t> ids;
  for (const json::value& id : v.as_array()) ids.push_back(int32_t(id.to_number<int64_t>()));
  return ids;
}

std::string Str(const json::value& v) { return std::string(v.as_string()); }

// The fixtures were written by tests/fixtures/train/make_tokenizer_fixtures.py with the real
// Hugging Face `tokenizers` (0.19.1); every id and every decode must match exactly.
class TokenizerFixtureTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerFixtureTest, EncodesLikeHuggingFace) {
  auto tok = Tokenizer::FromFile(FixtureDir(GetParam()) + "/tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  auto expected = json::parse(ReadFile(FixtureDir(GetParam()) + "/expected.json"));
  EXPECT_EQ((*tok)->VocabSize(), expected.at("vocab_size").to_number<int64_t>());
  const json::array& cases = expected.at("cases").as_array();
  ASSERT_GT(cases.size(), 300u);
  int mismatches = 0;
  for (const json::value& c : cases) {
    std::string text = Str(c.at("text"));
    std::vector<int32_t> ids = (*tok)->Encode(text, true);
    std::vector<int32_t> plain = (*tok)->Encode(text, false);
    bool ok = ids == Ids(c.at("ids")) && plain == Ids(c.at("ids_no_special"));
    EXPECT_EQ(ids, Ids(c.at("ids"))) << "text: " << text;
    EXPECT_EQ(plain, Ids(c.at("ids_no_special"))) << "text: " << text;
    EXPECT_EQ((*tok)->Decode(ids, false), Str(c.at("decoded"))) << "text: " << text;
    EXPECT_EQ((*tok)->Decode(ids, true), Str(c.at("decoded_skip_special"))) << "text: " << text;
    if (!ok && ++mismatches > 10) FAIL() << "stopping after 10 mismatching texts";
  }
}

TEST_P(TokenizerFixtureTest, DecodesArbitraryIdsLikeHuggingFace) {
  auto tok = Tokenizer::FromFile(FixtureDir(GetParam()) + "/tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  auto expected = json::parse(ReadFile(FixtureDir(GetParam()) + "/expected.json"));
  const json::array& cases = expected.at("decode_cases").as_array();
  ASSERT_GT(cases.size(), 50u);
  for (const json::value& c : cases) {
    std::vector<int32_t> ids = Ids(c.at("ids"));
    EXPECT_EQ((*tok)->Decode(ids, c.at("skip_special").as_bool()), Str(c.at("text")))
        << json::serialize(c.at("ids"));
  }
}

TEST_P(TokenizerFixtureTest, EncodesFromManyThreadsAlike) {
  auto tok = Tokenizer::FromFile(FixtureDir(GetParam()) + "/tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  const std::string text =
      "Hi, my order #123456 hasn't shipped 🙂 — 注文 <|endoftext|> thanks!";
  const std::vector<int32_t> want = (*tok)->Encode(text);
  std::vector<std::vector<int32_t>> got(4);
  std::vector<std::thread> threads;
  for (auto& out : got) {
    threads.emplace_back([&tok, &text, &out] {
      for (int i = 0; i < 200; ++i) out = (*tok)->Encode(text);
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& ids : got) EXPECT_EQ(ids, want);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TokenizerFixtureTest,
                         ::testing::Values("gpt2", "llama3", "qwen2"));

TEST(TokenizerTest, QuickstartTokenizerIsLlama3StyleWith2048Tokens) {
  auto tok = Tokenizer::FromFile(SourcePath("examples/quickstart/tokenizer.json"));
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  EXPECT_EQ((*tok)->VocabSize(), 2048);
  auto bos = (*tok)->TokenToId("<|begin_of_text|>");
  ASSERT_TRUE(bos.has_value());
  for (const char* special : {"<|end_of_text|>", "<|pad|>", "[INST]", "[/INST]"}) {
    EXPECT_TRUE((*tok)->TokenToId(special).has_value()) << special;
  }
  std::string text = "[INST] My refund for order #48213 never arrived. [/INST] Sorry about that!";
  std::vector<int32_t> ids = (*tok)->Encode(text);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], *bos);
  EXPECT_EQ(ids[1], *(*tok)->TokenToId("[INST]"));
  EXPECT_EQ((*tok)->Decode(ids, true),
            " My refund for order #48213 never arrived.  Sorry about that!");
  EXPECT_EQ((*tok)->Decode(ids, false), "<|begin_of_text|>" + text);
  // Trained on support tickets: common words are single tokens.
  EXPECT_LT((*tok)->Encode(" refund shipping account", false).size(), 6u);
}

TEST(TokenizerTest, LooksUpTokensAndIds) {
  auto tok = Tokenizer::FromFile(FixtureDir("gpt2") + "/tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  EXPECT_EQ((*tok)->TokenToId("<|endoftext|>"), 0);
  EXPECT_EQ((*tok)->IdToToken(0), "<|endoftext|>");
  auto space = (*tok)->TokenToId("\xC4\xA0");  // "Ġ", ByteLevel's space
  ASSERT_TRUE(space.has_value());
  EXPECT_EQ((*tok)->IdToToken(*space), "\xC4\xA0");
  EXPECT_FALSE((*tok)->TokenToId("no such token").has_value());
  EXPECT_FALSE((*tok)->IdToToken(-1).has_value());
  EXPECT_FALSE((*tok)->IdToToken((*tok)->VocabSize()).has_value());
}

TEST(TokenizerTest, DecodeDropsIdsOutOfRange) {
  auto tok = Tokenizer::FromFile(FixtureDir("llama3") + "/tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  std::vector<int32_t> hello = (*tok)->Encode("hello", false);
  std::vector<int32_t> ids = {-1, INT32_MIN, INT32_MAX, (*tok)->VocabSize()};
  ids.insert(ids.end(), hello.begin(), hello.end());
  ids.push_back(1 << 30);
  EXPECT_EQ((*tok)->Decode(ids), "hello");
  EXPECT_EQ((*tok)->Decode({}), "");
}

TEST(TokenizerTest, InvalidUtf8IsEncodedAsReplacementCharacters) {
  auto tok = Tokenizer::FromFile(FixtureDir("llama3") + "/tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  // A lone continuation byte, a truncated 3-byte sequence, an overlong encoding.
  std::string bad = "ok\x80 x\xE2\x82 y\xC0\xAF";
  std::string replaced = "ok\xEF\xBF\xBD x\xEF\xBF\xBD y\xEF\xBF\xBD\xEF\xBF\xBD";
  EXPECT_EQ((*tok)->Encode(bad), (*tok)->Encode(replaced));
  EXPECT_EQ((*tok)->Decode((*tok)->Encode(bad, false)), replaced);
}

// tokenizer.json of the gpt2 fixture, changed by `edit`.
std::string EditedFixture(const std::function<void(json::object&)>& edit) {
  json::value v = json::parse(ReadFile(FixtureDir("gpt2") + "/tokenizer.json"));
  edit(v.as_object());
  return json::serialize(v);
}

void ExpectInvalid(std::string_view json_text, std::string_view message_part) {
  auto tok = Tokenizer::FromJson(json_text, "tok.json");
  ASSERT_FALSE(tok.ok()) << "accepted: " << json_text.substr(0, 200);
  EXPECT_TRUE(tok.status().IsInvalidArgument()) << tok.status().ToString();
  EXPECT_NE(tok.status().message().find(message_part), std::string::npos) << tok.status().message();
  EXPECT_EQ(tok.status().message().rfind("tok.json: ", 0), 0u) << tok.status().message();
}

TEST(TokenizerTest, RejectsMalformedJson) {
  ExpectInvalid("", "not valid JSON");
  ExpectInvalid("{\"model\": ", "not valid JSON");
  ExpectInvalid("[1, 2]", "must be a JSON object");
  ExpectInvalid("{}", "model must be an object");
  ExpectInvalid(std::string(100, '[') + std::string(100, ']'), "not valid JSON");
}

TEST(TokenizerTest, RejectsUnsupportedModelsAndPipelines) {
  ExpectInvalid(EditedFixture([](json::object& o) { o["model"].as_object()["type"] = "Unigram"; }),
                "model.type \"Unigram\" is not supported (byte-level BPE only)");
  ExpectInvalid(EditedFixture([](json::object& o) {
                  o["model"].as_object()["continuing_subword_prefix"] = "##";
                }),
                "model.continuing_subword_prefix is not supported");
  ExpectInvalid(EditedFixture([](json::object& o) { o["model"].as_object()["dropout"] = 0.1; }),
                "model.dropout is not supported");
  ExpectInvalid(EditedFixture([](json::object& o) {
                  o["normalizer"] = json::object{{"type", "Lowercase"}};
                }),
                "normalizer.type \"Lowercase\" is not supported");
  ExpectInvalid(EditedFixture([](json::object& o) {
                  o["pre_tokenizer"] = json::object{{"type", "Whitespace"}};
                }),
                "pre_tokenizer.type \"Whitespace\" is not supported");
  ExpectInvalid(EditedFixture([](json::object& o) { o["pre_tokenizer"] = nullptr; }),
                "pre_tokenizer must be ByteLevel");
  ExpectInvalid(EditedFixture([](json::object& o) {
                  o["post_processor"] = json::object{{"type", "BertProcessing"}};
                }),
                "post_processor.type \"BertProcessing\" is not supported");
  ExpectInvalid(EditedFixture([](json::object& o) {
                  o["decoder"] = json::object{{"type", "WordPiece"}};
                }),
                "decoder.type \"WordPiece\" is not supported");
  ExpectInvalid(EditedFixture([](json::object& o) {
                  o["padding"] = json::object{{"strategy", "BatchLongest"}};
                }),
                "padding is not supported");
}

TEST(TokenizerTest, RejectsBadMergesAndVocab) {
  ExpectInvalid(EditedFixture([](json::object& o) {
                  o["model"].as_object()["merges"].as_array()[0] = "nosuchtoken e";
                }),
                "model.merges[0] uses \"nosuchtoken\", which is not in model.vocab");
  ExpectInvalid(EditedFixture([](json::object& o) {
                  o["model"].as_object()["merges"].as_array()[3] = "abc";
                }),
                "model.merges[3] must be two tokens separated by one space");
  ExpectInvalid(EditedFixture([](json::object& o) {
                  o["model"].as_object()["merges"].as_array()[1] = json::array{1, 2};
                }),
                "model.merges[1] must be");
  ExpectInvalid(EditedFixture([](json::object& o) { o["model"].as_object()["merges"] = 3; }),
                "model.merges must be an array");
  ExpectInvalid(
      EditedFixture([](json::object& o) { o["model"].as_object()["vocab"].as_object()["x"] = -4; }),
      "model.vocab[\"x\"] is out of range");
  ExpectInvalid(EditedFixture([](json::object& o) {
                  o["model"].as_object()["vocab"].as_object()["x"] = "seven";
                }),
                "model.vocab[\"x\"] must be a token id");
  ExpectInvalid(EditedFixture([](json::object& o) {
                  o["added_tokens"].as_array()[0].as_object()["content"] = "";
                }),
                "added_tokens[0].content must be a non-empty string");
}

TEST(TokenizerTest, RejectsBadSplitPatternsAndTemplates) {
  std::string llama = ReadFile(FixtureDir("llama3") + "/tokenizer.json");
  auto edit = [&](const std::function<void(json::object&)>& f) {
    json::value v = json::parse(llama);
    f(v.as_object());
    return json::serialize(v);
  };
  ExpectInvalid(
      edit([](json::object& o) {
        o["pre_tokenizer"].as_object()["pretokenizers"].as_array()[0].as_object()["pattern"] =
            json::object{{"Regex", "(unclosed"}};
      }),
      "pre_tokenizer.pretokenizers[0].pattern is not a valid regular expression");
  ExpectInvalid(
      edit([](json::object& o) {
        o["pre_tokenizer"].as_object()["pretokenizers"].as_array()[0].as_object()["behavior"] =
            "MergedWithNext";
      }),
      "pre_tokenizer.pretokenizers[0].behavior \"MergedWithNext\" is not supported");
  ExpectInvalid(edit([](json::object& o) {
                  auto& steps = o["pre_tokenizer"].as_object()["pretokenizers"].as_array();
                  std::swap(steps[0], steps[1]);
                }),
                "pre_tokenizer.pretokenizers[0].type \"ByteLevel\" is not supported here");
  ExpectInvalid(
      edit([](json::object& o) {
        o["post_processor"].as_object()["processors"].as_array()[1].as_object()["special_tokens"] =
            json::object{};
      }),
      "post_processor.processors[1].single[0] uses \"<|begin_of_text|>\"");
  ExpectInvalid(edit([](json::object& o) {
                  o["post_processor"]
                      .as_object()["processors"]
                      .as_array()[1]
                      .as_object()["special_tokens"]
                      .as_object()["<|begin_of_text|>"]
                      .as_object()["ids"] = json::array{99999};
                }),
                "99999 is not a token of this tokenizer");
}

TEST(TokenizerTest, AssignsAddedTokenIdsAsHuggingFaceDoes) {
  // `tokenizers` ignores the ids in added_tokens: a token in the vocabulary keeps its id, the
  // others follow the vocabulary. Expected values were read from tokenizers 0.19.1.
  json::value v = json::parse(ReadFile(FixtureDir("llama3") + "/tokenizer.json"));
  json::array& added = v.as_object()["added_tokens"].as_array();
  for (size_t i = 0; i < added.size(); ++i) added[i].as_object()["id"] = 5000 + int(i);
  json::object the = added[0].as_object();
  the["content"] = "\xC4\xA0the";  // "Ġthe", a vocabulary token
  the["id"] = 7;
  added.push_back(the);
  auto tok = Tokenizer::FromJson(json::serialize(v));
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  EXPECT_EQ((*tok)->TokenToId("<|begin_of_text|>"), 1501);
  EXPECT_EQ((*tok)->TokenToId("<|eot_id|>"), 1503);
  EXPECT_EQ((*tok)->TokenToId("\xC4\xA0the"), 266);
  EXPECT_EQ((*tok)->Encode("<|eot_id|>x"), (std::vector<int32_t>{1501, 1503, 87}));
  EXPECT_EQ((*tok)->VocabSize(), 1504);
}

TEST(TokenizerTest, FromFileReportsAMissingFile) {
  auto tok = Tokenizer::FromFile(SourcePath("no/such/tokenizer.json"));
  ASSERT_FALSE(tok.ok());
  EXPECT_TRUE(tok.status().IsNotFound()) << tok.status().ToString();
}

}  // namespace
}  // namespace trainyard::model
