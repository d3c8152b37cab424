// Predicate: the filter grammar, its printing, row evaluation and pruning by statistics.
#include "trainyard/tables/predicate.h"

#include <arrow/json/from_string.h>
#include <gtest/gtest.h>

#include "trainyard/testing/status_matchers.h"

namespace trainyard::tables {
namespace {

std::shared_ptr<arrow::RecordBatch> Batch() {
  auto schema = arrow::schema(
      {arrow::field("id", arrow::int64()), arrow::field("lang", arrow::utf8()),
       arrow::field("day", arrow::date32()), arrow::field("score", arrow::float64())});
  auto j = [](std::shared_ptr<arrow::DataType> t, const char* text) {
    return arrow::json::ArrayFromJSONString(t, text).ValueOrDie();
  };
  return arrow::RecordBatch::Make(
      schema, 4,
      {j(arrow::int64(), "[1, 5, 9, null]"), j(arrow::utf8(), R"(["en", "de", null, "it's"])"),
       j(arrow::date32(), "[19000, 19001, 19002, null]"),
       j(arrow::float64(), "[0.5, 1.5, null, 2.5]")});
}

std::vector<bool> Mask(const std::string& text) {
  auto p = Predicate::Parse(text);
  EXPECT_TRUE(p.ok()) << text << ": " << p.status().ToString();
  if (!p.ok()) return {};
  auto mask = p->Evaluate(*Batch());
  EXPECT_TRUE(mask.ok()) << text << ": " << mask.status().ToString();
  if (!mask.ok()) return {};
  std::vector<bool> out;
  for (int64_t i = 0; i < (*mask)->length(); ++i) {
    EXPECT_TRUE((*mask)->IsValid(i));
    out.push_back((*mask)->Value(i));
  }
  return out;
}

TEST(PredicateTest, EvaluatesWithSqlNullSemantics) {
  using V = std::vector<bool>;
  EXPECT_EQ(Mask("id > 3"), (V{false, true, true, false}));
  EXPECT_EQ(Mask("id > 3 AND lang = 'de'"), (V{false, true, false, false}));
  EXPECT_EQ(Mask("NOT (id > 3)"), (V{true, false, false, false}));  // NULL stays not TRUE
  EXPECT_EQ(Mask("lang IS NULL OR id IN (1, 9)"), (V{true, false, true, false}));
  EXPECT_EQ(Mask("lang NOT IN ('en')"), (V{false, true, false, true}));
  EXPECT_EQ(Mask("lang = 'it''s'"), (V{false, false, false, true}));
  EXPECT_EQ(Mask("day >= '2022-01-09'"), (V{false, true, true, false}));
  EXPECT_EQ(Mask("score < 1"), (V{true, false, false, false}));
  EXPECT_EQ(Mask("id <> 5 and score is not null"), (V{true, false, false, false}));
  EXPECT_EQ(Mask("TRUE"), (V{true, true, true, true}));
  EXPECT_EQ(Mask("id = NULL"), (V{false, false, false, false}));
}

TEST(PredicateTest, ErrorsNameTheOffsetOrTheColumn) {
  TY_EXPECT_ERROR(Predicate::Parse("id >").status(), StatusCode::kInvalidArgument,
                  "at offset 4: expected a literal after '>'");
  TY_EXPECT_ERROR(Predicate::Parse("id > 5 AND").status(), StatusCode::kInvalidArgument,
                  "expected a column name");
  TY_EXPECT_ERROR(Predicate::Parse("lang = 'x").status(), StatusCode::kInvalidArgument,
                  "unterminated");
  TY_EXPECT_ERROR(Predicate::Parse("(id > 5").status(), StatusCode::kInvalidArgument,
                  "expected ')'");
  TY_EXPECT_ERROR(Predicate::Parse("id > 5 5").status(), StatusCode::kInvalidArgument,
                  "offset 7: unexpected");
  TY_EXPECT_ERROR(Predicate::Parse(std::string(1000, '(')).status(), StatusCode::kInvalidArgument,
                  "nested too deeply");
  auto schema = Batch()->schema();
  TY_EXPECT_ERROR(Predicate::Parse("nope = 1")->Validate(*schema), StatusCode::kInvalidArgument,
                  "no column \"nope\"");
  TY_EXPECT_ERROR(Predicate::Parse("id = 'x'")->Validate(*schema), StatusCode::kInvalidArgument,
                  "\"id\"");
  TY_EXPECT_ERROR(Predicate::Parse("day = 'not a date'")->Validate(*schema),
                  StatusCode::kInvalidArgument, "not a valid date32");
}

TEST(PredicateTest, PrintsWhatItParses) {
  for (const char* text :
       {"id > 5", "(a = 1 AND NOT (b IS NULL))", "\"odd name\" IN (1, 2.5, 'x', TRUE, NULL)",
        "(x <= -3 OR y != 'it''s')", "\"and\" = 1"}) {
    TY_ASSERT_OK_AND_ASSIGN(Predicate p, Predicate::Parse(text));
    TY_ASSERT_OK_AND_ASSIGN(Predicate again, Predicate::Parse(p.ToString()));
    EXPECT_EQ(again.ToString(), p.ToString()) << text;
  }
  TY_ASSERT_OK_AND_ASSIGN(Predicate p, Predicate::Parse("b = 1 or a is null"));
  EXPECT_EQ(p.Columns(), (std::vector<std::string>{"a", "b"}));
}

TEST(PredicateTest, PrunesByStatistics) {
  FileStats f;
  f.num_records = 10;
  f.columns["id"] = {Literal(int64_t{10}), Literal(int64_t{20}), 0};
  f.columns["lang"] = {Literal(std::string("en")), Literal(std::string("en")), 0};
  f.columns["n"] = {std::nullopt, std::nullopt, 10};  // all null
  auto may = [&](const char* text) { return Predicate::Parse(text)->MayMatch(f); };
  EXPECT_TRUE(may("id = 15"));
  EXPECT_FALSE(may("id = 25"));
  EXPECT_FALSE(may("id < 10"));
  EXPECT_TRUE(may("id <= 10"));
  EXPECT_FALSE(may("id > 20 OR lang = 'de'"));
  EXPECT_TRUE(may("id > 20 OR lang = 'en'"));
  EXPECT_FALSE(may("NOT (lang = 'en')"));
  EXPECT_FALSE(may("lang != 'en'"));
  EXPECT_FALSE(may("n IS NOT NULL"));
  EXPECT_FALSE(may("n = 3"));
  EXPECT_FALSE(may("id IS NULL"));
  EXPECT_TRUE(may("unknown = 1"));  // no statistics: may match
  EXPECT_TRUE(may("id = 'x'"));     // not comparable: may match
  EXPECT_FALSE(may("id IN (1, 2, 30)"));
  EXPECT_TRUE(may("id IN (1, 12)"));
}

TEST(PredicateTest, ReaderFunctionsParsePrintAndBind) {
  TY_ASSERT_OK_AND_ASSIGN(Predicate p,
                          Predicate::Parse("lang = 'de' OR IS_MEMBER('support-leads') OR "
                                           "current_user() = lang OR lang < Current_User ( )"));
  EXPECT_TRUE(p.UsesReader());
  EXPECT_EQ(p.ToString(),
            "(((lang = 'de' OR is_member('support-leads')) OR lang = current_user()) OR "
            "lang < current_user())");
  TY_ASSERT_OK_AND_ASSIGN(Predicate again, Predicate::Parse(p.ToString()));
  EXPECT_EQ(again.ToString(), p.ToString());
  EXPECT_EQ(p.Columns(), (std::vector<std::string>{"lang"}));
  // A column of the function's name is still a column.
  TY_ASSERT_OK_AND_ASSIGN(Predicate column, Predicate::Parse("is_member = 1 AND current_user > 2"));
  EXPECT_FALSE(column.UsesReader());
  EXPECT_EQ(column.Columns(), (std::vector<std::string>{"current_user", "is_member"}));

  // A member of the group is exempt: the filter folds to TRUE.
  EXPECT_EQ(p.BindReader({"ann", {"all", "support-leads"}}).kind(), Predicate::Kind::kTrue);
  // Others get their name in place of current_user(), and is_member() gone.
  Predicate bob = p.BindReader({"bob", {"all"}});
  EXPECT_FALSE(bob.UsesReader());
  EXPECT_EQ(bob.ToString(), "((lang = 'de' OR lang = 'bob') OR lang < 'bob')");
  TY_ASSERT_OK_AND_ASSIGN(Predicate neg, Predicate::Parse("NOT is_member('x') AND id > 1"));
  EXPECT_EQ(neg.BindReader({"u", {"x"}}).kind(), Predicate::Kind::kFalse);
  EXPECT_EQ(neg.BindReader({"u", {}}).ToString(), "id > 1");
  // Binding leaves predicates without reader functions alone.
  TY_ASSERT_OK_AND_ASSIGN(Predicate plain, Predicate::Parse("TRUE AND id > 1"));
  EXPECT_EQ(plain.BindReader({"u", {}}).ToString(), "id > 1");
}

TEST(PredicateTest, UnboundReaderFunctionsAreCheckedButNotEvaluated) {
  auto schema = Batch()->schema();
  TY_ASSERT_OK_AND_ASSIGN(Predicate p, Predicate::Parse("lang = current_user() OR is_member('g')"));
  TY_EXPECT_OK(p.Validate(*schema));
  TY_EXPECT_ERROR(p.Evaluate(*Batch()).status(), StatusCode::kInvalidArgument, "bind");
  TY_EXPECT_ERROR(Predicate::Parse("id = current_user()")->Validate(*schema),
                  StatusCode::kInvalidArgument, "cannot be compared with current_user()");
  FileStats f;
  f.num_records = 1;
  f.columns["lang"] = {Literal(std::string("en")), Literal(std::string("en")), 0};
  EXPECT_TRUE(p.MayMatch(f));  // unknown until bound
  // Bound, it evaluates per row: "it's" reads its own rows, and the group is no help.
  TY_ASSERT_OK_AND_ASSIGN(auto mask, p.BindReader({"it's", {}}).Evaluate(*Batch()));
  EXPECT_EQ(mask->ToString(),
            arrow::json::ArrayFromJSONString(arrow::boolean(), "[false, false, false, true]")
                .ValueOrDie()
                ->ToString());
}

TEST(PredicateTest, ReaderFunctionErrors) {
  TY_EXPECT_ERROR(Predicate::Parse("is_member(group)").status(), StatusCode::kInvalidArgument,
                  "group name in single quotes");
  TY_EXPECT_ERROR(Predicate::Parse("is_member('')").status(), StatusCode::kInvalidArgument,
                  "empty");
  TY_EXPECT_ERROR(Predicate::Parse("is_member('a'").status(), StatusCode::kInvalidArgument,
                  "expected ')'");
  TY_EXPECT_ERROR(Predicate::Parse("lang IN ('a', current_user())").status(),
                  StatusCode::kInvalidArgument, "not allowed in an IN list");
  TY_EXPECT_ERROR(Predicate::Parse("current_user() = 'x'").status(), StatusCode::kInvalidArgument,
                  "expected a column name");
  TY_EXPECT_ERROR(Predicate::Parse("current_user(x) = lang").status(), StatusCode::kInvalidArgument,
                  "expected ')'");
}

}  // namespace
}  // namespace trainyard::tables
