#include "trainyard/tracking/search_filter.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "trainyard/store/database.h"
#include "trainyard/tracking/schema.h"

namespace trainyard::tracking {

// Readable gtest output for the AST (found by argument-dependent lookup).
void PrintTo(const Comparison& c, std::ostream* os) {
  *os << "{" << EntityTypeName(c.type) << " '" << c.key << "' " << CompareOpName(c.op) << " [";
  for (const FilterValue& v : c.values) {
    *os << (v.kind == ValueKind::kString ? " str:'" : " num:'") << v.text << "'";
  }
  *os << " ] @" << c.position << "}";
}

void PrintTo(const OrderBy& o, std::ostream* os) {
  *os << "{" << EntityTypeName(o.type) << " '" << o.key << "' " << (o.ascending ? "ASC" : "DESC")
      << "}";
}

namespace {

using Strings = std::vector<std::string>;

FilterValue Str(std::string s) { return {ValueKind::kString, std::move(s)}; }
FilterValue Num(std::string s) { return {ValueKind::kNumber, std::move(s)}; }

// The parse error's message, or "" when the filter parsed.
std::string ParseError(std::string_view filter) {
  auto r = ParseSearchFilter(filter);
  if (r.ok()) return "";
  EXPECT_TRUE(r.status().IsInvalidArgument()) << r.status().ToString();
  return r.status().message();
}

std::string OrderByError(std::string_view clause) {
  auto r = ParseOrderBy(clause);
  if (r.ok()) return "";
  EXPECT_TRUE(r.status().IsInvalidArgument()) << r.status().ToString();
  return r.status().message();
}

bool Contains(const std::string& haystack, std::string_view needle) {
  return haystack.find(needle) != std::string::npos;
}

// ------------------------------------------------------------------------------------------
// Parser
// ------------------------------------------------------------------------------------------

TEST(SearchFilterParseTest, BlankFilterIsEmpty) {
  for (std::string_view f : {"", "   ", " \t\n\r "}) {
    auto r = ParseSearchFilter(f);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(r->empty());
  }
}

TEST(SearchFilterParseTest, ComparisonsJoinedByAnd) {
  auto r = ParseSearchFilter("metrics.acc > 0.9 and params.lr = '0.01' AND run_name != \"x\"");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ((*r)[0], (Comparison{EntityType::kMetric, "acc", CompareOp::kGt, {Num("0.9")}, 0}));
  EXPECT_EQ((*r)[1], (Comparison{EntityType::kParam, "lr", CompareOp::kEq, {Str("0.01")}, 22}));
  EXPECT_EQ((*r)[2],
            (Comparison{EntityType::kAttribute, "run_name", CompareOp::kNe, {Str("x")}, 45}));
}

TEST(SearchFilterParseTest, EntityTypeSpellings) {
  struct Case {
    std::string_view filter;
    EntityType type;
  };
  for (const Case& c :
       {Case{"metric.a = 1", EntityType::kMetric}, Case{"metrics.a = 1", EntityType::kMetric},
        Case{"param.a = 'x'", EntityType::kParam}, Case{"params.a = 'x'", EntityType::kParam},
        Case{"parameter.a = 'x'", EntityType::kParam},
        Case{"parameters.a = 'x'", EntityType::kParam}, Case{"tag.a = 'x'", EntityType::kTag},
        Case{"tags.a = 'x'", EntityType::kTag}, Case{"attribute.a = 'x'", EntityType::kAttribute},
        Case{"attributes.a = 'x'", EntityType::kAttribute},
        Case{"attr.a = 'x'", EntityType::kAttribute}, Case{"run.a = 'x'", EntityType::kAttribute},
        Case{"a = 'x'", EntityType::kAttribute}, Case{"dataset.name = 'x'", EntityType::kDataset},
        Case{"datasets.name = 'x'", EntityType::kDataset}}) {
    auto r = ParseSearchFilter(c.filter);
    ASSERT_TRUE(r.ok()) << c.filter << ": " << r.status().ToString();
    EXPECT_EQ((*r)[0].type, c.type) << c.filter;
  }
}

TEST(SearchFilterParseTest, KeysQuotedAndUnquoted) {
  struct Case {
    std::string_view filter;
    std::string key;
  };
  for (const Case& c :
       {Case{"tags.mlflow.runName = 'x'", "mlflow.runName"},
        Case{"metrics.val/loss < 1", "val/loss"},
        Case{"params.learning-rate = '1'", "learning-rate"},
        Case{"metrics.\"my metric\" > 1", "my metric"}, Case{"params.`a b` = 'x'", "a b"},
        Case{"params.`a.b` = 'x'", "a.b"}, Case{"params.`a``b` = 'x'", "a`b"},
        Case{"tags.\"say \\\"hi\\\"\" = 'x'", "say \"hi\""},
        Case{"metrics.loss:train>1", "loss:train"}, Case{"`Run name` = 'x'", "Run name"},
        Case{"attributes.`Run name` = 'x'", "Run name"},
        Case{"tags.caf\xc3\xa9 = 'x'", "caf\xc3\xa9"}}) {
    auto r = ParseSearchFilter(c.filter);
    ASSERT_TRUE(r.ok()) << c.filter << ": " << r.status().ToString();
    EXPECT_EQ((*r)[0].key, c.key) << c.filter;
  }
}

TEST(SearchFilterParseTest, ValuesAndEscapes) {
  struct Case {
    std::string_view filter;
    FilterValue value;
  };
  for (const Case& c :
       {Case{"tags.a = 'it''s'", Str("it's")}, Case{"tags.a = 'it\\'s'", Str("it's")},
        Case{"tags.a = \"say \"\"hi\"\"\"", Str("say \"hi\"")},
        Case{"tags.a = 'C:\\\\dir'", Str("C:\\dir")}, Case{"tags.a LIKE '50\\%'", Str("50\\%")},
        Case{"tags.a = ''", Str("")}, Case{"metrics.a = -1.5e3", Num("-1.5e3")},
        Case{"metrics.a = +2", Num("+2")}, Case{"metrics.a = .5", Num(".5")},
        Case{"metrics.a = 5.", Num("5.")}, Case{"metrics.a = 1E-7", Num("1E-7")},
        Case{"metrics.a>-1", Num("-1")}}) {
    auto r = ParseSearchFilter(c.filter);
    ASSERT_TRUE(r.ok()) << c.filter << ": " << r.status().ToString();
    ASSERT_EQ((*r)[0].values.size(), 1u) << c.filter;
    EXPECT_EQ((*r)[0].values[0], c.value) << c.filter;
  }
}

TEST(SearchFilterParseTest, Operators) {
  struct Case {
    std::string_view filter;
    CompareOp op;
    size_t values;
  };
  for (const Case& c :
       {Case{"metrics.a = 1", CompareOp::kEq, 1}, Case{"metrics.a != 1", CompareOp::kNe, 1},
        Case{"metrics.a <> 1", CompareOp::kNe, 1}, Case{"metrics.a < 1", CompareOp::kLt, 1},
        Case{"metrics.a <= 1", CompareOp::kLe, 1}, Case{"metrics.a > 1", CompareOp::kGt, 1},
        Case{"metrics.a >= 1", CompareOp::kGe, 1}, Case{"params.a LIKE 'x'", CompareOp::kLike, 1},
        Case{"params.a like 'x'", CompareOp::kLike, 1},
        Case{"params.a ILike 'x'", CompareOp::kILike, 1},
        Case{"params.a IN ('x')", CompareOp::kIn, 1},
        Case{"params.a in('x','y')", CompareOp::kIn, 2},
        Case{"params.a IN ('x', \"y\", 'z',)", CompareOp::kIn, 3},
        Case{"params.a NOT IN ('x', 'y')", CompareOp::kNotIn, 2},
        Case{"params.a not   in ('x')", CompareOp::kNotIn, 1},
        Case{"params.a IS NULL", CompareOp::kIsNull, 0},
        Case{"params.a is not null", CompareOp::kIsNotNull, 0}}) {
    auto r = ParseSearchFilter(c.filter);
    ASSERT_TRUE(r.ok()) << c.filter << ": " << r.status().ToString();
    EXPECT_EQ((*r)[0].op, c.op) << c.filter;
    EXPECT_EQ((*r)[0].values.size(), c.values) << c.filter;
  }
}

TEST(SearchFilterParseTest, ErrorsSayWhatAndWhere) {
  struct Case {
    std::string_view filter;
    std::vector<std::string_view> needles;
  };
  const Case cases[] = {
      {"metrics.acc >> 1",
       {"invalid filter 'metrics.acc >> 1'", "unknown operator '>>'", "at position 12"}},
      {"metrics.acc = 'abc'", {"metric value must be a number (got 'abc')", "position 14"}},
      {"metrics.acc LIKE '1'", {"metrics compare with =, !=, <, <=, >, >= (got LIKE)"}},
      {"metrics.acc IS NULL", {"metrics compare with", "(got IS NULL)"}},
      {"params.lr = 0.1", {"param value must be a quoted string (got 0.1"}},
      {"tags.t IN ('a', 1)", {"tag value must be a quoted string (got 1", "position 16"}},
      {"params.lr > '1'", {"params compare with", "(got >)"}},
      {"a = 'x' OR b = 'y'", {"OR is not supported", "position 8"}},
      {"metrics.acc > 1 AND", {"expected a key", "got end of filter", "position 19"}},
      {"metrics.acc > 1 AND AND x = 'y'", {"expected a key", "got 'AND'"}},
      {"foo.bar = 'x'", {"unknown entity type 'foo'", "expected metrics, params, tags"}},
      {"metrics. > 1", {"missing key after 'metrics.'", "position 8"}},
      {"params.\"\" = 'x'", {"empty key"}},
      {"params.a = 'x", {"unterminated string", "position 11"}},
      {"params.`a = 'x'", {"unterminated string", "position 7"}},
      {"tags.a IN ()", {"empty list"}},
      {"tags.a IN ('x'", {"unterminated list"}},
      {"tags.a IN ('x' 'y')", {"expected ',' or ')'"}},
      {"tags.a IN 'x'", {"expected a parenthesized list"}},
      {"tags.a = ('x')", {"a list of values needs IN or NOT IN"}},
      {"tags.a = abc", {"expected a quoted string or a number, got 'abc'"}},
      {"tags.a = NULL", {"use IS NULL"}},
      {"tags.a =", {"expected a value, got end of filter"}},
      {"tags.a", {"expected an operator after 'tags.a'", "got end of filter"}},
      {"tags.a 'x'", {"expected an operator after 'tags.a'"}},
      {"params.a NOT LIKE 'x'", {"expected IN after NOT"}},
      {"params.a IS 'x'", {"expected NULL or NOT NULL after IS"}},
      {"params.a BETWEEN 1", {"unknown operator 'BETWEEN'"}},
      {"params.a == 'x'", {"unknown operator '=='"}},
      {"datasets.foo = 'x'", {"unknown dataset field 'foo'"}},
      {"datasets.name > 'x'", {"datasets compare with"}},
      {"(metrics.a > 1)", {"expected a key", "got '('"}},
      {"metrics.a > 1 metrics.b > 2", {"expected AND or the end of the filter", "position 14"}},
      {"metrics.a > 1e", {"invalid number '1e'"}},
      {"metrics.a > 1.2.3", {"invalid number '1.2.3'"}},
      {"metrics.a > 12abc", {"invalid number '12abc'"}},
      {"metrics.a > -", {"invalid number '-'"}},
      {"1 = 1", {"expected a key"}},
      {"metrics.a \x01 1", {"\\x01"}},
  };
  for (const Case& c : cases) {
    std::string error = ParseError(c.filter);
    ASSERT_FALSE(error.empty()) << c.filter << " parsed";
    for (std::string_view needle : c.needles) {
      EXPECT_TRUE(Contains(error, needle))
          << c.filter << "\n  error: " << error << "\n  missing: " << needle;
    }
  }
}

TEST(SearchFilterParseTest, InputIsBounded) {
  EXPECT_TRUE(Contains(ParseError(std::string(kMaxFilterLength + 1, ' ')), "bytes long"));
  std::string many;
  for (size_t i = 0; i <= kMaxComparisons; ++i) many += (i ? " AND " : "") + std::string("a='x'");
  EXPECT_TRUE(Contains(ParseError(many), "too many comparisons"));
  std::string list = "tags.a IN (";
  for (size_t i = 0; i <= kMaxFilterValues; ++i) list += "'',";
  list += ")";
  EXPECT_TRUE(Contains(ParseError(list), "too many values"));
  // Deeply nested or long inputs fail fast without recursion.
  EXPECT_FALSE(ParseError(std::string(60000, '(')).empty());
  EXPECT_FALSE(ParseError("tags.a IN " + std::string(60000, '(')).empty());
}

TEST(SearchFilterOrderByTest, Parses) {
  struct Case {
    std::string_view clause;
    OrderBy want;
  };
  for (const Case& c :
       {Case{"metrics.acc DESC", {EntityType::kMetric, "acc", false}},
        Case{"attributes.start_time ASC", {EntityType::kAttribute, "start_time", true}},
        Case{"params.lr", {EntityType::kParam, "lr", true}},
        Case{"tags.`x y` desc", {EntityType::kTag, "x y", false}},
        Case{"  run_name  ", {EntityType::kAttribute, "run_name", true}},
        Case{"metrics.\"my metric\" asc", {EntityType::kMetric, "my metric", true}},
        Case{"tags.mlflow.runName DESC", {EntityType::kTag, "mlflow.runName", false}}}) {
    auto r = ParseOrderBy(c.clause);
    ASSERT_TRUE(r.ok()) << c.clause << ": " << r.status().ToString();
    EXPECT_EQ(*r, c.want) << c.clause;
  }
}

TEST(SearchFilterOrderByTest, Errors) {
  EXPECT_TRUE(Contains(OrderByError(""), "empty clause"));
  EXPECT_TRUE(Contains(OrderByError("metrics.acc DOWN"), "expected ASC or DESC"));
  EXPECT_TRUE(Contains(OrderByError("metrics.my metric DESC"), "got 'metric'"));
  EXPECT_TRUE(Contains(OrderByError("metrics.acc DESC extra"), "unexpected 'extra'"));
  EXPECT_TRUE(Contains(OrderByError("foo.acc"), "unknown entity type 'foo'"));
  EXPECT_TRUE(Contains(OrderByError("metrics."), "missing key"));
  EXPECT_TRUE(Contains(OrderByError(std::string(kMaxFilterLength + 1, 'a')), "bytes long"));
}

// ------------------------------------------------------------------------------------------
// Compilers: errors and SQL shape
// ------------------------------------------------------------------------------------------

std::string CompileError(
    const std::function<Result<SqlFragment>(const std::vector<Comparison>&)>& compile,
    std::string_view filter) {
  auto parsed = ParseSearchFilter(filter);
  if (!parsed.ok()) return "parse error: " + parsed.status().message();
  auto r = compile(*parsed);
  if (r.ok()) return "";
  EXPECT_TRUE(r.status().IsInvalidArgument()) << r.status().ToString();
  return r.status().message();
}

std::string OrderCompileError(
    const std::function<Result<SqlFragment>(const std::vector<OrderBy>&)>& compile,
    const Strings& clauses) {
  std::vector<OrderBy> order;
  for (const std::string& c : clauses) {
    auto o = ParseOrderBy(c);
    if (!o.ok()) return "parse error: " + o.status().message();
    order.push_back(*o);
  }
  auto r = compile(order);
  if (r.ok()) return "";
  EXPECT_TRUE(r.status().IsInvalidArgument()) << r.status().ToString();
  return r.status().message();
}

TEST(SearchFilterCompileTest, UnknownKeysAndBadValuesNameTheProblem) {
  struct Case {
    std::function<Result<SqlFragment>(const std::vector<Comparison>&)> compile;
    std::string_view filter;
    std::vector<std::string_view> needles;
  };
  const Case cases[] = {
      {CompileRunFilter,
       "foo = 'x'",
       {"unknown run attribute 'foo'",
        "valid attributes: run_id, run_name, status, user_id, artifact_uri, lifecycle_stage, "
        "start_time, end_time",
        "position 0"}},
      {CompileRunFilter, "experiment_id = '1'", {"unknown run attribute 'experiment_id'"}},
      {CompileRunFilter, "status IN ('A')", {"'status' cannot be compared with a list", "run_id"}},
      {CompileRunFilter, "start_time > 'abc'", {"'start_time' takes a number (got 'abc')"}},
      {CompileRunFilter, "start_time LIKE '1'", {"'start_time' compares with =, !=, <"}},
      {CompileRunFilter, "status = 1", {"must be a quoted string (got 1"}},
      {CompileRunFilter, "status > 'a'", {"'status' compares with =, !=, LIKE"}},
      {CompileRunFilter, "params.a LIKE 'x\\\\'", {"ends with a lone backslash"}},
      {CompileRunFilter, "metrics.a > 1e999", {"finite number"}},
      {CompileExperimentFilter,
       "metrics.acc > 1",
       {"experiment filters cannot use 'metrics.acc'", "tags.<key>"}},
      {CompileExperimentFilter, "params.a = 'x'", {"cannot use 'params.a'"}},
      {CompileExperimentFilter, "datasets.name = 'x'", {"cannot use 'datasets.name'"}},
      {CompileExperimentFilter,
       "foo = 'x'",
       {"unknown experiment attribute 'foo'",
        "name, creation_time, last_update_time, experiment_id"}},
      {CompileExperimentFilter, "experiment_id = 'abc'", {"takes an integer id (got 'abc')"}},
      {CompileExperimentFilter, "experiment_id > 1", {"compares with =, !=, IN"}},
      {CompileLoggedModelFilter, "run_name = 'x'", {"unknown logged model attribute 'run_name'"}},
      {CompileLoggedModelFilter, "datasets.name = 'x'", {"cannot use 'datasets.name'"}},
      {CompileRegisteredModelFilter, "metrics.a > 1", {"registered model filters cannot use"}},
      {CompileRegisteredModelFilter,
       "creation_timestamp > 1",
       {"unknown registered model attribute", "valid attributes: name"}},
      {CompileModelVersionFilter,
       "status = 'READY'",
       {"valid attributes: name, run_id, source_path, version_number"}},
  };
  for (const Case& c : cases) {
    std::string error = CompileError(c.compile, c.filter);
    ASSERT_FALSE(error.empty()) << c.filter << " compiled";
    for (std::string_view needle : c.needles) {
      EXPECT_TRUE(Contains(error, needle))
          << c.filter << "\n  error: " << error << "\n  missing: " << needle;
    }
  }
}

TEST(SearchFilterCompileTest, OrderByErrors) {
  EXPECT_TRUE(Contains(OrderCompileError(CompileRunOrderBy, {"datasets.name"}), "datasets"));
  EXPECT_TRUE(Contains(OrderCompileError(CompileRunOrderBy, {"metrics.acc", "metrics.acc DESC"}),
                       "more than once"));
  EXPECT_TRUE(
      Contains(OrderCompileError(CompileRunOrderBy, {"created", "start_time"}), "more than once"));
  EXPECT_TRUE(Contains(OrderCompileError(CompileRunOrderBy, {"foo"}),
                       "unknown run attribute; orderable attributes: run_id"));
  EXPECT_TRUE(Contains(OrderCompileError(CompileExperimentOrderBy, {"tags.x"}),
                       "experiment searches cannot be ordered by tags"));
  EXPECT_TRUE(
      Contains(OrderCompileError(CompileRegisteredModelOrderBy, {"metrics.x"}), "no metrics"));
  EXPECT_EQ(OrderCompileError(CompileLoggedModelOrderBy, {"metrics.x DESC", "name"}), "");
  std::vector<OrderBy> too_many(kMaxOrderByClauses + 1, OrderBy{EntityType::kMetric, "a", true});
  EXPECT_FALSE(CompileRunOrderBy(too_many).ok());
}

TEST(SearchFilterCompileTest, HandBuiltComparisonsWithWrongArityAreRejected) {
  Comparison no_value{EntityType::kMetric, "a", CompareOp::kGt, {}, 0};
  Comparison null_with_value{EntityType::kTag, "a", CompareOp::kIsNull, {Str("x")}, 0};
  Comparison empty_in{EntityType::kAttribute, "run_id", CompareOp::kIn, {}, 0};
  Comparison string_metric{EntityType::kMetric, "a", CompareOp::kGt, {Str("1")}, 0};
  for (const Comparison& c : {no_value, null_with_value, empty_in, string_metric}) {
    EXPECT_TRUE(CompileRunFilter({c}).status().IsInvalidArgument());
  }
}

TEST(SearchFilterCompileTest, SqlCarriesNoUserTextAndOnePlaceholderPerParam) {
  std::string evil = "x'); DROP TABLE runs; --";
  auto parsed = ParseSearchFilter("params.`" + evil + "` = \"" + evil + "\" AND metrics.`" + evil +
                                  "` > 1 AND run_id IN (\"" + evil + "\")");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  auto where = CompileRunFilter(*parsed);
  ASSERT_TRUE(where.ok()) << where.status().ToString();
  EXPECT_FALSE(Contains(where->sql, "DROP"));
  EXPECT_EQ(static_cast<size_t>(std::count(where->sql.begin(), where->sql.end(), '?')),
            where->params.size());
  auto order = CompileRunOrderBy({{EntityType::kTag, evil, false}});
  ASSERT_TRUE(order.ok());
  EXPECT_FALSE(Contains(order->sql, "DROP"));
  EXPECT_EQ(static_cast<size_t>(std::count(order->sql.begin(), order->sql.end(), '?')),
            order->params.size());
}

TEST(SearchFilterCompileTest, EmptyFilterAndDefaultOrder) {
  auto where = CompileRunFilter({});
  ASSERT_TRUE(where.ok());
  EXPECT_EQ(where->sql, "1=1");
  EXPECT_TRUE(where->params.empty());
  auto order = CompileRunOrderBy({});
  ASSERT_TRUE(order.ok());
  EXPECT_EQ(order->sql,
            "CASE WHEN runs.start_time IS NULL THEN 1 ELSE 0 END, runs.start_time DESC, "
            "runs.run_uuid ASC");
  auto by_start = CompileRunOrderBy({{EntityType::kAttribute, "start_time", true}});
  ASSERT_TRUE(by_start.ok());
  EXPECT_EQ(by_start->sql,
            "CASE WHEN runs.start_time IS NULL THEN 1 ELSE 0 END, runs.start_time ASC, "
            "runs.run_uuid ASC");
  auto experiments = CompileExperimentOrderBy({});
  ASSERT_TRUE(experiments.ok());
  EXPECT_EQ(experiments->sql, "experiments.creation_time DESC, experiments.experiment_id ASC");
}

// ------------------------------------------------------------------------------------------
// Real SQL against SQLite
// ------------------------------------------------------------------------------------------

using FilterCompiler = std::function<Result<SqlFragment>(const std::vector<Comparison>&)>;
using OrderCompiler = std::function<Result<SqlFragment>(const std::vector<OrderBy>&)>;

class SearchFilterSqlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto db = store::OpenDatabase({.url = ":memory:"});
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    db_ = std::move(db).value();
    Status migrated = store::ApplyMigrations(*db_, TrackingMigrations());
    ASSERT_TRUE(migrated.ok()) << migrated.ToString();
    SeedRegistryTables();
    SeedRuns();
    SeedExperimentsAndLoggedModels();
    SeedRegisteredModels();
  }

  // The registry's tables as search_filter.h assumes them.
  void SeedRegistryTables() {
    Exec(
        "CREATE TABLE registered_models (name TEXT PRIMARY KEY, creation_timestamp BIGINT, "
        "last_updated_timestamp BIGINT, description TEXT)");
    Exec("CREATE TABLE registered_model_tags (name TEXT, key TEXT, value TEXT)");
    Exec(
        "CREATE TABLE model_versions (name TEXT, version BIGINT, run_id TEXT, source TEXT, "
        "status TEXT, current_stage TEXT, creation_timestamp BIGINT, "
        "last_updated_timestamp BIGINT)");
    Exec("CREATE TABLE model_version_tags (name TEXT, version BIGINT, key TEXT, value TEXT)");
  }

  void SeedRuns() {
    // Runs, by start_time: r1 1000, r4 1500, r2 2000, r5 2500, r3 3000. The default order is
    // start_time DESC: r3 r5 r2 r4 r1.
    struct Run {
      const char* id;
      const char* name;
      const char* user;
      const char* status;
      int64_t start;
      std::optional<int64_t> end;
      const char* stage;
    };
    for (const Run& r : {Run{"r1", "alpha", "alice", "FINISHED", 1000, 2000, "active"},
                         Run{"r2", "beta", "bob", "RUNNING", 2000, std::nullopt, "active"},
                         Run{"r3", "Alpha-2", "alice", "FAILED", 3000, 3500, "active"},
                         Run{"r4", "gamma", "carol", "FINISHED", 1500, 1600, "active"},
                         Run{"r5", "delta", "bob", "KILLED", 2500, 2600, "deleted"}}) {
      store::Value end;
      if (r.end) end.emplace<int64_t>(*r.end);
      Exec(
          "INSERT INTO runs (run_uuid, experiment_id, name, user_id, status, start_time, "
          "end_time, lifecycle_stage, artifact_uri) VALUES (?, 1, ?, ?, ?, ?, ?, ?, ?)",
          {r.id, r.name, r.user, r.status, r.start, end, r.stage,
           std::string("s3://bucket/") + r.id});
    }
    using KeyValue = std::tuple<const char*, const char*, const char*>;
    for (auto [run, key, value] : std::vector<KeyValue>{{"r1", "lr", "0.01"},
                                                        {"r1", "model", "BERT-base"},
                                                        {"r2", "lr", "0.1"},
                                                        {"r2", "model", "bert-large"},
                                                        {"r2", "tokenizer", "axb"},
                                                        {"r3", "lr", "0.01"},
                                                        {"r3", "optimizer", "adam"},
                                                        {"r4", "model", "gpt2"},
                                                        {"r4", "tokenizer", "a_b"},
                                                        {"r5", "lr", "1e-3"}}) {
      Exec("INSERT INTO params (run_uuid, key, value) VALUES (?, ?, ?)", {run, key, value});
    }
    for (auto [run, key, value] : std::vector<KeyValue>{{"r1", "team", "nlp"},
                                                        {"r1", "mlflow.runName", "alpha"},
                                                        {"r1", "note key", "hello world"},
                                                        {"r2", "team", "vision"},
                                                        {"r2", "quote", "it's"},
                                                        {"r3", "team", "nlp"},
                                                        {"r5", "team", "nlp"}}) {
      Exec("INSERT INTO tags (run_uuid, key, value) VALUES (?, ?, ?)", {run, key, value});
    }
    // r3's acc is NaN; r5 has no metrics.
    using Metric = std::tuple<const char*, const char*, std::optional<double>>;
    for (auto [run, key, value] : std::vector<Metric>{{"r1", "acc", 0.9},
                                                      {"r1", "val/loss", 0.3},
                                                      {"r2", "acc", 0.75},
                                                      {"r2", "val/loss", 0.5},
                                                      {"r3", "acc", std::nullopt},
                                                      {"r3", "my metric", 5.0},
                                                      {"r4", "acc", 0.95}}) {
      store::Value v;
      if (value) v.emplace<double>(*value);
      Exec(
          "INSERT INTO latest_metrics (run_uuid, key, step, timestamp, value, is_nan) "
          "VALUES (?, ?, 0, 0, ?, ?)",
          {run, key, v, int64_t{value.has_value() ? 0 : 1}});
    }
    Exec(
        "INSERT INTO datasets (dataset_uuid, experiment_id, name, digest, source_type, source) "
        "VALUES ('d1', 1, 'mnist', 'abc123', 'http', 'x'), "
        "('d2', 1, 'cifar10', 'def456', 'http', 'y')");
    Exec(
        "INSERT INTO run_inputs (run_uuid, dataset_uuid, context, tags_json) VALUES "
        "('r1', 'd1', 'training', '{}'), ('r1', 'd2', 'evaluation', '{}'), "
        "('r2', 'd2', 'training', '{}'), ('r3', 'd1', NULL, '{}')");
  }

  void SeedExperimentsAndLoggedModels() {
    Exec(
        "INSERT INTO experiments (experiment_id, name, artifact_location, lifecycle_stage, owner, "
        "creation_time, last_update_time) VALUES "
        "(1, 'exp-one', 'a', 'active', 'o', 100, 500), (2, 'Exp-Two', 'a', 'active', 'o', 200, "
        "300), (3, 'other', 'a', 'active', 'o', 300, 400)");
    Exec(
        "INSERT INTO experiment_tags (experiment_id, key, value) VALUES (1, 'team', 'nlp'), "
        "(2, 'team', 'cv')");

    // Logged models, by creation: m1 100, m2 200, m3 300.
    Exec(
        "INSERT INTO logged_models (model_id, experiment_id, name, artifact_location, "
        "creation_timestamp, last_updated_timestamp, status, lifecycle_stage, model_type, "
        "source_run_id, owner) VALUES "
        "('m1', 1, 'clf', 'a', 100, 150, 'READY', 'active', 'sklearn', 'r1', 'o'), "
        "('m2', 1, 'reg', 'a', 200, 250, 'PENDING', 'active', NULL, NULL, 'o'), "
        "('m3', 1, 'clf-v2', 'a', 300, 350, 'READY', 'active', 'pytorch', 'r2', 'o')");
    Exec(
        "INSERT INTO logged_model_params (model_id, key, value) VALUES ('m1', 'alpha', '0.5'), "
        "('m2', 'alpha', '1.0')");
    Exec(
        "INSERT INTO logged_model_tags (model_id, key, value) VALUES ('m1', 'stage', 'prod'), "
        "('m3', 'stage', 'dev')");
    // Latest is the highest timestamp, then step: m1 0.8, m2 0.9 (its step-6 point is older),
    // m3 NaN.
    Exec(
        "INSERT INTO logged_model_metrics (model_id, key, value, is_nan, step, timestamp) VALUES "
        "('m1', 'acc', 0.5, 0, 0, 10), ('m1', 'acc', 0.8, 0, 1, 20), "
        "('m2', 'acc', 0.9, 0, 5, 30), ('m2', 'acc', 0.1, 0, 6, 25), "
        "('m3', 'acc', 0.99, 0, 0, 40), ('m3', 'acc', NULL, 1, 1, 50)");
  }

  void SeedRegisteredModels() {
    Exec(
        "INSERT INTO registered_models (name, creation_timestamp, last_updated_timestamp) "
        "VALUES ('fraud', 100, 100), ('Fraud-v2', 200, 200), ('churn', 300, 300)");
    Exec("INSERT INTO registered_model_tags VALUES ('fraud', 'owner', 'risk')");
    Exec(
        "INSERT INTO model_versions (name, version, run_id, source, status, current_stage, "
        "creation_timestamp, last_updated_timestamp) VALUES "
        "('fraud', 1, 'r1', 's3://a/1', 'READY', 'None', 1, 1), "
        "('fraud', 2, 'r2', 's3://a/2', 'READY', 'None', 2, 2), "
        "('churn', 1, 'r3', 'runs:/r3/model', 'READY', 'None', 3, 3)");
    Exec("INSERT INTO model_version_tags VALUES ('fraud', 2, 'stage', 'prod')");
  }

  void Exec(const std::string& sql, std::vector<store::Value> params = {}) {
    Status s = db_->Write([&](store::Transaction& tx) -> Status {
      auto r = tx.Exec(sql, params);
      return r.ok() ? Status::Ok() : r.status();
    });
    ASSERT_TRUE(s.ok()) << sql << ": " << s.ToString();
  }

  // Runs `select WHERE <filter> ORDER BY <order>` and returns the first column of each row, or
  // one "error: ..." string, so that a failing expectation shows the message.
  Strings Search(const std::string& select, const FilterCompiler& compile_filter,
                 const OrderCompiler& compile_order, std::string_view filter,
                 const Strings& order_by) {
    auto parsed = ParseSearchFilter(filter);
    if (!parsed.ok()) return {"error: " + parsed.status().ToString()};
    auto where = compile_filter(*parsed);
    if (!where.ok()) return {"error: " + where.status().ToString()};
    std::vector<OrderBy> order;
    for (const std::string& clause : order_by) {
      auto o = ParseOrderBy(clause);
      if (!o.ok()) return {"error: " + o.status().ToString()};
      order.push_back(*o);
    }
    auto order_sql = compile_order(order);
    if (!order_sql.ok()) return {"error: " + order_sql.status().ToString()};
    std::string sql = select + " WHERE " + where->sql + " ORDER BY " + order_sql->sql;
    std::vector<store::Value> params = where->params;
    params.insert(params.end(), order_sql->params.begin(), order_sql->params.end());
    Strings ids;
    Status s = db_->Read([&](store::Transaction& tx) -> Status {
      TY_ASSIGN_OR_RETURN(store::Rows rows, tx.Query(sql, params));
      for (const store::Row& row : rows) ids.push_back(row.Text(0));
      return Status::Ok();
    });
    if (!s.ok()) return {"error: " + s.ToString() + " in " + sql};
    return ids;
  }

  Strings Runs(std::string_view filter, const Strings& order_by = {}) {
    return Search("SELECT runs.run_uuid FROM runs", CompileRunFilter, CompileRunOrderBy, filter,
                  order_by);
  }
  Strings Experiments(std::string_view filter, const Strings& order_by = {}) {
    return Search("SELECT experiments.experiment_id FROM experiments", CompileExperimentFilter,
                  CompileExperimentOrderBy, filter, order_by);
  }
  Strings LoggedModels(std::string_view filter, const Strings& order_by = {}) {
    return Search("SELECT logged_models.model_id FROM logged_models", CompileLoggedModelFilter,
                  CompileLoggedModelOrderBy, filter, order_by);
  }
  Strings RegisteredModels(std::string_view filter, const Strings& order_by = {}) {
    return Search("SELECT registered_models.name FROM registered_models",
                  CompileRegisteredModelFilter, CompileRegisteredModelOrderBy, filter, order_by);
  }
  Strings ModelVersions(std::string_view filter, const Strings& order_by = {}) {
    return Search(
        "SELECT model_versions.name || ':' || CAST(model_versions.version AS TEXT) FROM "
        "model_versions",
        CompileModelVersionFilter, CompileModelVersionOrderBy, filter, order_by);
  }

  std::unique_ptr<store::Database> db_;
};

TEST_F(SearchFilterSqlTest, RunMetrics) {
  EXPECT_EQ(Runs(""), (Strings{"r3", "r5", "r2", "r4", "r1"}));
  EXPECT_EQ(Runs("metrics.acc > 0.8"), (Strings{"r4", "r1"}));  // r3's NaN never matches
  EXPECT_EQ(Runs("metrics.acc >= 0.75 AND metrics.acc < 0.95"), (Strings{"r2", "r1"}));
  EXPECT_EQ(Runs("metrics.acc != 0.9"), (Strings{"r2", "r4"}));  // r5 lacks acc, r3 is NaN
  EXPECT_EQ(Runs("metrics.acc = 0.75"), (Strings{"r2"}));
  EXPECT_EQ(Runs("metrics.acc <= 0.9"), (Strings{"r2", "r1"}));
  EXPECT_EQ(Runs("metrics.val/loss <= 0.3"), (Strings{"r1"}));
  EXPECT_EQ(Runs("metrics.`val/loss` > 0.3"), (Strings{"r2"}));
  EXPECT_EQ(Runs("metrics.\"my metric\" = 5"), (Strings{"r3"}));
  EXPECT_EQ(Runs("metrics.missing > -1e300"), (Strings{}));
}

TEST_F(SearchFilterSqlTest, RunParamsAndTags) {
  EXPECT_EQ(Runs("params.lr = '0.01'"), (Strings{"r3", "r1"}));
  EXPECT_EQ(Runs("params.model LIKE 'bert%'"), (Strings{"r2"}));  // LIKE is case-sensitive
  EXPECT_EQ(Runs("params.model ILIKE 'bert%'"), (Strings{"r2", "r1"}));
  EXPECT_EQ(Runs("params.model ILIKE '%BASE'"), (Strings{"r1"}));
  EXPECT_EQ(Runs("params.lr != '0.01'"), (Strings{"r5", "r2"}));  // r4 has no lr: no match
  EXPECT_EQ(Runs("params.optimizer IS NULL"), (Strings{"r5", "r2", "r4", "r1"}));
  EXPECT_EQ(Runs("params.optimizer IS NOT NULL"), (Strings{"r3"}));
  EXPECT_EQ(Runs("params.tokenizer LIKE 'a_b'"), (Strings{"r2", "r4"}));
  EXPECT_EQ(Runs("params.tokenizer LIKE 'a\\_b'"), (Strings{"r4"}));  // \ escapes _
  EXPECT_EQ(Runs("tags.team != 'nlp'"), (Strings{"r2"}));             // r4 has no team tag
  EXPECT_EQ(Runs("tags.team IN ('nlp', 'vision')"), (Strings{"r3", "r5", "r2", "r1"}));
  EXPECT_EQ(Runs("tags.team NOT IN ('nlp')"), (Strings{"r2"}));
  EXPECT_EQ(Runs("tags.team = \"nlp\""), (Strings{"r3", "r5", "r1"}));
  EXPECT_EQ(Runs("tags.mlflow.runName = 'alpha'"), (Strings{"r1"}));
  EXPECT_EQ(Runs("tags.`note key` LIKE '%world'"), (Strings{"r1"}));
  EXPECT_EQ(Runs("tags.quote = 'it''s'"), (Strings{"r2"}));
  EXPECT_EQ(Runs("tags.quote = 'it\\'s'"), (Strings{"r2"}));
  EXPECT_EQ(Runs("params.lr = '0.01' AND metrics.acc > 0.5 AND tags.team = 'nlp'"),
            (Strings{"r1"}));
}

TEST_F(SearchFilterSqlTest, RunAttributes) {
  EXPECT_EQ(Runs("attributes.run_id IN ('r1', 'r4')"), (Strings{"r4", "r1"}));
  EXPECT_EQ(Runs("run_id NOT IN ('r1','r2')"), (Strings{"r3", "r5", "r4"}));
  EXPECT_EQ(Runs("attributes.run_id = 'r2'"), (Strings{"r2"}));
  EXPECT_EQ(Runs("attributes.status = 'FINISHED'"), (Strings{"r4", "r1"}));
  EXPECT_EQ(Runs("status != 'FINISHED' AND user_id = 'bob'"), (Strings{"r5", "r2"}));
  EXPECT_EQ(Runs("run_name LIKE 'alpha%'"), (Strings{"r1"}));
  EXPECT_EQ(Runs("run_name ILIKE 'alpha%'"), (Strings{"r3", "r1"}));
  EXPECT_EQ(Runs("attributes.`Run name` = 'beta'"), (Strings{"r2"}));
  EXPECT_EQ(Runs("attributes.start_time >= 2000"), (Strings{"r3", "r5", "r2"}));
  EXPECT_EQ(Runs("start_time > 1500.5 AND start_time < 2600"), (Strings{"r5", "r2"}));
  EXPECT_EQ(Runs("created < 1600"), (Strings{"r4", "r1"}));
  EXPECT_EQ(Runs("end_time IS NULL"), (Strings{"r2"}));
  EXPECT_EQ(Runs("end_time != 2000"), (Strings{"r3", "r5", "r4"}));  // NULL end_time: no match
  EXPECT_EQ(Runs("artifact_uri = 's3://bucket/r3'"), (Strings{"r3"}));
  EXPECT_EQ(Runs("lifecycle_stage = 'deleted'"), (Strings{"r5"}));
}

TEST_F(SearchFilterSqlTest, RunDatasets) {
  EXPECT_EQ(Runs("datasets.name = 'mnist'"), (Strings{"r3", "r1"}));
  EXPECT_EQ(Runs("datasets.context = 'training'"), (Strings{"r2", "r1"}));
  EXPECT_EQ(Runs("datasets.digest IN ('def456')"), (Strings{"r2", "r1"}));
  EXPECT_EQ(Runs("datasets.name LIKE 'cif%'"), (Strings{"r2", "r1"}));
  EXPECT_EQ(Runs("datasets.context != 'training'"), (Strings{"r1"}));  // r3's NULL context
  // Each comparison may be met by a different input (r1: mnist for training, cifar10 for eval).
  EXPECT_EQ(Runs("datasets.context = 'training' AND datasets.name = 'cifar10'"),
            (Strings{"r2", "r1"}));
}

TEST_F(SearchFilterSqlTest, RunOrderBy) {
  // Values first, then NaN (r3), then missing (r5), in both directions.
  EXPECT_EQ(Runs("", {"metrics.acc DESC"}), (Strings{"r4", "r1", "r2", "r3", "r5"}));
  EXPECT_EQ(Runs("", {"metrics.acc ASC"}), (Strings{"r2", "r1", "r4", "r3", "r5"}));
  EXPECT_EQ(Runs("metrics.acc > 0", {"metrics.acc"}), (Strings{"r2", "r1", "r4"}));
  // Params sort as strings; the tie between r1 and r3 falls to start_time DESC.
  EXPECT_EQ(Runs("", {"params.lr ASC"}), (Strings{"r3", "r1", "r2", "r5", "r4"}));
  EXPECT_EQ(Runs("", {"params.lr DESC"}), (Strings{"r5", "r2", "r3", "r1", "r4"}));
  EXPECT_EQ(Runs("", {"end_time ASC"}), (Strings{"r4", "r1", "r5", "r3", "r2"}));
  EXPECT_EQ(Runs("", {"end_time DESC"}), (Strings{"r3", "r5", "r1", "r4", "r2"}));
  EXPECT_EQ(Runs("", {"run_name"}), (Strings{"r3", "r1", "r2", "r5", "r4"}));
  EXPECT_EQ(Runs("", {"tags.team DESC", "start_time ASC"}),
            (Strings{"r2", "r1", "r5", "r3", "r4"}));
  EXPECT_EQ(Runs("", {"attributes.start_time ASC"}), (Strings{"r1", "r4", "r2", "r5", "r3"}));
  EXPECT_EQ(Runs("", {"run_id DESC"}), (Strings{"r5", "r4", "r3", "r2", "r1"}));
  EXPECT_EQ(Runs("tags.team = 'nlp'", {"user_id", "metrics.acc DESC"}),
            (Strings{"r1", "r3", "r5"}));
}

TEST_F(SearchFilterSqlTest, Experiments) {
  EXPECT_EQ(Experiments(""), (Strings{"3", "2", "1"}));  // creation_time DESC
  EXPECT_EQ(Experiments("name LIKE 'exp%'"), (Strings{"1"}));
  EXPECT_EQ(Experiments("name ILIKE 'exp%'"), (Strings{"2", "1"}));
  EXPECT_EQ(Experiments("attributes.creation_time > 150"), (Strings{"3", "2"}));
  EXPECT_EQ(Experiments("tags.team = 'nlp'"), (Strings{"1"}));
  EXPECT_EQ(Experiments("tags.team IS NULL"), (Strings{"3"}));
  EXPECT_EQ(Experiments("tags.team != 'nlp'"), (Strings{"2"}));
  EXPECT_EQ(Experiments("experiment_id IN ('1', '3')"), (Strings{"3", "1"}));
  EXPECT_EQ(Experiments("experiment_id = 2"), (Strings{"2"}));
  EXPECT_EQ(Experiments("last_update_time <= 400 AND name != 'other'"), (Strings{"2"}));
  EXPECT_EQ(Experiments("", {"last_update_time DESC"}), (Strings{"1", "3", "2"}));
  EXPECT_EQ(Experiments("", {"name"}), (Strings{"2", "1", "3"}));
  EXPECT_EQ(Experiments("", {"experiment_id DESC"}), (Strings{"3", "2", "1"}));
}

TEST_F(SearchFilterSqlTest, LoggedModels) {
  EXPECT_EQ(LoggedModels(""), (Strings{"m3", "m2", "m1"}));             // creation_timestamp DESC
  EXPECT_EQ(LoggedModels("metrics.acc > 0.7"), (Strings{"m2", "m1"}));  // m3's latest is NaN
  EXPECT_EQ(LoggedModels("metrics.acc < 0.2"), (Strings{}));  // m2's 0.1 is not its latest
  EXPECT_EQ(LoggedModels("metrics.acc = 0.8"), (Strings{"m1"}));
  EXPECT_EQ(LoggedModels("name LIKE 'clf%'"), (Strings{"m3", "m1"}));
  EXPECT_EQ(LoggedModels("status = 'READY' AND model_type IN ('sklearn', 'pytorch')"),
            (Strings{"m3", "m1"}));
  EXPECT_EQ(LoggedModels("params.alpha = '1.0'"), (Strings{"m2"}));
  EXPECT_EQ(LoggedModels("tags.stage != 'prod'"), (Strings{"m3"}));
  EXPECT_EQ(LoggedModels("source_run_id IS NULL"), (Strings{"m2"}));
  EXPECT_EQ(LoggedModels("creation_time >= 200"), (Strings{"m3", "m2"}));
  EXPECT_EQ(LoggedModels("attributes.last_updated_timestamp < 300"), (Strings{"m2", "m1"}));
  EXPECT_EQ(LoggedModels("model_id NOT IN ('m1')"), (Strings{"m3", "m2"}));
  EXPECT_EQ(LoggedModels("", {"metrics.acc DESC"}), (Strings{"m2", "m1", "m3"}));
  EXPECT_EQ(LoggedModels("", {"metrics.acc ASC"}), (Strings{"m1", "m2", "m3"}));
  EXPECT_EQ(LoggedModels("", {"name"}), (Strings{"m1", "m3", "m2"}));
}

TEST_F(SearchFilterSqlTest, RegisteredModelsAndVersions) {
  EXPECT_EQ(RegisteredModels(""), (Strings{"Fraud-v2", "churn", "fraud"}));  // name ASC
  EXPECT_EQ(RegisteredModels("name LIKE '%raud%'"), (Strings{"Fraud-v2", "fraud"}));
  EXPECT_EQ(RegisteredModels("name ILIKE 'fraud%'"), (Strings{"Fraud-v2", "fraud"}));
  EXPECT_EQ(RegisteredModels("name = 'churn'"), (Strings{"churn"}));
  EXPECT_EQ(RegisteredModels("tags.owner = 'risk'"), (Strings{"fraud"}));
  EXPECT_EQ(RegisteredModels("", {"creation_timestamp DESC"}),
            (Strings{"churn", "Fraud-v2", "fraud"}));

  EXPECT_EQ(ModelVersions(""), (Strings{"churn:1", "fraud:2", "fraud:1"}));
  EXPECT_EQ(ModelVersions("name = 'fraud'"), (Strings{"fraud:2", "fraud:1"}));
  EXPECT_EQ(ModelVersions("run_id IN ('r1', 'r3')"), (Strings{"churn:1", "fraud:1"}));
  EXPECT_EQ(ModelVersions("version_number > 1"), (Strings{"fraud:2"}));
  EXPECT_EQ(ModelVersions("source_path LIKE 'runs:/%'"), (Strings{"churn:1"}));
  EXPECT_EQ(ModelVersions("tags.stage = 'prod'"), (Strings{"fraud:2"}));
  EXPECT_EQ(ModelVersions("name = 'fraud'", {"version_number ASC"}),
            (Strings{"fraud:1", "fraud:2"}));
}

TEST_F(SearchFilterSqlTest, HostileKeysAndValuesAreData) {
  EXPECT_EQ(Runs("params.`x'); DROP TABLE runs; --` = 'y'"), (Strings{}));
  EXPECT_EQ(Runs("run_name = 'x'' OR 1=1 --'"), (Strings{}));
  EXPECT_EQ(Runs("").size(), 5u);
}

}  // namespace
}  // namespace trainyard::tracking
