// Concurrent writers of one Delta table on S3 with no lock service (docs/decisions/0011): each
// writer has its own S3 client and its own DeltaTable, as separate processes would, and they
// append at the same time against moto's S3 server. Every commit must land exactly once, the
// versions must be contiguous, and every appended row must be read back exactly once.
#include <gtest/gtest.h>

#include <atomic>
#include <iostream>
#include <latch>
#include <set>
#include <string>
#include <thread>
#include <vector>

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
  c.cache_dir = testing::MotoS3::TempDir("cache");
  return blob::OpenS3BlobStore(std::move(c));
}

std::shared_ptr<arrow::Schema> RowSchema() {
  return arrow::schema(
      {arrow::field("writer", arrow::int64(), false), arrow::field("seq", arrow::int64(), false)});
}

std::shared_ptr<arrow::Table> OneRow(int64_t writer, int64_t seq) {
  arrow::Int64Builder w, s;
  EXPECT_TRUE(w.Append(writer).ok());
  EXPECT_TRUE(s.Append(seq).ok());
  return arrow::Table::Make(RowSchema(), {*w.Finish(), *s.Finish()});
}

TEST(DeltaTableS3RaceTest, ConcurrentAppendersLoseNoCommit) {
  constexpr int kWriters = 4, kCommits = 5;
  // A fresh prefix per run: moto lives for the whole test process (--gtest_repeat included).
  static int run = 0;
  std::string prefix = "tables-race-" + std::to_string(::getpid()) + "-" + std::to_string(run++);
  SystemClock clock;
  TableOptions options;
  options.max_commit_attempts = 4 * kWriters * kCommits;
  {
    TY_ASSERT_OK_AND_ASSIGN(auto store, OpenMoto(prefix));
    CreateTableRequest create;
    create.schema = RowSchema();
    TY_ASSERT_OK(DeltaTable::Create(*store, "t", clock, create, options).status());
  }
  std::vector<std::unique_ptr<blob::BlobStore>> stores;
  std::vector<std::unique_ptr<DeltaTable>> tables;
  for (int w = 0; w < kWriters; ++w) {
    TY_ASSERT_OK_AND_ASSIGN(auto store, OpenMoto(prefix));
    TY_ASSERT_OK_AND_ASSIGN(auto table, DeltaTable::Open(*store, "t", clock, options));
    stores.push_back(std::move(store));
    tables.push_back(std::move(table));
  }
  std::vector<std::vector<int64_t>> versions(kWriters);
  std::vector<std::string> errors(kWriters);
  std::atomic<int> retries{0};  // commits that lost a race and went again
  std::latch start(kWriters);
  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      start.arrive_and_wait();
      for (int c = 0; c < kCommits; ++c) {
        Result<CommitResult> r = tables[static_cast<size_t>(w)]->Append(*OneRow(w, c));
        if (!r.ok()) {
          errors[static_cast<size_t>(w)] = r.status().ToString();
          return;
        }
        versions[static_cast<size_t>(w)].push_back(r->version);
        retries += r->attempts - 1;
      }
    });
  }
  for (auto& t : threads) t.join();
  std::set<int64_t> all;
  for (int w = 0; w < kWriters; ++w) {
    ASSERT_EQ(errors[static_cast<size_t>(w)], "") << "writer " << w;
    for (int64_t v : versions[static_cast<size_t>(w)]) {
      EXPECT_TRUE(all.insert(v).second) << "version " << v << " was committed twice";
    }
  }
  std::cout << "commits retried after losing a race: " << retries << "\n";
  // Version 0 created the table; the appends are versions 1..N, with no gap.
  ASSERT_EQ(all.size(), static_cast<size_t>(kWriters * kCommits));
  EXPECT_EQ(*all.begin(), 1);
  EXPECT_EQ(*all.rbegin(), kWriters * kCommits);

  // A fresh reader sees every row exactly once.
  TY_ASSERT_OK_AND_ASSIGN(auto store, OpenMoto(prefix));
  TY_ASSERT_OK_AND_ASSIGN(auto table, DeltaTable::Open(*store, "t", clock, options));
  TY_ASSERT_OK_AND_ASSIGN(int64_t latest, table->LatestVersion());
  EXPECT_EQ(latest, kWriters * kCommits);
  TY_ASSERT_OK_AND_ASSIGN(auto rows, table->ReadAll(ReadOptions{}));
  ASSERT_EQ(rows->num_rows(), kWriters * kCommits);
  auto batch = rows->CombineChunksToBatch().ValueOrDie();
  auto writer = std::static_pointer_cast<arrow::Int64Array>(batch->GetColumnByName("writer"));
  auto seq = std::static_pointer_cast<arrow::Int64Array>(batch->GetColumnByName("seq"));
  std::set<std::pair<int64_t, int64_t>> seen;
  for (int64_t i = 0; i < batch->num_rows(); ++i) {
    EXPECT_TRUE(seen.emplace(writer->Value(i), seq->Value(i)).second)
        << "row (" << writer->Value(i) << ", " << seq->Value(i) << ") was read twice";
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(kWriters * kCommits));
  TY_ASSERT_OK_AND_ASSIGN(auto history, table->History());
  EXPECT_EQ(history.size(), static_cast<size_t>(kWriters * kCommits + 1));
}

}  // namespace
}  // namespace trainyard::tables
