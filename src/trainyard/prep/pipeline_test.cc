#include "trainyard/prep/pipeline.h"

#include <arrow/io/file.h>
#include <gtest/gtest.h>
#include <parquet/arrow/writer.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "trainyard/blob/blob_store.h"
#include "trainyard/common/clock.h"
#include "trainyard/model/tokenizer.h"
#include "trainyard/prep/doc_id.h"
#include "trainyard/tables/import.h"
#include "trainyard/tables/table.h"
#include "trainyard/testing/status_matchers.h"

namespace trainyard::prep {
namespace {

namespace fs = std::filesystem;

// A local output's rows as {column: values as text}, in the table's order.
struct Rows {
  std::vector<std::map<std::string, std::string>> rows;
  std::vector<std::string> Column(const std::string& name) const {
    std::vector<std::string> out;
    for (const auto& r : rows) out.push_back(r.at(name));
    return out;
  }
};

class PipelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ty_prep_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  void Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name, std::ios::binary) << text;
  }

  Result<PipelineReport> Run(const std::string& spec_text, int threads = 2,
                             int64_t batch_rows = 7) {
    Write("pipeline.yaml", spec_text);
    TY_ASSIGN_OR_RETURN(spec_, LoadPipelineSpec((dir_ / "pipeline.yaml").string()));
    PipelineOptions options;
    options.threads = threads;
    options.batch_rows = batch_rows;  // several batches even for small files
    options.flush_rows = 10;          // several commits per output
    return RunPipeline(spec_, options);
  }

  Rows Read(const std::string& output) {
    Rows out;
    auto store = blob::OpenBlobStore((dir_ / output).string());
    EXPECT_TRUE(store.ok());
    if (!store.ok()) return out;
    SystemClock clock;
    auto table = tables::DeltaTable::Open(**store, "", clock);
    EXPECT_TRUE(table.ok()) << table.status().ToString();
    if (!table.ok()) return out;
    auto all = (*table)->ReadAll({});
    EXPECT_TRUE(all.ok());
    if (!all.ok()) return out;
    auto t = (*all)->CombineChunksToBatch().ValueOrDie();
    for (int64_t r = 0; r < t->num_rows(); ++r) {
      std::map<std::string, std::string> row;
      for (int c = 0; c < t->num_columns(); ++c) {
        auto scalar = t->column(c)->GetScalar(r).ValueOrDie();
        row[t->schema()->field(c)->name()] = scalar->is_valid ? scalar->ToString() : "null";
      }
      out.rows.push_back(std::move(row));
    }
    return out;
  }

  // The rows in doc_id order (a Delta table's read order follows its files, not its commits).
  Rows ReadSorted(const std::string& output) {
    Rows out = Read(output);
    std::sort(out.rows.begin(), out.rows.end(),
              [](const auto& a, const auto& b) { return a.at("doc_id") < b.at("doc_id"); });
    return out;
  }

  fs::path dir_;
  PipelineSpec spec_;
};

std::string Tickets() {
  std::string out;
  auto add = [&](int id, const std::string& customer, const std::string& text) {
    out += "{\"id\": " + std::to_string(id) + ", \"customer\": \"" + customer + "\", \"text\": \"" +
           text + "\"}\n";
  };
  add(0, "a", "My parcel never arrived, please help me track it.");
  add(1, "b", "short");
  add(2, "c", "The invoice lists a charge I do not recognise at all.");
  add(3, "a",
      "MY PARCEL never arrived -- please help me track it!");  // exact dup of 0 (normalized)
  add(4, "d", "Write to jane.doe@example.com about the refund for order 7.");
  add(5, "e", "lorem ipsum dolor sit amet, this is filler text only.");
  add(6, "c", "The invoice lists a charge I do not recognise at all.");  // dup of 2
  add(7, "f", "");
  for (int i = 8; i < 40; ++i) {
    add(i, "g" + std::to_string(i % 9),
        "Customer " + std::to_string(i) + " asks about delivery window number " +
            std::to_string(i * 7) + " today.");
  }
  return out;
}

constexpr const char* kSteps = R"(name: test
source: {files: [tickets.jsonl], id_column: id}
steps:
  - filter: {min_chars: 10}
  - filter: {drop_regex: "(?i)lorem ipsum"}
  - dedup_exact: {}
  - redact_pii: {kinds: [email]}
)";

TEST_F(PipelineTest, AccountingAddsUpAndExactDedupKeepsTheFirst) {
  Write("tickets.jsonl", Tickets());
  TY_ASSERT_OK_AND_ASSIGN(
      PipelineReport report,
      Run(std::string(kSteps) + "outputs: {rows: {path: out}, dropped: {path: dropped}}\n"));
  EXPECT_EQ(report.rows_in, 40);
  ASSERT_EQ(report.steps.size(), 4u);
  int64_t in = report.rows_in;
  for (const auto& s : report.steps) {
    EXPECT_EQ(s.rows_in, in) << s.label;
    EXPECT_EQ(s.rows_in, s.rows_out + s.dropped_rows()) << s.label;
    in = s.rows_out;
  }
  EXPECT_EQ(report.rows_out, in);
  EXPECT_EQ(report.rows_out + report.rows_dropped, report.rows_in);
  EXPECT_EQ(report.steps[0].dropped.at("min_chars").rows, 2);  // "short" and ""
  EXPECT_EQ(report.steps[1].dropped.at("drop_regex").rows, 1);
  EXPECT_EQ(report.steps[2].dropped.at("duplicate").rows, 2);
  EXPECT_EQ(report.steps[3].rows_changed, 1);
  EXPECT_EQ(report.steps[3].changed.at("email"), 1);

  Rows kept = Read("out");
  ASSERT_EQ(static_cast<int64_t>(kept.rows.size()), report.rows_out);
  std::set<std::string> ids;
  for (const auto& id : kept.Column("id")) ids.insert(id);
  EXPECT_TRUE(ids.count("0") && ids.count("2"));   // the first of each duplicate pair
  EXPECT_FALSE(ids.count("3") || ids.count("6"));  // the later ones
  for (const auto& row : kept.rows) {
    EXPECT_EQ(row.at("doc_id").size(), 16u);
    if (row.at("id") == "4") {
      EXPECT_EQ(row.at("text").find("jane.doe"), std::string::npos);
    }
  }
  // Every dropped row is in the dropped table, with its step and reason.
  Rows dropped = Read("dropped");
  ASSERT_EQ(static_cast<int64_t>(dropped.rows.size()), report.rows_dropped);
  std::map<std::string, int> by_reason;
  for (const auto& r : dropped.rows) ++by_reason[r.at("step") + "/" + r.at("reason")];
  EXPECT_EQ(by_reason["2_dedup_exact/duplicate"], 2);
  EXPECT_EQ(by_reason["0_filter/min_chars"], 2);
  // A duplicate names the row it duplicates (the one kept).
  for (const auto& r : dropped.rows) {
    if (r.at("doc_id") == DocId("tickets.jsonl", "3")) {
      EXPECT_EQ(r.at("duplicate_of"), DocId("tickets.jsonl", "0"));
    }
    if (r.at("reason") == "min_chars") {
      EXPECT_EQ(r.at("duplicate_of"), "null");
    }
  }
  // Report examples are doc ids of the dropped table, the first in source order.
  EXPECT_EQ(report.steps[2].dropped.at("duplicate").examples.front(), DocId("tickets.jsonl", "3"));
}

TEST_F(PipelineTest, GroupedSplitNeverLeaksAGroup) {
  std::string text;
  for (int i = 0; i < 300; ++i) {
    text += "{\"id\": " + std::to_string(i) + ", \"customer\": \"cust" + std::to_string(i % 23) +
            "\", \"text\": \"ticket number " + std::to_string(i) + " about something\"}\n";
  }
  Write("tickets.jsonl", text);
  TY_ASSERT_OK_AND_ASSIGN(
      PipelineReport report,
      Run("name: s\nsource: {files: [tickets.jsonl]}\nsteps:\n"
          "  - split: {ratios: {train: 0.6, val: 0.2, test: 0.2}, seed: 7, group_by: customer}\n"
          "outputs: {train: {path: train}, val: {path: val}, test: {path: test}}\n"));
  std::map<std::string, std::set<std::string>> splits_of;
  int64_t total = 0;
  for (const char* split : {"train", "val", "test"}) {
    Rows rows = Read(split);
    total += static_cast<int64_t>(rows.rows.size());
    EXPECT_GT(rows.rows.size(), 0u) << split;
    for (const auto& c : rows.Column("customer")) splits_of[c].insert(split);
  }
  EXPECT_EQ(total, 300);
  EXPECT_EQ(splits_of.size(), 23u);
  for (const auto& [customer, splits] : splits_of) EXPECT_EQ(splits.size(), 1u) << customer;
  EXPECT_EQ(report.steps[0].split_rows.at("train") + report.steps[0].split_rows.at("val") +
                report.steps[0].split_rows.at("test"),
            300);
}

TEST_F(PipelineTest, RerunGivesIdenticalOutputsWithoutDuplicates) {
  Write("tickets.jsonl", Tickets());
  std::string spec = std::string(kSteps) +
                     "  - split: {ratios: {train: 0.5, val: 0.5}, seed: 3}\n"
                     "outputs: {train: {path: train}, val: {path: val}, dropped: {path: d}}\n";
  TY_ASSERT_OK(Run(spec, 1, 5).status());
  Rows train = ReadSorted("train"), val = ReadSorted("val"), dropped = ReadSorted("d");
  // Another run, with other threads and batches, over the same outputs: the same rows.
  TY_ASSERT_OK(Run(spec, 3, 11).status());
  EXPECT_EQ(ReadSorted("train").rows, train.rows);
  EXPECT_EQ(ReadSorted("val").rows, val.rows);
  EXPECT_EQ(ReadSorted("d").rows, dropped.rows);
  EXPECT_EQ(train.rows.size() + val.rows.size() + dropped.rows.size(), 40u);
}

// Tickets() as CSV: every text quoted (commas, doubled quotes), a note column with a line
// break inside its quotes on some rows, CRLF line ends and a blank line.
std::string TicketsCsv() {
  std::string out = "id,customer,text,note\r\n";
  std::istringstream lines(Tickets());
  std::string line;
  for (int i = 0; std::getline(lines, line); ++i) {
    auto value = [&](const std::string& key) {
      size_t at = line.find("\"" + key + "\": ") + key.size() + 4;
      if (line[at] != '"') return line.substr(at, line.find(',', at) - at);
      return line.substr(at + 1, line.find('"', at + 1) - at - 1);
    };
    std::string text = value("text");
    std::string quoted;
    for (char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
    out += value("id") + "," + value("customer") + ",\"" + quoted + "\"," +
           (i % 5 == 0 ? "\"first line\r\nsecond, \"\"line\"\"\"" : "plain") + "\r\n";
    if (i == 20) out += "\r\n";
  }
  return out;
}

TEST_F(PipelineTest, CsvAndParquetSourcesGiveTheSameOutputsOnAnyThreadsAndBatches) {
  Write("tickets.jsonl", Tickets());
  Write("tickets.csv", TicketsCsv());
  {
    // The same rows as Parquet, in row groups of 6 rows.
    std::string csv = TicketsCsv();
    tables::ImportOptions o;
    o.format = tables::ImportFormat::kCsv;
    TY_ASSERT_OK_AND_ASSIGN(auto imp, tables::OpenImportBuffer(csv, o));
    std::vector<std::shared_ptr<arrow::RecordBatch>> batches;
    for (;;) {
      TY_ASSERT_OK_AND_ASSIGN(auto b, imp->Next());
      if (!b) break;
      batches.push_back(b);
    }
    auto table = arrow::Table::FromRecordBatches(imp->schema(), batches).ValueOrDie();
    auto file = arrow::io::FileOutputStream::Open((dir_ / "tickets.parquet").string()).ValueOrDie();
    ASSERT_TRUE(parquet::arrow::WriteTable(*table, arrow::default_memory_pool(), file, 6).ok());
    ASSERT_TRUE(file->Close().ok());
  }
  // Outputs in a directory per file (the CSV and Parquet rows have a column more).
  auto spec_for = [](const std::string& file) {
    std::string spec = kSteps;
    spec.replace(spec.find("tickets.jsonl"), 13, file);
    return spec + "  - split: {ratios: {train: 0.5, val: 0.5}, seed: 3}\n" +
           "outputs: {train: {path: " + file + ".out/train}, val: {path: " + file +
           ".out/val}, dropped: {path: " + file + ".out/d}}\n";
  };
  // The texts kept and the reasons rows were dropped for (doc ids name the file: not these).
  auto texts = [&](const std::string& file) {
    std::multiset<std::string> out;
    for (const char* name : {"/train", "/val"}) {
      for (const auto& t : Read(file + ".out" + name).Column("text")) out.insert(t);
    }
    return out;
  };
  auto reasons = [&](const std::string& file) {
    std::multiset<std::string> out;
    for (const auto& r : Read(file + ".out/d").Column("reason")) out.insert(r);
    return out;
  };
  TY_ASSERT_OK(Run(spec_for("tickets.jsonl"), 2, 7).status());
  for (const std::string file : {"tickets.csv", "tickets.parquet"}) {
    SCOPED_TRACE(file);
    TY_ASSERT_OK(Run(spec_for(file), 1, 5).status());
    const std::string out = file + ".out/";
    Rows train = ReadSorted(out + "train"), val = ReadSorted(out + "val"),
         dropped = ReadSorted(out + "d");
    EXPECT_EQ(train.rows.size() + val.rows.size() + dropped.rows.size(), 40u);
    EXPECT_EQ(texts(file), texts("tickets.jsonl"));
    EXPECT_EQ(reasons(file), reasons("tickets.jsonl"));
    // Other threads and batches: the same rows, doc ids included.
    for (auto [threads, batch] : {std::pair{3, 4}, std::pair{2, 11}}) {
      TY_ASSERT_OK(Run(spec_for(file), threads, batch).status());
      EXPECT_EQ(ReadSorted(out + "train").rows, train.rows);
      EXPECT_EQ(ReadSorted(out + "val").rows, val.rows);
      EXPECT_EQ(ReadSorted(out + "d").rows, dropped.rows);
    }
  }
  // A bad record late in a CSV file (before ticket 35): the error names its line, as a serial
  // read's.
  std::string csv = TicketsCsv();
  size_t at = csv.find("\n35,") + 1;
  size_t line = 1 + static_cast<size_t>(std::count(csv.begin(), csv.begin() + at, '\n'));
  csv.insert(at, "99,short\r\n");
  Write("tickets.csv", csv);
  for (auto [threads, batch] : {std::pair{1, 100}, std::pair{3, 4}}) {
    auto report = Run(spec_for("tickets.csv"), threads, batch);
    ASSERT_FALSE(report.ok());
    EXPECT_NE(report.status().message().find("tickets.csv line " + std::to_string(line) +
                                             ": expected 4 fields (as the header has), got 2"),
              std::string::npos)
        << report.status().ToString();
  }
}

TEST_F(PipelineTest, NearDuplicatesAreDroppedAboveTheThresholdOnly) {
  std::string base =
      "the delivery of my order was late by three days and the box arrived damaged with the "
      "contents broken so I would like a refund or a replacement as soon as possible please";
  std::string near = base + " thanks";  // one more word: Jaccard well above 0.5
  std::string other =
      "how do I change the billing address on my account before the next invoice is sent out "
      "to the old address again this month";
  Write("t.jsonl", "{\"text\": \"" + base + "\"}\n{\"text\": \"" + other + "\"}\n{\"text\": \"" +
                       near + "\"}\n");
  TY_ASSERT_OK_AND_ASSIGN(
      PipelineReport report,
      Run("name: n\nsource: {files: [t.jsonl]}\nsteps:\n"
          "  - dedup_near: {shingle_words: 3, bands: 20, rows: 5, threshold: 0.5, keep: longest}\n"
          "outputs: {rows: {path: out}}\n"));
  EXPECT_EQ(report.steps[0].dropped.at("near_duplicate").rows, 1);
  Rows kept = Read("out");
  ASSERT_EQ(kept.rows.size(), 2u);
  // keep: longest keeps the longer of the pair, in source order among the outputs.
  EXPECT_EQ(kept.rows[0].at("text"), other);
  EXPECT_EQ(kept.rows[1].at("text"), near);
  // With a threshold no pair reaches, nothing is dropped.
  TY_ASSERT_OK_AND_ASSIGN(
      report, Run("name: n\nsource: {files: [t.jsonl]}\nsteps:\n"
                  "  - dedup_near: {shingle_words: 3, bands: 20, rows: 5, threshold: 1.0}\n"
                  "outputs: {rows: {path: out}}\n"));
  EXPECT_EQ(report.rows_out, 3);
}

TEST_F(PipelineTest, ABadRowIsAnErrorNamingTheFileAndLine) {
  std::string text;
  for (int i = 0; i < 5; ++i) text += "{\"text\": \"fine row " + std::to_string(i) + "\"}\n";
  text += "{\"text\": 42}\n";
  Write("bad.jsonl", text);
  auto report =
      Run("name: b\nsource: {files: [bad.jsonl]}\nsteps:\n  - dedup_exact: {}\n"
          "outputs: {rows: {path: out}}\n");
  ASSERT_FALSE(report.ok());
  EXPECT_NE(report.status().message().find("bad.jsonl"), std::string::npos)
      << report.status().ToString();
  EXPECT_NE(report.status().message().find("line 6"), std::string::npos)
      << report.status().ToString();
  // Nothing was written.
  EXPECT_FALSE(fs::exists(dir_ / "out" / "_delta_log"));

  // A column the steps read that is not text.
  Write("num.jsonl", "{\"text\": 1}\n{\"text\": 2}\n");
  report =
      Run("name: b\nsource: {files: [num.jsonl]}\nsteps:\n  - dedup_exact: {}\n"
          "outputs: {rows: {path: out}}\n");
  ASSERT_FALSE(report.ok());
  EXPECT_NE(report.status().message().find("steps[0].dedup_exact.column: column \"text\" of "
                                           "num.jsonl is int64, not text"),
            std::string::npos)
      << report.status().ToString();
}

TEST_F(PipelineTest, AnEarlierBadRowIsReportedBeforeALaterUnreadableLine) {
  // Line 1001 (past the inference sample) has a type error, parsed on a worker; line 1011 is
  // longer than a line may be, which the reading thread finds while line 1001's batch is still
  // in flight. The error is line 1001's, as a serial read's would be.
  std::string text;
  for (int i = 0; i < 1000; ++i) text += "{\"text\": \"fine row\"}\n";
  text += "{\"text\": 42}\n";
  for (int i = 0; i < 9; ++i) text += "{\"text\": \"fine again\"}\n";
  text += "{\"text\": \"" + std::string((size_t{16} << 20) + 1, 'x') + "\"}\n";
  Write("late.jsonl", text);
  for (auto [threads, batch] : {std::pair{3, 5}, std::pair{1, 7}, std::pair{2, 100}}) {
    auto report =
        Run("name: b\nsource: {files: [late.jsonl]}\nsteps:\n  - filter: {min_chars: 1}\n"
            "outputs: {rows: {path: out}}\n",
            threads, batch);
    ASSERT_FALSE(report.ok());
    EXPECT_NE(report.status().message().find("late.jsonl line 1001: field 'text'"),
              std::string::npos)
        << report.status().ToString();
  }
}

TEST_F(PipelineTest, DuplicateIdsAreAnErrorNamingTheIdAndBothRows) {
  // Rows 3 and 12 share id "t-2", in different batches (7 rows each) on two threads.
  std::string text;
  for (int i = 0; i < 20; ++i) {
    std::string id = i == 11 ? "t-2" : "t-" + std::to_string(i);
    text += "{\"id\": \"" + id + "\", \"text\": \"ticket number " + std::to_string(i) + "\"}\n";
  }
  Write("dup.jsonl", text);
  const std::string spec =
      "name: d\nsource: {files: [dup.jsonl], id_column: id}\nsteps:\n"
      "  - filter: {min_chars: 1}\noutputs: {rows: {path: out}}\n";
  auto report = Run(spec);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(report.status().message().find(
                "dup.jsonl rows 3 and 12 have the same source.id_column \"id\" value \"t-2\""),
            std::string::npos)
      << report.status().ToString();
  EXPECT_FALSE(fs::exists(dir_ / "out" / "_delta_log"));  // found in pass 1: nothing written
  // The same with one thread and one batch, and with numeric ids.
  report = Run(spec, 1, 100);
  ASSERT_FALSE(report.ok());
  EXPECT_NE(report.status().message().find("rows 3 and 12"), std::string::npos);
  Write("num.jsonl",
        "{\"id\": 7, \"text\": \"a\"}\n{\"id\": 8, \"text\": \"b\"}\n"
        "{\"id\": 7, \"text\": \"c\"}\n");
  report =
      Run("name: d\nsource: {files: [num.jsonl], id_column: id}\nsteps:\n"
          "  - dedup_exact: {}\noutputs: {rows: {path: out}}\n");
  ASSERT_FALSE(report.ok());
  EXPECT_NE(report.status().message().find("num.jsonl rows 1 and 3 have the same "
                                           "source.id_column \"id\" value 7;"),
            std::string::npos)
      << report.status().ToString();

  // Ids are per file (a doc id names its file): the same id in two files is two documents.
  Write("a.jsonl", "{\"id\": \"x\", \"text\": \"first file\"}\n");
  Write("b.jsonl", "{\"id\": \"x\", \"text\": \"second file\"}\n");
  TY_ASSERT_OK_AND_ASSIGN(
      PipelineReport ok, Run("name: d\nsource: {files: [a.jsonl, b.jsonl], id_column: id}\n"
                             "steps:\n  - filter: {min_chars: 1}\noutputs: {rows: {path: out}}\n"));
  EXPECT_EQ(ok.rows_out, 2);
}

TEST_F(PipelineTest, TemplatesTokenizesAndFiltersByTokens) {
  const std::string tokenizer =
      std::string(TRAINYARD_SOURCE_DIR) + "/tests/fixtures/train/tokenizers/gpt2/tokenizer.json";
  auto model = model::Tokenizer::FromFile(tokenizer);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  Write("qa.jsonl",
        "{\"q\": \"Where is my parcel?\", \"a\": \"It ships tomorrow.\"}\n"
        "{\"q\": \"Hi\", \"a\": \"Hello\"}\n"
        "{\"q\": null, \"a\": \"orphan answer\"}\n");
  TY_ASSERT_OK_AND_ASSIGN(PipelineReport report,
                          Run("name: t\nsource: {files: [qa.jsonl]}\nsteps:\n"
                              "  - template: {format: chatml, prompt_column: q, response_column: "
                              "a, system: Be brief.}\n"
                              "  - filter: {min_tokens: 90, tokenizer: " +
                              tokenizer +
                              "}\n"
                              "  - tokenize: {tokenizer: " +
                              tokenizer +
                              ", add_special_tokens: false}\n"
                              "outputs: {rows: {path: out}}\n"));
  EXPECT_EQ(report.steps[0].dropped.at("missing_prompt").rows, 1);
  EXPECT_EQ(report.steps[1].dropped.at("min_tokens").rows, 1);
  Rows rows = Read("out");
  ASSERT_EQ(rows.rows.size(), 1u);
  const std::string text =
      "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhere is my parcel?<|im_end|>\n"
      "<|im_start|>assistant\nIt ships tomorrow.<|im_end|>";
  EXPECT_EQ(rows.rows[0].at("text"), text);
  std::string ids;
  for (int32_t id : (*model)->Encode(text, false)) {
    ids += (ids.empty() ? "" : ", ") + std::to_string(id);
  }
  EXPECT_EQ(rows.rows[0].at("input_ids"), "list<element: int32>[" + ids + "]");
}

TEST_F(PipelineTest, MemoryLimitFailsEarlyWithTheFigure) {
  Write("tickets.jsonl", Tickets());
  Write("pipeline.yaml",
        "name: m\nsource: {files: [tickets.jsonl]}\nsteps:\n"
        "  - dedup_near: {bands: 64, rows: 16, threshold: 0.5}\n"
        "outputs: {rows: {path: out}}\n");
  TY_ASSERT_OK_AND_ASSIGN(spec_, LoadPipelineSpec((dir_ / "pipeline.yaml").string()));
  PipelineOptions options;
  options.threads = 1;
  options.batch_rows = 8;
  options.memory_limit = 10000;
  auto report = RunPipeline(spec_, options);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(report.status().message().find("over --memory-limit 10000"), std::string::npos)
      << report.status().ToString();
  EXPECT_FALSE(fs::exists(dir_ / "out"));
}

}  // namespace
}  // namespace trainyard::prep
