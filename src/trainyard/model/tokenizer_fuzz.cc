// Fuzzes the tokenizer. The first byte picks what the rest of the input is:
//   0: a tokenizer.json: it must load or fail with InvalidArgument, and a loaded tokenizer
//      must encode and decode without crashing;
//   1: text for a built-in Llama-3-style tokenizer: decode(encode(text)) must give the text
//      back when it is ASCII, and be stable after one round in any case;
//   2: text for a built-in GPT-2-style tokenizer with NFC and lstrip/rstrip/single_word
//      tokens: no crash;
//   3: ids (little-endian int32) to decode with both built-in tokenizers: no crash.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "trainyard/model/tokenizer.h"

namespace {

using trainyard::model::Tokenizer;

// GPT-2's byte → character table, as JSON-escaped strings. The built-in vocabularies are these
// 256 characters and 7 merged tokens; added tokens take the ids after them (263...).
std::vector<std::string> ByteLevelChars() {
  std::vector<std::string> chars;
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    int c = printable ? b : next++;
    char buf[16];
    if (c == '"' || c == '\\') {
      std::snprintf(buf, sizeof buf, "\\%c", c);
    } else if (c >= 0x20 && c < 0x7F) {
      std::snprintf(buf, sizeof buf, "%c", c);
    } else {
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
    }
    chars.emplace_back(buf);
  }
  return chars;
}

std::string BuiltInJson(bool llama) {
  std::vector<std::string> chars = ByteLevelChars();
  std::string vocab;
  int id = 0;
  for (const std::string& c : chars) vocab += "\"" + c + "\":" + std::to_string(id++) + ",";
  const char* merged[] = {"\\u0120t", "he", "\\u0120the", "in", "\\u0120in", "er", "\\u0120a"};
  for (const char* m : merged) vocab += std::string("\"") + m + "\":" + std::to_string(id++) + ",";
  vocab.pop_back();
  std::string merges =
      R"(["\u0120 t", "h e", "\u0120t he", "i n", "\u0120 in", "e r", "\u0120 a"])";
  std::string pattern =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+)";
  std::string added, pre, post, normalizer = "null";
  if (llama) {
    added = R"([{"id": 263, "content": "<|bos|>", "special": true, "normalized": false},
                {"id": 264, "content": "<|eot|>", "special": true, "normalized": false}])";
    pre = R"({"type": "Sequence", "pretokenizers": [
               {"type": "Split", "pattern": {"Regex": ")" +
          pattern + R"("}, "behavior": "Isolated", "invert": false},
               {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]})";
    post = R"({"type": "Sequence", "processors": [{"type": "ByteLevel"},
                {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<|bos|>"}},
                 {"Sequence": {"id": "A"}}], "special_tokens": {"<|bos|>": {"ids": [263]}}}]})";
  } else {
    added = R"([{"id": 263, "content": "<mask>", "special": true, "lstrip": true, "rstrip": true},
                {"id": 264, "content": "the", "special": false, "single_word": true},
                {"id": 265, "content": "é", "special": false, "normalized": true}])";
    pre = R"({"type": "ByteLevel", "add_prefix_space": true, "use_regex": true})";
    post = R"({"type": "ByteLevel"})";
    normalizer = R"({"type": "NFC"})";
  }
  return R"({"version": "1.0", "added_tokens": )" + added + R"(, "normalizer": )" + normalizer +
         R"(, "pre_tokenizer": )" + pre + R"(, "post_processor": )" + post +
         R"(, "decoder": {"type": "ByteLevel"}, "model": {"type": "BPE", "ignore_merges": )" +
         (llama ? "true" : "false") + R"(, "vocab": {)" + vocab + "}, \"merges\": " + merges + "}}";
}

[[noreturn]] void Die(const std::string& why) {
  std::fprintf(stderr, "%s\n", why.c_str());
  std::abort();
}

const Tokenizer& BuiltIn(bool llama) {
  static const std::shared_ptr<const Tokenizer> llama_tok = [] {
    auto t = Tokenizer::FromJson(BuiltInJson(true), "builtin-llama");
    if (!t.ok()) Die(t.status().ToString());
    return *t;
  }();
  static const std::shared_ptr<const Tokenizer> gpt2_tok = [] {
    auto t = Tokenizer::FromJson(BuiltInJson(false), "builtin-gpt2");
    if (!t.ok()) Die(t.status().ToString());
    return *t;
  }();
  return llama ? *llama_tok : *gpt2_tok;
}

void Exercise(const Tokenizer& tok, std::string_view text) {
  std::vector<int32_t> ids = tok.Encode(text, true);
  for (int32_t id : ids) {
    if (id < 0 || id >= tok.VocabSize()) std::abort();
  }
  (void)tok.Decode(ids, false);
  (void)tok.Decode(ids, true);
}

bool IsAscii(std::string_view s) {
  for (char c : s) {
    if (uint8_t(c) >= 0x80) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 4) {
    case 0: {
      auto tok = Tokenizer::FromJson(rest, "fuzz.json");
      if (!tok.ok()) {
        if (!tok.status().IsInvalidArgument()) std::abort();
        return 0;
      }
      Exercise(**tok, "Hello world! I'm here 123 \xF0\x9F\x99\x82 \n\n caf\xC3\xA9");
      Exercise(**tok, rest.substr(0, 256));
      std::vector<int32_t> ids;
      for (int32_t i = -2; i < 300; ++i) ids.push_back(i);
      (void)(*tok)->Decode(ids, true);
      return 0;
    }
    case 1: {
      const Tokenizer& tok = BuiltIn(true);
      std::string once = tok.Decode(tok.Encode(rest, false), false);
      if (IsAscii(rest) && once != rest) std::abort();
      if (tok.Decode(tok.Encode(once, false), false) != once) std::abort();
      Exercise(tok, rest);
      return 0;
    }
    case 2:
      Exercise(BuiltIn(false), rest);
      return 0;
    default: {
      std::vector<int32_t> ids(rest.size() / 4);
      if (!ids.empty()) std::memcpy(ids.data(), rest.data(), ids.size() * 4);
      for (bool llama : {true, false}) {
        (void)BuiltIn(llama).Decode(ids, false);
        (void)BuiltIn(llama).Decode(ids, true);
      }
      return 0;
    }
  }
}
