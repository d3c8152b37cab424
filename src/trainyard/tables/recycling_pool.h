// RecyclingPool: an arrow::MemoryPool that keeps large freed buffers and hands them out again,
// for the Parquet scan. Decoding a batch of long strings allocates tens of megabytes (the
// decompressed pages, the column's string data, grown by reallocation); from the default pool
// every such buffer is fresh memory that the kernel faults in and zeroes page by page, which
// cost a third of a scan's CPU time. Buffers from this pool are memory a previous batch already
// touched.
//
// Blocks of at least kMinRecycled bytes are rounded up to a size class (8 per power of two) and,
// when freed, kept up to `cache_bytes` in all (the oldest given back to the underlying pool
// first); an allocation takes the smallest kept block that fits and is at most twice its class.
// Smaller blocks, and blocks with more than 64-byte alignment, go straight to the underlying
// pool. A reallocation within the block's class keeps the block. Thread-safe.
//
// A buffer remembers its pool by address, so a pool must outlive every buffer it allocated:
// the scan uses the process-wide ScanMemoryPool(), which is never destroyed.
#pragma once

#include <arrow/memory_pool.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <unordered_map>

#include "trainyard/common/mutex.h"

namespace trainyard::tables {

class RecyclingPool : public arrow::MemoryPool {
 public:
  static constexpr int64_t kMinRecycled = int64_t{1} << 20;

  RecyclingPool(arrow::MemoryPool* underlying, int64_t cache_bytes);
  ~RecyclingPool() override;  // gives the kept blocks back; live ones must be freed before

  using arrow::MemoryPool::Allocate;
  using arrow::MemoryPool::Free;
  using arrow::MemoryPool::Reallocate;
  arrow::Status Allocate(int64_t size, int64_t alignment, uint8_t** out) override;
  arrow::Status Reallocate(int64_t old_size, int64_t new_size, int64_t alignment,
                           uint8_t** ptr) override;
  void Free(uint8_t* buffer, int64_t size, int64_t alignment) override;
  // Gives every kept block back to the underlying pool.
  void ReleaseUnused() override;

  int64_t bytes_allocated() const override { return bytes_allocated_.load(); }
  int64_t max_memory() const override { return max_memory_.load(); }
  int64_t total_bytes_allocated() const override { return total_bytes_allocated_.load(); }
  int64_t num_allocations() const override { return num_allocations_.load(); }
  std::string backend_name() const override { return "recycling:" + underlying_->backend_name(); }

  // For tests and measurements: blocks handed out again instead of allocated, and bytes kept.
  int64_t reused() const { return reused_.load(); }
  int64_t cached_bytes() const;

  // The size class of a recycled block of `size` bytes (size >= kMinRecycled).
  static int64_t Class(int64_t size);

 private:
  static bool Recycled(int64_t size, int64_t alignment) {
    return size >= kMinRecycled && alignment <= 64;
  }
  // A block of at least `size` bytes (>= kMinRecycled): a kept one or a new one.
  arrow::Status Take(int64_t size, uint8_t** out) TY_EXCLUDES(mu_);
  void Keep(uint8_t* block) TY_EXCLUDES(mu_);
  void Counted(int64_t delta);

  arrow::MemoryPool* const underlying_;
  const int64_t cache_bytes_;
  mutable Mutex mu_;
  std::unordered_map<uint8_t*, int64_t> live_ TY_GUARDED_BY(mu_);  // block -> capacity
  // Kept blocks: by capacity (best fit), and by age (the oldest go first when over the cap).
  std::multimap<int64_t, std::pair<uint64_t, uint8_t*>> kept_ TY_GUARDED_BY(mu_);
  std::map<uint64_t, std::pair<int64_t, uint8_t*>> kept_by_age_ TY_GUARDED_BY(mu_);
  uint64_t next_age_ TY_GUARDED_BY(mu_) = 0;
  int64_t kept_bytes_ TY_GUARDED_BY(mu_) = 0;
  std::atomic<int64_t> bytes_allocated_{0}, max_memory_{0}, total_bytes_allocated_{0},
      num_allocations_{0}, reused_{0};
};

// The pool of the Parquet scan (ScanFiles) and of the writer's row-group encoders
// (DataFileWriter): RecyclingPool over Arrow's default pool, keeping
// up to 512 MiB of freed blocks. Never destroyed.
RecyclingPool* ScanMemoryPool();

}  // namespace trainyard::tables
