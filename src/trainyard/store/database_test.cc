// The Database contract, run against every backend: SQLite on a temp file and
// PostgreSQL on a real server (a throwaway one started by PostgresUrlForTest).
// Then a few PostgreSQL-only tests of the pool and of its error handling.
#include "trainyard/store/database.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "trainyard/testing/status_matchers.h"
#include "trainyard/testing/test_postgres.h"

namespace trainyard::store {
namespace {

// One statement in its own write transaction.
Status ExecOne(Database& db, const std::string& sql, const std::vector<Value>& params = {}) {
  return db.Write([&](Transaction& tx) -> Status {
    auto r = tx.Exec(sql, params);
    return r.ok() ? Status::Ok() : r.status();
  });
}

// One query in its own read transaction.
Result<Rows> QueryOne(Database& db, const std::string& sql, const std::vector<Value>& params = {}) {
  Rows rows;
  Status s = db.Read([&](Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(rows, tx.Query(sql, params));
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return rows;
}

// The single int64 that `sql` returns; -1 (and a test failure) when it fails.
int64_t QueryInt(Database& db, const std::string& sql, const std::vector<Value>& params = {}) {
  auto rows = QueryOne(db, sql, params);
  EXPECT_TRUE(rows.ok()) << sql << ": " << rows.status().ToString();
  if (!rows.ok() || rows->size() != 1) return -1;
  return (*rows)[0].Int(0);
}

class DatabaseTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "sqlite") {
      std::string pattern =
          (std::filesystem::temp_directory_path() / "trainyard-db-XXXXXX").string();
      ASSERT_NE(mkdtemp(pattern.data()), nullptr);
      dir_ = pattern;
      url_ = "sqlite:" + (dir_ / "metadata.db").string();
    } else {
      auto url = PostgresUrlForTest();
      ASSERT_TRUE(url.ok()) << "PostgreSQL for tests: " << url.status().ToString();
      url_ = *url;
    }
    db_ = Open();
    ASSERT_NE(db_, nullptr);
  }

  void TearDown() override {
    db_.reset();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  // Another handle on the same database (a second process, as far as the
  // database can tell).
  std::unique_ptr<Database> Open(int pool_size = 8) {
    DatabaseOptions options;
    options.url = url_;
    options.pool_size = pool_size;
    auto db = OpenDatabase(options);
    EXPECT_TRUE(db.ok()) << url_ << ": " << db.status().ToString();
    return db.ok() ? std::move(db).value() : nullptr;
  }

  std::filesystem::path dir_;
  std::string url_;
  std::unique_ptr<Database> db_;
};

TEST_P(DatabaseTest, ReportsItsBackend) { EXPECT_EQ(db_->Backend(), GetParam()); }

TEST_P(DatabaseTest, RoundTripsEveryValueKind) {
  TY_ASSERT_OK(ExecOne(*db_,
                       "CREATE TABLE kinds (id TEXT PRIMARY KEY, i BIGINT, n INTEGER, "
                       "d DOUBLE PRECISION, s TEXT)"));
  struct Case {
    std::string id;
    int64_t i;
    int64_t n;
    double d;
    std::string s;
  };
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<Case> cases = {
      {"max", std::numeric_limits<int64_t>::max(), 1, 0.1, ""},
      {"min", std::numeric_limits<int64_t>::min(), 0, -1.0 / 3,
       "h\xC3\xA9llo \xE4\xB8\x96\xE7\x95\x8C \xF0\x9F\x9A\x82"},
      {"edge", -1, 2147483647, 5e-324, "it's \"quoted\", back\\slash,\nnew line, tab\t"},
      {"huge", 9007199254740993, -2147483648LL, 1.7976931348623157e308, "?"},
      {"inf", 0, 0, inf, "x"},
      {"neg_inf", 0, 0, -inf, "y"},
  };
  TY_ASSERT_OK(db_->Write([&](Transaction& tx) -> Status {
    for (const Case& c : cases) {
      TY_ASSIGN_OR_RETURN(int64_t changed,
                          tx.Exec("INSERT INTO kinds (id, i, n, d, s) VALUES (?, ?, ?, ?, ?)",
                                  {c.id, c.i, c.n, c.d, c.s}));
      if (changed != 1) return Status::Internal("insert changed " + std::to_string(changed));
    }
    auto r = tx.Exec("INSERT INTO kinds (id, i, n, d, s) VALUES (?, ?, ?, ?, ?)",
                     {std::string("nulls"), std::monostate{}, std::monostate{}, std::monostate{},
                      std::monostate{}});
    return r.ok() ? Status::Ok() : r.status();
  }));

  auto rows = QueryOne(*db_, "SELECT id, i, n, d, s FROM kinds");
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  ASSERT_EQ(rows->size(), cases.size() + 1);
  std::map<std::string, const Row*> by_id;
  for (const Row& row : *rows) by_id[row.Text(0)] = &row;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.id);
    ASSERT_TRUE(by_id.count(c.id));
    const Row& row = *by_id[c.id];
    ASSERT_EQ(row.size(), 5u);
    for (size_t col = 0; col < 5; ++col) EXPECT_FALSE(row.IsNull(col));
    EXPECT_EQ(row.Int(1), c.i);
    EXPECT_EQ(row.Int(2), c.n);
    EXPECT_EQ(row.Double(3), c.d);  // exactly: the text form must round-trip
    EXPECT_EQ(row.Text(4), c.s);
  }
  const Row& nulls = *by_id["nulls"];
  for (size_t col = 1; col < 5; ++col) EXPECT_TRUE(nulls.IsNull(col)) << col;

  // Bound values compare equal to the stored ones.
  EXPECT_EQ(QueryInt(*db_, "SELECT COUNT(*) FROM kinds WHERE i = ?",
                     {std::numeric_limits<int64_t>::min()}),
            1);
  EXPECT_EQ(QueryInt(*db_, "SELECT COUNT(*) FROM kinds WHERE d = ?", {0.1}), 1);
  EXPECT_EQ(QueryInt(*db_, "SELECT COUNT(*) FROM kinds WHERE s = ?", {std::string()}), 1);
  EXPECT_EQ(QueryInt(*db_, "SELECT COUNT(*) FROM kinds WHERE s IS NULL"), 1);
  EXPECT_EQ(QueryInt(*db_, "SELECT COUNT(*) FROM kinds WHERE n = ?", {int64_t{2147483647}}), 1);
}

TEST_P(DatabaseTest, RoundTripsBinaryBlobs) {
  TY_ASSERT_OK(ExecOne(*db_, "CREATE TABLE blobs (id BIGINT PRIMARY KEY, data BYTEA NOT NULL)"));
  std::string all;  // every byte value, NUL and invalid UTF-8 included
  for (int i = 0; i < 256; ++i) all.push_back(static_cast<char>(i));
  std::string big(300000, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 2654435761u >> 24);
  const std::vector<std::string> blobs = {"", std::string(1, '\0'), all, big};
  for (size_t i = 0; i < blobs.size(); ++i) {
    TY_ASSERT_OK(ExecOne(*db_, "INSERT INTO blobs (id, data) VALUES (?, ?)",
                         {static_cast<int64_t>(i), Blob{blobs[i]}}));
  }
  auto rows = QueryOne(*db_, "SELECT id, data FROM blobs ORDER BY id");
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  ASSERT_EQ(rows->size(), blobs.size());
  for (size_t i = 0; i < blobs.size(); ++i) {
    EXPECT_FALSE((*rows)[i].IsNull(1)) << i;
    EXPECT_EQ((*rows)[i].Bytes(1), blobs[i]) << i;
  }
  // Streamed rows see the same bytes; a blob parameter compares equal in WHERE.
  std::vector<std::string> seen;
  TY_ASSERT_OK(db_->Read([&](Transaction& tx) -> Status {
    return tx.QueryEach("SELECT data FROM blobs WHERE data = ? OR id = ?", {Blob{all}, int64_t{3}},
                        [&](const RowView& row) -> Status {
                          seen.emplace_back(row.Bytes(0));
                          return Status::Ok();
                        });
  }));
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0] == all ? seen[1] : seen[0], big);
}

TEST_P(DatabaseTest, ComparisonsReadAsZeroOrOne) {
  auto rows = QueryOne(*db_, "SELECT 1 = 1, 1 = 2, ? = ?", {int64_t{7}, int64_t{7}});
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].Int(0), 1);
  EXPECT_EQ((*rows)[0].Int(1), 0);
  EXPECT_EQ((*rows)[0].Int(2), 1);
  EXPECT_EQ((*rows)[0].Text(0), "1");
}

TEST_P(DatabaseTest, UpsertsWithOnConflict) {
  TY_ASSERT_OK(
      ExecOne(*db_, "CREATE TABLE kv (k TEXT PRIMARY KEY, v TEXT NOT NULL, hits BIGINT NOT NULL)"));
  const std::string do_nothing =
      "INSERT INTO kv (k, v, hits) VALUES (?, ?, 1) ON CONFLICT DO NOTHING";
  const std::string do_update =
      "INSERT INTO kv (k, v, hits) VALUES (?, ?, 1) "
      "ON CONFLICT (k) DO UPDATE SET v = excluded.v, hits = kv.hits + 1";
  struct Step {
    std::string sql, k, v;
  };
  const std::vector<Step> steps = {
      {do_nothing, "a", "1"}, {do_nothing, "a", "2"}, {do_update, "a", "3"}, {do_update, "b", "4"}};
  std::vector<int64_t> changed;
  TY_ASSERT_OK(db_->Write([&](Transaction& tx) -> Status {
    for (const Step& step : steps) {
      TY_ASSIGN_OR_RETURN(int64_t n, tx.Exec(step.sql, {step.k, step.v}));
      changed.push_back(n);
    }
    return Status::Ok();
  }));
  EXPECT_EQ(changed, (std::vector<int64_t>{1, 0, 1, 1}));
  auto rows = QueryOne(*db_, "SELECT k, v, hits FROM kv ORDER BY k");
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].Text(0), "a");
  EXPECT_EQ((*rows)[0].Text(1), "3");
  EXPECT_EQ((*rows)[0].Int(2), 2);
  EXPECT_EQ((*rows)[1].Text(0), "b");
  EXPECT_EQ((*rows)[1].Int(2), 1);
}

TEST_P(DatabaseTest, UniqueViolationIsAlreadyExistsAndRollsBack) {
  TY_ASSERT_OK(ExecOne(*db_, "CREATE TABLE kv (k TEXT PRIMARY KEY, v TEXT)"));
  TY_ASSERT_OK(ExecOne(*db_, "INSERT INTO kv (k, v) VALUES (?, ?)", {"a", "1"}));
  Status insert_again;
  Status s = db_->Write([&](Transaction& tx) -> Status {
    auto b = tx.Exec("INSERT INTO kv (k, v) VALUES (?, ?)", {"b", "2"});
    if (!b.ok()) return b.status();
    auto a = tx.Exec("INSERT INTO kv (k, v) VALUES (?, ?)", {"a", "3"});
    insert_again = a.ok() ? Status::Ok() : a.status();
    return insert_again;
  });
  EXPECT_TRUE(insert_again.IsAlreadyExists()) << insert_again.ToString();
  EXPECT_TRUE(s.IsAlreadyExists()) << s.ToString();
  EXPECT_EQ(QueryInt(*db_, "SELECT COUNT(*) FROM kv"), 1);  // "b" rolled back with it
  EXPECT_EQ(QueryInt(*db_, "SELECT COUNT(*) FROM kv WHERE k = ? AND v = ?", {"a", "1"}), 1);
}

TEST_P(DatabaseTest, FailedCallbackRollsBackEverything) {
  TY_ASSERT_OK(ExecOne(*db_, "CREATE TABLE kv (k TEXT PRIMARY KEY, v TEXT)"));
  auto write = [&](bool fail) {
    return db_->Write([&](Transaction& tx) -> Status {
      for (const char* sql : {"CREATE TABLE other (x BIGINT)",
                              "INSERT INTO kv (k, v) VALUES ('a', 'b')", "DELETE FROM kv"}) {
        TY_RETURN_IF_ERROR(tx.Exec(sql).status());
      }
      TY_RETURN_IF_ERROR(tx.Exec("INSERT INTO other (x) VALUES (?)", {int64_t{1}}).status());
      TY_RETURN_IF_ERROR(tx.Exec("INSERT INTO kv (k, v) VALUES (?, ?)", {"c", "d"}).status());
      return fail ? Status::FailedPrecondition("run is not active") : Status::Ok();
    });
  };
  Status s = write(/*fail=*/true);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "run is not active");
  EXPECT_EQ(QueryInt(*db_, "SELECT COUNT(*) FROM kv"), 0);
  EXPECT_FALSE(QueryOne(*db_, "SELECT COUNT(*) FROM other").ok());  // DDL rolled back too

  // The same statements work afterwards (cached statements survive the rollback).
  TY_EXPECT_OK(write(/*fail=*/false));
  EXPECT_EQ(QueryInt(*db_, "SELECT COUNT(*) FROM kv"), 1);
  EXPECT_EQ(QueryInt(*db_, "SELECT COUNT(*) FROM other"), 1);
}

TEST_P(DatabaseTest, QuestionMarksInLiteralsAndCommentsAreNotParameters) {
  TY_ASSERT_OK(ExecOne(*db_, "CREATE TABLE \"odd?\" (\"k?\" TEXT PRIMARY KEY, v TEXT)"));
  TY_ASSERT_OK(ExecOne(*db_, "INSERT INTO \"odd?\" (\"k?\", v) VALUES ('why?', ?)", {"a?"}));
  TY_ASSERT_OK(ExecOne(
      *db_, "INSERT INTO \"odd?\" (\"k?\", v) VALUES ('it''s ?', ? /* ? */) -- ?\n", {"b"}));
  auto rows = QueryOne(*db_,
                       "SELECT \"k?\", v, '?' FROM \"odd?\" WHERE v = ? OR \"k?\" = 'it''s ?' "
                       "ORDER BY \"k?\"",
                       {"a?"});
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].Text(0), "it's ?");
  EXPECT_EQ((*rows)[0].Text(1), "b");
  EXPECT_EQ((*rows)[1].Text(0), "why?");
  EXPECT_EQ((*rows)[1].Text(1), "a?");
  EXPECT_EQ((*rows)[1].Text(2), "?");

  // Too few or too many parameters is an error, not a crash or a NULL.
  EXPECT_FALSE(ExecOne(*db_, "INSERT INTO \"odd?\" (\"k?\", v) VALUES (?, ?)", {"x"}).ok());
  EXPECT_FALSE(ExecOne(*db_, "INSERT INTO \"odd?\" (\"k?\", v) VALUES (?, 'y')", {"x", "y"}).ok());
  EXPECT_EQ(QueryInt(*db_, "SELECT COUNT(*) FROM \"odd?\""), 2);
}

TEST_P(DatabaseTest, LikeIsCaseSensitiveAndLowerLikeLowerIsNot) {
  TY_ASSERT_OK(ExecOne(*db_, "CREATE TABLE names (name TEXT PRIMARY KEY)"));
  TY_ASSERT_OK(ExecOne(*db_, "INSERT INTO names (name) VALUES (?), (?), (?), (?)",
                       {"Alpha", "alpha", "ALPHABET", "beta"}));
  auto matches = [&](const std::string& sql, const std::string& pattern) {
    std::vector<std::string> names;
    auto rows = QueryOne(*db_, sql + " ORDER BY name", {pattern});
    EXPECT_TRUE(rows.ok()) << rows.status().ToString();
    if (rows.ok()) {
      for (const Row& row : *rows) names.push_back(row.Text(0));
    }
    return names;
  };
  const std::string like = "SELECT name FROM names WHERE name LIKE ?";
  const std::string lower_like = "SELECT name FROM names WHERE LOWER(name) LIKE LOWER(?)";
  EXPECT_EQ(matches(like, "Alpha%"), std::vector<std::string>{"Alpha"});
  EXPECT_EQ(matches(like, "alpha%"), std::vector<std::string>{"alpha"});
  EXPECT_EQ(matches(like, "%ET"), std::vector<std::string>{"ALPHABET"});
  EXPECT_EQ(matches(lower_like, "ALPHA%"),
            (std::vector<std::string>{"ALPHABET", "Alpha", "alpha"}));
  EXPECT_EQ(matches(lower_like, "_eta"), std::vector<std::string>{"beta"});
}

std::vector<Migration> WidgetMigrations() {
  return {
      {"widgets",
       1,
       {"CREATE TABLE widgets (id TEXT PRIMARY KEY, name TEXT NOT NULL)",
        "INSERT INTO widgets (id, name) VALUES ('w1', 'first')"}},
      {"widgets", 2, {"ALTER TABLE widgets ADD COLUMN size BIGINT"}},
      {"gadgets", 1, {"CREATE TABLE gadgets (id TEXT PRIMARY KEY)"}},
  };
}

TEST_P(DatabaseTest, MigrationsApplyOnce) {
  std::vector<Migration> migrations = WidgetMigrations();
  TY_ASSERT_OK(ApplyMigrations(*db_, migrations));
  TY_ASSERT_OK(ApplyMigrations(*db_, migrations));
  EXPECT_EQ(QueryInt(*db_, "SELECT COUNT(*) FROM widgets"), 1);
  EXPECT_EQ(QueryInt(*db_, "SELECT COUNT(*) FROM schema_migrations"), 3);

  migrations.push_back({"widgets", 3, {"UPDATE widgets SET size = 7"}});
  TY_ASSERT_OK(ApplyMigrations(*db_, migrations));
  EXPECT_EQ(QueryInt(*db_, "SELECT size FROM widgets WHERE id = 'w1'"), 7);

  // A failing migration names itself and leaves nothing behind.
  migrations.push_back({"widgets",
                        4,
                        {"INSERT INTO widgets (id, name) VALUES ('w2', 'second')",
                         "INSERT INTO no_such_table (id) VALUES ('x')"}});
  Status s = ApplyMigrations(*db_, migrations);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("migration widgets/4"), std::string::npos) << s.ToString();
  EXPECT_EQ(QueryInt(*db_, "SELECT COUNT(*) FROM widgets"), 1);
  EXPECT_EQ(
      QueryInt(*db_, "SELECT MAX(version) FROM schema_migrations WHERE component = ?", {"widgets"}),
      3);
}

TEST_P(DatabaseTest, ConcurrentMigrationsFromTwoHandlesApplyOnce) {
  std::unique_ptr<Database> other = Open();
  ASSERT_NE(other, nullptr);
  Status a, b;
  std::thread first([&] { a = ApplyMigrations(*db_, WidgetMigrations()); });
  std::thread second([&] { b = ApplyMigrations(*other, WidgetMigrations()); });
  first.join();
  second.join();
  TY_EXPECT_OK(a);
  TY_EXPECT_OK(b);
  EXPECT_EQ(QueryInt(*db_, "SELECT COUNT(*) FROM widgets"), 1);
  EXPECT_EQ(QueryInt(*db_, "SELECT COUNT(*) FROM schema_migrations"), 3);
}

TEST_P(DatabaseTest, WritersAreSerializedAndReadersSeeConsistentSnapshots) {
  TY_ASSERT_OK(db_->Write([](Transaction& tx) -> Status {
    for (const char* sql : {"CREATE TABLE counter (id TEXT PRIMARY KEY, n BIGINT NOT NULL)",
                            "CREATE TABLE ledger (id TEXT PRIMARY KEY, amount BIGINT NOT NULL)",
                            "INSERT INTO counter (id, n) VALUES ('c', 0)"}) {
      TY_RETURN_IF_ERROR(tx.Exec(sql).status());
    }
    return Status::Ok();
  }));
  constexpr int kWriters = 3;
  constexpr int kReaders = 3;
  constexpr int kWritesEach = 40;
  std::atomic<int> writers_left{kWriters};
  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      for (int i = 0; i < kWritesEach; ++i) {
        // Read-modify-write: only serialized writers lose no increment.
        TY_EXPECT_OK(db_->Write([&](Transaction& tx) -> Status {
          TY_ASSIGN_OR_RETURN(Rows rows, tx.Query("SELECT n FROM counter WHERE id = 'c'"));
          int64_t n = rows.at(0).Int(0) + 1;
          TY_RETURN_IF_ERROR(tx.Exec("UPDATE counter SET n = ? WHERE id = 'c'", {n}).status());
          std::string id = std::to_string(w) + "/" + std::to_string(i);
          return tx
              .Exec("INSERT INTO ledger (id, amount) VALUES (?, ?), (?, ?)",
                    {id + "+", int64_t{i + 1}, id + "-", int64_t{-(i + 1)}})
              .status();
        }));
      }
      --writers_left;
    });
  }
  std::atomic<int> reads{0};
  for (int r = 0; r < kReaders; ++r) {
    threads.emplace_back([&] {
      int64_t last_n = 0;
      do {
        // Two statements, one snapshot: the counter and the ledger agree.
        TY_EXPECT_OK(db_->Read([&](Transaction& tx) -> Status {
          TY_ASSIGN_OR_RETURN(Rows counter, tx.Query("SELECT n FROM counter WHERE id = 'c'"));
          TY_ASSIGN_OR_RETURN(Rows ledger,
                              tx.Query("SELECT COUNT(*), COALESCE(SUM(amount), 0) FROM ledger"));
          int64_t n = counter.at(0).Int(0);
          EXPECT_EQ(ledger.at(0).Int(0), 2 * n);
          EXPECT_EQ(ledger.at(0).Int(1), 0);
          EXPECT_GE(n, last_n);
          last_n = n;
          return Status::Ok();
        }));
        ++reads;
      } while (writers_left > 0);
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_GE(reads.load(), kReaders);
  EXPECT_EQ(QueryInt(*db_, "SELECT n FROM counter"), kWriters * kWritesEach);
  EXPECT_EQ(QueryInt(*db_, "SELECT COUNT(*) FROM ledger"), 2 * kWriters * kWritesEach);
}

// Concurrent writers (which SQLite commits in groups): each one's changes commit or roll
// back by its own outcome alone, and each caller gets its own status.
TEST_P(DatabaseTest, ConcurrentWritersCommitOrRollBackAlone) {
  TY_ASSERT_OK(ExecOne(*db_, "CREATE TABLE t (id BIGINT PRIMARY KEY, w BIGINT NOT NULL)"));
  TY_ASSERT_OK(ExecOne(*db_, "INSERT INTO t (id, w) VALUES (?, ?)", {int64_t{-1}, int64_t{-1}}));
  constexpr int kWriters = 6;
  constexpr int kWritesEach = 60;
  std::atomic<int> wrong_status{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      for (int i = 0; i < kWritesEach; ++i) {
        int64_t id = w * 1000 + i;
        Status s = db_->Write([&](Transaction& tx) -> Status {
          TY_RETURN_IF_ERROR(
              tx.Exec("INSERT INTO t (id, w) VALUES (?, ?)", {id, int64_t{w}}).status());
          TY_RETURN_IF_ERROR(tx.Exec("UPDATE t SET w = w + 1 WHERE id = -1").status());
          if (i % 3 == 1) return Status::FailedPrecondition("writer " + std::to_string(id));
          if (i % 3 == 2) {  // a failing statement: the id taken by the first row
            return tx.Exec("INSERT INTO t (id, w) VALUES (?, ?)", {int64_t{-1}, int64_t{0}})
                .status();
          }
          return Status::Ok();
        });
        bool right = i % 3 == 0   ? s.ok()
                     : i % 3 == 1 ? s.code() == StatusCode::kFailedPrecondition &&
                                        s.message() == "writer " + std::to_string(id)
                                  : s.code() == StatusCode::kAlreadyExists;
        if (!right) {
          ++wrong_status;
          ADD_FAILURE() << "write " << id << ": " << s.ToString();
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong_status.load(), 0);
  int64_t committed = kWriters * ((kWritesEach + 2) / 3);
  EXPECT_EQ(QueryInt(*db_, "SELECT COUNT(*) FROM t WHERE id >= 0"), committed);
  EXPECT_EQ(QueryInt(*db_, "SELECT COUNT(*) FROM t WHERE id >= 0 AND (id % 1000) % 3 <> 0"), 0);
  EXPECT_EQ(QueryInt(*db_, "SELECT w FROM t WHERE id = -1"), committed - 1);
}

TEST_P(DatabaseTest, ReadKeepsItsSnapshotWhileAWriterCommits) {
  TY_ASSERT_OK(ExecOne(*db_, "CREATE TABLE t (id BIGINT PRIMARY KEY)"));
  TY_ASSERT_OK(ExecOne(*db_, "INSERT INTO t (id) VALUES (1)"));
  Status write;
  int64_t before = -1, after = -1;
  TY_ASSERT_OK(db_->Read([&](Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(Rows rows, tx.Query("SELECT COUNT(*) FROM t"));
    before = rows.at(0).Int(0);
    std::thread writer([&] { write = ExecOne(*db_, "INSERT INTO t (id) VALUES (2)"); });
    writer.join();  // committed while this read is open
    TY_ASSIGN_OR_RETURN(rows, tx.Query("SELECT COUNT(*) FROM t"));
    after = rows.at(0).Int(0);
    return Status::Ok();
  }));
  TY_EXPECT_OK(write);
  EXPECT_EQ(before, 1);
  EXPECT_EQ(after, 1);
  EXPECT_EQ(QueryInt(*db_, "SELECT COUNT(*) FROM t"), 2);
}

TEST_P(DatabaseTest, ReadTransactionsRejectWrites) {
  TY_ASSERT_OK(ExecOne(*db_, "CREATE TABLE t (id BIGINT PRIMARY KEY)"));
  Status s = db_->Read(
      [](Transaction& tx) -> Status { return tx.Exec("INSERT INTO t (id) VALUES (1)").status(); });
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(QueryInt(*db_, "SELECT COUNT(*) FROM t"), 0);
}

TEST_P(DatabaseTest, InsertsThousandsOfParametersInOneStatement) {
  TY_ASSERT_OK(ExecOne(*db_,
                       "CREATE TABLE metrics (id TEXT PRIMARY KEY, step BIGINT, value DOUBLE "
                       "PRECISION, tag TEXT)"));
  constexpr int kRows = 1500;  // 6000 parameters
  std::string sql = "INSERT INTO metrics (id, step, value, tag) VALUES ";
  std::vector<Value> params;
  int64_t step_sum = 0;
  for (int i = 0; i < kRows; ++i) {
    sql += i == 0 ? "(?, ?, ?, ?)" : ", (?, ?, ?, ?)";
    params.insert(params.end(), {"m" + std::to_string(i), int64_t{i}, i * 0.5,
                                 i % 2 ? Value{std::string("odd")} : Value{}});
    step_sum += i;
  }
  int64_t changed = -1;
  TY_ASSERT_OK(db_->Write([&](Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(changed, tx.Exec(sql, params));
    return Status::Ok();
  }));
  EXPECT_EQ(changed, kRows);
  EXPECT_EQ(QueryInt(*db_, "SELECT COUNT(*) FROM metrics"), kRows);
  EXPECT_EQ(QueryInt(*db_, "SELECT SUM(step) FROM metrics"), step_sum);
  EXPECT_EQ(QueryInt(*db_, "SELECT COUNT(*) FROM metrics WHERE tag IS NULL"), kRows / 2);
  auto rows = QueryOne(*db_, "SELECT step, value, tag FROM metrics WHERE id = ?", {"m1499"});
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].Int(0), 1499);
  EXPECT_EQ((*rows)[0].Double(1), 749.5);
  EXPECT_EQ((*rows)[0].Text(2), "odd");
}

TEST_P(DatabaseTest, ErrorsLeaveTheDatabaseUsable) {
  std::unique_ptr<Database> db = Open(/*pool_size=*/2);
  ASSERT_NE(db, nullptr);
  TY_ASSERT_OK(ExecOne(*db, "CREATE TABLE t (id BIGINT PRIMARY KEY)"));
  // More failures than connections: a failed transaction must not keep one.
  for (int i = 0; i < 6; ++i) {
    EXPECT_FALSE(ExecOne(*db, "INSERT INTO no_such_table VALUES (1)").ok());
    EXPECT_FALSE(ExecOne(*db, "INSERT INTO t (id) VALUES (1), (1)").ok());
    EXPECT_FALSE(QueryOne(*db, "SELEC 1").ok());
    EXPECT_FALSE(db->Read([](Transaction& tx) -> Status {
                     (void)tx.Query("SELECT id FROM t");
                     return Status::Internal("the callback failed");
                   }).ok());
  }
  TY_EXPECT_OK(ExecOne(*db, "INSERT INTO t (id) VALUES (?)", {int64_t{1}}));
  EXPECT_EQ(QueryInt(*db, "SELECT COUNT(*) FROM t"), 1);
}

INSTANTIATE_TEST_SUITE_P(Backends, DatabaseTest, ::testing::Values("sqlite", "postgresql"),
                         [](const ::testing::TestParamInfo<std::string>& param_info) {
                           return param_info.param;
                         });

// PostgreSQL only: the pool and the rules PostgreSQL adds.
class PostgresDatabaseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto url = PostgresUrlForTest();
    ASSERT_TRUE(url.ok()) << "PostgreSQL for tests: " << url.status().ToString();
    url_ = *url;
  }

  std::unique_ptr<Database> Open(int pool_size) {
    DatabaseOptions options;
    options.url = url_;
    options.pool_size = pool_size;
    auto db = OpenDatabase(options);
    EXPECT_TRUE(db.ok()) << db.status().ToString();
    return db.ok() ? std::move(db).value() : nullptr;
  }

  std::string url_;
};

TEST_F(PostgresDatabaseTest, UrlsForTestAreFreshDatabases) {
  auto db = Open(1);
  ASSERT_NE(db, nullptr);
  TY_ASSERT_OK(ExecOne(*db, "CREATE TABLE t (id BIGINT)"));
  auto other_url = PostgresUrlForTest();
  ASSERT_TRUE(other_url.ok()) << other_url.status().ToString();
  EXPECT_NE(*other_url, url_);
  auto other = OpenDatabase({.url = *other_url});
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  EXPECT_EQ(QueryInt(**other,
                     "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = "
                     "'public'"),
            0);
}

TEST_F(PostgresDatabaseTest, ReconnectsAfterTheServerEndsAConnection) {
  auto db = Open(1);
  auto admin = Open(1);
  ASSERT_NE(db, nullptr);
  ASSERT_NE(admin, nullptr);
  EXPECT_EQ(QueryInt(*db, "SELECT 1"), 1);
  // Ends db's pooled connection (and waits until it is gone).
  EXPECT_EQ(QueryInt(*admin,
                     "WITH victims AS MATERIALIZED (SELECT pid FROM pg_stat_activity WHERE "
                     "datname = current_database() AND pid <> pg_backend_pid()) "
                     "SELECT COUNT(*) FROM victims WHERE pg_terminate_backend(pid, 10000)"),
            1);
  EXPECT_EQ(QueryInt(*db, "SELECT 2"), 2);
  TY_EXPECT_OK(ExecOne(*db, "CREATE TABLE t (id BIGINT)"));
}

TEST_F(PostgresDatabaseTest, SwallowedStatementErrorIsNotCommitted) {
  auto db = Open(2);
  ASSERT_NE(db, nullptr);
  TY_ASSERT_OK(ExecOne(*db, "CREATE TABLE t (id BIGINT PRIMARY KEY)"));
  TY_ASSERT_OK(ExecOne(*db, "INSERT INTO t (id) VALUES (1)"));
  Status later;
  Status s = db->Write([&](Transaction& tx) -> Status {
    (void)tx.Exec("INSERT INTO t (id) VALUES (2)");
    auto duplicate = tx.Exec("INSERT INTO t (id) VALUES (1)");
    EXPECT_TRUE(duplicate.status().IsAlreadyExists()) << duplicate.status().ToString();
    later = tx.Exec("INSERT INTO t (id) VALUES (3)").status();
    return Status::Ok();  // wrongly: PostgreSQL has already given up on this transaction
  });
  EXPECT_FALSE(later.ok());
  EXPECT_EQ(s.code(), StatusCode::kInternal) << s.ToString();
  EXPECT_EQ(QueryInt(*db, "SELECT COUNT(*) FROM t"), 1);
}

TEST_F(PostgresDatabaseTest, BadUrlOrNoServerIsAnErrorNotAHang) {
  auto bad = OpenDatabase({.url = "postgresql://127.0.0.1/db?no_such_option=1"});
  EXPECT_TRUE(bad.status().IsInvalidArgument()) << bad.status().ToString();

  // A port that is bound but not listening refuses connections.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  auto refused = OpenDatabase(
      {.url = "postgresql://postgres@127.0.0.1:" + std::to_string(ntohs(addr.sin_port)) + "/db"});
  close(fd);
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable) << refused.status().ToString();
}

}  // namespace
}  // namespace trainyard::store
