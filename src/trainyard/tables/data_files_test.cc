// DataFileWriter through DeltaTable::Append on a local store: the row groups and files it
// writes, and the statistics of its add actions (Parquet's column chunk statistics, merged over
// row groups, or computed here where Parquet keeps none).
#include "trainyard/tables/data_files.h"

#include <arrow/io/file.h>
#include <arrow/io/memory.h>
#include <arrow/json/from_string.h>
#include <gtest/gtest.h>
#include <parquet/arrow/reader.h>
#include <parquet/arrow/writer.h>
#include <parquet/file_reader.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>

#include "trainyard/common/json.h"
#include "trainyard/tables/arrow_util.h"
#include "trainyard/tables/table.h"
#include "trainyard/testing/status_matchers.h"

namespace trainyard::tables {
namespace {

namespace fs = std::filesystem;

std::shared_ptr<arrow::Array> Json(const std::shared_ptr<arrow::DataType>& type,
                                   const std::string& text) {
  return arrow::json::ArrayFromJSONString(type, text).ValueOrDie();
}

// Doubles, with nullopt for null (JSON has no NaN or infinities).
std::shared_ptr<arrow::Array> Doubles(const std::vector<std::optional<double>>& values) {
  arrow::DoubleBuilder b;
  for (const auto& v : values) EXPECT_TRUE((v ? b.Append(*v) : b.AppendNull()).ok());
  return b.Finish().ValueOrDie();
}

// A local store whose PutFile fails from the `fail_from`-th call on (a full disk, a lost
// connection to S3).
class FailingStore : public blob::BlobStore {
 public:
  FailingStore(std::unique_ptr<blob::BlobStore> inner, int fail_from)
      : inner_(std::move(inner)), fail_from_(fail_from) {}
  std::atomic<int> puts{0};

  Status PutBytes(std::string_view key, std::string_view data) override {
    return inner_->PutBytes(key, data);
  }
  Status PutIfAbsent(std::string_view key, std::string_view data) override {
    return inner_->PutIfAbsent(key, data);
  }
  Status PutFile(std::string_view key, const std::string& local_path) override {
    if (++puts >= fail_from_) return Status::IOError("no space left on device");
    return inner_->PutFile(key, local_path);
  }
  Result<std::string> LocalPathForRead(std::string_view key) override {
    return inner_->LocalPathForRead(key);
  }
  Result<std::string> GetBytes(std::string_view key) override { return inner_->GetBytes(key); }
  Result<std::vector<blob::BlobEntry>> List(std::string_view prefix) override {
    return inner_->List(prefix);
  }
  Status Delete(std::string_view key) override { return inner_->Delete(key); }
  Result<bool> IsDirectory(std::string_view key) override { return inner_->IsDirectory(key); }
  Result<bool> Exists(std::string_view key) override { return inner_->Exists(key); }

 private:
  std::unique_ptr<blob::BlobStore> inner_;
  int fail_from_;
};

class DataFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ty_data_file_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    auto store = blob::OpenLocalBlobStore(dir_.string());
    ASSERT_TRUE(store.ok());
    store_ = std::move(store).value();
    options_.random = &random_;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Appends `rows` to a new table "t" and returns the add actions of the commit.
  std::vector<AddAction> AppendToNewTable(const arrow::Table& rows) {
    CreateTableRequest request;
    request.schema = rows.schema();
    auto table = DeltaTable::Create(*store_, "t", clock_, request, options_);
    EXPECT_TRUE(table.ok()) << table.status().ToString();
    if (!table.ok()) return {};
    auto committed = (*table)->Append(rows);
    EXPECT_TRUE(committed.ok()) << committed.status().ToString();
    std::ifstream in(dir_ / "t" / "_delta_log" / CommitFileName(1));
    std::string text(std::istreambuf_iterator<char>(in), {});
    auto actions = ParseCommit(text);
    EXPECT_TRUE(actions.ok()) << actions.status().ToString();
    std::vector<AddAction> adds;
    for (const Action& a : actions.ok() ? *actions : std::vector<Action>{}) {
      if (a.add) adds.push_back(*a.add);
    }
    return adds;
  }

  json::object Stats(const AddAction& add) {
    EXPECT_TRUE(add.stats.has_value());
    auto parsed = ParseJsonObject(add.stats.value_or("{}"));
    EXPECT_TRUE(parsed.ok());
    return parsed.ok() ? *parsed : json::object{};
  }

  std::unique_ptr<parquet::ParquetFileReader> OpenDataFile(const AddAction& add) {
    auto path = DecodePathUri(add.path);
    EXPECT_TRUE(path.ok());
    return parquet::ParquetFileReader::OpenFile((dir_ / "t" / *path).string());
  }

  fs::path dir_;
  std::unique_ptr<blob::BlobStore> store_;
  FakeClock clock_;
  SeededRandom random_{7};
  TableOptions options_;
};

TEST_F(DataFileTest, StatsSpanRowGroupsAndStateOnlyTrueBounds) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  std::string long_z(5000, 'z');  // longer than Parquet keeps in statistics
  auto point =
      arrow::struct_({arrow::field("a", arrow::int64()), arrow::field("b", arrow::utf8())});
  auto schema = arrow::schema({
      arrow::field("i32", arrow::int32()),
      arrow::field("i64", arrow::int64()),
      arrow::field("f64", arrow::float64()),
      arrow::field("day", arrow::date32()),
      arrow::field("s", arrow::utf8()),
      arrow::field("point", point),
      arrow::field("none", arrow::utf8()),
      arrow::field("nan", arrow::float64()),
  });
  auto rows = arrow::Table::Make(
      schema, {
                  Json(arrow::int32(), "[5, -3, null, 7, 2, 9]"),
                  Json(arrow::int64(), "[10, 20, 30, 40, 50, -60]"),
                  Doubles({1.5, 2.5, kInf, 0.5, kNaN, std::nullopt}),
                  Json(arrow::date32(), "[19000, 19001, null, 18000, 20000, 19500]"),
                  Json(arrow::utf8(), R"(["m", "b", ")" + long_z + R"(", "c", null, "a"])"),
                  Json(point, R"([{"a": 1, "b": "x"}, null, {"a": -5, "b": "y"},
                                  {"a": 3, "b": null}, {"a": 2, "b": "w"}, {"a": 8, "b": "v"}])"),
                  Json(arrow::utf8(), "[null, null, null, null, null, null]"),
                  Doubles({kNaN, kNaN, kNaN, kNaN, kNaN, kNaN}),
              });
  options_.row_group_rows = 2;
  std::vector<AddAction> adds = AppendToNewTable(*rows);
  ASSERT_EQ(adds.size(), 1u);
  EXPECT_EQ(OpenDataFile(adds[0])->metadata()->num_row_groups(), 3);

  json::object stats = Stats(adds[0]);
  EXPECT_EQ(stats["numRecords"], 6);
  json::object expected_min = {{"i32", -3},  {"i64", -60},
                               {"f64", 0.5}, {"day", "2019-04-14"},
                               {"s", "a"},   {"point", json::object{{"a", -5}, {"b", "v"}}}};
  // The maximum of f64 is infinite: no bound is stated. The long maximum of s is cut to 32
  // characters and followed by U+10FFFF, so it stays an upper bound.
  json::object expected_max = {{"i32", 9},
                               {"i64", 50},
                               {"day", "2024-10-04"},
                               {"s", std::string(32, 'z') + "\xF4\x8F\xBF\xBF"},
                               {"point", json::object{{"a", 8}, {"b", "y"}}}};
  json::object expected_nulls = {{"i32", 1},  {"i64", 0},
                                 {"f64", 1},  {"day", 1},
                                 {"s", 1},    {"point", json::object{{"a", 1}, {"b", 2}}},
                                 {"none", 6}, {"nan", 0}};
  EXPECT_EQ(stats["minValues"], expected_min) << json::serialize(stats["minValues"]);
  EXPECT_EQ(stats["maxValues"], expected_max) << json::serialize(stats["maxValues"]);
  EXPECT_EQ(stats["nullCount"], expected_nulls) << json::serialize(stats["nullCount"]);
}

// Files roll at target_file_rows; each file's stats cover its own rows only, and its row
// groups hold row_group_rows rows however the input is batched.
TEST_F(DataFileTest, EachFileHasItsOwnStatsAndFullRowGroups) {
  auto schema =
      arrow::schema({arrow::field("id", arrow::int64()), arrow::field("s", arrow::utf8())});
  std::vector<std::shared_ptr<arrow::RecordBatch>> batches;
  int64_t id = 0;
  for (int64_t size : {3, 5, 1, 7, 4}) {  // 20 rows in uneven batches
    arrow::Int64Builder ids;
    arrow::StringBuilder s;
    for (int64_t i = 0; i < size; ++i, ++id) {
      ASSERT_TRUE(ids.Append(id).ok());
      ASSERT_TRUE(s.Append("row " + std::to_string(100 + id)).ok());
    }
    batches.push_back(arrow::RecordBatch::Make(
        schema, size, {ids.Finish().ValueOrDie(), s.Finish().ValueOrDie()}));
  }
  options_.target_file_rows = 8;
  options_.row_group_rows = 3;
  std::vector<AddAction> adds =
      AppendToNewTable(*arrow::Table::FromRecordBatches(schema, batches).ValueOrDie());
  ASSERT_EQ(adds.size(), 3u);  // 8 + 8 + 4 rows
  for (size_t f = 0; f < adds.size(); ++f) {
    int64_t first = static_cast<int64_t>(f) * 8, n = f < 2 ? 8 : 4;
    json::object stats = Stats(adds[f]);
    EXPECT_EQ(stats["numRecords"], n);
    EXPECT_EQ(stats["minValues"],
              (json::object{{"id", first}, {"s", "row " + std::to_string(100 + first)}}));
    EXPECT_EQ(
        stats["maxValues"],
        (json::object{{"id", first + n - 1}, {"s", "row " + std::to_string(100 + first + n - 1)}}));
    auto metadata = OpenDataFile(adds[f])->metadata();
    ASSERT_EQ(metadata->num_rows(), n);
    for (int g = 0; g < metadata->num_row_groups(); ++g) {
      EXPECT_EQ(metadata->RowGroup(g)->num_rows(), std::min<int64_t>(3, n - 3 * g)) << f << g;
    }
  }
}

// Row groups are encoded in parallel, each as a Parquet file of its own, and then copied into
// the data file with its metadata and page index moved: the file is byte for byte the one
// Parquet's writer writes for the same rows in one pass.
TEST_F(DataFileTest, ParallelRowGroupsMakeTheFileParquetWrites) {
  auto schema = arrow::schema({arrow::field("id", arrow::int64()), arrow::field("s", arrow::utf8()),
                               arrow::field("x", arrow::float64())});
  arrow::Int64Builder ids;
  arrow::StringBuilder s;
  arrow::DoubleBuilder x;
  for (int64_t i = 0; i < 2500; ++i) {
    ASSERT_TRUE(ids.Append(i * 7 - 3000).ok());
    ASSERT_TRUE((i % 11 == 0 ? s.AppendNull()
                             : s.Append(std::string(static_cast<size_t>(i % 97), 'a' + i % 26) +
                                        std::to_string(i % 300)))
                    .ok());
    ASSERT_TRUE(x.Append(static_cast<double>(i % 13) / 4).ok());
  }
  auto rows = arrow::Table::Make(
      schema, {ids.Finish().ValueOrDie(), s.Finish().ValueOrDie(), x.Finish().ValueOrDie()});
  options_.row_group_rows = 200;  // 13 row groups, over every encoder thread
  std::vector<AddAction> adds = AppendToNewTable(*rows);
  ASSERT_EQ(adds.size(), 1u);
  auto path = DecodePathUri(adds[0].path);
  ASSERT_TRUE(path.ok());
  std::ifstream in(dir_ / "t" / *path, std::ios::binary);
  std::string ours(std::istreambuf_iterator<char>(in), {});

  // The reference: Parquet's own writer, the same properties, the rows as the file holds them.
  TY_ASSERT_OK_AND_ASSIGN(
      auto file, FromArrow(arrow::io::ReadableFile::Open((dir_ / "t" / *path).string()), "open"));
  TY_ASSERT_OK_AND_ASSIGN(
      auto reader, FromArrow(parquet::arrow::OpenFile(file, arrow::default_memory_pool()), "open"));
  TY_ASSERT_OK_AND_ASSIGN(auto read, FromArrow(reader->ReadTable(), "read"));
  ASSERT_TRUE(read->Equals(*rows));
  auto sink = arrow::io::BufferOutputStream::Create().ValueOrDie();
  auto props = parquet::WriterProperties::Builder()
                   .compression(arrow::Compression::SNAPPY)
                   ->max_row_group_length(200)
                   ->build();
  ASSERT_TRUE(
      parquet::arrow::WriteTable(*read, arrow::default_memory_pool(), sink, 200, props).ok());
  std::string reference = sink->Finish().ValueOrDie()->ToString();
  EXPECT_EQ(OpenDataFile(adds[0])->metadata()->num_row_groups(), 13);
  EXPECT_EQ(ours.size(), reference.size());
  EXPECT_TRUE(ours == reference);
}

// A row group also ends once the batches gathered for it hold row_group_bytes of Arrow data,
// so the rows the writer holds stay bounded whatever row_group_rows says.
TEST_F(DataFileTest, RowGroupsEndAtTheByteBound) {
  auto schema = arrow::schema({arrow::field("s", arrow::utf8())});
  std::vector<std::shared_ptr<arrow::RecordBatch>> batches;
  for (int i = 0; i < 10; ++i) {
    arrow::StringBuilder s;
    ASSERT_TRUE(s.Append(std::string(1000, static_cast<char>('a' + i))).ok());
    batches.push_back(arrow::RecordBatch::Make(schema, 1, {s.Finish().ValueOrDie()}));
  }
  options_.row_group_bytes = 2500;  // a row is 1,000 bytes of text and 8 of offsets
  std::vector<AddAction> adds =
      AppendToNewTable(*arrow::Table::FromRecordBatches(schema, batches).ValueOrDie());
  ASSERT_EQ(adds.size(), 1u);
  auto metadata = OpenDataFile(adds[0])->metadata();
  ASSERT_EQ(metadata->num_row_groups(), 4);
  for (int g = 0; g < 4; ++g) EXPECT_EQ(metadata->RowGroup(g)->num_rows(), g < 3 ? 3 : 1);
}

// Files are stored on a thread of their own while the next ones are encoded: when storing one
// fails, the append fails with that error, the table stays at its version, and neither the
// files stored before nor any temporary file stays behind.
TEST_F(DataFileTest, AFailedStoreLeavesNothingBehind) {
  fs::path temp = dir_ / "tmp";
  fs::create_directories(temp);
  const char* old_tmpdir = std::getenv("TMPDIR");
  std::string restore = old_tmpdir ? old_tmpdir : "";
  ::setenv("TMPDIR", temp.c_str(), 1);  // where the writer puts files before storing them

  auto inner = blob::OpenLocalBlobStore((dir_ / "store").string());
  ASSERT_TRUE(inner.ok());
  FailingStore store(std::move(inner).value(), 3);
  CreateTableRequest request;
  request.schema = arrow::schema({arrow::field("id", arrow::int64())});
  TY_ASSERT_OK_AND_ASSIGN(auto table, DeltaTable::Create(store, "t", clock_, request, options_));
  arrow::Int64Builder ids;
  for (int64_t i = 0; i < 20; ++i) ASSERT_TRUE(ids.Append(i).ok());
  auto rows = arrow::Table::Make(request.schema, {ids.Finish().ValueOrDie()});
  TableOptions options = options_;
  options.target_file_rows = 4;  // five files; the third one fails to store
  TY_ASSERT_OK_AND_ASSIGN(table, DeltaTable::Open(store, "t", clock_, options));
  TY_EXPECT_ERROR(table->Append(*rows).status(), StatusCode::kIOError, "no space left");
  if (old_tmpdir) {
    ::setenv("TMPDIR", restore.c_str(), 1);
  } else {
    ::unsetenv("TMPDIR");
  }

  EXPECT_GE(store.puts, 3);
  TY_ASSERT_OK_AND_ASSIGN(TableInfo info, table->Describe());
  EXPECT_EQ(info.version, 0);
  std::vector<std::string> left;
  for (const auto& e : fs::recursive_directory_iterator(dir_)) {
    if (e.is_regular_file() && e.path().extension() == ".parquet") left.push_back(e.path());
  }
  EXPECT_TRUE(left.empty()) << left.front();
}

}  // namespace
}  // namespace trainyard::tables
