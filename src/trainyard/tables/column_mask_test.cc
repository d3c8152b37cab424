// Column masks: each kind on each type it keeps, the pairs it refuses, and the masking reader
// (masks, a filter over masked values, projection).
#include "trainyard/tables/column_mask.h"

#include <arrow/json/from_string.h>
#include <gtest/gtest.h>

#include "trainyard/common/strings.h"
#include "trainyard/testing/status_matchers.h"

namespace trainyard::tables {
namespace {

std::shared_ptr<arrow::Array> Json(std::shared_ptr<arrow::DataType> t, const char* text) {
  return arrow::json::ArrayFromJSONString(std::move(t), text).ValueOrDie();
}

std::string Masked(MaskKind kind, std::shared_ptr<arrow::DataType> t, const char* values) {
  auto in = Json(t, values);
  auto out = MaskArray(kind, *in);
  EXPECT_TRUE(out.ok()) << out.status().ToString();
  if (!out.ok()) return "";
  EXPECT_TRUE((*out)->type()->Equals(*t)) << (*out)->type()->ToString();
  EXPECT_EQ((*out)->length(), in->length());
  return (*out)->ToString();
}

std::string Strings(std::shared_ptr<arrow::DataType> t, const char* values) {
  return Json(std::move(t), values)->ToString();
}

TEST(ColumnMaskTest, KindsNamesAndErrors) {
  for (const char* name : {"redact", "hash", "null", "last4"}) {
    TY_ASSERT_OK_AND_ASSIGN(MaskKind k, ParseMaskKind(name));
    EXPECT_EQ(MaskKindName(k), name);
  }
  TY_ASSERT_OK_AND_ASSIGN(MaskKind upper, ParseMaskKind("LAST4"));
  EXPECT_EQ(upper, MaskKind::kLast4);
  TY_EXPECT_ERROR(ParseMaskKind("blur", "mask.kind").status(), StatusCode::kInvalidArgument,
                  "mask.kind: must be redact, hash, null or last4 (got 'blur')");
}

TEST(ColumnMaskTest, RedactKeepsTheTypeAndNulls) {
  EXPECT_EQ(Masked(MaskKind::kRedact, arrow::utf8(), R"(["alice@x.com", null, ""])"),
            Strings(arrow::utf8(), R"(["***", null, "***"])"));
  EXPECT_EQ(Masked(MaskKind::kRedact, arrow::large_utf8(), R"(["a"])"),
            Strings(arrow::large_utf8(), R"(["***"])"));
  EXPECT_EQ(Masked(MaskKind::kRedact, arrow::binary(), R"(["\u0001\u0002"])"),
            Strings(arrow::binary(), R"(["***"])"));
}

TEST(ColumnMaskTest, HashIsStableSha256Hex) {
  std::string h = Sha256Hex("alice@x.com");
  std::string expected = "[\"" + h + "\", null, \"" + h + "\"]";
  EXPECT_EQ(Masked(MaskKind::kHash, arrow::utf8(), R"(["alice@x.com", null, "alice@x.com"])"),
            Strings(arrow::utf8(), expected.c_str()));
  EXPECT_EQ(Sha256Hex("").size(), 64u);
  auto bin = MaskArray(MaskKind::kHash, *Json(arrow::large_binary(), R"(["abc"])"));
  TY_ASSERT_OK(bin.status());
  EXPECT_EQ(std::static_pointer_cast<arrow::LargeBinaryArray>(*bin)->GetString(0),
            Sha256Hex("abc"));
}

TEST(ColumnMaskTest, Last4KeepsTheLastFourCharacters) {
  EXPECT_EQ(Masked(MaskKind::kLast4, arrow::utf8(),
                   R"(["4111-1111-1111-1234", "12345", "1234", "ab", "", null])"),
            Strings(arrow::utf8(), R"(["***************1234", "*2345", "****", "**", "", null])"));
  // Characters, not bytes: "über-straße" has 11 characters, 13 bytes.
  EXPECT_EQ(Masked(MaskKind::kLast4, arrow::large_utf8(), R"(["über-straße"])"),
            Strings(arrow::large_utf8(), R"(["*******raße"])"));
}

TEST(ColumnMaskTest, NullMasksAnyType) {
  EXPECT_EQ(Masked(MaskKind::kNull, arrow::int64(), "[1, null, 3]"),
            Strings(arrow::int64(), "[null, null, null]"));
  EXPECT_EQ(Masked(MaskKind::kNull, arrow::timestamp(arrow::TimeUnit::MICRO, "UTC"), "[1]"),
            Strings(arrow::timestamp(arrow::TimeUnit::MICRO, "UTC"), "[null]"));
  auto list = arrow::list(arrow::int32());
  EXPECT_EQ(Masked(MaskKind::kNull, list, "[[1, 2]]"), Strings(list, "[null]"));
}

TEST(ColumnMaskTest, RefusesKindsThatCannotKeepTheType) {
  TY_EXPECT_OK(CheckMaskable(MaskKind::kNull, *arrow::float64(), "score"));
  TY_EXPECT_OK(CheckMaskable(MaskKind::kHash, *arrow::binary(), "blob"));
  TY_EXPECT_ERROR(CheckMaskable(MaskKind::kRedact, *arrow::int64(), "salary"),
                  StatusCode::kInvalidArgument, "column \"salary\" of type int64; use null");
  TY_EXPECT_ERROR(CheckMaskable(MaskKind::kHash, *arrow::date32(), "born"),
                  StatusCode::kInvalidArgument, "born");
  TY_EXPECT_ERROR(CheckMaskable(MaskKind::kLast4, *arrow::binary(), "blob"),
                  StatusCode::kInvalidArgument, "use redact, hash or null");
  TY_EXPECT_ERROR(MaskArray(MaskKind::kLast4, *Json(arrow::int64(), "[1]")).status(),
                  StatusCode::kInvalidArgument, "last4");
}

class VectorReader : public arrow::RecordBatchReader {
 public:
  explicit VectorReader(std::vector<std::shared_ptr<arrow::RecordBatch>> batches)
      : batches_(std::move(batches)) {}
  std::shared_ptr<arrow::Schema> schema() const override { return batches_[0]->schema(); }
  arrow::Status ReadNext(std::shared_ptr<arrow::RecordBatch>* batch) override {
    *batch = next_ < batches_.size() ? batches_[next_++] : nullptr;
    return arrow::Status::OK();
  }

 private:
  std::vector<std::shared_ptr<arrow::RecordBatch>> batches_;
  size_t next_ = 0;
};

TEST(ColumnMaskTest, MaskRowsMasksFiltersOverMaskedValuesAndProjects) {
  auto schema = arrow::schema({arrow::field("id", arrow::int64(), false),
                               arrow::field("email", arrow::utf8()),
                               arrow::field("salary", arrow::int64(), false)});
  auto batch = [&](const char* ids, const char* emails, const char* salaries) {
    return arrow::RecordBatch::Make(
        schema, Json(arrow::int64(), ids)->length(),
        {Json(arrow::int64(), ids), Json(arrow::utf8(), emails), Json(arrow::int64(), salaries)});
  };
  std::vector<std::shared_ptr<arrow::RecordBatch>> batches = {
      batch("[1, 2]", R"(["a@x.com", "b@x.com"])", "[10, 20]"),
      batch("[3]", R"(["secret@x.com"])", "[30]")};
  std::map<std::string, MaskKind> masks = {{"email", MaskKind::kRedact},
                                           {"salary", MaskKind::kNull}};
  // A filter over the raw value finds nothing: it sees "***".
  auto probe = Predicate::Parse("email = 'secret@x.com'");
  TY_ASSERT_OK_AND_ASSIGN(auto reader,
                          MaskRows(std::make_unique<VectorReader>(batches), masks, *probe, {"id"}));
  EXPECT_EQ(reader->schema()->ToString(), "id: int64 not null");
  auto table = arrow::Table::FromRecordBatchReader(reader.get());
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  EXPECT_EQ((*table)->num_rows(), 0);
  // Over the masked value it matches every row; masked columns come back masked.
  TY_ASSERT_OK_AND_ASSIGN(reader, MaskRows(std::make_unique<VectorReader>(batches), masks,
                                           *Predicate::Parse("email = '***' AND id >= 2"), {}));
  EXPECT_EQ(reader->schema()->field(2)->nullable(), true);  // null mask: nullable
  auto all = arrow::Table::FromRecordBatchReader(reader.get()).ValueOrDie();
  ASSERT_EQ(all->num_rows(), 2);
  EXPECT_EQ(
      all->column(0)->ToString(),
      arrow::ChunkedArray({Json(arrow::int64(), "[2]"), Json(arrow::int64(), "[3]")}).ToString());
  EXPECT_EQ(all->column(1)->chunk(1)->ToString(), Strings(arrow::utf8(), R"(["***"])"));
  EXPECT_EQ(all->column(2)->null_count(), 2);
  TY_EXPECT_ERROR(
      MaskRows(std::make_unique<VectorReader>(batches), masks, std::nullopt, {"nope"}).status(),
      StatusCode::kInvalidArgument, "no column 'nope'");
}

}  // namespace
}  // namespace trainyard::tables
