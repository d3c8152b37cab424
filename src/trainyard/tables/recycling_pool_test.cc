#include "trainyard/tables/recycling_pool.h"

#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <vector>

namespace trainyard::tables {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

TEST(RecyclingPoolTest, SizeClassesAreEighthsOfAPowerOfTwo) {
  EXPECT_EQ(RecyclingPool::Class(kMiB), kMiB);
  EXPECT_EQ(RecyclingPool::Class(kMiB + 1), kMiB + kMiB / 8);
  EXPECT_EQ(RecyclingPool::Class(3 * kMiB), 3 * kMiB);
  EXPECT_EQ(RecyclingPool::Class(100 * kMiB + 5), 104 * kMiB);
  for (int64_t size = kMiB; size < 300 * kMiB; size += 7 * kMiB + 12345) {
    int64_t c = RecyclingPool::Class(size);
    EXPECT_GE(c, size);
    EXPECT_LE(c, size + size / 8);
  }
}

// A freed large block is handed out again, with what was written into it, for a request of
// the same class or a somewhat smaller one; small blocks are not kept.
TEST(RecyclingPoolTest, FreedLargeBlocksAreHandedOutAgain) {
  RecyclingPool pool(arrow::system_memory_pool(), 64 * kMiB);
  uint8_t* a = nullptr;
  ASSERT_TRUE(pool.Allocate(5 * kMiB, 64, &a).ok());
  std::memset(a, 0x5a, 5 * kMiB);
  EXPECT_EQ(pool.bytes_allocated(), 5 * kMiB);
  pool.Free(a, 5 * kMiB, 64);
  EXPECT_EQ(pool.bytes_allocated(), 0);
  EXPECT_EQ(pool.cached_bytes(), 5 * kMiB);

  uint8_t* b = nullptr;
  ASSERT_TRUE(pool.Allocate(4 * kMiB + 3, 64, &b).ok());
  EXPECT_EQ(b, a);
  EXPECT_EQ(b[4 * kMiB], 0x5a);
  EXPECT_EQ(pool.reused(), 1);
  EXPECT_EQ(pool.cached_bytes(), 0);

  // Not a block more than twice the class asked for: a small request gets its own.
  uint8_t* c = nullptr;
  pool.Free(b, 4 * kMiB + 3, 64);
  ASSERT_TRUE(pool.Allocate(kMiB, 64, &c).ok());
  EXPECT_NE(c, a);
  pool.Free(c, kMiB, 64);

  uint8_t* small = nullptr;
  ASSERT_TRUE(pool.Allocate(1000, 64, &small).ok());
  pool.Free(small, 1000, 64);
  EXPECT_EQ(pool.cached_bytes(), 5 * kMiB + kMiB);
  pool.ReleaseUnused();
  EXPECT_EQ(pool.cached_bytes(), 0);
  EXPECT_EQ(pool.bytes_allocated(), 0);
}

// Growing within the block's class keeps the block; growing past it moves the contents;
// shrinking below the recycled sizes moves them to the underlying pool.
TEST(RecyclingPoolTest, ReallocateKeepsOrMovesTheContents) {
  RecyclingPool pool(arrow::system_memory_pool(), 64 * kMiB);
  uint8_t* p = nullptr;
  ASSERT_TRUE(pool.Allocate(kMiB + 1, 64, &p).ok());
  for (int64_t i = 0; i < kMiB + 1; ++i) p[i] = static_cast<uint8_t>(i * 7);
  uint8_t* before = p;
  ASSERT_TRUE(pool.Reallocate(kMiB + 1, kMiB + kMiB / 8, 64, &p).ok());
  EXPECT_EQ(p, before);
  ASSERT_TRUE(pool.Reallocate(kMiB + kMiB / 8, 10 * kMiB, 64, &p).ok());
  EXPECT_NE(p, before);
  for (int64_t i = 0; i < kMiB + 1; ++i) ASSERT_EQ(p[i], static_cast<uint8_t>(i * 7)) << i;
  EXPECT_EQ(pool.bytes_allocated(), 10 * kMiB);
  ASSERT_TRUE(pool.Reallocate(10 * kMiB, 4096, 64, &p).ok());
  for (int64_t i = 0; i < 4096; ++i) ASSERT_EQ(p[i], static_cast<uint8_t>(i * 7)) << i;
  EXPECT_EQ(pool.bytes_allocated(), 4096);
  pool.Free(p, 4096, 64);
  EXPECT_EQ(pool.bytes_allocated(), 0);
  EXPECT_EQ(pool.cached_bytes(), RecyclingPool::Class(kMiB + 1) + 10 * kMiB);
}

// What is kept stays under the cap: the oldest kept blocks go first.
TEST(RecyclingPoolTest, KeepsAtMostItsCap) {
  RecyclingPool pool(arrow::system_memory_pool(), 8 * kMiB);
  std::vector<uint8_t*> blocks(5);
  for (auto& b : blocks) ASSERT_TRUE(pool.Allocate(3 * kMiB, 64, &b).ok());
  for (auto* b : blocks) pool.Free(b, 3 * kMiB, 64);
  EXPECT_EQ(pool.cached_bytes(), 6 * kMiB);
  uint8_t* again = nullptr;
  ASSERT_TRUE(pool.Allocate(3 * kMiB, 64, &again).ok());
  EXPECT_TRUE(again == blocks[3] || again == blocks[4]);
  pool.Free(again, 3 * kMiB, 64);
  // Bigger than the cap: never kept.
  uint8_t* huge = nullptr;
  ASSERT_TRUE(pool.Allocate(16 * kMiB, 64, &huge).ok());
  pool.Free(huge, 16 * kMiB, 64);
  EXPECT_EQ(pool.cached_bytes(), 6 * kMiB);
}

TEST(RecyclingPoolTest, ConcurrentUseKeepsEveryBlockIntact) {
  RecyclingPool pool(arrow::system_memory_pool(), 32 * kMiB);
  auto work = [&pool](uint8_t tag) {
    for (int i = 0; i < 200; ++i) {
      int64_t size = kMiB + (i % 5) * kMiB / 3;
      uint8_t* p = nullptr;
      ASSERT_TRUE(pool.Allocate(size, 64, &p).ok());
      std::memset(p, tag, static_cast<size_t>(size));
      ASSERT_TRUE(pool.Reallocate(size, 2 * size, 64, &p).ok());
      ASSERT_EQ(p[0], tag);
      ASSERT_EQ(p[size - 1], tag);
      pool.Free(p, 2 * size, 64);
    }
  };
  std::thread t1(work, 1), t2(work, 2);
  t1.join();
  t2.join();
  EXPECT_EQ(pool.bytes_allocated(), 0);
  EXPECT_LE(pool.cached_bytes(), 32 * kMiB);
  EXPECT_GT(pool.reused(), 0);
}

}  // namespace
}  // namespace trainyard::tables
