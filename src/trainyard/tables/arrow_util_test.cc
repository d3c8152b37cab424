// Arrow C++ and Parquet from the pyarrow wheel link and work: a Parquet file written here
// reads back with the same rows and per-column statistics, and Arrow errors map to ours.
#include "trainyard/tables/arrow_util.h"

#include <arrow/api.h>
#include <arrow/io/file.h>
#include <gtest/gtest.h>
#include <parquet/arrow/reader.h>
#include <parquet/arrow/writer.h>
#include <parquet/statistics.h>

#include <filesystem>

#include "trainyard/testing/status_matchers.h"

namespace trainyard::tables {
namespace {

TEST(ArrowUtilTest, MapsArrowErrorsToOurs) {
  EXPECT_TRUE(FromArrow(arrow::Status::OK(), "x").ok());
  Status s = FromArrow(arrow::Status::Invalid("bad column"), "reading t");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "reading t: bad column");
  EXPECT_EQ(FromArrow(arrow::Status::IOError("disk"), "").code(), StatusCode::kIOError);
  EXPECT_EQ(FromArrow(arrow::Status::OutOfMemory("oom"), "").code(),
            StatusCode::kResourceExhausted);
  EXPECT_EQ(FromArrow(arrow::Status::UnknownError("?"), "").code(), StatusCode::kInternal);
  Result<int> r = FromArrow(arrow::Result<int>(7), "x");
  TY_ASSERT_OK(r.status());
  EXPECT_EQ(r.value(), 7);
}

TEST(ArrowUtilTest, ParquetRoundTripKeepsRowsAndStatistics) {
  arrow::Int64Builder ids;
  arrow::StringBuilder texts;
  for (int64_t i = 0; i < 1000; ++i) {
    ASSERT_TRUE(ids.Append(i * 3).ok());
    ASSERT_TRUE(texts.Append("ticket " + std::to_string(i)).ok());
  }
  auto schema =
      arrow::schema({arrow::field("id", arrow::int64()), arrow::field("text", arrow::utf8())});
  auto table = arrow::Table::Make(schema, {ids.Finish().ValueOrDie(), texts.Finish().ValueOrDie()});
  std::string path = (std::filesystem::temp_directory_path() /
                      ("ty_arrow_util_test_" + std::to_string(::getpid()) + ".parquet"))
                         .string();
  {
    auto out = FromArrow(arrow::io::FileOutputStream::Open(path), "open");
    TY_ASSERT_OK(out.status());
    TY_ASSERT_OK(FromArrow(
        parquet::arrow::WriteTable(*table, arrow::default_memory_pool(), out.value(), 256),
        "write"));
    TY_ASSERT_OK(FromArrow(out.value()->Close(), "close"));
  }
  auto in = FromArrow(arrow::io::ReadableFile::Open(path), "open");
  TY_ASSERT_OK(in.status());
  auto reader =
      FromArrow(parquet::arrow::OpenFile(in.value(), arrow::default_memory_pool()), "open parquet");
  TY_ASSERT_OK(reader.status());
  auto metadata = reader.value()->parquet_reader()->metadata();
  EXPECT_EQ(metadata->num_rows(), 1000);
  EXPECT_EQ(metadata->num_row_groups(), 4);
  auto stats = std::static_pointer_cast<parquet::Int64Statistics>(
      metadata->RowGroup(1)->ColumnChunk(0)->statistics());
  ASSERT_NE(stats, nullptr);
  EXPECT_EQ(stats->min(), 256 * 3);
  EXPECT_EQ(stats->max(), 511 * 3);
  auto back = FromArrow(reader.value()->ReadTable(), "read");
  TY_ASSERT_OK(back.status());
  EXPECT_TRUE(back.value()->Equals(*table));
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace trainyard::tables
