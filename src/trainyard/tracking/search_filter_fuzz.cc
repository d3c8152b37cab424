// libFuzzer target for search_filter: any input must parse or fail with InvalidArgument, never
// crash or hang, and whatever compiles must be SQL that SQLite accepts with exactly one bound
// value per placeholder.
//
// The input is one filter, or order_by clauses after a "\n--\n" separator, one per line.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "trainyard/common/strings.h"
#include "trainyard/store/database.h"
#include "trainyard/tracking/schema.h"
#include "trainyard/tracking/search_filter.h"

namespace trainyard::tracking {
namespace {

struct Search {
  const char* select;
  Result<SqlFragment> (*filter)(const std::vector<Comparison>&);
  Result<SqlFragment> (*order)(const std::vector<OrderBy>&);
};

constexpr Search kSearches[] = {
    {"SELECT COUNT(*) FROM runs", CompileRunFilter, CompileRunOrderBy},
    {"SELECT COUNT(*) FROM experiments", CompileExperimentFilter, CompileExperimentOrderBy},
    {"SELECT COUNT(*) FROM logged_models", CompileLoggedModelFilter, CompileLoggedModelOrderBy},
    {"SELECT COUNT(*) FROM registered_models", CompileRegisteredModelFilter,
     CompileRegisteredModelOrderBy},
    {"SELECT COUNT(*) FROM model_versions", CompileModelVersionFilter, CompileModelVersionOrderBy},
};

[[noreturn]] void Fail(std::string_view what, const Status& s) {
  std::fprintf(stderr, "%.*s: %s\n", static_cast<int>(what.size()), what.data(),
               s.ToString().c_str());
  std::abort();
}

store::Database& Db() {
  static store::Database* db = [] {
    auto opened = store::OpenDatabase({.url = ":memory:"});
    if (!opened.ok()) Fail("open", opened.status());
    store::Database* d = opened->release();
    Status s = store::ApplyMigrations(*d, TrackingMigrations());
    if (!s.ok()) Fail("migrate", s);
    s = d->Write([](store::Transaction& tx) -> Status {
      for (const char* sql :
           {"CREATE TABLE registered_models (name TEXT PRIMARY KEY, creation_timestamp BIGINT, "
            "last_updated_timestamp BIGINT, description TEXT)",
            "CREATE TABLE registered_model_tags (name TEXT, key TEXT, value TEXT)",
            "CREATE TABLE model_versions (name TEXT, version BIGINT, run_id TEXT, source TEXT, "
            "status TEXT, current_stage TEXT, creation_timestamp BIGINT, "
            "last_updated_timestamp BIGINT)",
            "CREATE TABLE model_version_tags (name TEXT, version BIGINT, key TEXT, value TEXT)"}) {
        auto r = tx.Exec(sql);
        if (!r.ok()) return r.status();
      }
      return Status::Ok();
    });
    if (!s.ok()) Fail("create registry tables", s);
    return d;
  }();
  return *db;
}

void CheckStatus(const Status& s, std::string_view what) {
  if (!s.ok() && !s.IsInvalidArgument()) Fail(what, s);
}

void Run(const Search& search, const SqlFragment& where, const SqlFragment& order) {
  std::string sql = std::string(search.select) + " WHERE " + where.sql + " ORDER BY " + order.sql;
  std::vector<store::Value> params = where.params;
  params.insert(params.end(), order.params.begin(), order.params.end());
  Status s = Db().Read([&](store::Transaction& tx) -> Status {
    auto rows = tx.Query(sql, params);
    return rows.ok() ? Status::Ok() : rows.status();
  });
  if (!s.ok()) Fail(sql, s);
}

void FuzzOne(std::string_view input) {
  std::string_view filter = input;
  std::vector<OrderBy> order_by;
  if (size_t sep = input.find("\n--\n"); sep != std::string_view::npos) {
    filter = input.substr(0, sep);
    for (const std::string& line : SplitString(input.substr(sep + 4), '\n')) {
      auto o = ParseOrderBy(line);
      CheckStatus(o.status(), "ParseOrderBy");
      if (o.ok()) order_by.push_back(*o);
    }
  }
  CheckStatus(ParseOrderBy(input).status(), "ParseOrderBy");

  auto parsed = ParseSearchFilter(filter);
  CheckStatus(parsed.status(), "ParseSearchFilter");
  std::vector<Comparison> comparisons;
  if (parsed.ok()) comparisons = *parsed;

  for (const Search& search : kSearches) {
    auto where = search.filter(comparisons);
    CheckStatus(where.status(), "compile filter");
    auto order = search.order(order_by);
    CheckStatus(order.status(), "compile order_by");
    auto no_order = search.order({});
    if (!no_order.ok()) Fail("compile default order_by", no_order.status());
    if (where.ok()) Run(search, *where, order.ok() ? *order : *no_order);
  }
}

}  // namespace
}  // namespace trainyard::tracking

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  trainyard::tracking::FuzzOne(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
