// Training data for the native trainer: records read through a RecordSource (JSONL today;
// catalog tables later), rendered with a prompt template, tokenized with a loss mask that
// covers only the response, and cut into deterministic batches (shuffled by seed, optionally
// packed), sharded across data-parallel ranks.
//
// Everything is deterministic: the same records, tokenizer, options and seed give the same
// batches on any machine, and a BatchIterator's position (epoch, cursor) is all the state a
// resumed run needs to continue with exactly the batches an uninterrupted run would see.
//
// Thread-compatible value types; a BatchIterator is used by one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "trainyard/common/status.h"
#include "trainyard/train/tokenizer.h"

namespace trainyard::train {

// One example. Instruction data fills instruction/response; classification data
// ({message, label}) fills instruction with the message and response with the label.
struct Record {
  std::string instruction;
  std::string input;  // optional context (Alpaca's "input")
  std::string response;
  std::string label;  // classification: the gold label (== response); empty otherwise
};

// Where records come from; JSONL now, catalog tables later.
class RecordSource {
 public:
  virtual ~RecordSource() = default;
  virtual Result<std::vector<Record>> ReadAll() = 0;
  virtual std::string Describe() const = 0;  // e.g. the path, for logs and errors
};

// JSONL: one object per line with {instruction, response} (optional "input") or
// {message, label}. Blank lines are skipped; a bad line is InvalidArgument "path:line: ...".
std::unique_ptr<RecordSource> OpenJsonl(const std::string& path);

enum class PromptTemplate { kMistral, kChatML, kAlpaca };
Result<PromptTemplate> ParsePromptTemplate(std::string_view name);  // mistral|chatml|alpaca

struct RenderedExample {
  std::string prompt;    // everything the model is given
  std::string response;  // what it must produce (loss applies here)
};
// Mistral: "[INST] {system}\n\n{instruction} [/INST]" + " {response}"; ChatML:
// "<|im_start|>system\n...<|im_end|>\n<|im_start|>user\n...<|im_end|>\n<|im_start|>assistant\n"
// + "{response}<|im_end|>"; Alpaca: "### Instruction:\n...\n\n### Response:\n" + "{response}".
RenderedExample Render(const Record& r, PromptTemplate t, std::string_view system_prompt);

struct TokenizedExample {
  std::vector<int32_t> ids;
  std::vector<uint8_t> loss_mask;  // 1 where ids[i] is a response token (incl. the eos)
  int32_t prompt_length = 0;       // ids[0, prompt_length) is the prompt (with bos)
};

struct TokenizeOptions {
  int64_t max_seq_len =
      512;              // longer examples lose the start of the prompt, never the response end
  bool add_bos = true;  // the tokenizer's bos (if it has one) before the prompt
  int32_t bos_id = -1;  // -1: none
  int32_t eos_id = -1;  // appended after the response; -1: none
};
TokenizedExample TokenizeExample(const Tokenizer& tok, const RenderedExample& ex,
                                 const TokenizeOptions& o);

// Splits records into train and validation deterministically by seed (fraction in [0, 1)).
void SplitRecords(std::vector<Record> all, double val_fraction, uint64_t seed,
                  std::vector<Record>* train, std::vector<Record>* val);

// A batch of `rows` sequences of `seq_len` tokens, row-major [rows, seq_len].
struct Batch {
  int64_t rows = 0;
  int64_t seq_len = 0;
  std::vector<int64_t> input_ids;     // padded with pad_id
  std::vector<int64_t> targets;       // next-token targets; -100 where no loss applies
  std::vector<int64_t> position_ids;  // restart at 0 for each packed segment
  std::vector<int64_t> segment_ids;   // 0,1,2... per packed example; -1 on padding
  int64_t loss_tokens = 0;            // targets != -100
};

struct BatchOptions {
  int64_t rows_per_batch = 8;  // this rank's micro-batch
  int64_t seq_len = 512;
  bool packing = true;  // several examples per row, never split across rows
  int64_t pad_id = 0;
  uint64_t seed = 42;  // shuffle order: a permutation per epoch from (seed, epoch)
  int rank = 0;        // data-parallel shard: this rank takes every world_size-th row
  int world_size = 1;
};

struct IteratorPosition {
  int64_t epoch = 0;
  int64_t cursor = 0;  // rows of the global order consumed in this epoch
};

// Endless iterator over epochs of the examples. Each global step consumes
// rows_per_batch × world_size rows of the epoch's order; rank r gets its slice, so
// world_size ranks together see exactly what one rank with rows_per_batch × world_size
// would. Rows are built once (packing happens before shuffling of rows).
class BatchIterator {
 public:
  BatchIterator(std::vector<TokenizedExample> examples, BatchOptions options);
  Batch Next();
  IteratorPosition position() const;
  void Seek(IteratorPosition p);
  int64_t rows_per_epoch() const;  // global rows in one epoch
};

}  // namespace trainyard::train
