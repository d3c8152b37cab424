// Table policies as pure functions: validation when set, what applies to a reader, the mask
// body decoder and the refusal of direct access.
#include "trainyard/catalog/table_policy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "trainyard/testing/status_matchers.h"

namespace trainyard::catalog {
namespace {

using ::testing::HasSubstr;

std::vector<ColumnInfo> Columns() {
  return {{.name = "id", .type_text = "bigint"},
          {.name = "region", .type_text = "string"},
          {.name = "Email", .type_text = "string"},
          {.name = "salary", .type_text = "bigint"}};
}

TableInfo Governed() {
  TableInfo t;
  t.full_name = "main.support.tickets";
  t.columns = Columns();
  t.row_filter = RowFilterInfo{"region = 'EU' OR is_member('leads')", {"region"}};
  t.columns[2].mask = ColumnMaskInfo{tables::MaskKind::kLast4, {"pii-readers", "carol"}};
  t.columns[3].mask = ColumnMaskInfo{tables::MaskKind::kNull, {}};
  return t;
}

TEST(TablePolicyTest, ValidatesRowFilters) {
  TY_ASSERT_OK_AND_ASSIGN(auto p,
                          ValidateRowFilter(Columns(), "region = current_user() OR id < 5"));
  EXPECT_EQ(p.Columns(), (std::vector<std::string>{"id", "region"}));
  TY_EXPECT_ERROR(ValidateRowFilter(Columns(), "").status(), StatusCode::kInvalidArgument,
                  "predicate: required");
  TY_EXPECT_ERROR(ValidateRowFilter(Columns(), "region = ").status(), StatusCode::kInvalidArgument,
                  "predicate: filter: at offset");
  TY_EXPECT_ERROR(ValidateRowFilter(Columns(), "country = 'EU'").status(),
                  StatusCode::kInvalidArgument, "no column \"country\"");
  TY_EXPECT_ERROR(ValidateRowFilter(Columns(), "id = current_user()").status(),
                  StatusCode::kInvalidArgument, "\"id\"");
  TY_EXPECT_ERROR(ValidateRowFilter(Columns(), std::string(kMaxRowFilterLength + 1, ' ')).status(),
                  StatusCode::kInvalidArgument, "at most");
}

TEST(TablePolicyTest, ValidatesMasksAgainstTheColumnsType) {
  TY_ASSERT_OK_AND_ASSIGN(size_t i,
                          ValidateColumnMask(Columns(), "email", tables::MaskKind::kHash));
  EXPECT_EQ(i, 2u);  // case-insensitive when no exact match
  TY_EXPECT_ERROR(ValidateColumnMask(Columns(), "phone", tables::MaskKind::kNull).status(),
                  StatusCode::kInvalidArgument, "column: the table has no column 'phone'");
  TY_EXPECT_ERROR(ValidateColumnMask(Columns(), "salary", tables::MaskKind::kLast4).status(),
                  StatusCode::kInvalidArgument, "column \"salary\" of type int64; use null");
  TY_EXPECT_OK(ValidateColumnMask(Columns(), "salary", tables::MaskKind::kNull).status());
}

TEST(TablePolicyTest, PolicyForAReader) {
  TableInfo t = Governed();
  EXPECT_TRUE(HasPolicies(t));
  // A stranger: the filter and both masks.
  TY_ASSERT_OK_AND_ASSIGN(ReadPolicy bob, PolicyFor(t, {"bob", {"all"}}));
  ASSERT_TRUE(bob.row_filter.has_value());
  EXPECT_EQ(bob.row_filter->ToString(), "region = 'EU'");
  EXPECT_EQ(bob.masks.size(), 2u);
  EXPECT_EQ(bob.masks.at("Email"), tables::MaskKind::kLast4);
  EXPECT_TRUE(bob.restricted());
  // A lead sees every row; a pii-reader (through a group) raw emails; carol by name.
  TY_ASSERT_OK_AND_ASSIGN(ReadPolicy lead, PolicyFor(t, {"ann", {"leads", "pii-readers"}}));
  EXPECT_FALSE(lead.row_filter.has_value());
  EXPECT_EQ(lead.masks.size(), 1u);
  EXPECT_EQ(lead.masks.count("salary"), 1u);
  TY_ASSERT_OK_AND_ASSIGN(ReadPolicy carol, PolicyFor(t, {"carol", {}}));
  EXPECT_EQ(carol.masks.count("Email"), 0u);
  // Without policies, nobody is restricted.
  TableInfo plain;
  plain.columns = Columns();
  EXPECT_FALSE(HasPolicies(plain));
  TY_ASSERT_OK_AND_ASSIGN(ReadPolicy none, PolicyFor(plain, {"bob", {}}));
  EXPECT_FALSE(none.restricted());
  // A stored filter that does not parse fails closed.
  t.row_filter->predicate = "region = ";
  EXPECT_THAT(PolicyFor(t, {"bob", {}}), StatusIs(StatusCode::kFailedPrecondition));
}

TEST(TablePolicyTest, DirectAccessIsRefusedWithPolicies) {
  TableInfo t = Governed();
  TY_EXPECT_ERROR(CheckDirectAccess(t), StatusCode::kPermissionDenied, "has a row filter");
  t.row_filter.reset();
  TY_EXPECT_ERROR(CheckDirectAccess(t), StatusCode::kPermissionDenied, "column masks");
  TableInfo plain;
  TY_EXPECT_OK(CheckDirectAccess(plain));
}

TEST(TablePolicyTest, DecodesMaskBodies) {
  TY_ASSERT_OK_AND_ASSIGN(auto m,
                          DecodeColumnMask(R"({"kind": "LAST4", "except": ["a", "b", "a"]})"));
  EXPECT_EQ(m.kind, tables::MaskKind::kLast4);
  EXPECT_EQ(m.except, (std::vector<std::string>{"a", "b"}));
  TY_ASSERT_OK_AND_ASSIGN(auto bare, DecodeColumnMask(R"({"kind": "null"})"));
  EXPECT_TRUE(bare.except.empty());
  TY_EXPECT_ERROR(DecodeColumnMask("[]").status(), StatusCode::kInvalidArgument, "JSON object");
  TY_EXPECT_ERROR(DecodeColumnMask("{}").status(), StatusCode::kInvalidArgument, "kind");
  TY_EXPECT_ERROR(DecodeColumnMask(R"({"kind": "blur"})").status(), StatusCode::kInvalidArgument,
                  "kind: must be redact, hash, null or last4");
  TY_EXPECT_ERROR(DecodeColumnMask(R"({"kind": "hash", "except": [1]})").status(),
                  StatusCode::kInvalidArgument, "except[0]");
  TY_EXPECT_ERROR(DecodeColumnMask(R"({"kind": "hash", "except": [""]})").status(),
                  StatusCode::kInvalidArgument, "except[0]: empty");
  TY_EXPECT_ERROR(DecodeColumnMask(R"({"kind": "hash", "excpt": []})").status(),
                  StatusCode::kInvalidArgument, "unknown field 'excpt'");
  std::string many = R"({"kind": "hash", "except": [)";
  for (size_t i = 0; i <= kMaxMaskExceptions; ++i)
    many += (i ? ",\"u" : "\"u") + std::to_string(i) + "\"";
  TY_EXPECT_ERROR(DecodeColumnMask(many + "]}").status(), StatusCode::kInvalidArgument,
                  "except: at most");
}

}  // namespace
}  // namespace trainyard::catalog
