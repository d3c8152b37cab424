// DeltaTable on S3 (moto's server, docs/decisions/0011): the same table lifecycle as on a local
// directory — partitioned writes, delete/update, schema evolution, checkpoints, time travel,
// history and vacuum — through the S3 BlobStore.
#include <arrow/compute/api.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "trainyard/blob/s3_blob_store.h"
#include "trainyard/common/clock.h"
#include "trainyard/tables/table.h"
#include "trainyard/testing/moto_s3.h"
#include "trainyard/testing/status_matchers.h"

namespace trainyard::tables {
namespace {

Result<std::unique_ptr<blob::BlobStore>> OpenMoto(const std::string& prefix) {
  const testing::MotoS3& moto = testing::MotoS3::Get();
  if (!moto.ok()) return Status::Unavailable(moto.error());
  blob::S3Config c;
  c.endpoint = moto.endpoint();
  c.region = moto.region();
  c.bucket = moto.bucket();
  c.prefix = prefix;
  c.credentials = {moto.access_key_id(), moto.secret_access_key(), ""};
  c.retry_base_millis = 1;
  c.retry_max_millis = 20;
  c.cache_dir = testing::MotoS3::TempDir("table-cache");
  return blob::OpenS3BlobStore(std::move(c));
}

std::shared_ptr<arrow::Table> Rows(int64_t first, int64_t n) {
  arrow::Int64Builder ids;
  arrow::StringBuilder lang;
  for (int64_t i = first; i < first + n; ++i) {
    EXPECT_TRUE(ids.Append(i).ok());
    EXPECT_TRUE(lang.Append(i % 2 ? "de" : "en").ok());
  }
  return arrow::Table::Make(
      arrow::schema({arrow::field("id", arrow::int64()), arrow::field("lang", arrow::utf8())}),
      {*ids.Finish(), *lang.Finish()});
}

int64_t SumIds(const std::shared_ptr<arrow::Table>& t) {
  auto sum = arrow::compute::Sum(t->GetColumnByName("id")).ValueOrDie();
  return std::static_pointer_cast<arrow::Int64Scalar>(sum.scalar())->value;
}

TEST(DeltaTableS3Test, LifecycleOnS3) {
  // A fresh prefix per run: moto lives for the whole test process (--gtest_repeat included).
  static int run = 0;
  std::string prefix = "tables-life-" + std::to_string(::getpid()) + "-" + std::to_string(run++);
  TY_ASSERT_OK_AND_ASSIGN(auto store, OpenMoto(prefix));
  FakeClock clock(SystemClock().NowMillis());
  CreateTableRequest create;
  create.schema = Rows(0, 0)->schema();
  create.partition_columns = {"lang"};
  create.properties = {{"delta.checkpointInterval", "2"}};
  TY_ASSERT_OK_AND_ASSIGN(auto table, DeltaTable::Create(*store, "main/t", clock, create));
  TY_ASSERT_OK(table->Append(*Rows(0, 10)).status());                 // v1
  TY_ASSERT_OK(table->Append(*Rows(10, 10)).status());                // v2, checkpoint
  TY_ASSERT_OK(table->Delete(*Predicate::Parse("id < 5")).status());  // v3
  TY_ASSERT_OK(table->Update(*Predicate::Parse("id = 19"), {{"id", Literal(int64_t{100})}})
                   .status());  // v4, checkpoint
  TY_ASSERT_OK(table->AddColumns({arrow::field("note", arrow::utf8())}).status());  // v5
  TY_ASSERT_OK_AND_ASSIGN(
      auto exists, store->Exists("main/t/_delta_log/00000000000000000004.checkpoint.parquet"));
  EXPECT_TRUE(exists);

  TY_ASSERT_OK_AND_ASSIGN(auto other_store, OpenMoto(prefix));
  TY_ASSERT_OK_AND_ASSIGN(auto reopened, DeltaTable::Open(*other_store, "main/t", clock));
  TY_ASSERT_OK_AND_ASSIGN(auto rows, reopened->ReadAll({}));
  EXPECT_EQ(rows->num_rows(), 15);
  EXPECT_EQ(rows->num_columns(), 3);
  EXPECT_EQ(SumIds(rows), (190 - 10) - 19 + 100);  // 5..18 and 100
  ReadOptions v2;
  v2.at.version = 2;
  TY_ASSERT_OK_AND_ASSIGN(rows, reopened->ReadAll(v2));
  EXPECT_EQ(SumIds(rows), 190);
  ReadOptions de;
  de.filter = *Predicate::Parse("lang = 'de'");
  TY_ASSERT_OK_AND_ASSIGN(rows, reopened->ReadAll(de));
  EXPECT_EQ(rows->num_rows(), 8);
  TY_ASSERT_OK_AND_ASSIGN(auto history, reopened->History());
  ASSERT_EQ(history.size(), 6u);
  EXPECT_EQ(history[0].operation, "ADD COLUMNS");

  // Files the delete and update replaced go once the retention has passed.
  clock.AdvanceMillis(8 * 86'400'000LL);
  TY_ASSERT_OK_AND_ASSIGN(VacuumResult vacuumed, reopened->Vacuum({}));
  EXPECT_EQ(vacuumed.deleted.size(), 3u);  // both v1 files (delete), v2's lang=de (update)
  TY_ASSERT_OK_AND_ASSIGN(rows, reopened->ReadAll({}));
  EXPECT_EQ(rows->num_rows(), 15);
}

}  // namespace
}  // namespace trainyard::tables
