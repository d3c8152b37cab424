// CatalogService on SQLite and PostgreSQL (OpenTestDatabase), with the real IdentityService
// for users, groups, service principals and the audit log.
#include "trainyard/catalog/catalog_service.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "trainyard/identity/identity_service.h"
#include "trainyard/testing/status_matchers.h"
#include "trainyard/testing/test_database.h"

namespace trainyard::catalog {
namespace {

using identity::Principal;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<store::Migration> AllMigrations() {
  auto m = identity::IdentityService::Migrations();
  for (auto& c : CatalogService::Migrations()) m.push_back(std::move(c));
  return m;
}

class CatalogServiceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    TY_ASSERT_OK_AND_ASSIGN(db_, store::OpenTestDatabase(GetParam(), AllMigrations()));
    ids_ = std::make_unique<identity::IdentityService>(*db_, clock_, random_);
    for (const char* name : {"alice", "bob", "carol"}) {
      TY_ASSERT_OK(ids_->CreateUser(admin_, {.name = name}));
    }
    catalog_ = MakeService();
    TY_ASSERT_OK(catalog_->Init());
  }
  std::unique_ptr<CatalogService> MakeService() {
    return std::make_unique<CatalogService>(*db_, *ids_, clock_, random_,
                                            CatalogServiceOptions{"/data/managed"});
  }
  static Principal User(const std::string& name) { return Principal{name, false, "", ""}; }
  void Grant(const std::string& principal, SecurableType type, const std::string& name,
             std::vector<Privilege> add) {
    auto r = catalog_->UpdatePermissions(admin_, type, name, {{principal, add, {}}});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }
  void Revoke(const std::string& principal, SecurableType type, const std::string& name,
              std::vector<Privilege> remove) {
    auto r = catalog_->UpdatePermissions(admin_, type, name, {{principal, {}, remove}});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }
  // main.support.tickets, created by the admin.
  void MakeTable() {
    TY_ASSERT_OK(catalog_->CreateCatalog(admin_, {.name = "main"}));
    TY_ASSERT_OK(catalog_->CreateSchema(admin_, {.catalog_name = "main", .name = "support"}));
    TY_ASSERT_OK(catalog_->CreateTable(
        admin_, {.catalog_name = "main",
                 .schema_name = "support",
                 .name = "tickets",
                 .columns = {{.name = "id", .type_text = "bigint", .type_name = "LONG"}}}));
  }

  FakeClock clock_;
  SeededRandom random_{11};
  std::unique_ptr<store::Database> db_;
  std::unique_ptr<identity::IdentityService> ids_;
  std::unique_ptr<CatalogService> catalog_;
  Principal admin_ = Principal::System();
};

TEST_P(CatalogServiceTest, CreateGetUpdateDeleteAcrossTheHierarchy) {
  TY_ASSERT_OK_AND_ASSIGN(auto c,
                          catalog_->CreateCatalog(admin_, {.name = "Main", .comment = "x"}));
  EXPECT_EQ(c.name, "main");  // stored lower-cased, as UC does
  EXPECT_EQ(c.owner, "admin");
  EXPECT_EQ(c.id.size(), 36u);
  EXPECT_EQ(c.storage_location, "/data/managed/catalogs/" + c.id);
  TY_ASSERT_OK_AND_ASSIGN(
      auto s, catalog_->CreateSchema(admin_, {.catalog_name = "MAIN", .name = "support"}));
  EXPECT_EQ(s.full_name, "main.support");
  EXPECT_EQ(s.storage_location, c.storage_location + "/schemas/" + s.id);
  TY_ASSERT_OK_AND_ASSIGN(
      auto t,
      catalog_->CreateTable(
          admin_,
          {.catalog_name = "main",
           .schema_name = "support",
           .name = "tickets",
           .data_source_format = "delta",
           .columns = {
               {.name = "id", .type_text = "bigint"},
               {.name = "day", .type_text = "date", .position = 1, .partition_index = 0}}}));
  EXPECT_EQ(t.full_name, "main.support.tickets");
  EXPECT_EQ(t.storage_location, s.storage_location + "/tables/" + t.id);
  EXPECT_EQ(t.data_source_format, "DELTA");
  TY_ASSERT_OK_AND_ASSIGN(auto got, catalog_->GetTable(admin_, "Main.Support.TICKETS"));
  ASSERT_EQ(got.columns.size(), 2u);
  EXPECT_EQ(got.columns[1].partition_index, 0);
  TY_ASSERT_OK_AND_ASSIGN(auto by_id, catalog_->GetTableById(admin_, t.id));
  EXPECT_EQ(by_id.full_name, t.full_name);
  // Duplicates and unknown parents.
  EXPECT_THAT(catalog_->CreateCatalog(admin_, {.name = "MAIN"}),
              StatusIs(StatusCode::kAlreadyExists));
  EXPECT_THAT(catalog_->CreateSchema(admin_, {.catalog_name = "nope", .name = "x"}),
              StatusIs(StatusCode::kNotFound, HasSubstr("catalog 'nope'")));
  // Update and rename carry the children along.
  clock_.AdvanceMillis(5);
  TY_ASSERT_OK_AND_ASSIGN(
      auto renamed,
      catalog_->UpdateSchema(admin_, "main.support", {.new_name = "help", .comment = "renamed"}));
  EXPECT_EQ(renamed.full_name, "main.help");
  EXPECT_EQ(renamed.comment, "renamed");
  EXPECT_GT(renamed.updated_at, renamed.created_at);
  TY_ASSERT_OK_AND_ASSIGN(auto moved, catalog_->GetTable(admin_, "main.help.tickets"));
  EXPECT_EQ(moved.id, t.id);
  EXPECT_THAT(catalog_->GetTable(admin_, "main.support.tickets"), StatusIs(StatusCode::kNotFound));
  // Non-empty containers need force.
  EXPECT_THAT(catalog_->DeleteCatalog(admin_, "main", false),
              StatusIs(StatusCode::kFailedPrecondition, HasSubstr("force")));
  TY_ASSERT_OK(catalog_->DeleteCatalog(admin_, "main", true));
  EXPECT_THAT(catalog_->GetTable(admin_, "main.help.tickets"), StatusIs(StatusCode::kNotFound));
  // All of it survives a restart (the index is rebuilt from the store).
  TY_ASSERT_OK(catalog_->CreateCatalog(admin_, {.name = "again"}));
  auto restarted = MakeService();
  TY_ASSERT_OK(restarted->Init());
  TY_ASSERT_OK(restarted->GetCatalog(admin_, "again"));
  EXPECT_THAT(restarted->GetCatalog(admin_, "main"), StatusIs(StatusCode::kNotFound));
}

TEST_P(CatalogServiceTest, ListsPageByNameAndFilterWhatTheCallerMaySee) {
  TY_ASSERT_OK(catalog_->CreateCatalog(admin_, {.name = "main"}));
  TY_ASSERT_OK(catalog_->CreateSchema(admin_, {.catalog_name = "main", .name = "s"}));
  for (int i = 0; i < 7; ++i) {
    TY_ASSERT_OK(catalog_->CreateVolume(
        admin_, {.catalog_name = "main", .schema_name = "s", .name = "v" + std::to_string(i)}));
  }
  std::vector<std::string> seen;
  PageRequest page{.max_results = 3};
  int pages = 0;
  do {
    TY_ASSERT_OK_AND_ASSIGN(auto p, catalog_->ListVolumes(admin_, "main", "s", page));
    for (auto& v : p.items) seen.push_back(v.name);
    page.page_token = p.next_page_token;
    ++pages;
  } while (!page.page_token.empty() && pages < 10);
  EXPECT_THAT(seen, ElementsAre("v0", "v1", "v2", "v3", "v4", "v5", "v6"));
  EXPECT_EQ(pages, 3);
  EXPECT_THAT(catalog_->ListVolumes(admin_, "main", "s", {.max_results = -1}),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("max_results")));
  EXPECT_THAT(catalog_->ListVolumes(admin_, "main", "s", {.page_token = "garbage!"}),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("page_token")));
  // bob sees only what he may read.
  Principal bob = User("bob");
  EXPECT_THAT(catalog_->ListVolumes(bob, "main", "s", {}), StatusIs(StatusCode::kPermissionDenied));
  Grant("bob", SecurableType::kCatalog, "main", {Privilege::kUseCatalog});
  Grant("bob", SecurableType::kSchema, "main.s", {Privilege::kUseSchema});
  Grant("bob", SecurableType::kVolume, "main.s.v4", {Privilege::kReadVolume});
  TY_ASSERT_OK_AND_ASSIGN(auto visible, catalog_->ListVolumes(bob, "main", "s", {}));
  ASSERT_EQ(visible.items.size(), 1u);
  EXPECT_EQ(visible.items[0].name, "v4");
  TY_ASSERT_OK_AND_ASSIGN(auto catalogs, catalog_->ListCatalogs(User("carol"), {}));
  EXPECT_TRUE(catalogs.items.empty());
}

TEST_P(CatalogServiceTest, SelectNeedsUseCatalogAndUseSchemaAndIsInherited) {
  MakeTable();
  Principal bob = User("bob");
  EXPECT_THAT(catalog_->GetTable(bob, "main.support.tickets"),
              StatusIs(StatusCode::kPermissionDenied, HasSubstr("lacks SELECT")));
  // SELECT on the catalog is inherited by every table in it, but USE is still needed.
  Grant("bob", SecurableType::kCatalog, "main", {Privilege::kSelect});
  EXPECT_THAT(catalog_->GetTable(bob, "main.support.tickets"),
              StatusIs(StatusCode::kPermissionDenied, HasSubstr("lacks USE CATALOG")));
  Grant("bob", SecurableType::kCatalog, "main", {Privilege::kUseCatalog});
  EXPECT_THAT(catalog_->GetTable(bob, "main.support.tickets"),
              StatusIs(StatusCode::kPermissionDenied, HasSubstr("lacks USE SCHEMA")));
  Grant("bob", SecurableType::kSchema, "main.support", {Privilege::kUseSchema});
  TY_EXPECT_OK(catalog_->GetTable(bob, "main.support.tickets"));
  TY_EXPECT_OK(
      catalog_->Authorize(bob, Privilege::kSelect, SecurableType::kTable, "main.support.tickets"));
  EXPECT_THAT(
      catalog_->Authorize(bob, Privilege::kModify, SecurableType::kTable, "main.support.tickets"),
      StatusIs(StatusCode::kPermissionDenied));
  // Revocation takes effect on the next call.
  Revoke("bob", SecurableType::kCatalog, "main", {Privilege::kSelect});
  EXPECT_THAT(catalog_->GetTable(bob, "main.support.tickets"),
              StatusIs(StatusCode::kPermissionDenied, HasSubstr("lacks SELECT")));
  // ALL PRIVILEGES on the schema gives SELECT (and USE SCHEMA), but never MANAGE.
  Grant("bob", SecurableType::kSchema, "main.support", {Privilege::kAllPrivileges});
  TY_EXPECT_OK(catalog_->GetTable(bob, "main.support.tickets"));
  EXPECT_THAT(catalog_->DeleteTable(bob, "main.support.tickets"),
              StatusIs(StatusCode::kPermissionDenied, HasSubstr("MANAGE")));
  // Effective permissions say where each comes from.
  TY_ASSERT_OK_AND_ASSIGN(auto effective,
                          catalog_->GetEffectivePermissions(admin_, SecurableType::kTable,
                                                            "main.support.tickets", "bob"));
  ASSERT_EQ(effective.size(), 1u);
  bool found_inherited_all = false;
  for (const auto& e : effective[0].privileges) {
    if (e.privilege == Privilege::kAllPrivileges) {
      found_inherited_all = e.inherited && e.inherited_from_type == SecurableType::kSchema &&
                            e.inherited_from_name == "main.support";
    }
  }
  EXPECT_TRUE(found_inherited_all);
  TY_ASSERT_OK_AND_ASSIGN(auto direct,
                          catalog_->GetPermissions(admin_, SecurableType::kCatalog, "main"));
  ASSERT_EQ(direct.size(), 1u);
  EXPECT_THAT(direct[0].privileges, ElementsAre(Privilege::kUseCatalog));
}

TEST_P(CatalogServiceTest, CreatorsOwnWhatTheyCreateAndOwnershipTransfers) {
  TY_ASSERT_OK(catalog_->CreateCatalog(admin_, {.name = "main"}));
  Principal alice = User("alice"), bob = User("bob");
  EXPECT_THAT(catalog_->CreateSchema(alice, {.catalog_name = "main", .name = "a"}),
              StatusIs(StatusCode::kPermissionDenied, HasSubstr("CREATE SCHEMA")));
  Grant("alice", SecurableType::kCatalog, "main",
        {Privilege::kUseCatalog, Privilege::kCreateSchema});
  TY_ASSERT_OK_AND_ASSIGN(auto schema,
                          catalog_->CreateSchema(alice, {.catalog_name = "main", .name = "a"}));
  EXPECT_EQ(schema.owner, "alice");
  // The owner creates inside without further grants, and reads it.
  TY_ASSERT_OK(catalog_->CreateTable(alice, {.catalog_name = "main",
                                             .schema_name = "a",
                                             .name = "t",
                                             .columns = {{.name = "x", .type_text = "int"}}}));
  TY_EXPECT_OK(catalog_->GetTable(alice, "main.a.t"));
  // Only the owner or an admin transfers ownership; bob is not.
  EXPECT_THAT(catalog_->UpdateSchema(bob, "main.a", {.owner = "bob"}),
              StatusIs(StatusCode::kPermissionDenied, HasSubstr("owner")));
  EXPECT_THAT(catalog_->UpdateSchema(alice, "main.a", {.owner = "nobody"}),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("owner")));
  TY_ASSERT_OK_AND_ASSIGN(auto moved, catalog_->UpdateSchema(alice, "main.a", {.owner = "bob"}));
  EXPECT_EQ(moved.owner, "bob");
  // Now bob owns it (and the table inside, through it), alice no longer.
  EXPECT_THAT(catalog_->UpdateSchema(alice, "main.a", {.comment = "mine"}),
              StatusIs(StatusCode::kPermissionDenied));
  Grant("bob", SecurableType::kCatalog, "main", {Privilege::kUseCatalog});
  TY_EXPECT_OK(catalog_->GetTable(bob, "main.a.t"));
  TY_EXPECT_OK(catalog_->UpdateSchema(bob, "main.a", {.comment = "mine"}));
  // Scoped tokens never transfer ownership.
  Principal scoped{"bob", false, "t1", "job:j-1"};
  EXPECT_THAT(catalog_->UpdateSchema(scoped, "main.a", {.owner = "alice"}),
              StatusIs(StatusCode::kPermissionDenied, HasSubstr("scoped")));
}

TEST_P(CatalogServiceTest, ManageLetsANonOwnerGrantAndRevoke) {
  MakeTable();
  Principal alice = User("alice"), bob = User("bob");
  std::vector<PermissionChange> give_bob{{"bob", {Privilege::kSelect}, {}}};
  EXPECT_THAT(
      catalog_->UpdatePermissions(alice, SecurableType::kTable, "main.support.tickets", give_bob),
      StatusIs(StatusCode::kPermissionDenied, HasSubstr("MANAGE")));
  Grant("alice", SecurableType::kCatalog, "main", {Privilege::kUseCatalog});
  Grant("alice", SecurableType::kSchema, "main.support", {Privilege::kUseSchema});
  Grant("alice", SecurableType::kTable, "main.support.tickets", {Privilege::kManage});
  TY_ASSERT_OK_AND_ASSIGN(
      auto after,
      catalog_->UpdatePermissions(alice, SecurableType::kTable, "main.support.tickets", give_bob));
  EXPECT_EQ(after.size(), 2u);  // alice's MANAGE and bob's SELECT
  // MANAGE is not SELECT: alice manages without reading.
  EXPECT_THAT(
      catalog_->Authorize(alice, Privilege::kSelect, SecurableType::kTable, "main.support.tickets"),
      StatusIs(StatusCode::kPermissionDenied));
  // Bad changes: unknown principal, a privilege that does not apply here.
  EXPECT_THAT(catalog_->UpdatePermissions(admin_, SecurableType::kTable, "main.support.tickets",
                                          {{"ghost", {Privilege::kSelect}, {}}}),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("changes[0].principal")));
  EXPECT_THAT(catalog_->UpdatePermissions(admin_, SecurableType::kTable, "main.support.tickets",
                                          {{"bob", {Privilege::kCreateCatalog}, {}}}),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("CREATE CATALOG")));
  // Nothing was half-applied.
  TY_ASSERT_OK_AND_ASSIGN(auto grants, catalog_->GetPermissions(admin_, SecurableType::kTable,
                                                                "main.support.tickets", "bob"));
  ASSERT_EQ(grants.size(), 1u);
  EXPECT_THAT(grants[0].privileges, ElementsAre(Privilege::kSelect));
}

TEST_P(CatalogServiceTest, NestedGroupsGrantAndMembershipChangesTakeEffectAtOnce) {
  MakeTable();
  TY_ASSERT_OK(ids_->CreateGroup(admin_, "analysts"));
  TY_ASSERT_OK(ids_->CreateGroup(admin_, "data-scientists"));
  TY_ASSERT_OK(ids_->AddGroupMember(admin_, "analysts", "data-scientists"));
  TY_ASSERT_OK(ids_->AddGroupMember(admin_, "data-scientists", "carol"));
  Grant("analysts", SecurableType::kCatalog, "main",
        {Privilege::kUseCatalog, Privilege::kUseSchema, Privilege::kSelect});
  Principal carol = User("carol");
  TY_EXPECT_OK(catalog_->GetTable(carol, "main.support.tickets"));
  TY_ASSERT_OK(ids_->RemoveGroupMember(admin_, "data-scientists", "carol"));
  EXPECT_THAT(catalog_->GetTable(carol, "main.support.tickets"),
              StatusIs(StatusCode::kPermissionDenied));
  // A deleted group's grants go with it: a new group of the same name starts with none.
  TY_ASSERT_OK(ids_->AddGroupMember(admin_, "data-scientists", "carol"));
  TY_EXPECT_OK(catalog_->GetTable(carol, "main.support.tickets"));
  TY_ASSERT_OK(ids_->DeleteGroup(admin_, "analysts"));
  TY_ASSERT_OK(catalog_->DropGrantsOf("analysts"));
  TY_ASSERT_OK(ids_->CreateGroup(admin_, "analysts"));
  TY_ASSERT_OK(ids_->AddGroupMember(admin_, "analysts", "carol"));
  EXPECT_THAT(catalog_->GetTable(carol, "main.support.tickets"),
              StatusIs(StatusCode::kPermissionDenied));
  TY_ASSERT_OK_AND_ASSIGN(
      auto left, catalog_->GetPermissions(admin_, SecurableType::kCatalog, "main", "analysts"));
  EXPECT_TRUE(left.empty());
  // A group may own an object: its members are owners.
  TY_ASSERT_OK(catalog_->UpdateTable(admin_, "main.support.tickets", {.owner = "analysts"}));
  TY_EXPECT_OK(catalog_->DeleteTable(carol, "main.support.tickets"));
}

TEST_P(CatalogServiceTest, ServicePrincipalTokenReachesOnlyWhatItWasGranted) {
  MakeTable();
  TY_ASSERT_OK(catalog_->CreateTable(admin_, {.catalog_name = "main",
                                              .schema_name = "support",
                                              .name = "secrets",
                                              .columns = {{.name = "x", .type_text = "int"}}}));
  TY_ASSERT_OK_AND_ASSIGN(auto sp, ids_->CreateServicePrincipal(admin_, "trainer-bot"));
  EXPECT_EQ(sp.kind, identity::PrincipalKind::kServicePrincipal);
  Grant("trainer-bot", SecurableType::kCatalog, "main", {Privilege::kUseCatalog});
  Grant("trainer-bot", SecurableType::kSchema, "main.support", {Privilege::kUseSchema});
  Grant("trainer-bot", SecurableType::kTable, "main.support.tickets", {Privilege::kSelect});
  TY_ASSERT_OK_AND_ASSIGN(auto token,
                          ids_->CreateToken(admin_, {.user = "trainer-bot", .scope = "job:j-42"}));
  TY_ASSERT_OK_AND_ASSIGN(Principal job, ids_->Authenticate(token.first));
  EXPECT_EQ(job.scope, "job:j-42");
  TY_EXPECT_OK(catalog_->GetTable(job, "main.support.tickets"));
  EXPECT_THAT(catalog_->GetTable(job, "main.support.secrets"),
              StatusIs(StatusCode::kPermissionDenied));
  EXPECT_THAT(catalog_->UpdatePermissions(job, SecurableType::kTable, "main.support.secrets",
                                          {{"trainer-bot", {Privilege::kSelect}, {}}}),
              StatusIs(StatusCode::kPermissionDenied, HasSubstr("scoped")));
  // Even an admin's scoped token is not an admin to the catalog.
  Principal admin_scoped{"alice", true, "t", "job:j-1"};
  EXPECT_THAT(catalog_->GetTable(admin_scoped, "main.support.secrets"),
              StatusIs(StatusCode::kPermissionDenied));
}

TEST_P(CatalogServiceTest, ExternalObjectsNeedTheirPrivilegeAndAValidLocation) {
  TY_ASSERT_OK(catalog_->CreateCatalog(admin_, {.name = "main"}));
  TY_ASSERT_OK(catalog_->CreateSchema(admin_, {.catalog_name = "main", .name = "s"}));
  Principal alice = User("alice");
  Grant("alice", SecurableType::kSchema, "main.s",
        {Privilege::kUseSchema, Privilege::kCreateTable});
  Grant("alice", SecurableType::kCatalog, "main", {Privilege::kUseCatalog});
  CreateTableRequest ext{.catalog_name = "main",
                         .schema_name = "s",
                         .name = "ext",
                         .table_type = TableType::kExternal,
                         .columns = {{.name = "x", .type_text = "int"}},
                         .storage_location = "s3://bucket/data/ext"};
  EXPECT_THAT(catalog_->CreateTable(alice, ext),
              StatusIs(StatusCode::kPermissionDenied, HasSubstr("CREATE EXTERNAL TABLE")));
  Grant("alice", SecurableType::kMetastore, "", {Privilege::kCreateExternalTable});
  TY_ASSERT_OK_AND_ASSIGN(auto t, catalog_->CreateTable(alice, ext));
  EXPECT_EQ(t.storage_location, "s3://bucket/data/ext");
  EXPECT_EQ(t.table_type, TableType::kExternal);
  ext.name = "bad";
  ext.storage_location = "relative/path";
  EXPECT_THAT(catalog_->CreateTable(alice, ext),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("storage_location")));
  ext.storage_location = "/data/../etc";
  EXPECT_THAT(catalog_->CreateTable(alice, ext),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("..")));
  ext.storage_location = "";
  EXPECT_THAT(catalog_->CreateTable(alice, ext),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("required")));
}

TEST_P(CatalogServiceTest, BadInputNamesTheField) {
  TY_ASSERT_OK(catalog_->CreateCatalog(admin_, {.name = "main"}));
  TY_ASSERT_OK(catalog_->CreateSchema(admin_, {.catalog_name = "main", .name = "s"}));
  EXPECT_THAT(catalog_->CreateCatalog(admin_, {.name = "has space"}),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("name")));
  EXPECT_THAT(catalog_->CreateCatalog(admin_, {.name = "a.b"}),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("name")));
  EXPECT_THAT(catalog_->CreateCatalog(admin_, {.name = std::string(256, 'a')}),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("255")));
  EXPECT_THAT(catalog_->GetTable(admin_, "main.s"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("full_name")));
  EXPECT_THAT(
      catalog_->CreateTable(
          admin_,
          {.catalog_name = "main", .schema_name = "s", .name = "t", .data_source_format = "EXCEL"}),
      StatusIs(StatusCode::kInvalidArgument, HasSubstr("data_source_format")));
  EXPECT_THAT(catalog_->CreateTable(admin_, {.catalog_name = "main",
                                             .schema_name = "s",
                                             .name = "t",
                                             .columns = {{.name = "a", .type_text = "int"},
                                                         {.name = "A", .type_text = "int"}}}),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("columns[1].name")));
  EXPECT_THAT(
      catalog_->CreateTable(
          admin_,
          {.catalog_name = "main", .schema_name = "s", .name = "t", .storage_location = "/x"}),
      StatusIs(StatusCode::kInvalidArgument, HasSubstr("MANAGED")));
  EXPECT_THAT(
      catalog_->CreateFunction(
          admin_,
          {.catalog_name = "main", .schema_name = "s", .name = "f", .routine_body = "PYTHON"}),
      StatusIs(StatusCode::kInvalidArgument, HasSubstr("routine_body")));
  EXPECT_THAT(catalog_->CreateCatalog(admin_, {.name = "x", .storage_root = "ftp://x"}),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("storage_root")));
}

TEST_P(CatalogServiceTest, EveryDecisionIsAuditedWithItsOutcome) {
  MakeTable();
  Principal bob = User("bob");
  EXPECT_FALSE(catalog_->GetTable(bob, "main.support.tickets").ok());
  Grant("bob", SecurableType::kCatalog, "main",
        {Privilege::kUseCatalog, Privilege::kUseSchema, Privilege::kSelect});
  TY_ASSERT_OK(catalog_->GetTable(bob, "main.support.tickets"));
  ids_->FlushAuditForTest();
  TY_ASSERT_OK_AND_ASSIGN(
      auto denied,
      ids_->ReadAudit(
          admin_, {.user = "bob", .securable = "table main.support.tickets", .outcome = "DENY"}));
  ASSERT_EQ(denied.size(), 1u);
  EXPECT_EQ(denied[0].privilege, "SELECT");
  EXPECT_THAT(denied[0].detail, HasSubstr("lacks SELECT"));
  TY_ASSERT_OK_AND_ASSIGN(
      auto allowed,
      ids_->ReadAudit(
          admin_, {.user = "bob", .securable = "table main.support.tickets", .outcome = "ALLOW"}));
  ASSERT_EQ(allowed.size(), 1u);
  EXPECT_EQ(allowed[0].status, 200);
  EXPECT_THAT(ids_->ReadAudit(admin_, {.outcome = "MAYBE"}),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("outcome")));
}

TEST_P(CatalogServiceTest, RowFiltersAndMasksAreValidatedAuthorizedStoredAndAudited) {
  TY_ASSERT_OK(catalog_->CreateCatalog(admin_, {.name = "main"}));
  TY_ASSERT_OK(catalog_->CreateSchema(admin_, {.catalog_name = "main", .name = "support"}));
  const std::string t = "main.support.people";
  TY_ASSERT_OK(
      catalog_->CreateTable(admin_, {.catalog_name = "main",
                                     .schema_name = "support",
                                     .name = "people",
                                     .columns = {{.name = "id", .type_text = "bigint"},
                                                 {.name = "region", .type_text = "string"},
                                                 {.name = "email", .type_text = "string"}}}));
  TY_ASSERT_OK(ids_->CreateGroup(admin_, "leads"));
  Principal bob = User("bob"), carol = User("carol");
  Grant("bob", SecurableType::kCatalog, "main",
        {Privilege::kUseCatalog, Privilege::kUseSchema, Privilege::kSelect});
  // A reader may not set them; the owner (here the admin) may.
  EXPECT_THAT(catalog_->SetRowFilter(bob, t, "region = 'EU'"),
              StatusIs(StatusCode::kPermissionDenied, HasSubstr("MANAGE")));
  TY_ASSERT_OK_AND_ASSIGN(auto filtered,
                          catalog_->SetRowFilter(admin_, t, "region = 'EU' OR is_member('leads')"));
  ASSERT_TRUE(filtered.row_filter.has_value());
  EXPECT_EQ(filtered.row_filter->columns, (std::vector<std::string>{"region"}));
  EXPECT_EQ(filtered.row_filter->updated_by, "admin");
  EXPECT_THAT(catalog_->SetRowFilter(admin_, t, "country = 'EU'"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("no column \"country\"")));
  EXPECT_THAT(catalog_->SetRowFilter(admin_, t, "region ="),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("predicate")));
  // MANAGE is enough for masks too.
  Grant("carol", SecurableType::kCatalog, "main", {Privilege::kUseCatalog, Privilege::kUseSchema});
  Grant("carol", SecurableType::kTable, t, {Privilege::kManage});
  TY_ASSERT_OK_AND_ASSIGN(
      auto masked,
      catalog_->SetColumnMask(carol, t, "EMAIL", {tables::MaskKind::kLast4, {"leads"}}));
  ASSERT_TRUE(masked.columns[2].mask.has_value());
  EXPECT_EQ(masked.columns[2].mask->except, (std::vector<std::string>{"leads"}));
  EXPECT_EQ(masked.columns[2].mask->updated_by, "carol");
  EXPECT_THAT(catalog_->SetColumnMask(admin_, t, "phone", {tables::MaskKind::kNull, {}}),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("column")));
  EXPECT_THAT(catalog_->SetColumnMask(admin_, t, "id", {tables::MaskKind::kLast4, {}}),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("kind")));
  EXPECT_THAT(catalog_->SetColumnMask(admin_, t, "email", {tables::MaskKind::kHash, {"nobody"}}),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("except[0]")));
  EXPECT_THAT(catalog_->SetColumnMask(bob, t, "email", {tables::MaskKind::kNull, {}}),
              StatusIs(StatusCode::kPermissionDenied));

  // Readers see the policies; the storage location only where they do not restrict them.
  TY_ASSERT_OK_AND_ASSIGN(auto seen, catalog_->GetTable(bob, t));
  ASSERT_TRUE(seen.row_filter.has_value());
  EXPECT_EQ(seen.row_filter->predicate, "region = 'EU' OR is_member('leads')");
  EXPECT_TRUE(seen.storage_location.empty());
  TY_ASSERT_OK_AND_ASSIGN(auto listed, catalog_->ListTables(bob, "main", "support", {}));
  ASSERT_EQ(listed.items.size(), 1u);
  EXPECT_TRUE(listed.items[0].storage_location.empty());
  EXPECT_TRUE(listed.items[0].columns[2].mask.has_value());
  TY_ASSERT_OK(ids_->AddGroupMember(admin_, "leads", "bob"));
  TY_ASSERT_OK_AND_ASSIGN(seen, catalog_->GetTable(bob, t));
  EXPECT_FALSE(seen.storage_location.empty());
  TY_ASSERT_OK_AND_ASSIGN(auto loaded, catalog_->LoadTable(t));
  EXPECT_FALSE(loaded.storage_location.empty());

  // Stored: a new service over the same database has them.
  catalog_ = MakeService();
  TY_ASSERT_OK(catalog_->Init());
  TY_ASSERT_OK_AND_ASSIGN(loaded, catalog_->LoadTable(t));
  ASSERT_TRUE(loaded.row_filter.has_value());
  ASSERT_TRUE(loaded.columns[2].mask.has_value());
  EXPECT_EQ(loaded.columns[2].mask->kind, tables::MaskKind::kLast4);

  // Cleared (twice is fine), and gone with the table.
  TY_ASSERT_OK_AND_ASSIGN(auto cleared, catalog_->ClearRowFilter(admin_, t));
  EXPECT_FALSE(cleared.row_filter.has_value());
  TY_ASSERT_OK(catalog_->ClearRowFilter(admin_, t));
  EXPECT_THAT(catalog_->ClearColumnMask(admin_, t, "phone"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("column")));
  TY_ASSERT_OK(catalog_->SetRowFilter(admin_, t, "id > 1"));
  TY_ASSERT_OK(catalog_->DeleteTable(admin_, t));
  TY_ASSERT_OK(
      catalog_->CreateTable(admin_, {.catalog_name = "main",
                                     .schema_name = "support",
                                     .name = "people",
                                     .columns = {{.name = "email", .type_text = "string"}}}));
  TY_ASSERT_OK_AND_ASSIGN(loaded, catalog_->LoadTable(t));
  EXPECT_FALSE(loaded.row_filter.has_value());
  EXPECT_FALSE(loaded.columns[0].mask.has_value());

  // Each change is audited with what was set, and a refused one as a DENY.
  ids_->FlushAuditForTest();
  TY_ASSERT_OK_AND_ASSIGN(
      auto allowed,
      ids_->ReadAudit(admin_, {.user = "carol", .securable = "table " + t, .outcome = "ALLOW"}));
  ASSERT_FALSE(allowed.empty());
  EXPECT_EQ(allowed.back().privilege, "MANAGE");
  EXPECT_THAT(allowed.back().detail, HasSubstr("set mask of column EMAIL: last4 except leads"));
  TY_ASSERT_OK_AND_ASSIGN(
      auto denied,
      ids_->ReadAudit(admin_, {.user = "bob", .securable = "table " + t, .outcome = "DENY"}));
  ASSERT_EQ(denied.size(), 2u);
  EXPECT_THAT(denied.back().detail, HasSubstr("refused: set row filter: region = 'EU'"));
}

// Tables are read from memory after their first read (TableCache): every write of a
// table's row or policies, or of its parents' names, shows in the next read.
TEST_P(CatalogServiceTest, EveryWriteShowsInTheNextReadOfTheTable) {
  MakeTable();
  const std::string t = "main.support.tickets";
  Principal bob = User("bob");
  Grant("bob", SecurableType::kCatalog, "main",
        {Privilege::kUseCatalog, Privilege::kUseSchema, Privilege::kSelect});
  TY_ASSERT_OK_AND_ASSIGN(TableInfo first, catalog_->GetTable(bob, t));
  EXPECT_FALSE(first.storage_location.empty());
  const std::string id = first.id;

  TY_ASSERT_OK(catalog_->UpdateTable(admin_, t, {.comment = "v2"}));
  TY_ASSERT_OK_AND_ASSIGN(TableInfo got, catalog_->GetTable(bob, t));
  EXPECT_EQ(got.comment, "v2");
  TY_ASSERT_OK_AND_ASSIGN(got, catalog_->GetTableById(bob, id));
  EXPECT_EQ(got.comment, "v2");

  TY_ASSERT_OK(catalog_->SetRowFilter(admin_, t, "id > 10"));
  TY_ASSERT_OK_AND_ASSIGN(got, catalog_->GetTable(bob, t));
  ASSERT_TRUE(got.row_filter.has_value());
  EXPECT_EQ(got.row_filter->predicate, "id > 10");
  EXPECT_TRUE(got.storage_location.empty());  // restricted now: no way around the filter
  TY_ASSERT_OK_AND_ASSIGN(got, catalog_->LoadTable(t));
  EXPECT_FALSE(got.storage_location.empty());  // LoadTable presents nothing
  TY_ASSERT_OK(catalog_->ClearRowFilter(admin_, t));
  TY_ASSERT_OK_AND_ASSIGN(got, catalog_->GetTableById(bob, id));
  EXPECT_FALSE(got.row_filter.has_value());
  EXPECT_FALSE(got.storage_location.empty());

  TY_ASSERT_OK(catalog_->SetColumnMask(admin_, t, "id", {tables::MaskKind::kNull, {}}));
  TY_ASSERT_OK_AND_ASSIGN(got, catalog_->LoadTable(t));
  ASSERT_TRUE(got.columns[0].mask.has_value());
  TY_ASSERT_OK_AND_ASSIGN(got, catalog_->GetTable(bob, t));
  EXPECT_TRUE(got.storage_location.empty());
  TY_ASSERT_OK(catalog_->ClearColumnMask(admin_, t, "id"));
  TY_ASSERT_OK_AND_ASSIGN(got, catalog_->GetTable(bob, t));
  EXPECT_FALSE(got.columns[0].mask.has_value());

  TY_ASSERT_OK(catalog_->UpdateTable(admin_, t, {.owner = "carol"}));
  TY_ASSERT_OK_AND_ASSIGN(got, catalog_->GetTable(bob, t));
  EXPECT_EQ(got.owner, "carol");

  // Renaming the table, its schema or its catalog changes the names it carries.
  TY_ASSERT_OK(catalog_->UpdateTable(admin_, t, {.new_name = "issues"}));
  TY_ASSERT_OK_AND_ASSIGN(got, catalog_->GetTableById(bob, id));
  EXPECT_EQ(got.full_name, "main.support.issues");
  TY_ASSERT_OK(catalog_->UpdateSchema(admin_, "main.support", {.new_name = "help"}));
  TY_ASSERT_OK_AND_ASSIGN(got, catalog_->GetTable(bob, "main.help.issues"));
  EXPECT_EQ(got.schema_name, "help");
  EXPECT_EQ(got.full_name, "main.help.issues");
  TY_ASSERT_OK(catalog_->UpdateCatalog(admin_, "main", {.new_name = "prod"}));
  TY_ASSERT_OK_AND_ASSIGN(got, catalog_->GetTableById(bob, id));
  EXPECT_EQ(got.catalog_name, "prod");
  EXPECT_EQ(got.full_name, "prod.help.issues");

  // A revocation applies to the cached table at once.
  Revoke("bob", SecurableType::kCatalog, "prod", {Privilege::kSelect});
  EXPECT_THAT(catalog_->GetTable(bob, "prod.help.issues"), StatusIs(StatusCode::kPermissionDenied));
  EXPECT_THAT(catalog_->GetTableById(bob, id), StatusIs(StatusCode::kPermissionDenied));

  // Deleted: gone, by name and by id; re-created: a new table without the old one's fields.
  TY_ASSERT_OK(catalog_->SetRowFilter(admin_, "prod.help.issues", "id > 1"));
  TY_ASSERT_OK(catalog_->LoadTable("prod.help.issues"));
  TY_ASSERT_OK(catalog_->DeleteTable(admin_, "prod.help.issues"));
  EXPECT_THAT(catalog_->LoadTable("prod.help.issues"), StatusIs(StatusCode::kNotFound));
  EXPECT_THAT(catalog_->GetTableById(admin_, id), StatusIs(StatusCode::kNotFound));
  TY_ASSERT_OK(catalog_->CreateTable(admin_, {.catalog_name = "prod",
                                              .schema_name = "help",
                                              .name = "issues",
                                              .columns = {{.name = "x", .type_text = "string"}}}));
  TY_ASSERT_OK_AND_ASSIGN(got, catalog_->LoadTable("prod.help.issues"));
  EXPECT_NE(got.id, id);
  EXPECT_FALSE(got.row_filter.has_value());
  ASSERT_EQ(got.columns.size(), 1u);
  EXPECT_EQ(got.columns[0].name, "x");

  // Deleting the catalog deletes what lies in it.
  TY_ASSERT_OK_AND_ASSIGN(TableInfo again, catalog_->LoadTable("prod.help.issues"));
  TY_ASSERT_OK(catalog_->DeleteCatalog(admin_, "prod", true));
  EXPECT_THAT(catalog_->GetTableById(admin_, again.id), StatusIs(StatusCode::kNotFound));
}

TEST_P(CatalogServiceTest, FunctionsAndRegisteredModelsAreSecurablesToo) {
  TY_ASSERT_OK(catalog_->CreateCatalog(admin_, {.name = "main"}));
  TY_ASSERT_OK(catalog_->CreateSchema(admin_, {.catalog_name = "main", .name = "s"}));
  TY_ASSERT_OK_AND_ASSIGN(
      auto f, catalog_->CreateFunction(admin_, {.catalog_name = "main",
                                                .schema_name = "s",
                                                .name = "mask",
                                                .data_type = "STRING",
                                                .routine_body = "SQL",
                                                .routine_definition = "concat('***', x)"}));
  EXPECT_EQ(f.routine_definition, "concat('***', x)");
  TY_ASSERT_OK_AND_ASSIGN(
      auto m, catalog_->CreateRegisteredModel(
                  admin_, {.catalog_name = "main", .schema_name = "s", .name = "intent_model"}));
  EXPECT_THAT(m.storage_location, HasSubstr("/models/" + m.id));
  Principal bob = User("bob");
  Grant("bob", SecurableType::kCatalog, "main", {Privilege::kUseCatalog, Privilege::kUseSchema});
  EXPECT_THAT(catalog_->GetRegisteredModel(bob, "main.s.intent_model"),
              StatusIs(StatusCode::kPermissionDenied, HasSubstr("EXECUTE")));
  Grant("bob", SecurableType::kRegisteredModel, "main.s.intent_model", {Privilege::kExecute});
  TY_EXPECT_OK(catalog_->GetRegisteredModel(bob, "main.s.intent_model"));
  EXPECT_THAT(catalog_->GetFunction(bob, "main.s.mask"), StatusIs(StatusCode::kPermissionDenied));
  TY_ASSERT_OK(catalog_->DeleteFunction(admin_, "main.s.mask"));
  EXPECT_THAT(catalog_->GetFunction(admin_, "main.s.mask"), StatusIs(StatusCode::kNotFound));
}

INSTANTIATE_TEST_SUITE_P(Backends, CatalogServiceTest, ::testing::Values("sqlite", "postgres"),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace trainyard::catalog
