#include "trainyard/catalog/table_cache.h"

namespace trainyard::catalog {

std::shared_ptr<const TableInfo> TableCache::Get(const std::string& id) const {
  MutexLock lock(mu_);
  auto it = entries_.find(id);
  return it == entries_.end() ? nullptr : it->second.table;
}

uint64_t TableCache::Generation() const {
  MutexLock lock(mu_);
  return generation_;
}

void TableCache::Put(uint64_t generation, std::shared_ptr<const TableInfo> table) {
  const size_t bytes = EstimateBytes(*table);
  if (bytes > budget_bytes_) return;
  MutexLock lock(mu_);
  if (generation != generation_) return;
  auto [it, inserted] = entries_.try_emplace(table->id);
  if (!inserted) bytes_ -= it->second.bytes;
  it->second = Entry{std::move(table), bytes};
  bytes_ += bytes;
  while (bytes_ > budget_bytes_) {
    auto victim = entries_.begin();
    if (victim == it) ++victim;
    bytes_ -= victim->second.bytes;
    entries_.erase(victim);
  }
}

void TableCache::Invalidate(const std::vector<std::string>& ids) {
  MutexLock lock(mu_);
  ++generation_;
  for (const auto& id : ids) {
    auto it = entries_.find(id);
    if (it == entries_.end()) continue;
    bytes_ -= it->second.bytes;
    entries_.erase(it);
  }
}

void TableCache::InvalidateAll() {
  MutexLock lock(mu_);
  ++generation_;
  entries_.clear();
  bytes_ = 0;
}

size_t TableCache::EstimateBytes(const TableInfo& t) {
  // Each string costs its characters and its node in the containers around it.
  constexpr size_t kPerString = 32;
  size_t n = sizeof(TableInfo) + 2 * sizeof(Entry) + 2 * t.id.size();
  for (const std::string* s :
       {&t.name, &t.full_name, &t.catalog_name, &t.schema_name, &t.owner, &t.comment,
        &t.storage_location, &t.created_by, &t.updated_by, &t.data_source_format}) {
    n += s->size();
  }
  for (const auto& [k, v] : t.properties) n += k.size() + v.size() + 2 * kPerString + 32;
  for (const ColumnInfo& c : t.columns) {
    n += sizeof(ColumnInfo) + c.name.size() + c.type_text.size() + c.type_name.size() +
         c.type_json.size() + c.comment.size();
    if (c.mask) {
      for (const auto& e : c.mask->except) n += e.size() + kPerString;
      n += c.mask->updated_by.size();
    }
  }
  if (t.row_filter) {
    n += sizeof(RowFilterInfo) + t.row_filter->predicate.size() + t.row_filter->updated_by.size();
    for (const auto& c : t.row_filter->columns) n += c.size() + kPerString;
  }
  return n;
}

size_t TableCache::SizeForTest() const {
  MutexLock lock(mu_);
  return entries_.size();
}

}  // namespace trainyard::catalog
