// TableService on SQLite and PostgreSQL with the real CatalogService and IdentityService,
// Delta tables in a temporary directory, and a recording LineageRecorder.
#include "trainyard/catalog/table_service.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "trainyard/identity/identity_service.h"
#include "trainyard/testing/status_matchers.h"
#include "trainyard/testing/test_database.h"

namespace trainyard::catalog {
namespace {

using identity::Principal;
using ::testing::HasSubstr;

TEST(TableServicePolicy, ColumnsRoundTripThroughArrow) {
  auto schema = arrow::schema(
      {arrow::field("id", arrow::int64(), false), arrow::field("text", arrow::utf8()),
       arrow::field("messages", arrow::list(arrow::struct_({arrow::field("role", arrow::utf8()),
                                                            arrow::field("n", arrow::int32())})))});
  TY_ASSERT_OK_AND_ASSIGN(auto columns, ColumnsFromArrow(*schema));
  ASSERT_EQ(columns.size(), 3u);
  EXPECT_EQ(columns[0].type_text, "bigint");
  EXPECT_EQ(columns[0].type_name, "LONG");
  EXPECT_FALSE(columns[0].nullable);
  EXPECT_EQ(columns[2].type_text, "array<struct<role:string,n:int>>");
  EXPECT_EQ(columns[2].type_name, "ARRAY");
  TY_ASSERT_OK_AND_ASSIGN(auto back, ArrowFromColumns(columns));
  EXPECT_TRUE(back->Equals(*schema)) << back->ToString();
}

TEST(TableServicePolicy, ColumnsFromTypeTextAndErrorsNameTheColumn) {
  std::vector<ColumnInfo> columns{{.name = "a", .type_text = "bigint"},
                                  {.name = "b", .type_name = "STRING"},
                                  {.name = "c", .type_text = "int", .type_json = "{}"}};
  TY_ASSERT_OK_AND_ASSIGN(auto schema, ArrowFromColumns(columns));
  EXPECT_EQ(schema->ToString(), "a: int64\nb: string\nc: int32");
  columns.push_back({.name = "d", .type_text = "array<int>"});
  EXPECT_THAT(ArrowFromColumns(columns).status().message(), HasSubstr("columns[3].type_text"));
}

TEST(TableServicePolicy, PageTokens) {
  TY_ASSERT_OK_AND_ASSIGN(auto t, ParsePageToken(FormatPageToken(7, 2000)));
  EXPECT_EQ(t, std::make_pair(int64_t{7}, int64_t{2000}));
  for (const char* bad : {"", ":", "7", "7:", ":3", "a:1", "1:-2", "1:2:3", "1:2x", "-0:5"}) {
    EXPECT_THAT(ParsePageToken(bad).status().message(), HasSubstr("page_token")) << bad;
  }
  EXPECT_THAT(ParseImportMode("merge").status().message(), HasSubstr("mode"));
}

class RecordingLineage : public lineage::LineageRecorder {
 public:
  Status Record(const Principal&, const lineage::EdgeRecord&) override { return Status::Ok(); }
  Status RecordTableRead(const Principal&, const lineage::TableReadRecord& r) override {
    reads.push_back(r);
    return Status::Ok();
  }
  Status RecordTableWrite(const Principal&, const lineage::TableWriteRecord& w) override {
    writes.push_back(w);
    return Status::Ok();
  }
  std::vector<lineage::TableReadRecord> reads;
  std::vector<lineage::TableWriteRecord> writes;
};

std::vector<store::Migration> AllMigrations() {
  auto m = identity::IdentityService::Migrations();
  for (auto& c : CatalogService::Migrations()) m.push_back(std::move(c));
  return m;
}

class TableServiceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    root_ = std::filesystem::temp_directory_path() /
            ("table_service_test_" + std::to_string(::getpid()) + "_" + GetParam());
    std::filesystem::remove_all(root_);
    TY_ASSERT_OK_AND_ASSIGN(db_, store::OpenTestDatabase(GetParam(), AllMigrations()));
    ids_ = std::make_unique<identity::IdentityService>(*db_, clock_, random_);
    TY_ASSERT_OK(ids_->CreateUser(admin_, {.name = "bob"}));
    catalog_ = std::make_unique<CatalogService>(*db_, *ids_, clock_, random_,
                                                CatalogServiceOptions{root_.string()});
    TY_ASSERT_OK(catalog_->Init());
    TY_ASSERT_OK(catalog_->CreateCatalog(admin_, {.name = "main"}));
    TY_ASSERT_OK(catalog_->CreateSchema(admin_, {.catalog_name = "main", .name = "support"}));
    tables_ = std::make_unique<TableService>(*catalog_, &lineage_, clock_);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  Result<ImportTableResult> Import(std::string data, const Principal& who,
                                   ImportMode mode = ImportMode::kAppend) {
    ImportTableRequest r;
    r.full_name = "main.support.tickets";
    r.data = std::move(data);
    r.source_name = "t.jsonl";
    r.mode = mode;
    r.context.run_id = "r1";
    return tables_->Import(who, r);
  }

  std::filesystem::path root_;
  FakeClock clock_;
  SeededRandom random_{5};
  std::unique_ptr<store::Database> db_;
  std::unique_ptr<identity::IdentityService> ids_;
  std::unique_ptr<CatalogService> catalog_;
  RecordingLineage lineage_;
  std::unique_ptr<TableService> tables_;
  Principal admin_ = Principal::System();
  Principal bob_{"bob", false, "", ""};
};

TEST_P(TableServiceTest, ImportCreatesThenAppendsAndABadLineChangesNothing) {
  TY_ASSERT_OK_AND_ASSIGN(auto first,
                          Import("{\"id\":1,\"t\":\"a\"}\n{\"id\":2,\"t\":\"b\"}\n", admin_));
  EXPECT_TRUE(first.created);
  EXPECT_EQ(first.version, 1);
  EXPECT_EQ(first.rows, 2);
  TY_ASSERT_OK_AND_ASSIGN(auto row, catalog_->GetTable(admin_, "main.support.tickets"));
  ASSERT_EQ(row.columns.size(), 2u);
  EXPECT_EQ(row.columns[0].type_name, "LONG");
  auto bad = Import("{\"id\":3,\"t\":\"c\"}\n{\"id\":\"x\",\"t\":\"d\"}\n", admin_);
  EXPECT_THAT(bad.status().message(), HasSubstr("t.jsonl line 2"));
  TY_ASSERT_OK_AND_ASSIGN(auto d, tables_->Describe(admin_, "main.support.tickets"));
  EXPECT_EQ(d.delta.version, 1);
  EXPECT_EQ(d.delta.num_rows, 2);
  ASSERT_EQ(lineage_.writes.size(), 1u);
  EXPECT_EQ(lineage_.writes[0].version, 1);
  EXPECT_EQ(lineage_.writes[0].writer.key, "r1");
}

TEST_P(TableServiceTest, PagesStayOnTheirVersion) {
  TY_ASSERT_OK(Import("{\"id\":1}\n{\"id\":2}\n{\"id\":3}\n", admin_).status());
  ReadRowsRequest read{.full_name = "main.support.tickets", .max_rows = 2};
  TY_ASSERT_OK_AND_ASSIGN(auto page1, tables_->ReadRows(admin_, read));
  EXPECT_EQ(page1.rows->num_rows(), 2);
  ASSERT_FALSE(page1.next_page_token.empty());
  TY_ASSERT_OK(Import("{\"id\":4}\n", admin_).status());
  read.page_token = page1.next_page_token;
  TY_ASSERT_OK_AND_ASSIGN(auto page2, tables_->ReadRows(admin_, read));
  EXPECT_EQ(page2.version, 1);
  EXPECT_EQ(page2.rows->num_rows(), 1);
  EXPECT_TRUE(page2.next_page_token.empty());
  read.max_rows = 0;
  EXPECT_THAT(tables_->ReadRows(admin_, read).status().message(), HasSubstr("max_rows"));
}

TEST_P(TableServiceTest, ReadsNeedSelectAndWritesModify) {
  TY_ASSERT_OK(Import("{\"id\":1}\n", admin_).status());
  ReadRowsRequest read{.full_name = "main.support.tickets"};
  EXPECT_THAT(tables_->ReadRows(bob_, read), StatusIs(StatusCode::kPermissionDenied));
  TY_ASSERT_OK(catalog_->UpdatePermissions(
      admin_, SecurableType::kCatalog, "main",
      {{"bob", {Privilege::kUseCatalog, Privilege::kUseSchema, Privilege::kSelect}, {}}}));
  TY_ASSERT_OK_AND_ASSIGN(auto page, tables_->ReadRows(bob_, read));
  EXPECT_EQ(page.rows->num_rows(), 1);
  EXPECT_THAT(Import("{\"id\":2}\n", bob_), StatusIs(StatusCode::kPermissionDenied));
}

INSTANTIATE_TEST_SUITE_P(Backends, TableServiceTest, ::testing::Values("sqlite", "postgres"),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace trainyard::catalog
