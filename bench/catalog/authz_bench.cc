// Authorization decisions on a deep catalog: 10,000 tables (100 schemas x 100 tables in one
// catalog), 1,000 groups in 200 chains nested 5 deep, a user in 10 chains (50 groups), grants
// to groups at every level. Times CatalogService::Authorize (name lookup, the caller's groups,
// the decision and the audit enqueue), one call at a time, and prints p50/p99 per decision
// and one JSON line per figure.
//
// Usage: catalog_authz_bench [--quick]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "trainyard/catalog/catalog_service.h"
#include "trainyard/identity/identity_service.h"

namespace {

using namespace trainyard;
using catalog::Privilege;
using catalog::SecurableType;

void Check(const Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, s.ToString().c_str());
    std::exit(1);
  }
}
template <typename T>
void Check(const Result<T>& r, const char* what) {
  Check(r.ok() ? Status::Ok() : r.status(), what);
}

struct Percentiles {
  double p50_us, p99_us;
};

Percentiles Summarize(std::vector<double>& ns) {
  std::sort(ns.begin(), ns.end());
  return {ns[ns.size() / 2] / 1000.0, ns[ns.size() * 99 / 100] / 1000.0};
}

void Grant(catalog::CatalogService& c, const identity::Principal& admin, SecurableType type,
           const std::string& name, const std::string& principal, std::vector<Privilege> add) {
  Check(c.UpdatePermissions(admin, type, name, {{principal, add, {}}}), "grant");
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  const int schemas = 100, tables_per_schema = 100, chains = 200, depth = 5;
  const int iterations = quick ? 50000 : 500000;
  auto db = std::move(store::OpenDatabase({.url = ":memory:"})).value();
  auto migrations = identity::IdentityService::Migrations();
  for (auto& m : catalog::CatalogService::Migrations()) migrations.push_back(m);
  Check(store::ApplyMigrations(*db, migrations), "migrations");
  SystemClock clock;
  SeededRandom random(1);
  identity::IdentityService ids(*db, clock, random);
  catalog::CatalogService cat(*db, ids, clock, random, {"/tmp/managed"});
  Check(cat.Init(), "init");
  const identity::Principal admin = identity::Principal::System();
  Check(ids.CreateUser(admin, {.name = "reader"}), "user");
  // 200 chains g<c>_0 in g<c>_1 in ... g<c>_4; the reader is in g<c>_0 for 10 chains.
  for (int c = 0; c < chains; ++c) {
    for (int d = 0; d < depth; ++d) {
      Check(ids.CreateGroup(admin, "g" + std::to_string(c) + "_" + std::to_string(d)), "group");
      if (d > 0) {
        Check(ids.AddGroupMember(admin, "g" + std::to_string(c) + "_" + std::to_string(d),
                                 "g" + std::to_string(c) + "_" + std::to_string(d - 1)),
              "member");
      }
    }
    if (c % 20 == 0)
      Check(ids.AddGroupMember(admin, "g" + std::to_string(c) + "_0", "reader"), "m");
  }
  Check(cat.CreateCatalog(admin, {.name = "main"}), "catalog");
  Grant(cat, admin, SecurableType::kCatalog, "main", "g0_4", {Privilege::kUseCatalog});
  for (int s = 0; s < schemas; ++s) {
    const std::string schema = "s" + std::to_string(s);
    Check(cat.CreateSchema(admin, {.catalog_name = "main", .name = schema}), "schema");
    Grant(cat, admin, SecurableType::kSchema, "main." + schema,
          "g" + std::to_string((s * 7) % chains) + "_3", {Privilege::kUseSchema});
    Grant(cat, admin, SecurableType::kSchema, "main." + schema, "g20_2", {Privilege::kUseSchema});
    for (int t = 0; t < tables_per_schema; ++t) {
      const std::string table = "t" + std::to_string(t);
      Check(cat.CreateTable(admin, {.catalog_name = "main",
                                    .schema_name = schema,
                                    .name = table,
                                    .columns = {{.name = "x", .type_text = "int"}}}),
            "table");
      if (t % 3 == 0) {
        Grant(cat, admin, SecurableType::kTable, "main." + schema + "." + table,
              "g" + std::to_string((s + t) % chains) + "_1", {Privilege::kSelect});
      }
    }
    if (s % 2 == 0) {
      Grant(cat, admin, SecurableType::kSchema, "main." + schema, "g40_4", {Privilege::kSelect});
    }
  }
  ids.FlushAuditForTest();
  const identity::Principal reader{"reader", false, "", ""};
  std::vector<std::string> names;
  for (int i = 0; i < schemas * tables_per_schema; ++i) {
    names.push_back("main.s" + std::to_string((i * 37) % schemas) + ".t" +
                    std::to_string((i * 11) % tables_per_schema));
  }
  std::vector<double> service_ns;
  service_ns.reserve(iterations);
  int64_t allowed = 0;
  for (int i = 0; i < iterations; ++i) {
    const auto start = std::chrono::steady_clock::now();
    Status s =
        cat.Authorize(reader, Privilege::kSelect, SecurableType::kTable, names[i % names.size()]);
    const auto end = std::chrono::steady_clock::now();
    allowed += s.ok();
    service_ns.push_back(std::chrono::duration<double, std::nano>(end - start).count());
    if (i % 4096 == 4095) ids.FlushAuditForTest();  // keep the audit queue bounded
  }
  ids.FlushAuditForTest();
  Percentiles service = Summarize(service_ns);
  std::printf(
      "authorize (service, with audit enqueue): p50 %.2f us, p99 %.2f us, %lld of %d "
      "allowed\n",
      service.p50_us, service.p99_us, static_cast<long long>(allowed), iterations);
  std::printf(
      "{\"bench\": \"catalog_authorize_p99\", \"value\": %.3f, \"unit\": \"us\", \"anchor\": "
      "\"target (Unity Catalog OSS's Java server is not on the package registries)\", "
      "\"anchor_value\": 10.0, \"ratio\": %.2f, \"target\": \"< 10 us p99\"}\n",
      service.p99_us, 10.0 / service.p99_us);
  std::printf(
      "{\"bench\": \"catalog_authorize_p50\", \"value\": %.3f, \"unit\": \"us\", "
      "\"anchor\": \"target\", \"anchor_value\": 10.0, \"ratio\": %.2f, \"target\": "
      "\"< 10 us p99\"}\n",
      service.p50_us, 10.0 / service.p50_us);
  return allowed > 0 && allowed < iterations ? 0 : 1;  // both outcomes must occur
}
