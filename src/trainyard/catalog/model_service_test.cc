// ModelService (Unity Catalog's models over the model registry) and the catalog's temporary
// credentials, on SQLite and PostgreSQL, with the real CatalogService, RegistryService,
// TrackingService and IdentityService wired as the server wires them: the registry asks the
// CatalogAuthorizer, and ModelService is its namespace.
#include "trainyard/catalog/model_service.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "trainyard/blob/sts.h"
#include "trainyard/catalog/catalog_authorizer.h"
#include "trainyard/identity/identity_service.h"
#include "trainyard/registry/registry_service.h"
#include "trainyard/testing/status_matchers.h"
#include "trainyard/testing/test_database.h"
#include "trainyard/tracking/tracking_service.h"

namespace trainyard::catalog {
namespace {

using identity::Principal;
using registry::ModelVersionStatus;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Records what the catalog asks STS for; the real issuer is tested against moto in
// blob/sts_test.cc and end to end in tests/test_uc_s3_credentials.py.
class RecordingIssuer : public blob::S3CredentialIssuer {
 public:
  struct Request {
    std::string url;
    blob::S3Access access;
    std::string who;
  };
  Result<blob::TemporaryS3Credentials> Issue(const blob::S3Location& location,
                                             blob::S3Access access, std::string_view who) override {
    requests.push_back({location.Url(), access, std::string(who)});
    return blob::TemporaryS3Credentials{{"ASIA" + std::to_string(requests.size()), "s", "t"}, 1234};
  }
  std::string Describe() const override { return "recording"; }
  std::vector<Request> requests;
};

class ModelServiceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::vector<store::Migration> migrations = identity::IdentityService::Migrations();
    for (auto& m : CatalogService::Migrations()) migrations.push_back(std::move(m));
    for (auto& m : tracking::TrackingService::Migrations()) migrations.push_back(std::move(m));
    for (auto& m : registry::RegistryService::Migrations()) migrations.push_back(std::move(m));
    TY_ASSERT_OK_AND_ASSIGN(db_, store::OpenTestDatabase(GetParam(), migrations));
    ids_ = std::make_unique<identity::IdentityService>(*db_, clock_, random_);
    for (const char* name : {"alice", "bob"}) {
      TY_ASSERT_OK(ids_->CreateUser(admin_, {.name = name}));
    }
    catalog_ = std::make_unique<CatalogService>(*db_, *ids_, clock_, random_,
                                                CatalogServiceOptions{"/data/managed", &issuer_});
    TY_ASSERT_OK(catalog_->Init());
    authz_ = std::make_unique<CatalogAuthorizer>(*catalog_, *ids_);
    tracking_ = std::make_unique<tracking::TrackingService>(*db_, clock_, random_, *authz_,
                                                            "mlflow-artifacts:");
    TY_ASSERT_OK(tracking_->Init("admin"));
    registry_ = std::make_unique<registry::RegistryService>(*db_, clock_, *authz_, *tracking_);
    models_ = std::make_unique<ModelService>(*catalog_, *registry_);
    registry_->SetNamespace(models_.get());
    TY_ASSERT_OK(catalog_->CreateCatalog(admin_, {.name = "main"}));
    TY_ASSERT_OK(catalog_->CreateSchema(admin_, {.catalog_name = "main", .name = "support"}));
  }

  static Principal User(const std::string& name) { return Principal{name, false, "", ""}; }
  void Grant(const std::string& principal, SecurableType type, const std::string& name,
             std::vector<Privilege> add) {
    auto r = catalog_->UpdatePermissions(admin_, type, name, {{principal, add, {}}});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }
  // Lets `user` into main.support: USE CATALOG and USE SCHEMA.
  void LetIn(const std::string& user) {
    Grant(user, SecurableType::kCatalog, "main", {Privilege::kUseCatalog, Privilege::kUseSchema});
  }
  RegisteredModelInfo MakeModel(const std::string& name = "intent_model") {
    auto m = models_->CreateModel(admin_, {.catalog_name = "main",
                                           .schema_name = "support",
                                           .name = name,
                                           .comment = "routes tickets"});
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return m.ok() ? *m : RegisteredModelInfo{};
  }
  ModelVersionInfo MakeVersion(const std::string& name = "intent_model") {
    auto v = models_->CreateVersion(admin_, {.catalog_name = "main",
                                             .schema_name = "support",
                                             .model_name = name,
                                             .source = "s3://elsewhere/model"});
    EXPECT_TRUE(v.ok()) << v.status().ToString();
    return v.ok() ? *v : ModelVersionInfo{};
  }

  FakeClock clock_;
  SeededRandom random_{5};
  RecordingIssuer issuer_;
  std::unique_ptr<store::Database> db_;
  std::unique_ptr<identity::IdentityService> ids_;
  std::unique_ptr<CatalogService> catalog_;
  std::unique_ptr<CatalogAuthorizer> authz_;
  std::unique_ptr<tracking::TrackingService> tracking_;
  std::unique_ptr<registry::RegistryService> registry_;
  std::unique_ptr<ModelService> models_;
  Principal admin_ = Principal::System();
};

TEST_P(ModelServiceTest, AModelCreatedThroughUcIsTheRegistrysModel) {
  RegisteredModelInfo m = MakeModel();
  EXPECT_EQ(m.full_name, "main.support.intent_model");
  EXPECT_EQ(m.comment, "routes tickets");
  EXPECT_EQ(m.storage_location,
            "file:///data/managed/catalogs/" + catalog_->GetCatalog(admin_, "main")->id +
                "/schemas/" + catalog_->GetSchema(admin_, "main.support")->id + "/models/" + m.id);
  TY_ASSERT_OK_AND_ASSIGN(registry::RegisteredModel r,
                          registry_->GetRegisteredModel("main.support.intent_model"));
  EXPECT_EQ(r.description, "routes tickets");
  // The MLflow side's description is the UC comment.
  TY_ASSERT_OK(registry_->UpdateRegisteredModel(admin_, r.name, std::string("v2 router")));
  EXPECT_EQ(models_->GetModel(admin_, "main.support.intent_model")->comment, "v2 router");
  EXPECT_THAT(
      models_->CreateModel(
          admin_, {.catalog_name = "main", .schema_name = "support", .name = "Intent_Model"}),
      StatusIs(StatusCode::kAlreadyExists));
}

TEST_P(ModelServiceTest, AThreeLevelNameCreatedThroughMlflowIsInTheCatalog) {
  // bob may not create models in main.support until granted CREATE MODEL.
  LetIn("bob");
  EXPECT_THAT(registry_->CreateRegisteredModel(User("bob"), {.name = "main.support.Churn"}),
              StatusIs(StatusCode::kPermissionDenied));
  EXPECT_THAT(registry_->GetRegisteredModel("main.support.churn"), StatusIs(StatusCode::kNotFound));
  Grant("bob", SecurableType::kSchema, "main.support", {Privilege::kCreateModel});
  TY_ASSERT_OK_AND_ASSIGN(registry::RegisteredModel r,
                          registry_->CreateRegisteredModel(
                              User("bob"), {.name = "main.support.Churn", .description = "d"}));
  EXPECT_EQ(r.name, "main.support.churn");  // the catalog's (lower-case) form
  TY_ASSERT_OK_AND_ASSIGN(RegisteredModelInfo info,
                          models_->GetModel(User("bob"), "main.support.churn"));
  EXPECT_EQ(info.owner, "bob");
  EXPECT_EQ(info.comment, "d");
  // A missing schema is the catalog's NotFound; plain names stay MLflow's own.
  EXPECT_THAT(registry_->CreateRegisteredModel(admin_, {.name = "main.nowhere.m"}),
              StatusIs(StatusCode::kNotFound, HasSubstr("main.nowhere")));
  TY_ASSERT_OK(registry_->CreateRegisteredModel(User("bob"), {.name = "plain-model"}));
  TY_ASSERT_OK(registry_->CreateRegisteredModel(User("bob"), {.name = "two.levels"}));
  TY_ASSERT_OK_AND_ASSIGN(auto all, catalog_->ListRegisteredModels(admin_, "", "", {}));
  ASSERT_EQ(all.items.size(), 1u);
  EXPECT_EQ(all.items[0].full_name, "main.support.churn");
}

TEST_P(ModelServiceTest, RenameAndDeleteThroughMlflowFollowInTheCatalog) {
  MakeModel();
  EXPECT_THAT(registry_->RenameRegisteredModel(admin_, "main.support.intent_model",
                                               "main.other.intent_model"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("within its schema")));
  EXPECT_THAT(registry_->RenameRegisteredModel(admin_, "main.support.intent_model", "plain_name"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("new_name")));
  TY_ASSERT_OK(
      registry_->RenameRegisteredModel(admin_, "main.support.intent_model", "main.support.router"));
  TY_EXPECT_OK(catalog_->GetRegisteredModel(admin_, "main.support.router"));
  EXPECT_THAT(catalog_->GetRegisteredModel(admin_, "main.support.intent_model"),
              StatusIs(StatusCode::kNotFound));
  TY_ASSERT_OK(registry_->DeleteRegisteredModel(admin_, "main.support.router"));
  EXPECT_THAT(catalog_->GetRegisteredModel(admin_, "main.support.router"),
              StatusIs(StatusCode::kNotFound));
}

TEST_P(ModelServiceTest, VersionsArePendingUntilFinalizedAndWritableOnlyThen) {
  RegisteredModelInfo m = MakeModel();
  ModelVersionInfo v = MakeVersion();
  EXPECT_EQ(v.version, 1);
  EXPECT_EQ(v.status, ModelVersionStatus::kPendingRegistration);
  EXPECT_EQ(v.storage_location, m.storage_location + "/versions/1");
  EXPECT_EQ(v.source, "s3://elsewhere/model");
  EXPECT_EQ(v.model_name, "intent_model");
  TY_ASSERT_OK_AND_ASSIGN(TemporaryCredential write,
                          models_->VersionCredential(admin_, "main.support.intent_model", 1,
                                                     ModelVersionOperation::kReadWrite));
  EXPECT_EQ(write.url, v.storage_location);
  EXPECT_EQ(write.expiration_time, clock_.NowMillis() + kTemporaryCredentialMillis);
  // The MLflow side sees the same version, with the same files.
  TY_ASSERT_OK_AND_ASSIGN(std::string uri,
                          registry_->GetModelVersionDownloadUri("main.support.intent_model", 1));
  EXPECT_EQ(uri, v.storage_location);

  TY_ASSERT_OK_AND_ASSIGN(ModelVersionInfo ready,
                          models_->FinalizeVersion(admin_, "main.support.intent_model", 1));
  EXPECT_EQ(ready.status, ModelVersionStatus::kReady);
  EXPECT_THAT(models_->FinalizeVersion(admin_, "main.support.intent_model", 1),
              StatusIs(StatusCode::kFailedPrecondition, HasSubstr("READY")));
  EXPECT_THAT(models_->VersionCredential(admin_, "main.support.intent_model", 1,
                                         ModelVersionOperation::kReadWrite),
              StatusIs(StatusCode::kFailedPrecondition, HasSubstr("PENDING_REGISTRATION")));
  TY_EXPECT_OK(models_->VersionCredential(admin_, "main.support.intent_model", 1,
                                          ModelVersionOperation::kRead));
  EXPECT_THAT(models_->GetVersion(admin_, "main.support.intent_model", 9),
              StatusIs(StatusCode::kNotFound));
}

TEST_P(ModelServiceTest, ReadingNeedsExecuteAndChangingNeedsOwnership) {
  MakeModel();
  MakeVersion();
  LetIn("bob");
  const std::string name = "main.support.intent_model";
  EXPECT_THAT(models_->GetModel(User("bob"), name), StatusIs(StatusCode::kPermissionDenied));
  EXPECT_THAT(models_->GetVersion(User("bob"), name, 1), StatusIs(StatusCode::kPermissionDenied));
  EXPECT_THAT(registry_->AuthorizeRead(User("bob"), name), StatusIs(StatusCode::kPermissionDenied));
  EXPECT_THAT(models_->VersionCredential(User("bob"), name, 1, ModelVersionOperation::kRead),
              StatusIs(StatusCode::kPermissionDenied));
  TY_ASSERT_OK_AND_ASSIGN(auto hidden, models_->ListModels(User("bob"), "main", "support", {}));
  EXPECT_TRUE(hidden.items.empty());
  Grant("bob", SecurableType::kRegisteredModel, name, {Privilege::kExecute});
  TY_EXPECT_OK(models_->GetModel(User("bob"), name));
  TY_EXPECT_OK(registry_->AuthorizeRead(User("bob"), name));
  TY_EXPECT_OK(models_->VersionCredential(User("bob"), name, 1, ModelVersionOperation::kRead));
  TY_ASSERT_OK_AND_ASSIGN(auto listed, models_->ListModels(User("bob"), "", "", {}));
  ASSERT_EQ(listed.items.size(), 1u);
  // EXECUTE does not let bob change the model or write its versions.
  EXPECT_THAT(models_->UpdateVersion(User("bob"), name, 1, std::string("x")),
              StatusIs(StatusCode::kPermissionDenied));
  EXPECT_THAT(models_->VersionCredential(User("bob"), name, 1, ModelVersionOperation::kReadWrite),
              StatusIs(StatusCode::kPermissionDenied));
  EXPECT_THAT(registry_->DeleteRegisteredModel(User("bob"), name),
              StatusIs(StatusCode::kPermissionDenied));
  EXPECT_THAT(models_->CreateVersion(User("bob"), {.catalog_name = "main",
                                                   .schema_name = "support",
                                                   .model_name = "intent_model",
                                                   .source = "s3://b/m"}),
              StatusIs(StatusCode::kPermissionDenied));
}

TEST_P(ModelServiceTest, DeletingAModelWithVersionsNeedsForce) {
  MakeModel();
  MakeVersion();
  const std::string name = "main.support.intent_model";
  EXPECT_THAT(models_->DeleteModel(admin_, name, false),
              StatusIs(StatusCode::kFailedPrecondition, HasSubstr("force")));
  TY_ASSERT_OK(models_->DeleteVersion(admin_, name, 1));
  TY_ASSERT_OK(models_->DeleteModel(admin_, name, false));
  EXPECT_THAT(registry_->GetRegisteredModel(name), StatusIs(StatusCode::kNotFound));
  EXPECT_THAT(catalog_->GetRegisteredModel(admin_, name), StatusIs(StatusCode::kNotFound));
  MakeModel();
  MakeVersion();
  TY_ASSERT_OK(models_->DeleteModel(admin_, name, true));
  EXPECT_THAT(catalog_->GetRegisteredModel(admin_, name), StatusIs(StatusCode::kNotFound));
}

TEST_P(ModelServiceTest, UpdateRenamesWithinTheSchemaAndTransfersOwnership) {
  MakeModel();
  TY_ASSERT_OK_AND_ASSIGN(
      RegisteredModelInfo renamed,
      models_->UpdateModel(admin_, "main.support.intent_model",
                           {.new_name = "router", .comment = "new", .owner = "alice"}));
  EXPECT_EQ(renamed.full_name, "main.support.router");
  EXPECT_EQ(renamed.comment, "new");
  EXPECT_EQ(renamed.owner, "alice");
  TY_EXPECT_OK(registry_->GetRegisteredModel("main.support.router"));
  EXPECT_THAT(models_->UpdateModel(admin_, "main.support.router",
                                   {.properties = std::map<std::string, std::string>{}}),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("properties")));
  EXPECT_THAT(models_->UpdateModel(admin_, "main.support.router", {.new_name = "a.b"}),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("new_name")));
}

TEST_P(ModelServiceTest, VersionListsPageInOrder) {
  MakeModel();
  for (int i = 0; i < 5; ++i) MakeVersion();
  std::vector<int64_t> seen;
  PageRequest page{.max_results = 2};
  for (int pages = 0; pages < 10; ++pages) {
    TY_ASSERT_OK_AND_ASSIGN(auto result,
                            models_->ListVersions(admin_, "main.support.intent_model", page));
    for (const auto& v : result.items) seen.push_back(v.version);
    if (result.next_page_token.empty()) break;
    page.page_token = result.next_page_token;
  }
  EXPECT_THAT(seen, ElementsAre(1, 2, 3, 4, 5));
  EXPECT_THAT(models_->ListVersions(admin_, "main.support", {}),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("full_name")));
}

TEST_P(ModelServiceTest, PathCredentialsFollowTheObjectThatHoldsThePath) {
  TY_ASSERT_OK_AND_ASSIGN(
      TableInfo table,
      catalog_->CreateTable(admin_, {.catalog_name = "main",
                                     .schema_name = "support",
                                     .name = "tickets",
                                     .table_type = TableType::kExternal,
                                     .columns = {{.name = "id", .type_text = "bigint"}},
                                     .storage_location = "file:///lake/tickets"}));
  LetIn("bob");
  const std::string inside = "file:///lake/tickets/part-0.parquet";
  EXPECT_THAT(catalog_->TemporaryPathCredential(User("bob"), inside, PathOperation::kRead),
              StatusIs(StatusCode::kPermissionDenied, HasSubstr("SELECT")));
  Grant("bob", SecurableType::kTable, table.full_name, {Privilege::kSelect});
  TY_ASSERT_OK_AND_ASSIGN(TemporaryCredential read,
                          catalog_->TemporaryPathCredential(
                              User("bob"), "/lake/tickets//part-0.parquet", PathOperation::kRead));
  EXPECT_EQ(read.url, inside);
  EXPECT_THAT(catalog_->TemporaryPathCredential(User("bob"), inside, PathOperation::kReadWrite),
              StatusIs(StatusCode::kPermissionDenied, HasSubstr("MODIFY")));
  // A path above the table would hand out its files too; a path outside every object is
  // nobody's; a new table may not go inside an existing one.
  EXPECT_THAT(catalog_->TemporaryPathCredential(admin_, "file:///lake", PathOperation::kRead),
              StatusIs(StatusCode::kPermissionDenied, HasSubstr("main.support.tickets")));
  EXPECT_THAT(catalog_->TemporaryPathCredential(admin_, "/elsewhere/x", PathOperation::kRead),
              StatusIs(StatusCode::kPermissionDenied, HasSubstr("no catalog object")));
  EXPECT_THAT(catalog_->TemporaryPathCredential(admin_, inside, PathOperation::kCreateTable),
              StatusIs(StatusCode::kPermissionDenied, HasSubstr("outside")));
  TY_EXPECT_OK(
      catalog_->TemporaryPathCredential(admin_, "/lake/new_table", PathOperation::kCreateTable));
  EXPECT_THAT(catalog_->TemporaryPathCredential(User("bob"), "/lake/new_table",
                                                PathOperation::kCreateTable),
              StatusIs(StatusCode::kPermissionDenied, HasSubstr("CREATE EXTERNAL TABLE")));
  // Bad and S3 URLs.
  EXPECT_THAT(catalog_->TemporaryPathCredential(admin_, "lake/tickets", PathOperation::kRead),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("url")));
  EXPECT_THAT(catalog_->TemporaryPathCredential(admin_, "/lake/tickets/../x", PathOperation::kRead),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("url")));
  EXPECT_THAT(catalog_->TemporaryPathCredential(admin_, "s3://bucket/x", PathOperation::kRead),
              StatusIs(StatusCode::kPermissionDenied, HasSubstr("no catalog object")));
  EXPECT_TRUE(issuer_.requests.empty());
}

TEST_P(ModelServiceTest, S3LocationsGetCredentialsScopedToWhatWasAuthorized) {
  TY_ASSERT_OK_AND_ASSIGN(
      TableInfo table,
      catalog_->CreateTable(admin_, {.catalog_name = "main",
                                     .schema_name = "support",
                                     .name = "tickets",
                                     .table_type = TableType::kExternal,
                                     .columns = {{.name = "id", .type_text = "bigint"}},
                                     .storage_location = "s3://lake/t/tickets/"}));
  LetIn("bob");
  Grant("bob", SecurableType::kTable, table.full_name, {Privilege::kSelect});
  // A path inside the table, spelled loosely: the credential is for that path only.
  TY_ASSERT_OK_AND_ASSIGN(
      TemporaryCredential read,
      catalog_->TemporaryPathCredential(User("bob"), "s3://lake/t//tickets/_delta_log/",
                                        PathOperation::kRead));
  EXPECT_EQ(read.url, "s3://lake/t/tickets/_delta_log");
  ASSERT_TRUE(read.aws_temp_credentials);
  EXPECT_EQ(read.aws_temp_credentials->access_key_id, "ASIA1");
  EXPECT_EQ(read.aws_temp_credentials->session_token, "t");
  EXPECT_EQ(read.expiration_time, 1234);
  ASSERT_EQ(issuer_.requests.size(), 1u);
  EXPECT_EQ(issuer_.requests[0].url, "s3://lake/t/tickets/_delta_log");
  EXPECT_EQ(issuer_.requests[0].access, blob::S3Access::kRead);
  EXPECT_EQ(issuer_.requests[0].who, "bob");
  // Refusals never reach STS: writing without MODIFY, a path above the table (it would
  // cover the table's objects and more), a sibling whose name extends the table's.
  EXPECT_THAT(catalog_->TemporaryPathCredential(User("bob"), "s3://lake/t/tickets",
                                                PathOperation::kReadWrite),
              StatusIs(StatusCode::kPermissionDenied, HasSubstr("MODIFY")));
  EXPECT_THAT(catalog_->TemporaryPathCredential(admin_, "s3://lake/t", PathOperation::kRead),
              StatusIs(StatusCode::kPermissionDenied, HasSubstr("main.support.tickets")));
  EXPECT_THAT(catalog_->TemporaryPathCredential(admin_, "s3://lake", PathOperation::kRead),
              StatusIs(StatusCode::kPermissionDenied, HasSubstr("main.support.tickets")));
  EXPECT_THAT(
      catalog_->TemporaryPathCredential(admin_, "s3://lake/t/tickets2", PathOperation::kRead),
      StatusIs(StatusCode::kPermissionDenied, HasSubstr("no catalog object")));
  EXPECT_EQ(issuer_.requests.size(), 1u);
  Grant("bob", SecurableType::kTable, table.full_name, {Privilege::kModify});
  TY_ASSERT_OK(catalog_->TemporaryPathCredential(User("bob"), "s3://lake/t/tickets",
                                                 PathOperation::kReadWrite));
  ASSERT_EQ(issuer_.requests.size(), 2u);
  EXPECT_EQ(issuer_.requests[1].url, "s3://lake/t/tickets");
  EXPECT_EQ(issuer_.requests[1].access, blob::S3Access::kReadWrite);

  // A catalog rooted on S3: its managed volumes are there, and their credentials too.
  TY_ASSERT_OK(catalog_->CreateCatalog(admin_, {.name = "lake", .storage_root = "s3://lake/c"}));
  TY_ASSERT_OK(catalog_->CreateSchema(admin_, {.catalog_name = "lake", .name = "raw"}));
  TY_ASSERT_OK_AND_ASSIGN(
      VolumeInfo volume,
      catalog_->CreateVolume(admin_, {.catalog_name = "lake", .schema_name = "raw", .name = "v"}));
  EXPECT_EQ(volume.storage_location.rfind("s3://lake/c/", 0), 0u) << volume.storage_location;
  TY_ASSERT_OK_AND_ASSIGN(
      TemporaryCredential written,
      catalog_->TemporaryVolumeCredential(admin_, volume.id, VolumeOperation::kWrite));
  EXPECT_EQ(written.url, volume.storage_location);
  ASSERT_EQ(issuer_.requests.size(), 3u);
  EXPECT_EQ(issuer_.requests[2].access, blob::S3Access::kReadWrite);
  EXPECT_EQ(issuer_.requests[2].who, "admin");
}

TEST_P(ModelServiceTest, VolumeCredentialsNeedReadVolumeOrWriteFiles) {
  TY_ASSERT_OK_AND_ASSIGN(
      VolumeInfo volume,
      catalog_->CreateVolume(admin_,
                             {.catalog_name = "main", .schema_name = "support", .name = "raw"}));
  LetIn("bob");
  EXPECT_THAT(catalog_->TemporaryVolumeCredential(User("bob"), volume.id, VolumeOperation::kRead),
              StatusIs(StatusCode::kPermissionDenied));
  Grant("bob", SecurableType::kVolume, volume.full_name, {Privilege::kReadVolume});
  TY_ASSERT_OK_AND_ASSIGN(
      TemporaryCredential read,
      catalog_->TemporaryVolumeCredential(User("bob"), volume.id, VolumeOperation::kRead));
  EXPECT_EQ(read.url, volume.storage_location);
  EXPECT_THAT(catalog_->TemporaryVolumeCredential(User("bob"), volume.id, VolumeOperation::kWrite),
              StatusIs(StatusCode::kPermissionDenied, HasSubstr("WRITE FILES")));
  Grant("bob", SecurableType::kVolume, volume.full_name, {Privilege::kWriteFiles});
  TY_EXPECT_OK(
      catalog_->TemporaryVolumeCredential(User("bob"), volume.id, VolumeOperation::kWrite));
  EXPECT_THAT(catalog_->TemporaryVolumeCredential(admin_, "no-such-id", VolumeOperation::kRead),
              StatusIs(StatusCode::kNotFound));
}

INSTANTIATE_TEST_SUITE_P(Backends, ModelServiceTest, ::testing::Values("sqlite", "postgres"),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace trainyard::catalog
