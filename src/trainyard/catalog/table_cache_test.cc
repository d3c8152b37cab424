#include "trainyard/catalog/table_cache.h"

#include <gtest/gtest.h>

namespace trainyard::catalog {
namespace {

std::shared_ptr<const TableInfo> Table(const std::string& id, const std::string& comment = "") {
  TableInfo t;
  t.id = id;
  t.full_name = "main.s." + id;
  t.comment = comment;
  t.columns.push_back(ColumnInfo{.name = "c", .type_text = "string"});
  return std::make_shared<const TableInfo>(std::move(t));
}

TEST(TableCacheTest, KeepsWhatWasPutAndForgetsWhatWasInvalidated) {
  TableCache cache;
  EXPECT_EQ(cache.Get("a"), nullptr);
  cache.Put(cache.Generation(), Table("a", "one"));
  cache.Put(cache.Generation(), Table("b"));
  ASSERT_NE(cache.Get("a"), nullptr);
  EXPECT_EQ(cache.Get("a")->comment, "one");
  cache.Put(cache.Generation(), Table("a", "two"));  // replaced
  EXPECT_EQ(cache.Get("a")->comment, "two");
  cache.Invalidate({"a"});
  EXPECT_EQ(cache.Get("a"), nullptr);
  EXPECT_NE(cache.Get("b"), nullptr);
  cache.InvalidateAll();
  EXPECT_EQ(cache.Get("b"), nullptr);
  EXPECT_EQ(cache.SizeForTest(), 0u);
}

TEST(TableCacheTest, DropsALoadThatRacedAnInvalidation) {
  TableCache cache;
  // A reader takes the generation, reads the old row; a writer commits and invalidates; the
  // reader's Put must not bring the old row back.
  const uint64_t before = cache.Generation();
  cache.Invalidate({"a"});
  cache.Put(before, Table("a", "stale"));
  EXPECT_EQ(cache.Get("a"), nullptr);
  // Even when the invalidation was of another table, or of everything.
  const uint64_t again = cache.Generation();
  cache.InvalidateAll();
  cache.Put(again, Table("a", "stale"));
  EXPECT_EQ(cache.Get("a"), nullptr);
  cache.Put(cache.Generation(), Table("a", "fresh"));
  EXPECT_EQ(cache.Get("a")->comment, "fresh");
}

TEST(TableCacheTest, StaysWithinItsBudget) {
  const size_t one = TableCache::EstimateBytes(*Table("t0"));
  TableCache cache(one * 3 + one / 2);
  for (int i = 0; i < 10; ++i) cache.Put(cache.Generation(), Table("t" + std::to_string(i)));
  EXPECT_EQ(cache.SizeForTest(), 3u);
  EXPECT_NE(cache.Get("t9"), nullptr);  // the newest is never the one dropped
  // A table larger than the whole budget is not kept at all.
  TableInfo big = *Table("big");
  big.comment.assign(one * 4, 'x');
  cache.Put(cache.Generation(), std::make_shared<const TableInfo>(big));
  EXPECT_EQ(cache.Get("big"), nullptr);
  EXPECT_NE(cache.Get("t9"), nullptr);
}

}  // namespace
}  // namespace trainyard::catalog
