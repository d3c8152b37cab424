// Training data for the native trainer: records read through a RecordSource (a JSONL file,
// or a catalog table's rows through the server's API: table_source.h), rendered with a prompt
// template, tokenized with a loss mask that covers only the response, and cut into deterministic
// batches (shuffled by seed, optionally packed), sharded across data-parallel ranks.
//
// Everything is deterministic: the same records, tokenizer, options and seed give the same
// batches on any machine, and a BatchIterator's position (epoch, cursor) is all the state a
// resumed run needs to continue with exactly the batches an uninterrupted run would see.
//
// Thread-compatible value types; a BatchIterator is used by one thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "trainyard/common/json.h"
#include "trainyard/common/status.h"
#include "trainyard/model/chat_template.h"
#include "trainyard/model/tokenizer.h"

namespace trainyard::train {

// One example. Instruction data fills instruction/response; classification data
// ({message, label}) fills instruction with the message and response with the label.
struct Record {
  std::string instruction;
  std::string input;  // optional context (Alpaca's "input")
  std::string response;
  std::string label;  // classification: the gold label (== response); empty otherwise
};

// Where records come from: a JSONL file (OpenJsonl) or a catalog table (OpenTable).
class RecordSource {
 public:
  virtual ~RecordSource() = default;
  virtual Result<std::vector<Record>> ReadAll() = 0;
  virtual std::string Describe() const = 0;  // e.g. the path, for logs and errors
};

// Which column fills which Record field (message, label, instruction, input, response); a
// field not named reads the column of its own name (TableSource::columns).
using ColumnMapping = std::map<std::string, std::string>;

// A record from one row (a JSONL line's object or a table row): {message, label} fills
// instruction with the message and response and label with the label; {instruction,
// response, input?} fills those ("output" is accepted for "response" when response is not
// mapped). A mapping naming classification fields (or instruction fields) fixes the kind;
// otherwise the row's columns decide. Other columns are ignored; null is absent. A missing
// or non-string field is InvalidArgument `where` + what is wrong, naming the column.
Result<Record> RecordFromRow(const json::object& row, const ColumnMapping& columns,
                             const std::string& where);

// The columns a table read needs for `columns`: all (empty) without a mapping, else the
// mapped kind's columns (input only when mapped), so masked or large columns that training
// does not use are not read.
std::vector<std::string> ColumnsToRead(const ColumnMapping& columns);

// JSONL: one object per line with {instruction, response} (optional "input"; "output" is
// accepted for "response", as in Alpaca's files) or {message, label}. Other keys are ignored.
// Blank lines are skipped; a bad line (not JSON, not an object, a missing or non-string
// field, longer than kMaxJsonlLineBytes) is InvalidArgument "path:line: ..."; a missing file
// is NotFound. ReadAll reads the whole file each time it is called.
std::unique_ptr<RecordSource> OpenJsonl(const std::string& path);
inline constexpr size_t kMaxJsonlLineBytes = size_t{1} << 20;

struct RenderedExample {
  std::string prompt;    // everything the model is given
  std::string response;  // what it must produce (loss applies here)
};
// The record as one exchange of model/chat_template.h (the text inference renders for the same
// messages): the system prompt (none when empty), a user message
// model::InstructionMessage(t, instruction, input) and the response as the assistant's reply.
// Mistral: "[INST] {system}\n\n{user} [/INST]" + " {response}"; ChatML, Alpaca: see
// RenderChat. No bos/eos here: TokenizeExample adds them as ids.
RenderedExample Render(const Record& r, model::PromptTemplate t, std::string_view system_prompt);

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
// ids = [bos] + Encode(prompt) + Encode(response) + [eos], each part encoded without
// special tokens. Longer than max_seq_len (> 0; <= 0 means no limit): the prompt loses
// tokens from its start (the bos stays); when even bos + response + eos do not fit, the
// prompt is dropped and the sequence is cut at max_seq_len from the end (the response's end
// and the eos are lost).
TokenizedExample TokenizeExample(const model::Tokenizer& tok, const RenderedExample& ex,
                                 const TokenizeOptions& o);

// Splits records into train and validation deterministically by seed (fraction in [0, 1)):
// round(n × fraction) records, at least 1 when fraction > 0 and n ≥ 2, and never all of
// them, go to validation. Both keep the input's relative order.
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
  int rank = 0;        // data-parallel shard, 0 <= rank < world_size
  int world_size = 1;
};

struct IteratorPosition {
  int64_t epoch = 0;
  int64_t cursor = 0;  // rows of the global order consumed in this epoch
};

// Endless iterator over epochs of the examples.
//
// Rows are built once, before any shuffling. With packing, examples are placed best-fit
// decreasing (longest first, each into the fullest row it still fits in, ties by example
// index) into rows of seq_len tokens: an example is never split across rows, and one longer
// than seq_len is cut to its first seq_len tokens. Without packing each example is one row.
// Empty examples are dropped. Within a row, positions restart at 0 and segment ids count
// 0, 1, ... per example; targets[i] = input_ids[i + 1] when that token is in the same
// segment and has loss_mask 1, else -100; padding is pad_id, segment -1, position 0,
// target -100.
//
// Order: epoch e visits all rows in a permutation drawn from (seed, e) by splitmix64 +
// Fisher-Yates (the same on every platform). The row stream is the concatenation of the
// epochs' permutations; each global step takes its next rows_per_batch × world_size rows,
// and rank r builds rows [r × rows_per_batch, (r + 1) × rows_per_batch) of them, so
// world_size ranks together see exactly what one rank with rows_per_batch × world_size
// would. An epoch's tail that does not fill a global batch is not dropped: the batch
// continues with the first rows of the next epoch's order (so every row is seen once per
// epoch, and a dataset smaller than one global batch still trains).
//
// With no rows at all (no non-empty examples), Next returns all-padding batches with
// loss_tokens 0; callers check rows_per_epoch() > 0.
class BatchIterator {
 public:
  BatchIterator(std::vector<TokenizedExample> examples, BatchOptions options);
  Batch Next();
  // Where the next global step starts; the same on every rank.
  IteratorPosition position() const;
  // Continues from `p` (a position() of an iterator built from the same examples and
  // options); a cursor past the epoch's end carries into the next epochs.
  void Seek(IteratorPosition p);
  int64_t rows_per_epoch() const;  // global rows in one epoch

 private:
  struct Segment {
    int32_t example = 0;
    int32_t length = 0;  // tokens used (an example is cut to seq_len)
  };
  const std::vector<int64_t>& Order(int64_t epoch);
  void FillRow(const std::vector<Segment>& row, int64_t r, Batch& out) const;

  std::vector<TokenizedExample> examples_;
  BatchOptions options_;
  std::vector<std::vector<Segment>> rows_;
  IteratorPosition position_;
  // The permutations of the last two epochs asked for (a batch may span two epochs).
  int64_t cached_epoch_[2] = {-1, -1};
  std::vector<int64_t> cached_order_[2];
};

}  // namespace trainyard::train
