// TableCache: tables as CatalogService reads them from its store (the row's fields, columns,
// row filter and column masks; not yet presented to a reader), by id, so that reading a
// table it has read before needs no store read.
//
// Consistency: CatalogService invalidates an entry after every write that changes what it
// holds (the table's update, rename, deletion, a change of its row filter or masks; a
// rename of a catalog or schema invalidates everything, since a table carries its parents'
// names) and before answering that write. A load that raced a write must not be kept: take
// Generation() before reading the store and pass it to Put(), which drops the table when
// anything was invalidated since. Like AccessIndex, the cache assumes this process is the
// only writer of the catalog's tables (see catalog_service.h).
//
// Bounded by an estimate of the bytes it holds; over the budget, arbitrary entries are
// dropped. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "trainyard/catalog/catalog_types.h"
#include "trainyard/common/mutex.h"

namespace trainyard::catalog {

class TableCache {
 public:
  static constexpr size_t kDefaultBudgetBytes = size_t{64} << 20;

  explicit TableCache(size_t budget_bytes = kDefaultBudgetBytes) : budget_bytes_(budget_bytes) {}
  TableCache(const TableCache&) = delete;
  TableCache& operator=(const TableCache&) = delete;

  // The table with id `id`, or null when it is not cached.
  std::shared_ptr<const TableInfo> Get(const std::string& id) const TY_EXCLUDES(mu_);
  // Take before reading a table from the store; pass to Put.
  uint64_t Generation() const TY_EXCLUDES(mu_);
  // Keeps `table` unless an invalidation happened since `generation` was taken, or it alone
  // is over the budget.
  void Put(uint64_t generation, std::shared_ptr<const TableInfo> table) TY_EXCLUDES(mu_);
  void Invalidate(const std::vector<std::string>& ids) TY_EXCLUDES(mu_);
  void InvalidateAll() TY_EXCLUDES(mu_);

  // An estimate of the memory a table takes (its strings and their containers).
  static size_t EstimateBytes(const TableInfo& table);
  size_t SizeForTest() const TY_EXCLUDES(mu_);

 private:
  struct Entry {
    std::shared_ptr<const TableInfo> table;
    size_t bytes = 0;
  };

  const size_t budget_bytes_;
  mutable Mutex mu_;
  uint64_t generation_ TY_GUARDED_BY(mu_) = 0;
  size_t bytes_ TY_GUARDED_BY(mu_) = 0;
  std::unordered_map<std::string, Entry> entries_ TY_GUARDED_BY(mu_);
};

}  // namespace trainyard::catalog
