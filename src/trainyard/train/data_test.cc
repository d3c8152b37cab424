#include "trainyard/train/data.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

namespace trainyard::train {
namespace {

// One id per byte (byte + 10); ids 1 and 2 are free for bos and eos.
class ByteTokenizer : public model::Tokenizer {
 public:
  std::vector<int32_t> Encode(std::string_view text, bool = true) const override {
    std::vector<int32_t> ids;
    for (unsigned char c : text) ids.push_back(static_cast<int32_t>(c) + 10);
    return ids;
  }
  std::string Decode(std::span<const int32_t> ids, bool = false) const override {
    std::string s;
    for (int32_t id : ids) {
      if (id >= 10) s += static_cast<char>(id - 10);
    }
    return s;
  }
  std::optional<int32_t> TokenToId(std::string_view) const override { return std::nullopt; }
  std::optional<std::string> IdToToken(int32_t) const override { return std::nullopt; }
  int32_t VocabSize() const override { return 266; }
};

constexpr int32_t kBos = 1;
constexpr int32_t kEos = 2;

Record MakeRecord(std::string instruction, std::string response, std::string input = "") {
  Record r;
  r.instruction = std::move(instruction);
  r.response = std::move(response);
  r.input = std::move(input);
  return r;
}

TokenizeOptions Options(int64_t max_seq_len, bool add_bos = true, int32_t eos = kEos) {
  TokenizeOptions o;
  o.max_seq_len = max_seq_len;
  o.add_bos = add_bos;
  o.bos_id = kBos;
  o.eos_id = eos;
  return o;
}

class TempFile {
 public:
  explicit TempFile(const std::string& content) {
    path_ =
        (std::filesystem::temp_directory_path() / ("ty-data-test-" + std::to_string(::getpid()) +
                                                   "-" + std::to_string(counter_++) + ".jsonl"))
            .string();
    std::ofstream(path_, std::ios::binary) << content;
  }
  ~TempFile() { std::filesystem::remove(path_); }
  const std::string& path() const { return path_; }

 private:
  static inline int counter_ = 0;
  std::string path_;
};

TEST(DataTest, RendersMistral) {
  Record r = MakeRecord("Where is my order?", "shipping_delay");
  RenderedExample e = Render(r, model::PromptTemplate::kMistral, "Classify the ticket.");
  EXPECT_EQ(e.prompt, "[INST] Classify the ticket.\n\nWhere is my order? [/INST]");
  EXPECT_EQ(e.response, " shipping_delay");
  e = Render(r, model::PromptTemplate::kMistral, "");
  EXPECT_EQ(e.prompt, "[INST] Where is my order? [/INST]");
  r.input = "Order #12";
  e = Render(r, model::PromptTemplate::kMistral, "");
  EXPECT_EQ(e.prompt, "[INST] Where is my order?\n\nOrder #12 [/INST]");
}

TEST(DataTest, RendersChatML) {
  Record r = MakeRecord("hi", "refund_request");
  RenderedExample e = Render(r, model::PromptTemplate::kChatML, "Be brief.");
  EXPECT_EQ(e.prompt,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(e.response, "refund_request<|im_end|>");
  e = Render(r, model::PromptTemplate::kChatML, "");
  EXPECT_EQ(e.prompt, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(DataTest, RendersAlpaca) {
  Record r = MakeRecord("Sum", "3", "1 2");
  RenderedExample e = Render(r, model::PromptTemplate::kAlpaca, "You add.");
  EXPECT_EQ(e.prompt, "You add.\n\n### Instruction:\nSum\n\n### Input:\n1 2\n\n### Response:\n");
  EXPECT_EQ(e.response, "3");
  r.input.clear();
  e = Render(r, model::PromptTemplate::kAlpaca, "");
  EXPECT_EQ(e.prompt, "### Instruction:\nSum\n\n### Response:\n");
}

TEST(DataTest, MaskCoversOnlyResponseAndEos) {
  ByteTokenizer tok;
  TokenizedExample t = TokenizeExample(tok, {"abc", "xy"}, Options(512));
  EXPECT_EQ(t.ids,
            (std::vector<int32_t>{kBos, 'a' + 10, 'b' + 10, 'c' + 10, 'x' + 10, 'y' + 10, kEos}));
  EXPECT_EQ(t.loss_mask, (std::vector<uint8_t>{0, 0, 0, 0, 1, 1, 1}));
  EXPECT_EQ(t.prompt_length, 4);

  // No bos, no eos.
  t = TokenizeExample(tok, {"abc", "xy"}, Options(512, false, -1));
  EXPECT_EQ(t.ids.size(), 5u);
  EXPECT_EQ(t.loss_mask, (std::vector<uint8_t>{0, 0, 0, 1, 1}));
  EXPECT_EQ(t.prompt_length, 3);
}

TEST(DataTest, TruncationCutsThePromptStartAfterBos) {
  ByteTokenizer tok;
  // bos + 10 prompt + 3 response + eos = 15 > 10: 5 prompt tokens go, from the start.
  TokenizedExample t = TokenizeExample(tok, {"0123456789", "xyz"}, Options(10));
  ASSERT_EQ(t.ids.size(), 10u);
  EXPECT_EQ(t.ids[0], kBos);
  EXPECT_EQ(tok.Decode(std::span<const int32_t>(t.ids).subspan(1, 5)), "56789");
  EXPECT_EQ(t.prompt_length, 6);
  EXPECT_EQ(tok.Decode(std::span<const int32_t>(t.ids).subspan(6, 3)), "xyz");
  EXPECT_EQ(t.ids.back(), kEos);
  EXPECT_EQ(std::count(t.loss_mask.begin(), t.loss_mask.end(), 1), 4);

  // Exactly fits: nothing is cut.
  t = TokenizeExample(tok, {"01234", "xyz"}, Options(10));
  EXPECT_EQ(tok.Decode(t.ids), "01234xyz");
  EXPECT_EQ(t.ids.size(), 10u);
}

TEST(DataTest, TruncationCutsTheResponseEndWhenEvenItDoesNotFit) {
  ByteTokenizer tok;
  TokenizedExample t = TokenizeExample(tok, {"prompt", "abcdefghijkl"}, Options(8));
  ASSERT_EQ(t.ids.size(), 8u);
  EXPECT_EQ(t.ids[0], kBos);
  EXPECT_EQ(t.prompt_length, 1);
  EXPECT_EQ(tok.Decode(t.ids), "abcdefg");
  EXPECT_EQ(t.loss_mask, (std::vector<uint8_t>{0, 1, 1, 1, 1, 1, 1, 1}));
}

TEST(DataTest, ReadsJsonlInBothShapes) {
  TempFile f(
      "{\"message\": \"where is my parcel\", \"label\": \"shipping_delay\"}\n"
      "\n"
      "   \r\n"
      "{\"instruction\": \"Add\", \"input\": \"1 2\", \"response\": \"3\", \"id\": 7}\r\n"
      "{\"instruction\": \"Say hi\", \"output\": \"hi\", \"input\": null}");  // no final newline
  auto records = OpenJsonl(f.path())->ReadAll();
  ASSERT_TRUE(records.ok()) << records.status().ToString();
  ASSERT_EQ(records->size(), 3u);
  EXPECT_EQ((*records)[0].instruction, "where is my parcel");
  EXPECT_EQ((*records)[0].response, "shipping_delay");
  EXPECT_EQ((*records)[0].label, "shipping_delay");
  EXPECT_EQ((*records)[1].input, "1 2");
  EXPECT_EQ((*records)[1].response, "3");
  EXPECT_TRUE((*records)[1].label.empty());
  EXPECT_EQ((*records)[2].response, "hi");
  EXPECT_EQ(OpenJsonl(f.path())->Describe(), f.path());
}

TEST(DataTest, JsonlErrorsNameTheLine) {
  struct Case {
    std::string content;
    std::string expect;
  };
  std::vector<Case> cases = {
      {"{\"message\": \"a\", \"label\": \"b\"}\n\n{not json}\n", ":3: not valid JSON"},
      {"[1, 2]\n", ":1: must be a JSON object"},
      {"{\"message\": \"a\"}\n", ":1: \"label\" is required"},
      {"{\"message\": \"a\", \"label\": 3}\n", ":1: \"label\" must be a string (got 3)"},
      {"{\"instruction\": \"a\"}\n", ":1: \"response\" (or \"output\") is required"},
      {"{\"text\": \"a\"}\n", ":1: a record needs"},
  };
  for (const auto& c : cases) {
    TempFile f(c.content);
    auto records = OpenJsonl(f.path())->ReadAll();
    ASSERT_FALSE(records.ok()) << c.content;
    EXPECT_TRUE(records.status().IsInvalidArgument());
    EXPECT_NE(records.status().message().find(f.path() + c.expect), std::string::npos)
        << records.status().message();
  }
}

TEST(DataTest, JsonlRejectsOverlongLinesAndMissingFiles) {
  std::string big =
      "{\"message\": \"" + std::string(kMaxJsonlLineBytes, 'a') + "\", \"label\": \"x\"}";
  TempFile f("{\"message\": \"a\", \"label\": \"b\"}\n" + big + "\n");
  auto records = OpenJsonl(f.path())->ReadAll();
  ASSERT_FALSE(records.ok());
  EXPECT_NE(records.status().message().find(":2: line is longer than 1 MiB"), std::string::npos)
      << records.status().message();

  // A line of exactly the limit is fine.
  std::string fits = "{\"message\": \"\", \"label\": \"x\"}";
  fits.insert(13, kMaxJsonlLineBytes - fits.size(), 'b');
  ASSERT_EQ(fits.size(), kMaxJsonlLineBytes);
  TempFile g(fits + "\n");
  records = OpenJsonl(g.path())->ReadAll();
  ASSERT_TRUE(records.ok()) << records.status().ToString();
  EXPECT_EQ((*records)[0].instruction.size(), kMaxJsonlLineBytes - 29);

  auto missing = OpenJsonl("/nonexistent/dir/train.jsonl")->ReadAll();
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(missing.status().IsNotFound());
}

json::object Row(std::string_view text) { return ParseJsonObject(text).value(); }

TEST(DataTest, RowsFillRecordsThroughTheColumnMapping) {
  // Classification from renamed columns; other columns are ignored.
  ColumnMapping ticket = {{"message", "text"}, {"label", "intent"}};
  auto r = RecordFromRow(Row(R"({"id": 4, "text": "where is it", "intent": "shipping"})"), ticket,
                         "t@7 row 1: ");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->instruction, "where is it");
  EXPECT_EQ(r->response, "shipping");
  EXPECT_EQ(r->label, "shipping");
  // A mapping fixes the kind: a row that also has instruction columns is still a ticket.
  r = RecordFromRow(Row(R"({"text": "a", "intent": "b", "instruction": "x", "response": "y"})"),
                    ticket, "");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->label, "b");
  // Naming one field maps it; the others read their own names.
  r = RecordFromRow(Row(R"({"body": "a", "label": "b"})"), {{"message", "body"}}, "");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->instruction, "a");
  EXPECT_EQ(r->label, "b");

  // Instruction data; input is optional, "output" stands in for an unmapped response.
  ColumnMapping inst = {{"instruction", "prompt"}, {"input", "context"}};
  r = RecordFromRow(Row(R"({"prompt": "Add", "context": "1 2", "output": "3"})"), inst, "");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->instruction, "Add");
  EXPECT_EQ(r->input, "1 2");
  EXPECT_EQ(r->response, "3");
  EXPECT_TRUE(r->label.empty());
  r = RecordFromRow(Row(R"({"prompt": "Add", "context": null, "response": "3"})"), inst, "");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->input.empty());

  // No mapping: the row's columns decide, as in a JSONL file.
  r = RecordFromRow(Row(R"({"instruction": "Say hi", "response": "hi"})"), {}, "");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->response, "hi");
}

TEST(DataTest, RowErrorsNameTheColumnAndTheField) {
  struct Case {
    std::string row;
    ColumnMapping columns;
    std::string expect;
  };
  std::vector<Case> cases = {
      {R"({"text": 3, "intent": "b"})",
       {{"message", "text"}, {"label", "intent"}},
       "t@7 row 2: column \"text\" (message) must be a string (got 3)"},
      {R"({"text": "a"})",
       {{"message", "text"}, {"label", "intent"}},
       "t@7 row 2: column \"intent\" (label) is required"},
      {R"({"text": "a", "intent": null})",
       {{"message", "text"}, {"label", "intent"}},
       "column \"intent\" (label) is required"},
      {R"({"message": "a"})", {{"message", "message"}}, "t@7 row 2: \"label\" is required"},
      {R"({"q": "a", "output": "b"})",
       {{"instruction", "q"}, {"response", "a"}},
       "column \"a\" (response) is required"},
      {R"({"q": "a"})", {{"instruction", "q"}}, "\"response\" (or \"output\") is required"},
      {R"({"body": "a"})", {}, "t@7 row 2: a record needs"},
  };
  for (const auto& c : cases) {
    auto r = RecordFromRow(Row(c.row), c.columns, "t@7 row 2: ");
    ASSERT_FALSE(r.ok()) << c.row;
    EXPECT_TRUE(r.status().IsInvalidArgument());
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos)
        << r.status().message() << "\nexpected: " << c.expect;
  }
}

TEST(DataTest, ColumnsToReadProjectsTheMappedKind) {
  EXPECT_TRUE(ColumnsToRead({}).empty());  // no mapping: every column
  EXPECT_EQ(ColumnsToRead({{"message", "text"}}), (std::vector<std::string>{"text", "label"}));
  EXPECT_EQ(ColumnsToRead({{"label", "intent"}, {"message", "text"}}),
            (std::vector<std::string>{"text", "intent"}));
  EXPECT_EQ(ColumnsToRead({{"response", "answer"}}),
            (std::vector<std::string>{"instruction", "answer"}));
  EXPECT_EQ(ColumnsToRead({{"instruction", "q"}, {"input", "ctx"}}),
            (std::vector<std::string>{"q", "response", "ctx"}));
}

std::vector<Record> NumberedRecords(int n) {
  std::vector<Record> out;
  for (int i = 0; i < n; ++i) out.push_back(MakeRecord(std::to_string(i), "r"));
  return out;
}

TEST(DataTest, SplitIsDeterministicAndDisjoint) {
  std::vector<Record> train, val, train2, val2, train3, val3;
  SplitRecords(NumberedRecords(100), 0.1, 7, &train, &val);
  ASSERT_EQ(val.size(), 10u);
  ASSERT_EQ(train.size(), 90u);
  std::set<std::string> seen;
  for (const auto& r : train) seen.insert(r.instruction);
  for (const auto& r : val) seen.insert(r.instruction);
  EXPECT_EQ(seen.size(), 100u);
  // Relative order is kept.
  for (size_t i = 1; i < train.size(); ++i) {
    EXPECT_LT(std::stoi(train[i - 1].instruction), std::stoi(train[i].instruction));
  }
  SplitRecords(NumberedRecords(100), 0.1, 7, &train2, &val2);
  SplitRecords(NumberedRecords(100), 0.1, 8, &train3, &val3);
  auto names = [](const std::vector<Record>& v) {
    std::vector<std::string> out;
    for (const auto& r : v) out.push_back(r.instruction);
    return out;
  };
  EXPECT_EQ(names(val), names(val2));
  EXPECT_NE(names(val), names(val3));

  SplitRecords(NumberedRecords(5), 0.01, 1, &train, &val);
  EXPECT_EQ(val.size(), 1u);  // at least one when asked for some
  SplitRecords(NumberedRecords(1), 0.4, 1, &train, &val);
  EXPECT_EQ(train.size(), 1u);  // never all
  SplitRecords(NumberedRecords(10), 0.0, 1, &train, &val);
  EXPECT_EQ(val.size(), 0u);
}

BatchOptions Batching(int64_t rows, int64_t seq_len, bool packing, int64_t pad_id,
                      uint64_t seed = 42) {
  BatchOptions o;
  o.rows_per_batch = rows;
  o.seq_len = seq_len;
  o.packing = packing;
  o.pad_id = pad_id;
  o.seed = seed;
  return o;
}

// Example i has `lengths[i]` tokens with ids 1000*i + j; its second half is the response.
std::vector<TokenizedExample> Examples(const std::vector<int>& lengths) {
  std::vector<TokenizedExample> out;
  for (size_t i = 0; i < lengths.size(); ++i) {
    TokenizedExample t;
    for (int j = 0; j < lengths[i]; ++j) {
      t.ids.push_back(static_cast<int32_t>(1000 * i + j));
      t.loss_mask.push_back(j >= lengths[i] / 2 ? 1 : 0);
    }
    t.prompt_length = lengths[i] / 2;
    out.push_back(std::move(t));
  }
  return out;
}

// Checks a batch's invariants against the examples it came from; returns the examples seen
// (row by row) and how many times.
std::map<int64_t, int> CheckBatch(const Batch& b, const std::vector<TokenizedExample>& ex,
                                  int64_t pad_id) {
  std::map<int64_t, int> seen;
  int64_t loss_tokens = 0;
  for (int64_t r = 0; r < b.rows; ++r) {
    int64_t expected_segment = 0;
    int64_t c = 0;
    while (c < b.seq_len) {
      const int64_t at = r * b.seq_len + c;
      if (b.segment_ids[at] == -1) {
        // Padding runs to the row's end.
        for (; c < b.seq_len; ++c) {
          const int64_t p = r * b.seq_len + c;
          EXPECT_EQ(b.segment_ids[p], -1);
          EXPECT_EQ(b.input_ids[p], pad_id);
          EXPECT_EQ(b.targets[p], -100);
        }
        break;
      }
      EXPECT_EQ(b.segment_ids[at], expected_segment);
      const int64_t example = b.input_ids[at] / 1000;
      const auto& e = ex[example];
      const int64_t len = std::min<int64_t>(static_cast<int64_t>(e.ids.size()), b.seq_len);
      // The whole example (cut to seq_len) is here, contiguous, in one segment.
      for (int64_t j = 0; j < len; ++j) {
        const int64_t p = at + j;
        if (c + j >= b.seq_len) {
          ADD_FAILURE() << "example " << example << " split across rows";
          return seen;
        }
        EXPECT_EQ(b.input_ids[p], e.ids[j]);
        EXPECT_EQ(b.position_ids[p], j);
        EXPECT_EQ(b.segment_ids[p], expected_segment);
        const int64_t want = (j + 1 < len && e.loss_mask[j + 1]) ? e.ids[j + 1] : -100;
        EXPECT_EQ(b.targets[p], want) << "example " << example << " token " << j;
        if (want != -100) ++loss_tokens;
      }
      ++seen[example];
      c += len;
      ++expected_segment;
    }
  }
  EXPECT_EQ(b.loss_tokens, loss_tokens);
  return seen;
}

TEST(DataTest, PackingNeverSplitsAndLabelsTargets) {
  std::vector<int> lengths = {5, 3, 8, 2, 7, 4, 6, 1, 8, 20};  // 20 > seq_len: cut to 8
  auto ex = Examples(lengths);
  BatchIterator it(ex, Batching(100, 8, true, 99));
  // 5+3, 8, 2+6, 7+1, 4, 8, 8 → best-fit decreasing gives 7 rows (sum 52 tokens).
  EXPECT_EQ(it.rows_per_epoch(), 7);
  Batch b = it.Next();
  EXPECT_EQ(b.rows, 100);
  auto seen = CheckBatch(b, ex, 99);
  // 100 rows over 7-row epochs: every example appears 14 or 15 times, each as a whole.
  ASSERT_EQ(seen.size(), lengths.size());
  for (const auto& [example, times] : seen) {
    EXPECT_GE(times, 14) << example;
    EXPECT_LE(times, 15) << example;
  }
  // The example cut to seq_len keeps its first tokens.
  bool found = false;
  for (int64_t i = 0; i < b.rows * b.seq_len; ++i) found |= b.input_ids[i] == 9000 + 7;
  EXPECT_TRUE(found);
  for (int64_t i = 0; i < b.rows * b.seq_len; ++i) EXPECT_NE(b.input_ids[i], 9000 + 8);
}

TEST(DataTest, PackingPutsSeveralExamplesInARow) {
  auto ex = Examples({4, 4, 4, 4});
  BatchIterator it(ex, Batching(2, 8, true, 0));
  ASSERT_EQ(it.rows_per_epoch(), 2);
  Batch b = it.Next();
  // Each row: two segments of 4 with positions 0..3 twice and no padding.
  for (int64_t r = 0; r < 2; ++r) {
    for (int64_t c = 0; c < 8; ++c) {
      EXPECT_EQ(b.position_ids[r * 8 + c], c % 4);
      EXPECT_EQ(b.segment_ids[r * 8 + c], c / 4);
    }
    // The last token of the first segment predicts nothing (the next is another example).
    EXPECT_EQ(b.targets[r * 8 + 3], -100);
    // Response tokens are 2 and 3 of each example: targets at 1 and 2.
    EXPECT_EQ(b.targets[r * 8 + 0], -100);
    EXPECT_EQ(b.targets[r * 8 + 1], b.input_ids[r * 8 + 2]);
    EXPECT_EQ(b.targets[r * 8 + 2], b.input_ids[r * 8 + 3]);
  }
  EXPECT_EQ(b.loss_tokens, 8);
  CheckBatch(b, ex, 0);
}

TEST(DataTest, WithoutPackingEachExampleIsARow) {
  auto ex = Examples({4, 4, 4, 0, 9});
  BatchIterator it(ex, Batching(4, 8, false, 5));
  EXPECT_EQ(it.rows_per_epoch(), 4);  // the empty example is dropped
  Batch b = it.Next();
  CheckBatch(b, ex, 5);
  std::set<int64_t> firsts;
  for (int64_t r = 0; r < 4; ++r) {
    firsts.insert(b.input_ids[r * 8] / 1000);
    EXPECT_EQ(b.segment_ids[r * 8 + 7], b.input_ids[r * 8] / 1000 == 4 ? 0 : -1);
  }
  EXPECT_EQ(firsts, (std::set<int64_t>{0, 1, 2, 4}));
}

std::vector<int64_t> RowOrder(BatchIterator& it, int steps) {
  std::vector<int64_t> order;
  for (int s = 0; s < steps; ++s) {
    Batch b = it.Next();
    for (int64_t r = 0; r < b.rows; ++r) order.push_back(b.input_ids[r * b.seq_len] / 1000);
  }
  return order;
}

TEST(DataTest, ShuffleIsDeterministicAndDiffersPerEpochAndSeed) {
  std::vector<int> lengths(40, 6);
  auto ex = Examples(lengths);
  BatchOptions o = Batching(8, 8, false, 0, 42);
  BatchIterator a(ex, o), b(ex, o);
  auto order_a = RowOrder(a, 10);  // two epochs of 40 rows
  auto order_b = RowOrder(b, 10);
  EXPECT_EQ(order_a, order_b);
  std::vector<int64_t> epoch0(order_a.begin(), order_a.begin() + 40);
  std::vector<int64_t> epoch1(order_a.begin() + 40, order_a.end());
  EXPECT_NE(epoch0, epoch1);
  // Each epoch is a permutation: every row once.
  for (auto epoch : {epoch0, epoch1}) {
    std::sort(epoch.begin(), epoch.end());
    for (int i = 0; i < 40; ++i) EXPECT_EQ(epoch[i], i);
  }
  o.seed = 43;
  BatchIterator c(ex, o);
  EXPECT_NE(RowOrder(c, 10), order_a);
  EXPECT_EQ(a.position().epoch, 2);
  EXPECT_EQ(a.position().cursor, 0);
}

TEST(DataTest, RanksTogetherSeeTheOneRankBatch) {
  std::vector<int> lengths;
  for (int i = 0; i < 37; ++i) lengths.push_back(2 + (i * 7) % 11);
  auto ex = Examples(lengths);
  BatchOptions one = Batching(6, 16, true, 0, 3);
  BatchOptions r0 = one, r1 = one;
  r0.rows_per_batch = r1.rows_per_batch = 3;
  r0.world_size = r1.world_size = 2;
  r1.rank = 1;
  BatchIterator single(ex, one), rank0(ex, r0), rank1(ex, r1);
  ASSERT_GT(single.rows_per_epoch(), 6);
  // Enough steps to cross several epoch boundaries, where a batch wraps into the next epoch.
  for (int step = 0; step < 25; ++step) {
    Batch all = single.Next(), a = rank0.Next(), b = rank1.Next();
    ASSERT_EQ(a.rows, 3);
    std::vector<int64_t> joined = a.input_ids;
    joined.insert(joined.end(), b.input_ids.begin(), b.input_ids.end());
    EXPECT_EQ(joined, all.input_ids) << "step " << step;
    std::vector<int64_t> targets = a.targets;
    targets.insert(targets.end(), b.targets.begin(), b.targets.end());
    EXPECT_EQ(targets, all.targets);
    EXPECT_EQ(a.loss_tokens + b.loss_tokens, all.loss_tokens);
    EXPECT_EQ(rank0.position().epoch, single.position().epoch);
    EXPECT_EQ(rank0.position().cursor, single.position().cursor);
    EXPECT_EQ(rank1.position().cursor, single.position().cursor);
  }
  EXPECT_GE(single.position().epoch, 3);
}

TEST(DataTest, SeekResumesTheSameSequence) {
  std::vector<int> lengths;
  for (int i = 0; i < 50; ++i) lengths.push_back(1 + (i * 5) % 9);
  auto ex = Examples(lengths);
  BatchOptions o = Batching(4, 12, true, 0, 11);
  BatchIterator straight(ex, o);
  std::vector<Batch> expected;
  IteratorPosition saved;
  for (int step = 0; step < 30; ++step) {
    if (step == 13) saved = straight.position();
    expected.push_back(straight.Next());
  }
  BatchIterator resumed(ex, o);
  resumed.Next();  // some other state first
  resumed.Seek(saved);
  for (int step = 13; step < 30; ++step) {
    Batch b = resumed.Next();
    EXPECT_EQ(b.input_ids, expected[step].input_ids) << step;
    EXPECT_EQ(b.targets, expected[step].targets) << step;
    EXPECT_EQ(b.position_ids, expected[step].position_ids) << step;
    EXPECT_EQ(b.segment_ids, expected[step].segment_ids) << step;
  }
  // A cursor past the epoch's end carries into the next epoch.
  BatchIterator carried(ex, o);
  carried.Seek({0, carried.rows_per_epoch() + 2});
  EXPECT_EQ(carried.position().epoch, 1);
  EXPECT_EQ(carried.position().cursor, 2);
}

TEST(DataTest, NoExamplesGivesPaddingOnly) {
  BatchIterator it({}, Batching(2, 4, true, 7));
  EXPECT_EQ(it.rows_per_epoch(), 0);
  Batch b = it.Next();
  EXPECT_EQ(b.loss_tokens, 0);
  EXPECT_EQ(b.input_ids, std::vector<int64_t>(8, 7));
  EXPECT_EQ(b.segment_ids, std::vector<int64_t>(8, -1));
}

}  // namespace
}  // namespace trainyard::train
