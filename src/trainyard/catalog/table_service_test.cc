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
    TableServiceOptions options;
    // r1 is everyone's run; r-admin only the admin's; any other run does not exist.
    options.authorize_run = [](const Principal& who, const std::string& run_id) {
      if (run_id == "r1" || (run_id == "r-admin" && who.user == "admin")) return Status::Ok();
      if (run_id == "r-admin") return Status::PermissionDenied("no EDIT on experiment 1");
      return Status::NotFound("no run " + run_id);
    };
    tables_ = std::make_unique<TableService>(*catalog_, &lineage_, clock_, std::move(options));
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

// CheckImport refuses what Import refuses, with the same error, and writes nothing.
TEST_P(TableServiceTest, CheckImportRefusesAsImportDoesAndWritesNothing) {
  ImportTableRequest check{.full_name = "main.support.tickets"};
  check.context.run_id = "r1";
  auto same_refusal = [&](const Principal& who) {
    auto checked = tables_->CheckImport(who, check);
    auto imported = Import("{\"id\":1}\n", who);
    ASSERT_FALSE(checked.ok());
    EXPECT_EQ(checked.status().code(), imported.status().code());
    EXPECT_EQ(checked.status().message(), imported.status().message());
  };
  same_refusal(bob_);  // a new table: no CREATE TABLE on the schema
  TY_ASSERT_OK_AND_ASSIGN(bool created, tables_->CheckImport(admin_, check));
  EXPECT_TRUE(created);
  EXPECT_THAT(tables_->Describe(admin_, "main.support.tickets"), StatusIs(StatusCode::kNotFound));

  TY_ASSERT_OK(Import("{\"id\":1}\n", admin_).status());
  TY_ASSERT_OK(catalog_->UpdatePermissions(
      admin_, SecurableType::kCatalog, "main",
      {{"bob", {Privilege::kUseCatalog, Privilege::kUseSchema, Privilege::kSelect}, {}}}));
  same_refusal(bob_);  // an existing table: no MODIFY
  check.context.run_id = "r-nosuch";
  EXPECT_THAT(tables_->CheckImport(admin_, check),
              StatusIs(StatusCode::kNotFound, HasSubstr("run_id")));
  check.context.run_id = "r1";
  TY_ASSERT_OK_AND_ASSIGN(created, tables_->CheckImport(admin_, check));
  EXPECT_FALSE(created);
  TY_ASSERT_OK_AND_ASSIGN(auto d, tables_->Describe(admin_, "main.support.tickets"));
  EXPECT_EQ(d.delta.version, 1);  // only the one import
}

// A run id puts a read or write in that run's lineage: only who may log to the run may name
// it, and nothing is read, written or recorded otherwise.
TEST_P(TableServiceTest, ARunIdNeedsWriteOnTheRun) {
  TY_ASSERT_OK(Import("{\"id\":1}\n", admin_).status());
  TY_ASSERT_OK(catalog_->UpdatePermissions(
      admin_, SecurableType::kCatalog, "main",
      {{"bob",
        {Privilege::kUseCatalog, Privilege::kUseSchema, Privilege::kSelect, Privilege::kModify},
        {}}}));
  size_t writes = lineage_.writes.size();
  ImportTableRequest w{.full_name = "main.support.tickets", .data = "{\"id\":2}\n"};
  w.context.run_id = "r-admin";
  auto denied = tables_->Import(bob_, w);
  EXPECT_THAT(denied, StatusIs(StatusCode::kPermissionDenied));
  EXPECT_THAT(denied.status().message(), HasSubstr("run_id"));
  w.context.run_id = "r-nosuch";
  auto unknown = tables_->Import(bob_, w);
  EXPECT_THAT(unknown, StatusIs(StatusCode::kNotFound));
  EXPECT_THAT(unknown.status().message(), HasSubstr("run_id"));
  TY_ASSERT_OK_AND_ASSIGN(auto d, tables_->Describe(admin_, "main.support.tickets"));
  EXPECT_EQ(d.delta.version, 1);  // nothing was written
  EXPECT_EQ(lineage_.writes.size(), writes);

  ReadRowsRequest read{.full_name = "main.support.tickets"};
  read.context.run_id = "r-admin";
  EXPECT_THAT(tables_->ReadRows(bob_, read), StatusIs(StatusCode::kPermissionDenied));
  size_t reads = lineage_.reads.size();
  TY_ASSERT_OK(tables_->ReadRows(admin_, read).status());
  ASSERT_EQ(lineage_.reads.size(), reads + 1);
  EXPECT_EQ(lineage_.reads.back().run_id, "r-admin");
  EXPECT_THAT(tables_->Export(bob_, "main.support.tickets", {}, tables::ExportFormat::kJsonl,
                              [](std::string_view) { return Status::Ok(); }, {"r-admin"}),
              StatusIs(StatusCode::kPermissionDenied));
  EXPECT_THAT(tables_->DeleteRows(bob_, "main.support.tickets", "id = 1", {"r-admin"}),
              StatusIs(StatusCode::kPermissionDenied));
  // Without a way to check runs, a run id is refused rather than trusted.
  TableService unchecked(*catalog_, &lineage_, clock_);
  EXPECT_THAT(unchecked.ReadRows(admin_, read).status().message(), HasSubstr("run_id"));
}

// main.support.tickets with a row filter (EU rows, unless a lead), an email mask (last4,
// except pii readers) and a salary mask (null, for everyone); bob reads and modifies, carol is
// a lead and a pii reader through nested groups.
class GovernedTableTest : public TableServiceTest {
 protected:
  void SetUp() override {
    TableServiceTest::SetUp();
    if (HasFatalFailure()) return;
    TY_ASSERT_OK(ids_->CreateUser(admin_, {.name = "carol"}));
    for (const char* g : {"leads", "pii-readers", "staff"})
      TY_ASSERT_OK(ids_->CreateGroup(admin_, g));
    TY_ASSERT_OK(ids_->AddGroupMember(admin_, "staff", "carol"));
    TY_ASSERT_OK(ids_->AddGroupMember(admin_, "leads", "staff"));
    TY_ASSERT_OK(ids_->AddGroupMember(admin_, "pii-readers", "leads"));
    TY_ASSERT_OK(Import(R"({"id":1,"region":"EU","email":"anna@example.eu","salary":100}
{"id":2,"region":"US","email":"bill@example.com","salary":200}
{"id":3,"region":"EU","email":"cleo@example.eu","salary":300}
{"id":4,"region":"US","email":"dana@example.com","salary":400}
)",
                        admin_)
                     .status());
    for (const char* who : {"bob", "carol"}) {
      TY_ASSERT_OK(catalog_->UpdatePermissions(
          admin_, SecurableType::kCatalog, "main",
          {{who,
            {Privilege::kUseCatalog, Privilege::kUseSchema, Privilege::kSelect, Privilege::kModify},
            {}}}));
    }
    TY_ASSERT_OK(catalog_->SetRowFilter(admin_, kTable, "region = 'EU' OR is_member('leads')"));
    TY_ASSERT_OK(catalog_->SetColumnMask(admin_, kTable, "email",
                                         {tables::MaskKind::kLast4, {"pii-readers"}}));
    TY_ASSERT_OK(catalog_->SetColumnMask(admin_, kTable, "salary", {tables::MaskKind::kNull, {}}));
  }

  // The rows `who` reads, as "id:region:email:salary" (the columns read), sorted.
  std::vector<std::string> Rows(const Principal& who, std::string filter = "",
                                std::vector<std::string> columns = {}) {
    ReadRowsRequest read{
        .full_name = kTable, .columns = std::move(columns), .filter = std::move(filter)};
    auto page = tables_->ReadRows(who, read);
    EXPECT_TRUE(page.ok()) << page.status().ToString();
    if (!page.ok()) return {};
    std::vector<std::string> out;
    auto table = page->rows->CombineChunksToBatch().ValueOrDie();
    for (int64_t i = 0; i < table->num_rows(); ++i) {
      std::string row;
      for (int c = 0; c < table->num_columns(); ++c) {
        auto scalar = table->column(c)->GetScalar(i).ValueOrDie();
        row += (c ? ":" : "") + (scalar->is_valid ? scalar->ToString() : std::string("null"));
      }
      out.push_back(row);
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  static constexpr const char* kTable = "main.support.tickets";
  Principal carol_{"carol", false, "", ""};
};

TEST_P(GovernedTableTest, ReadsSeeOnlyFilteredRowsAndMaskedValues) {
  using V = std::vector<std::string>;
  EXPECT_EQ(Rows(bob_), (V{"1:EU:***********e.eu:null", "3:EU:***********e.eu:null"}));
  // A lead and pii reader (through nested groups) sees every row and raw emails, not salaries.
  EXPECT_EQ(Rows(carol_), (V{"1:EU:anna@example.eu:null", "2:US:bill@example.com:null",
                             "3:EU:cleo@example.eu:null", "4:US:dana@example.com:null"}));
  // Owners and admins are filtered too (the admin is in no group here).
  EXPECT_EQ(Rows(admin_).size(), 2u);
  // The caller's filter is ANDed with the row filter, and sees masked values only.
  EXPECT_EQ(Rows(bob_, "region = 'US'"), V{});
  EXPECT_EQ(Rows(bob_, "email = 'anna@example.eu'"), V{});
  EXPECT_EQ(Rows(bob_, "salary = 100"), V{});
  EXPECT_EQ(Rows(bob_, "email = '***********e.eu' AND id > 1", {"id"}), V{"3"});
  EXPECT_EQ(Rows(carol_, "email = 'anna@example.eu'", {"id", "region"}), V{"1:EU"});
  EXPECT_EQ(Rows(bob_, "region = current_user() OR id = 1", {"id"}), V{"1"});
  // Revoking a membership takes effect on the next read.
  TY_ASSERT_OK(ids_->RemoveGroupMember(admin_, "staff", "carol"));
  EXPECT_EQ(Rows(carol_), (V{"1:EU:***********e.eu:null", "3:EU:***********e.eu:null"}));
}

TEST_P(GovernedTableTest, ExportDescribeAndHistoryAreGovernedToo) {
  for (auto format : {tables::ExportFormat::kJsonl, tables::ExportFormat::kCsv,
                      tables::ExportFormat::kParquet, tables::ExportFormat::kArrowIpc}) {
    std::string out;
    TY_ASSERT_OK(tables_->Export(bob_, kTable, {}, format, [&](std::string_view b) {
      out.append(b);
      return Status::Ok();
    }));
    for (const char* secret : {"anna@", "bill", "dana", "example.com"}) {
      EXPECT_EQ(out.find(secret), std::string::npos) << secret << " in format " << int(format);
    }
    if (format == tables::ExportFormat::kJsonl) {
      EXPECT_EQ(out,
                "{\"id\":1,\"region\":\"EU\",\"email\":\"***********e.eu\",\"salary\":null}\n"
                "{\"id\":3,\"region\":\"EU\",\"email\":\"***********e.eu\",\"salary\":null}\n");
    }
  }
  TY_ASSERT_OK_AND_ASSIGN(auto d, tables_->Describe(bob_, kTable));
  EXPECT_TRUE(d.caller_policy.restricted());
  EXPECT_TRUE(d.table.storage_location.empty());
  ASSERT_TRUE(d.table.row_filter.has_value());
  TY_ASSERT_OK_AND_ASSIGN(auto c, tables_->Describe(carol_, kTable));
  EXPECT_EQ(c.caller_policy.masks.size(), 1u);  // salary
  EXPECT_FALSE(c.caller_policy.row_filter.has_value());
  TY_ASSERT_OK(catalog_->ClearColumnMask(admin_, kTable, "salary"));
  TY_ASSERT_OK_AND_ASSIGN(c, tables_->Describe(carol_, kTable));
  EXPECT_FALSE(c.caller_policy.restricted());
  EXPECT_FALSE(c.table.storage_location.empty());
  // A delete's predicate holds row values: hidden from restricted readers in the history.
  TY_ASSERT_OK(tables_->DeleteRows(carol_, kTable, "email = 'dana@example.com'").status());
  TY_ASSERT_OK_AND_ASSIGN(auto history, tables_->History(bob_, kTable));
  EXPECT_EQ(history[0].operation, "DELETE");
  EXPECT_THAT(history[0].operation_parameters["predicate"], HasSubstr("hidden"));
  TY_ASSERT_OK_AND_ASSIGN(history, tables_->History(carol_, kTable));
  EXPECT_THAT(history[0].operation_parameters["predicate"], HasSubstr("dana@example.com"));
}

TEST_P(GovernedTableTest, WritesCannotReachRowsOrValuesTheWriterCannotSee) {
  // Delete everything: only the rows bob sees go.
  TY_ASSERT_OK_AND_ASSIGN(auto deleted, tables_->DeleteRows(bob_, kTable, "TRUE"));
  EXPECT_EQ(deleted.rows_affected, 2);
  EXPECT_EQ(Rows(carol_),
            (std::vector<std::string>{"2:US:bill@example.com:null", "4:US:dana@example.com:null"}));
  // Deleting by a masked column's raw values would probe them.
  EXPECT_THAT(tables_->DeleteRows(bob_, kTable, "email = 'bill@example.com'"),
              StatusIs(StatusCode::kPermissionDenied, HasSubstr("masked")));
  // An overwrite would replace rows bob cannot see; an append is fine.
  EXPECT_THAT(Import("{\"id\":9,\"region\":\"EU\",\"email\":\"x\",\"salary\":1}\n", bob_,
                     ImportMode::kOverwrite),
              StatusIs(StatusCode::kPermissionDenied, HasSubstr("row filter")));
  TY_ASSERT_OK(
      Import("{\"id\":9,\"region\":\"US\",\"email\":\"x\",\"salary\":1}\n", bob_).status());
  EXPECT_EQ(Rows(carol_).size(), 3u);
  EXPECT_EQ(Rows(bob_).size(), 0u);
  // A lead sees every row, so may overwrite.
  TY_ASSERT_OK(Import("{\"id\":5,\"region\":\"EU\",\"email\":\"e\",\"salary\":1}\n", carol_,
                      ImportMode::kOverwrite)
                   .status());
  EXPECT_EQ(Rows(bob_).size(), 1u);
}

INSTANTIATE_TEST_SUITE_P(Backends, GovernedTableTest, ::testing::Values("sqlite", "postgres"),
                         [](const auto& param_info) { return param_info.param; });

INSTANTIATE_TEST_SUITE_P(Backends, TableServiceTest, ::testing::Values("sqlite", "postgres"),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace trainyard::catalog
