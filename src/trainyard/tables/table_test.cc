// DeltaTable on a local BlobStore in a temporary directory with a FakeClock: writes, reads,
// time travel, concurrent writers, crashes, corrupt logs, refused features, checkpoints, vacuum.
#include "trainyard/tables/table.h"

#include <arrow/compute/api.h>
#include <arrow/json/from_string.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>

#include "trainyard/common/json.h"
#include "trainyard/common/strings.h"
#include "trainyard/tables/delta_log.h"
#include "trainyard/testing/status_matchers.h"

namespace trainyard::tables {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

// Forwards to a local store; counts reads and can run a hook before a log entry is written or
// fail every call from some point on (a writer that died).
class HookedStore : public blob::BlobStore {
 public:
  explicit HookedStore(std::unique_ptr<blob::BlobStore> inner) : inner_(std::move(inner)) {}

  std::function<void()> before_log_write;  // runs once, before the next log entry is written
  std::atomic<bool> dead_on_log_write{false};
  // The next log entry is written but its answer is lost: the caller sees AlreadyExists, as
  // a writer whose S3 put landed and whose retry then found the object.
  std::atomic<bool> lose_log_answer{false};
  std::atomic<bool> dead{false};
  std::atomic<int> reads{0};

  Status PutBytes(std::string_view key, std::string_view data) override {
    if (dead) return Status::IOError("writer died");
    return inner_->PutBytes(key, data);
  }
  Status PutFile(std::string_view key, const std::string& local_path) override {
    if (dead) return Status::IOError("writer died");
    return inner_->PutFile(key, local_path);
  }
  Result<std::string> LocalPathForRead(std::string_view key) override {
    ++reads;
    return inner_->LocalPathForRead(key);
  }
  Result<std::string> GetBytes(std::string_view key) override {
    ++reads;
    return inner_->GetBytes(key);
  }
  Result<std::vector<blob::BlobEntry>> List(std::string_view prefix) override {
    return inner_->List(prefix);
  }
  Status Delete(std::string_view key) override {
    if (dead) return Status::IOError("writer died");
    return inner_->Delete(key);
  }
  Result<bool> IsDirectory(std::string_view key) override { return inner_->IsDirectory(key); }
  Status PutIfAbsent(std::string_view key, std::string_view data) override {
    if (dead) return Status::IOError("writer died");
    if (dead_on_log_write) {
      dead = true;
      return Status::IOError("writer died");
    }
    if (before_log_write) {
      auto hook = std::move(before_log_write);
      before_log_write = nullptr;
      hook();
    }
    if (lose_log_answer.exchange(false)) {
      TY_RETURN_IF_ERROR(inner_->PutIfAbsent(key, data));
      return Status::AlreadyExists("the object exists (answer lost, retried)");
    }
    return inner_->PutIfAbsent(key, data);
  }
  Result<bool> Exists(std::string_view key) override {
    if (dead) return Status::IOError("writer died");
    return inner_->Exists(key);
  }

 private:
  std::unique_ptr<blob::BlobStore> inner_;
};

std::shared_ptr<arrow::Array> Json(const std::shared_ptr<arrow::DataType>& type,
                                   const std::string& text) {
  return arrow::json::ArrayFromJSONString(type, text).ValueOrDie();
}

std::shared_ptr<arrow::Schema> TicketSchema() {
  return arrow::schema({arrow::field("id", arrow::int64(), false),
                        arrow::field("lang", arrow::utf8()), arrow::field("text", arrow::utf8())});
}

// Rows id = first..first+n-1, lang cycling through `langs` (an empty string is null).
std::shared_ptr<arrow::Table> Tickets(int64_t first, int64_t n,
                                      std::vector<std::string> langs = {"en", "de"}) {
  arrow::Int64Builder ids;
  arrow::StringBuilder lang, text;
  for (int64_t i = first; i < first + n; ++i) {
    EXPECT_TRUE(ids.Append(i).ok());
    const std::string& l = langs[static_cast<size_t>(i) % langs.size()];
    EXPECT_TRUE((l.empty() ? lang.AppendNull() : lang.Append(l)).ok());
    EXPECT_TRUE(text.Append("ticket number " + std::to_string(i)).ok());
  }
  return arrow::Table::Make(TicketSchema(), {ids.Finish().ValueOrDie(), lang.Finish().ValueOrDie(),
                                             text.Finish().ValueOrDie()});
}

// The table's rows sorted by id, as one chunk, for comparisons.
std::shared_ptr<arrow::Table> Sorted(const std::shared_ptr<arrow::Table>& t) {
  auto indices = arrow::compute::SortIndices(
                     arrow::Datum(t), arrow::compute::SortOptions({arrow::compute::SortKey("id")}))
                     .ValueOrDie();
  auto taken = arrow::compute::Take(arrow::Datum(t), arrow::Datum(indices)).ValueOrDie().table();
  return taken->CombineChunks().ValueOrDie();
}

std::vector<int64_t> Ids(const std::shared_ptr<arrow::Table>& t) {
  auto sorted = Sorted(t);
  std::vector<int64_t> out;
  auto column =
      std::static_pointer_cast<arrow::Int64Array>(sorted->GetColumnByName("id")->chunk(0));
  for (int64_t i = 0; i < column->length(); ++i) out.push_back(column->Value(i));
  return out;
}

class TableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ty_table_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    auto inner = blob::OpenLocalBlobStore(dir_.string());
    ASSERT_TRUE(inner.ok());
    store_ = std::make_unique<HookedStore>(std::move(inner).value());
    options_.random = &random_;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<DeltaTable> CreateTickets(std::vector<std::string> partitions = {},
                                            std::map<std::string, std::string> props = {}) {
    CreateTableRequest request;
    request.schema = TicketSchema();
    request.partition_columns = std::move(partitions);
    request.properties = std::move(props);
    request.description = "support tickets";
    auto table = DeltaTable::Create(*store_, "t", clock_, request, options_);
    EXPECT_TRUE(table.ok()) << table.status().ToString();
    return table.ok() ? std::move(table).value() : nullptr;
  }
  std::unique_ptr<DeltaTable> OpenTickets() {
    auto table = DeltaTable::Open(*store_, "t", clock_, options_);
    EXPECT_TRUE(table.ok()) << table.status().ToString();
    return table.ok() ? std::move(table).value() : nullptr;
  }
  std::string LogFile(int64_t version) const {
    return (dir_ / "t" / "_delta_log" / CommitFileName(version)).string();
  }
  std::string ReadText(const std::string& path) const {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  void WriteText(const std::string& path, const std::string& text) const {
    std::ofstream out(path, std::ios::trunc);
    out << text;
  }

  fs::path dir_;
  std::unique_ptr<HookedStore> store_;
  FakeClock clock_{SystemClock().NowMillis()};
  SeededRandom random_{42};
  TableOptions options_;
};

TEST_F(TableTest, CreateAppendAndReadBack) {
  auto table = CreateTickets();
  ASSERT_NE(table, nullptr);
  TY_ASSERT_OK_AND_ASSIGN(CommitResult c, table->Append(*Tickets(0, 100)));
  EXPECT_EQ(c.version, 1);
  EXPECT_EQ(c.files_added, 1);
  EXPECT_EQ(c.rows_written, 100);
  TY_ASSERT_OK_AND_ASSIGN(auto rows, table->ReadAll({}));
  EXPECT_TRUE(Sorted(rows)->Equals(*Sorted(Tickets(0, 100)))) << rows->ToString();

  // What Spark and delta-rs expect of a plain table.
  std::string v0 = ReadText(LogFile(0));
  EXPECT_THAT(v0, HasSubstr("\"minReaderVersion\":1,\"minWriterVersion\":2"));
  EXPECT_THAT(v0, HasSubstr("\"provider\":\"parquet\""));
  EXPECT_THAT(v0, HasSubstr("\"operation\":\"CREATE TABLE\""));
  std::string v1 = ReadText(LogFile(1));
  EXPECT_THAT(v1, HasSubstr("\\\"numRecords\\\":100"));
  EXPECT_THAT(v1, HasSubstr("\\\"minValues\\\":{\\\"id\\\":0"));
  EXPECT_THAT(v1, HasSubstr("\"engineInfo\":\"Trainyard/"));

  TY_ASSERT_OK_AND_ASSIGN(TableInfo info, OpenTickets()->Describe());
  EXPECT_EQ(info.version, 1);
  EXPECT_EQ(info.num_rows, 100);
  EXPECT_EQ(info.num_files, 1);
  EXPECT_EQ(info.description, "support tickets");
  EXPECT_TRUE(info.schema->Equals(*TicketSchema()));
  CreateTableRequest again;
  again.schema = TicketSchema();
  TY_EXPECT_ERROR(DeltaTable::Create(*store_, "t", clock_, again, options_).status(),
                  StatusCode::kAlreadyExists, "already exists");
}

TEST_F(TableTest, CommitsCarryTheUserMetadataOfTheirOptions) {
  auto table = CreateTickets();
  ASSERT_NE(table, nullptr);
  TY_ASSERT_OK(table->Append(*Tickets(0, 10)).status());
  TableOptions tagged = options_;
  tagged.commit_user_metadata = R"({"pipeline":"p","version":"ab\"c"})";
  TY_ASSERT_OK_AND_ASSIGN(auto writer, DeltaTable::Open(*store_, "t", clock_, tagged));
  TY_ASSERT_OK(writer->Overwrite(*Tickets(10, 5)).status());
  // As Spark writes it: a JSON string in commitInfo.
  EXPECT_THAT(ReadText(LogFile(2)),
              HasSubstr(R"("userMetadata":"{\"pipeline\":\"p\",\"version\":\"ab\\\"c\"}")"));
  EXPECT_THAT(ReadText(LogFile(1)), Not(HasSubstr("userMetadata")));
  TY_ASSERT_OK_AND_ASSIGN(auto history, table->History());
  ASSERT_EQ(history.size(), 3u);
  EXPECT_EQ(history[0].user_metadata, tagged.commit_user_metadata);
  EXPECT_EQ(history[1].user_metadata, "");
}

TEST_F(TableTest, BadInputNamesTheField) {
  CreateTableRequest request;
  request.schema = TicketSchema();
  request.partition_columns = {"nope"};
  TY_EXPECT_ERROR(DeltaTable::Create(*store_, "t", clock_, request).status(),
                  StatusCode::kInvalidArgument, "partition_columns");
  request.partition_columns = {};
  request.properties = {{"delta.checkpointInterval", "zero"}};
  TY_EXPECT_ERROR(DeltaTable::Create(*store_, "t", clock_, request).status(),
                  StatusCode::kInvalidArgument, "delta.checkpointInterval");
  TY_EXPECT_ERROR(DeltaTable::Open(*store_, "t", clock_).status(), StatusCode::kNotFound,
                  "no Delta table");
  auto table = CreateTickets();
  auto wrong = arrow::Table::Make(arrow::schema({arrow::field("id", arrow::utf8())}),
                                  {Json(arrow::utf8(), R"(["x"])")});
  TY_EXPECT_ERROR(table->Append(*wrong).status(), StatusCode::kInvalidArgument, "column 'id'");
  auto extra = arrow::Table::Make(
      arrow::schema({arrow::field("id", arrow::int64()), arrow::field("extra", arrow::utf8())}),
      {Json(arrow::int64(), "[1]"), Json(arrow::utf8(), R"(["x"])")});
  TY_EXPECT_ERROR(table->Append(*extra).status(), StatusCode::kInvalidArgument, "'extra'");
  auto nulls = arrow::Table::Make(arrow::schema({arrow::field("id", arrow::int64())}),
                                  {Json(arrow::int64(), "[1, null]")});
  TY_EXPECT_ERROR(table->Append(*nulls).status(), StatusCode::kInvalidArgument, "not nullable");
  // A bad batch after good ones: the files of the good ones are removed too.
  options_.target_file_rows = 2;
  auto small = DeltaTable::Open(*store_, "t", clock_, options_);
  ASSERT_TRUE(small.ok());
  std::vector<std::shared_ptr<arrow::RecordBatch>> batches = {
      Tickets(0, 5)->CombineChunksToBatch().ValueOrDie(),
      arrow::RecordBatch::Make(
          TicketSchema(), 2,
          {Json(arrow::int64(), "[1, null]"), Json(arrow::utf8(), R"(["en", "de"])"),
           Json(arrow::utf8(), R"(["a", "b"])")})};
  auto reader = arrow::RecordBatchReader::Make(batches).ValueOrDie();
  TY_EXPECT_ERROR((*small)->Append(*reader).status(), StatusCode::kInvalidArgument, "rows 5..6");
  TY_ASSERT_OK_AND_ASSIGN(int64_t version, table->LatestVersion());
  EXPECT_EQ(version, 0);  // nothing half-written
  for (const auto& e : fs::recursive_directory_iterator(dir_ / "t")) {
    EXPECT_FALSE(EndsWith(e.path().string(), ".parquet")) << e.path();
  }
}

TEST_F(TableTest, PartitionedWritesAndPruning) {
  auto table = CreateTickets({"lang"});
  TY_ASSERT_OK(table->Append(*Tickets(0, 40, {"en", "de", "", "a:b c"})).status());
  TY_ASSERT_OK_AND_ASSIGN(TableInfo info, table->Describe());
  EXPECT_EQ(info.num_files, 4);
  std::set<std::string> dirs;
  for (const auto& f : info.files) dirs.insert(f.path.substr(0, f.path.find('/')));
  EXPECT_EQ(dirs, (std::set<std::string>{"lang=en", "lang=de", "lang=__HIVE_DEFAULT_PARTITION__",
                                         "lang=a%3Ab c"}));
  EXPECT_THAT(ReadText(LogFile(1)), HasSubstr("\"path\":\"lang=a%253Ab%20c/part-"));
  TY_ASSERT_OK_AND_ASSIGN(auto all, table->ReadAll({}));
  EXPECT_TRUE(Sorted(all)->Equals(*Sorted(Tickets(0, 40, {"en", "de", "", "a:b c"}))));

  ReadOptions options;
  TY_ASSERT_OK_AND_ASSIGN(options.filter, Predicate::Parse("lang = 'a:b c' OR lang IS NULL"));
  options.columns = {"id", "lang"};
  TY_ASSERT_OK_AND_ASSIGN(auto reader, table->Read(options));
  int before = store_->reads;
  auto some = arrow::Table::FromRecordBatchReader(reader.get()).ValueOrDie();
  EXPECT_EQ(store_->reads - before, 2);  // only the two matching files were opened
  EXPECT_EQ(some->num_columns(), 2);
  std::vector<int64_t> expected;
  for (int64_t i = 0; i < 40; ++i) {
    if (i % 4 >= 2) expected.push_back(i);
  }
  EXPECT_EQ(Ids(some), expected);
}

TEST_F(TableTest, StatsPruneFilesAndFilterRows) {
  options_.target_file_rows = 100;
  options_.row_group_rows = 25;
  auto table = CreateTickets();
  TY_ASSERT_OK(table->Append(*Tickets(0, 1000)).status());
  ReadOptions options;
  TY_ASSERT_OK_AND_ASSIGN(options.filter, Predicate::Parse("id >= 250 AND id < 260"));
  options.batch_rows = 4;
  TY_ASSERT_OK_AND_ASSIGN(auto reader, table->Read(options));
  int before = store_->reads;
  std::vector<int64_t> ids;
  while (true) {
    std::shared_ptr<arrow::RecordBatch> batch;
    ASSERT_TRUE(reader->ReadNext(&batch).ok());
    if (!batch) break;
    EXPECT_LE(batch->num_rows(), 4);
    auto column = std::static_pointer_cast<arrow::Int64Array>(batch->column(0));
    for (int64_t i = 0; i < column->length(); ++i) ids.push_back(column->Value(i));
  }
  EXPECT_EQ(store_->reads - before, 1);  // one of the ten files
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, (std::vector<int64_t>{250, 251, 252, 253, 254, 255, 256, 257, 258, 259}));
}

// Row groups are decoded ahead of the caller on the reader's threads; batches still come in
// file and row-group order, at most batch_rows each, and a reader dropped half way stops.
TEST_F(TableTest, ReadsRowGroupsAheadInOrder) {
  options_.target_file_rows = 400;
  options_.row_group_rows = 30;
  auto table = CreateTickets();
  TY_ASSERT_OK(table->Append(*Tickets(0, 2000)).status());
  for (int64_t batch_rows : {7, 45, 1000}) {
    ReadOptions options;
    options.batch_rows = batch_rows;
    TY_ASSERT_OK_AND_ASSIGN(auto reader, table->Read(options));
    std::vector<int64_t> ids;
    while (true) {
      std::shared_ptr<arrow::RecordBatch> batch;
      ASSERT_TRUE(reader->ReadNext(&batch).ok());
      if (!batch) break;
      EXPECT_LE(batch->num_rows(), batch_rows);
      auto column = std::static_pointer_cast<arrow::Int64Array>(batch->column(0));
      for (int64_t i = 0; i < column->length(); ++i) ids.push_back(column->Value(i));
    }
    ASSERT_EQ(ids.size(), 2000u) << batch_rows;
    // Five files of 400 consecutive ids (in the snapshot's file order), each read in order.
    for (size_t file = 0; file < 5; ++file) {
      int64_t first = ids[file * 400];
      EXPECT_EQ(first % 400, 0) << batch_rows;
      for (size_t i = 0; i < 400; ++i) {
        ASSERT_EQ(ids[file * 400 + i], first + static_cast<int64_t>(i)) << batch_rows;
      }
    }
  }
  ReadOptions filtered;
  TY_ASSERT_OK_AND_ASSIGN(filtered.filter, Predicate::Parse("id < 100 OR lang = 'de'"));
  filtered.batch_rows = 16;
  for (int stop_after : {0, 1, 5}) {
    TY_ASSERT_OK_AND_ASSIGN(auto reader, table->Read(filtered));
    for (int i = 0; i < stop_after; ++i) {
      std::shared_ptr<arrow::RecordBatch> batch;
      ASSERT_TRUE(reader->ReadNext(&batch).ok());
      ASSERT_NE(batch, nullptr);
    }
  }  // each reader is destroyed with units still decoding or queued
}

TEST_F(TableTest, OverwriteDeleteUpdate) {
  auto table = CreateTickets({"lang"});
  TY_ASSERT_OK(table->Append(*Tickets(0, 20)).status());
  TY_ASSERT_OK_AND_ASSIGN(Predicate odd_de, Predicate::Parse("lang = 'de' AND id > 10"));
  TY_ASSERT_OK_AND_ASSIGN(CommitResult deleted, table->Delete(odd_de));
  EXPECT_EQ(deleted.rows_affected, 5);  // 11 13 15 17 19
  TY_ASSERT_OK_AND_ASSIGN(auto rows, table->ReadAll({}));
  EXPECT_EQ(rows->num_rows(), 15);

  TY_ASSERT_OK_AND_ASSIGN(Predicate small, Predicate::Parse("id < 3"));
  TY_ASSERT_OK_AND_ASSIGN(CommitResult updated,
                          table->Update(small, {{"text", Literal(std::string("redacted"))}}));
  EXPECT_EQ(updated.rows_affected, 3);
  ReadOptions redacted;
  TY_ASSERT_OK_AND_ASSIGN(redacted.filter, Predicate::Parse("text = 'redacted'"));
  TY_ASSERT_OK_AND_ASSIGN(rows, table->ReadAll(redacted));
  EXPECT_EQ(Ids(rows), (std::vector<int64_t>{0, 1, 2}));
  TY_EXPECT_ERROR(table->Update(small, {{"id", Literal(std::string("x"))}}).status(),
                  StatusCode::kInvalidArgument, "id");

  TY_ASSERT_OK_AND_ASSIGN(Predicate en, Predicate::Parse("lang = 'en'"));
  TY_ASSERT_OK(table->Overwrite(*Tickets(100, 4, {"en"}), en).status());
  TY_ASSERT_OK_AND_ASSIGN(rows, table->ReadAll({}));
  EXPECT_EQ(Ids(rows), (std::vector<int64_t>{1, 3, 5, 7, 9, 100, 101, 102, 103}));
  TY_EXPECT_ERROR(table->Overwrite(*Tickets(200, 2, {"de"}), en).status(),
                  StatusCode::kInvalidArgument, "replace_where");
  TY_ASSERT_OK(table->Overwrite(*Tickets(500, 2)).status());
  TY_ASSERT_OK_AND_ASSIGN(rows, table->ReadAll({}));
  EXPECT_EQ(Ids(rows), (std::vector<int64_t>{500, 501}));

  TY_ASSERT_OK_AND_ASSIGN(auto history, table->History());
  ASSERT_EQ(history.size(), 6u);
  EXPECT_EQ(history[0].operation, "WRITE");
  EXPECT_EQ(history[0].operation_parameters["mode"], "Overwrite");
  EXPECT_EQ(history[2].operation, "UPDATE");
  EXPECT_EQ(history[3].operation, "DELETE");
  EXPECT_EQ(history[3].operation_metrics["numDeletedRows"], "5");
  EXPECT_EQ(history[5].operation, "CREATE TABLE");
  TY_ASSERT_OK_AND_ASSIGN(auto two, table->History(2));
  EXPECT_EQ(two.size(), 2u);
}

TEST_F(TableTest, CommitsNameTheUserOfTheirHandle) {
  auto table = CreateTickets();
  TY_ASSERT_OK(table->Append(*Tickets(0, 3)).status());
  TableOptions as_erin = options_;
  as_erin.user_id = "erin";
  as_erin.user_name = "erin";
  TY_ASSERT_OK_AND_ASSIGN(auto erins, DeltaTable::Open(*store_, "t", clock_, as_erin));
  TY_ASSERT_OK(erins->Append(*Tickets(10, 3)).status());
  EXPECT_THAT(ReadText(LogFile(2)), HasSubstr("\"userId\":\"erin\",\"userName\":\"erin\""));
  EXPECT_THAT(ReadText(LogFile(1)), Not(HasSubstr("userName")));
  TY_ASSERT_OK_AND_ASSIGN(auto history, table->History());
  ASSERT_EQ(history.size(), 3u);
  EXPECT_EQ(history[0].user_id, "erin");
  EXPECT_EQ(history[0].user_name, "erin");
  EXPECT_EQ(history[1].user_name, "");
}

TEST_F(TableTest, AddColumnsKeepsOldRowsAsNull) {
  auto table = CreateTickets();
  TY_ASSERT_OK(table->Append(*Tickets(0, 3)).status());
  TY_ASSERT_OK(table
                   ->AddColumns({arrow::field("score", arrow::float64()),
                                 arrow::field("seen", arrow::timestamp(arrow::TimeUnit::MICRO))})
                   .status());
  TY_ASSERT_OK_AND_ASSIGN(TableInfo info, table->Describe());
  EXPECT_EQ(info.schema->num_fields(), 5);
  EXPECT_EQ(info.min_reader_version, 3);  // timestamp_ntz needs the feature
  EXPECT_EQ(info.reader_features, std::vector<std::string>{"timestampNtz"});
  auto more = arrow::Table::Make(
      arrow::schema({arrow::field("id", arrow::int64()), arrow::field("score", arrow::float64())}),
      {Json(arrow::int64(), "[7]"), Json(arrow::float64(), "[0.5]")});
  TY_ASSERT_OK(table->Append(*more).status());
  TY_ASSERT_OK_AND_ASSIGN(auto rows, OpenTickets()->ReadAll({}));
  auto sorted = Sorted(rows);
  auto score =
      std::static_pointer_cast<arrow::DoubleArray>(sorted->GetColumnByName("score")->chunk(0));
  EXPECT_EQ(score->null_count(), 3);
  EXPECT_EQ(score->Value(3), 0.5);
  TY_EXPECT_ERROR(table->AddColumns({arrow::field("ID", arrow::int32())}).status(),
                  StatusCode::kInvalidArgument, "twice");
  TY_EXPECT_ERROR(table->AddColumns({arrow::field("x", arrow::int32(), false)}).status(),
                  StatusCode::kInvalidArgument, "nullable");
}

// Sets a file's modification time (ms since the epoch).
void SetModified(const std::string& path, int64_t ms) {
  struct timespec times[2];
  times[0].tv_sec = times[1].tv_sec = ms / 1000;
  times[0].tv_nsec = times[1].tv_nsec = (ms % 1000) * 1'000'000;
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0) << path;
}

TEST_F(TableTest, TimeTravelByVersionAndTimestamp) {
  auto table = CreateTickets();
  TY_ASSERT_OK(table->Append(*Tickets(0, 5)).status());
  TY_ASSERT_OK(table->Append(*Tickets(5, 5)).status());
  // A version's time is its log entry's modification time (PROTOCOL.md), not
  // commitInfo.timestamp: the entries get times an hour before their commitInfo timestamps
  // (the FakeClock's), so only that definition gives these answers.
  int64_t t0 = clock_.NowMillis() - 3'600'000;
  for (int64_t v = 0; v <= 2; ++v) SetModified(LogFile(v), t0 + v * 2000);
  int64_t between = t0 + 3000;
  ReadOptions at1;
  at1.at.version = 1;
  TY_ASSERT_OK_AND_ASSIGN(auto rows, table->ReadAll(at1));
  EXPECT_EQ(rows->num_rows(), 5);
  ReadOptions at_time;
  at_time.at.timestamp_ms = between;
  TY_ASSERT_OK_AND_ASSIGN(rows, table->ReadAll(at_time));
  EXPECT_EQ(rows->num_rows(), 5);
  at_time.at.timestamp_ms = t0;
  TY_ASSERT_OK_AND_ASSIGN(rows, table->ReadAll(at_time));
  EXPECT_EQ(rows->num_rows(), 0);
  ReadOptions missing;
  missing.at.version = 12;
  TY_EXPECT_ERROR(table->ReadAll(missing).status(), StatusCode::kNotFound,
                  "version 12 does not exist; latest is 2");
  ReadOptions early;
  early.at.timestamp_ms = t0 - 60'000;
  TY_EXPECT_ERROR(table->ReadAll(early).status(), StatusCode::kInvalidArgument,
                  "before the table's first commit");
  // Times that go backwards are made increasing (as Spark does): version 2 written "before"
  // version 1 counts as 1 ms after it.
  SetModified(LogFile(2), t0 + 1000);
  at_time.at.timestamp_ms = t0 + 2000;
  TY_ASSERT_OK_AND_ASSIGN(rows, table->ReadAll(at_time));
  EXPECT_EQ(rows->num_rows(), 5);
  at_time.at.timestamp_ms = t0 + 2001;
  TY_ASSERT_OK_AND_ASSIGN(rows, table->ReadAll(at_time));
  EXPECT_EQ(rows->num_rows(), 10);
}

TEST_F(TableTest, EveryCommitCarriesItsOwnTxnId) {
  auto table = CreateTickets();
  TY_ASSERT_OK(table->Append(*Tickets(0, 5)).status());
  std::set<std::string> ids;
  for (int64_t v = 0; v <= 1; ++v) {
    TY_ASSERT_OK_AND_ASSIGN(auto actions, ParseCommit(ReadText(LogFile(v))));
    for (const Action& a : actions) {
      if (!a.commit_info) continue;
      const json::value* id = a.commit_info->fields.if_contains("txnId");
      ASSERT_NE(id, nullptr) << "version " << v;
      ASSERT_TRUE(id->is_string());
      EXPECT_EQ(id->as_string().size(), 36u);
      ids.insert(std::string(id->as_string()));
    }
  }
  EXPECT_EQ(ids.size(), 2u);
}

TEST_F(TableTest, AWriterRecognisesItsOwnEntryAfterALostAnswer) {
  auto table = CreateTickets();
  store_->lose_log_answer = true;
  TY_ASSERT_OK_AND_ASSIGN(CommitResult c, table->Append(*Tickets(0, 5)));
  EXPECT_EQ(c.version, 1);
  EXPECT_FALSE(fs::exists(LogFile(2)));  // not committed a second time
  TY_ASSERT_OK_AND_ASSIGN(auto rows, OpenTickets()->ReadAll({}));
  EXPECT_EQ(rows->num_rows(), 5);
  // A rival's entry at that version is not mistaken for ours.
  auto b = OpenTickets();
  store_->before_log_write = [&] { ASSERT_TRUE(b->Append(*Tickets(10, 2)).ok()); };
  TY_ASSERT_OK_AND_ASSIGN(c, table->Append(*Tickets(20, 2)));
  EXPECT_EQ(c.version, 3);
  EXPECT_EQ(c.attempts, 2);
}

TEST_F(TableTest, ADamagedLogEntryLeavesEarlierVersionsReadable) {
  auto table = CreateTickets();
  TY_ASSERT_OK(table->Append(*Tickets(0, 5)).status());
  TY_ASSERT_OK(table->Append(*Tickets(5, 5)).status());
  std::string text = ReadText(LogFile(2));
  WriteText(LogFile(2), text.substr(0, text.size() / 2));
  TableOptions named = options_;
  named.name = "s3://bucket/tickets";
  TY_ASSERT_OK_AND_ASSIGN(auto opened, DeltaTable::Open(*store_, "t", clock_, named));
  ReadOptions at1;
  at1.at.version = 1;
  TY_ASSERT_OK_AND_ASSIGN(auto rows, opened->ReadAll(at1));
  EXPECT_EQ(rows->num_rows(), 5);
  Status latest = opened->ReadAll({}).status();
  TY_EXPECT_ERROR(latest, StatusCode::kInvalidArgument, "version 2");
  EXPECT_THAT(latest.message(), HasSubstr("table 's3://bucket/tickets'"));
  EXPECT_THAT(latest.message(), HasSubstr("is damaged"));
  EXPECT_THAT(latest.message(), Not(HasSubstr("request body")));
  // Without a name, errors name the root.
  TY_ASSERT_OK_AND_ASSIGN(opened, DeltaTable::Open(*store_, "t", clock_, options_));
  TY_EXPECT_ERROR(opened->Describe().status(), StatusCode::kInvalidArgument, "table 't'");
}

TEST_F(TableTest, ConcurrentAppendsBothLand) {
  auto a = CreateTickets();
  auto b = OpenTickets();
  store_->before_log_write = [&] { ASSERT_TRUE(b->Append(*Tickets(100, 2)).ok()); };
  TY_ASSERT_OK_AND_ASSIGN(CommitResult c, a->Append(*Tickets(0, 2)));
  EXPECT_EQ(c.version, 2);
  EXPECT_EQ(c.attempts, 2);
  TY_ASSERT_OK_AND_ASSIGN(auto rows, a->ReadAll({}));
  EXPECT_EQ(Ids(rows), (std::vector<int64_t>{0, 1, 100, 101}));
}

TEST_F(TableTest, DeleteConflictsWithAConcurrentAppendItWouldHaveRead) {
  auto a = CreateTickets({"lang"});
  TY_ASSERT_OK(a->Append(*Tickets(0, 4)).status());
  auto b = OpenTickets();
  // An append into another partition does not conflict with a delete in 'de'.
  store_->before_log_write = [&] { ASSERT_TRUE(b->Append(*Tickets(10, 1, {"fr"})).ok()); };
  TY_ASSERT_OK_AND_ASSIGN(Predicate de, Predicate::Parse("lang = 'de'"));
  TY_ASSERT_OK_AND_ASSIGN(CommitResult c, a->Delete(de));
  EXPECT_EQ(c.attempts, 2);
  // An append of 'de' rows does.
  TY_ASSERT_OK(a->Append(*Tickets(30, 2)).status());
  store_->before_log_write = [&] { ASSERT_TRUE(b->Append(*Tickets(20, 1, {"de"})).ok()); };
  TY_EXPECT_ERROR(a->Delete(de).status(), StatusCode::kFailedPrecondition,
                  "concurrent commit at version 5");
  TY_ASSERT_OK_AND_ASSIGN(auto rows, a->ReadAll({}));
  EXPECT_EQ(Ids(rows), (std::vector<int64_t>{0, 2, 10, 20, 30, 31}));
}

TEST_F(TableTest, KilledWriterLeavesOrphansThatVacuumRemoves) {
  auto table = CreateTickets();
  TY_ASSERT_OK(table->Append(*Tickets(0, 10)).status());
  store_->dead_on_log_write = true;
  EXPECT_FALSE(table->Append(*Tickets(10, 10)).ok());
  store_->dead = false;
  store_->dead_on_log_write = false;
  auto reopened = OpenTickets();
  TY_ASSERT_OK_AND_ASSIGN(auto rows, reopened->ReadAll({}));
  EXPECT_EQ(rows->num_rows(), 10);
  size_t parquet_files = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir_ / "t")) {
    if (EndsWith(e.path().string(), ".parquet")) ++parquet_files;
  }
  EXPECT_EQ(parquet_files, 2u);  // the orphan is there
  TY_EXPECT_ERROR(reopened->Vacuum({.retention_ms = 0, .force = false, .dry_run = false}).status(),
                  StatusCode::kFailedPrecondition, "shorter than");
  TY_ASSERT_OK_AND_ASSIGN(VacuumResult kept, reopened->Vacuum({}));
  EXPECT_TRUE(kept.deleted.empty());  // too young for the default 7 days
  clock_.AdvanceMillis(8 * 86'400'000LL);
  TY_ASSERT_OK_AND_ASSIGN(
      VacuumResult dry,
      reopened->Vacuum({.retention_ms = std::nullopt, .force = false, .dry_run = true}));
  EXPECT_EQ(dry.deleted.size(), 1u);
  TY_ASSERT_OK_AND_ASSIGN(VacuumResult done, reopened->Vacuum({}));
  ASSERT_EQ(done.deleted.size(), 1u);
  EXPECT_EQ(done.deleted, dry.deleted);
  EXPECT_FALSE(fs::exists(dir_ / "t" / done.deleted[0]));
  TY_ASSERT_OK_AND_ASSIGN(rows, reopened->ReadAll({}));
  EXPECT_EQ(rows->num_rows(), 10);
  EXPECT_TRUE(fs::exists(LogFile(1)));
}

TEST_F(TableTest, VacuumKeepsRemovedFilesForTheRetention) {
  auto table = CreateTickets();
  TY_ASSERT_OK(table->Append(*Tickets(0, 10)).status());
  TY_ASSERT_OK(table->Overwrite(*Tickets(10, 10)).status());
  TY_ASSERT_OK_AND_ASSIGN(VacuumResult none, table->Vacuum({}));
  EXPECT_TRUE(none.deleted.empty());
  ReadOptions v1;
  v1.at.version = 1;
  TY_ASSERT_OK_AND_ASSIGN(auto old, table->ReadAll(v1));
  EXPECT_EQ(Ids(old).front(), 0);
  clock_.AdvanceMillis(8 * 86'400'000LL);
  TY_ASSERT_OK_AND_ASSIGN(VacuumResult one, table->Vacuum({}));
  EXPECT_EQ(one.deleted.size(), 1u);
  TY_ASSERT_OK_AND_ASSIGN(auto rows, table->ReadAll({}));
  EXPECT_EQ(Ids(rows).front(), 10);
}

TEST_F(TableTest, CorruptAndTruncatedLogEntriesNameTheVersion) {
  auto table = CreateTickets();
  TY_ASSERT_OK(table->Append(*Tickets(0, 2)).status());
  TY_ASSERT_OK(table->Append(*Tickets(2, 2)).status());
  std::string text = ReadText(LogFile(2));
  // The table still opens (earlier versions stay readable); reading the latest version fails.
  auto latest_error = [&] {
    auto opened = DeltaTable::Open(*store_, "t", clock_);
    return opened.ok() ? (*opened)->ReadAll({}).status() : opened.status();
  };
  WriteText(LogFile(2), text.substr(0, text.size() - 20));
  TY_EXPECT_ERROR(latest_error(), StatusCode::kInvalidArgument,
                  "table 't': log entry 00000000000000000002.json (version 2) is damaged: line 2: "
                  "the action is not valid JSON");
  WriteText(LogFile(2), "{\"add\": {\"path\": 12}}\n");
  TY_EXPECT_ERROR(latest_error(), StatusCode::kInvalidArgument,
                  "00000000000000000002.json (version 2) is damaged: line 1: add: path");
  WriteText(LogFile(2), "garbage\n");
  TY_EXPECT_ERROR(latest_error(), StatusCode::kInvalidArgument,
                  "(version 2) is damaged: line 1: the action is not valid JSON");
  // A handle opened before the damage meets it on its next refresh of the log.
  WriteText(LogFile(3), "{\"add\":");
  TY_EXPECT_ERROR(table->ReadAll({}).status(), StatusCode::kInvalidArgument,
                  "00000000000000000003.json (version 3) is damaged: line 1");
}

TEST_F(TableTest, RefusesReaderFeaturesItDoesNotSupport) {
  auto table = CreateTickets();
  std::string v0 = ReadText(LogFile(0));
  WriteText(LogFile(1),
            "{\"protocol\":{\"minReaderVersion\":3,\"minWriterVersion\":7,\"readerFeatures\":"
            "[\"deletionVectors\"],\"writerFeatures\":[\"deletionVectors\"]}}\n");
  TY_EXPECT_ERROR(DeltaTable::Open(*store_, "t", clock_).status(), StatusCode::kFailedPrecondition,
                  "'deletionVectors'");
  WriteText(LogFile(1),
            "{\"protocol\":{\"minReaderVersion\":3,\"minWriterVersion\":7,\"readerFeatures\":"
            "[\"someFutureThing\"],\"writerFeatures\":[]}}\n");
  TY_EXPECT_ERROR(DeltaTable::Open(*store_, "t", clock_).status(), StatusCode::kFailedPrecondition,
                  "'someFutureThing'");
  // Column mapping with mode 'name': the metaData's configuration says so.
  std::string meta = v0.substr(v0.find("{\"metaData\""));
  meta = meta.substr(0, meta.find('\n'));
  std::string mapped = meta;
  mapped.replace(mapped.find("\"configuration\":{}"), 18,
                 "\"configuration\":{\"delta.columnMapping.mode\":\"name\"}");
  WriteText(LogFile(1),
            "{\"protocol\":{\"minReaderVersion\":2,\"minWriterVersion\":5}}\n" + mapped + "\n");
  TY_EXPECT_ERROR(DeltaTable::Open(*store_, "t", clock_).status(), StatusCode::kFailedPrecondition,
                  "column mapping");
  // A table a reader may read but this writer may not write (generated columns, version 4).
  WriteText(LogFile(1), "{\"protocol\":{\"minReaderVersion\":1,\"minWriterVersion\":4}}\n");
  auto opened = OpenTickets();
  ASSERT_NE(opened, nullptr);
  TY_ASSERT_OK(opened->ReadAll({}).status());
  TY_EXPECT_ERROR(opened->Append(*Tickets(0, 1)).status(), StatusCode::kFailedPrecondition,
                  "writer version 4");
}

TEST_F(TableTest, CheckpointsEveryNCommitsAndReadsFromThem) {
  auto table = CreateTickets({}, {{"delta.checkpointInterval", "3"}});
  for (int i = 0; i < 4; ++i) TY_ASSERT_OK(table->Append(*Tickets(i * 10, 10)).status());
  fs::path log = dir_ / "t" / "_delta_log";
  EXPECT_TRUE(fs::exists(log / CheckpointFileName(3)));
  EXPECT_FALSE(fs::exists(log / CheckpointFileName(4)));
  TY_ASSERT_OK_AND_ASSIGN(json::object last,
                          ParseJsonObject(ReadText((log / "_last_checkpoint").string())));
  EXPECT_EQ(last["version"].as_int64(), 3);
  EXPECT_EQ(last["numOfAddFiles"].as_int64(), 3);
  // Only the checkpoint and the commits after it are needed now.
  for (int v = 0; v <= 3; ++v) fs::remove(LogFile(v));
  auto reopened = OpenTickets();
  ASSERT_NE(reopened, nullptr);
  TY_ASSERT_OK_AND_ASSIGN(auto rows, reopened->ReadAll({}));
  EXPECT_EQ(rows->num_rows(), 40);
  TY_ASSERT_OK_AND_ASSIGN(TableInfo info, reopened->Describe());
  EXPECT_EQ(info.version, 4);
  EXPECT_EQ(info.description, "support tickets");
  ReadOptions v3;
  v3.at.version = 3;
  TY_ASSERT_OK_AND_ASSIGN(rows, reopened->ReadAll(v3));
  EXPECT_EQ(rows->num_rows(), 30);
  ReadOptions v1;
  v1.at.version = 1;
  TY_EXPECT_ERROR(reopened->ReadAll(v1).status(), StatusCode::kNotFound, "no longer available");
  // Without _last_checkpoint, the checkpoint is found by listing.
  fs::remove(log / "_last_checkpoint");
  TY_ASSERT_OK_AND_ASSIGN(rows, OpenTickets()->ReadAll({}));
  EXPECT_EQ(rows->num_rows(), 40);
}

TEST_F(TableTest, ACheckpointGivesTheSameFilesAsTheJsonLog) {
  auto table = CreateTickets({"lang"});
  TY_ASSERT_OK(table->Append(*Tickets(0, 6, {"en", "", "de"})).status());  // "" is null
  TY_ASSERT_OK(table->Append(*Tickets(6, 3, {"fr"})).status());
  TY_ASSERT_OK_AND_ASSIGN(TableInfo from_json, OpenTickets()->Describe());
  TY_ASSERT_OK(table->Checkpoint());
  for (int v = 0; v <= 2; ++v) fs::remove(LogFile(v));  // only the checkpoint is left
  TY_ASSERT_OK_AND_ASSIGN(TableInfo from_checkpoint, OpenTickets()->Describe());
  ASSERT_EQ(from_checkpoint.files.size(), 4u);
  ASSERT_EQ(from_checkpoint.files.size(), from_json.files.size());
  for (size_t i = 0; i < from_json.files.size(); ++i) {
    const DataFile& a = from_json.files[i];
    const DataFile& b = from_checkpoint.files[i];
    EXPECT_EQ(a.path, b.path);
    EXPECT_EQ(a.size_bytes, b.size_bytes);
    EXPECT_EQ(a.modification_time_ms, b.modification_time_ms);
    EXPECT_EQ(a.partition_values, b.partition_values);
    EXPECT_EQ(a.num_records, b.num_records);
  }
  EXPECT_EQ(from_checkpoint.num_rows, 9);
  int nulls = 0;
  for (const DataFile& f : from_checkpoint.files) nulls += !f.partition_values.at("lang");
  EXPECT_EQ(nulls, 1);
  TY_ASSERT_OK_AND_ASSIGN(Predicate de, Predicate::Parse("lang = 'de'"));
  ReadOptions pruned;
  pruned.filter = de;
  TY_ASSERT_OK_AND_ASSIGN(auto rows, OpenTickets()->ReadAll(pruned));
  EXPECT_EQ(Ids(rows), (std::vector<int64_t>{2, 5}));
}

TEST_F(TableTest, OpensATableWithTenThousandCommitsFromItsCheckpoint) {
  auto table = CreateTickets();
  TY_ASSERT_OK(table->Append(*Tickets(0, 5)).status());
  // Commits 2..10001 each add (a reference to) the same data file under a new name.
  TY_ASSERT_OK_AND_ASSIGN(TableInfo info, table->Describe());
  std::string file = info.files[0].path;
  for (int64_t v = 2; v <= 10'001; ++v) {
    std::string name = "copy-" + std::to_string(v) + ".parquet";
    fs::create_hard_link(dir_ / "t" / file, dir_ / "t" / name);
    Action add;
    add.add = AddAction{};
    add.add->path = name;
    add.add->size = 1;
    add.add->modification_time = 1;
    add.add->stats = "{\"numRecords\":5}";
    Action info_action;
    info_action.commit_info =
        CommitInfoAction{json::object{{"timestamp", v}, {"operation", "WRITE"}}};
    if (v % 2 == 0 && v > 2) {
      Action remove;
      remove.remove = RemoveAction{};
      remove.remove->path = "copy-" + std::to_string(v - 1) + ".parquet";
      remove.remove->deletion_timestamp = v;
      WriteText(LogFile(v), ActionLine(info_action) + "\n" + ActionLine(add) + "\n" +
                                ActionLine(remove) + "\n");
    } else {
      WriteText(LogFile(v), ActionLine(info_action) + "\n" + ActionLine(add) + "\n");
    }
  }
  TY_ASSERT_OK(OpenTickets()->Checkpoint());
  TY_ASSERT_OK(OpenTickets()->Append(*Tickets(5, 5)).status());  // version 10002, after it
  store_->reads = 0;
  auto started = std::chrono::steady_clock::now();
  auto opened = OpenTickets();
  ASSERT_NE(opened, nullptr);
  // Reported, not asserted (the machine may be loaded): the target is < 100 ms.
  RecordProperty("open_ms", std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                               std::chrono::steady_clock::now() - started)
                                               .count()));
  // _last_checkpoint, the checkpoint, its commit's timestamp, 10002 and the probe for 10003.
  EXPECT_LE(store_->reads, 6);
  TY_ASSERT_OK_AND_ASSIGN(TableInfo now, opened->Describe());
  EXPECT_EQ(now.version, 10'002);
  EXPECT_EQ(now.num_files, 2 + 5000 + 1);  // the first file, odd copies, 10001's, the append
  EXPECT_EQ(now.num_rows, now.num_files * 5);
}

}  // namespace
}  // namespace trainyard::tables
