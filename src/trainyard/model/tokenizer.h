// Tokenizer: Hugging Face `tokenizer.json` byte-level BPE (GPT-2, Llama-3, Qwen2 style),
// producing exactly the ids the Hugging Face `tokenizers` library produces.
//
// Supported: model.type "BPE" (merges as "a b" strings or [a, b] pairs, ignore_merges,
// continuing_subword_prefix/end_of_word_suffix absent), normalizer null/NFC, pre_tokenizer
// ByteLevel (with its GPT-2 regex when use_regex) or a Sequence of Split(regex pattern,
// behavior Isolated/Removed) + ByteLevel(use_regex false), post_processor ByteLevel /
// TemplateProcessing / Sequence of them, decoder ByteLevel, added_tokens (special or not:
// matched in the input text before pre-tokenization, honouring lstrip/rstrip/single_word).
// Anything else is an InvalidArgument naming the JSON path, never a crash.
//
// Where `tokenizers` is lenient we follow it, except where its result could not be used:
// - added tokens get the ids `tokenizers` gives them (a vocabulary token keeps its id, others
//   follow the vocabulary in file order), even where the file's "id" says otherwise;
// - a TemplateProcessing id that is not a token of this tokenizer is refused (it would index
//   past a model's embeddings);
// - text that is not valid UTF-8 is encoded as if each invalid sequence were U+FFFD;
// - Regex splits use PCRE2 (UTF, UCP) in place of Oniguruma; they agreed on every fixture and
//   on 20,000 strings of random code points.
//
// A Tokenizer is immutable after construction; Encode/Decode may be called from many
// threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "trainyard/common/status.h"

namespace trainyard::model {

class Tokenizer {
 public:
  // Parses tokenizer.json text. `source` names it in error messages (e.g. the path).
  static Result<std::shared_ptr<const Tokenizer>> FromJson(
      std::string_view json_text, std::string_view source = "tokenizer.json");
  static Result<std::shared_ptr<const Tokenizer>> FromFile(const std::string& path);

  virtual ~Tokenizer() = default;

  // Token ids of `text`. With add_special_tokens the post-processor's template applies
  // (e.g. Llama-3 prepends <|begin_of_text|>), as `tokenizers`' encode(text) does.
  virtual std::vector<int32_t> Encode(std::string_view text,
                                      bool add_special_tokens = true) const = 0;
  // Text of `ids`; special added tokens are dropped when skip_special_tokens.
  virtual std::string Decode(std::span<const int32_t> ids,
                             bool skip_special_tokens = false) const = 0;

  // The id of a token string (vocabulary or added token), or nullopt.
  virtual std::optional<int32_t> TokenToId(std::string_view token) const = 0;
  virtual std::optional<std::string> IdToToken(int32_t id) const = 0;
  // Largest id + 1 over the vocabulary and the added tokens.
  virtual int32_t VocabSize() const = 0;
};

}  // namespace trainyard::model
