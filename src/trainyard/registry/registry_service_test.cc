// RegistryService against every backend: in-memory SQLite and a throwaway PostgreSQL
// (OpenTestDatabase), with the real TrackingService for runs and logged models.
#include "trainyard/registry/registry_service.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "trainyard/common/clock.h"
#include "trainyard/identity/identity_service.h"
#include "trainyard/testing/status_matchers.h"
#include "trainyard/testing/test_database.h"
#include "trainyard/tracking/tracking_service.h"

namespace trainyard::registry {
namespace {

// Expects `expr` to fail with `code` and a message that contains `text`.
#define EXPECT_ERROR(expr, expected_code, text) TY_EXPECT_ERROR(expr, expected_code, text)

// Every check passes for an admin: these tests are about the registry's semantics; the
// Authorization test below is about who may change what.
const identity::Principal kAdmin = identity::Principal::System();

// An admin acting as `user` (who becomes the owner of what it creates).
identity::Principal As(const std::string& user) {
  identity::Principal p = kAdmin;
  p.user = user;
  return p;
}

std::vector<std::string> Names(const std::vector<RegisteredModel>& models) {
  std::vector<std::string> out;
  for (const auto& m : models) out.push_back(m.name);
  return out;
}

std::vector<std::string> Keys(const std::vector<ModelVersion>& versions) {
  std::vector<std::string> out;
  for (const auto& v : versions) out.push_back(v.name + "/" + std::to_string(v.version));
  return out;
}

class RegistryServiceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::vector<store::Migration> migrations = tracking::TrackingService::Migrations();
    for (auto& m : RegistryService::Migrations()) migrations.push_back(std::move(m));
    for (auto& m : identity::IdentityService::Migrations()) migrations.push_back(std::move(m));
    TY_ASSERT_OK_AND_ASSIGN(db_, store::OpenTestDatabase(GetParam(), migrations));
    identity_ = std::make_unique<identity::IdentityService>(*db_, clock_, random_);
    tracking_ = std::make_unique<tracking::TrackingService>(*db_, clock_, random_, *identity_,
                                                            "mlflow-artifacts:");
    TY_ASSERT_OK(tracking_->Init("admin"));
    registry_ = std::make_unique<RegistryService>(*db_, clock_, *identity_, *tracking_);
  }

  // Creates a model owned by `owner`, failing the test if that fails.
  void CreateModel(const std::string& name, std::vector<KeyValue> tags = {},
                   const std::string& owner = "alice") {
    auto m = registry_->CreateRegisteredModel(As(owner), {.name = name, .tags = std::move(tags)});
    ASSERT_TRUE(m.ok()) << m.status().ToString();
  }

  // Creates a version with a plain source; returns its number (0 on failure).
  int64_t CreateVersion(const std::string& name, const std::string& source = "s3://b/model",
                        std::vector<KeyValue> tags = {}, const std::string& run_id = "") {
    auto v = registry_->CreateModelVersion(
        As("alice"), {.name = name, .source = source, .run_id = run_id, .tags = std::move(tags)});
    EXPECT_TRUE(v.ok()) << v.status().ToString();
    return v.ok() ? v->version : 0;
  }

  std::vector<std::string> SearchModels(const std::string& filter,
                                        std::vector<std::string> order_by = {}) {
    auto page = registry_->SearchRegisteredModels({.filter = filter, .order_by = order_by});
    EXPECT_TRUE(page.ok()) << filter << ": " << page.status().ToString();
    return page.ok() ? Names(page->items) : std::vector<std::string>{"<error>"};
  }

  std::vector<std::string> SearchVersions(const std::string& filter,
                                          std::vector<std::string> order_by = {}) {
    auto page = registry_->SearchModelVersions({.filter = filter, .order_by = order_by});
    EXPECT_TRUE(page.ok()) << filter << ": " << page.status().ToString();
    return page.ok() ? Keys(page->items) : std::vector<std::string>{"<error>"};
  }

  FakeClock clock_;
  SeededRandom random_{7};
  std::unique_ptr<store::Database> db_;
  std::unique_ptr<identity::IdentityService> identity_;
  std::unique_ptr<tracking::TrackingService> tracking_;
  std::unique_ptr<RegistryService> registry_;
};

TEST_P(RegistryServiceTest, CreateAndGetRegisteredModel) {
  int64_t t0 = clock_.NowMillis();
  auto created = registry_->CreateRegisteredModel(
      As("alice"), {.name = "intent", .tags = {{"team", "nlp"}, {"a", "1"}}, .description = "d"});
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  EXPECT_EQ(created->name, "intent");
  EXPECT_EQ(created->user_id, "alice");
  EXPECT_EQ(created->description, "d");
  EXPECT_EQ(created->creation_timestamp, t0);
  EXPECT_EQ(created->last_updated_timestamp, t0);
  ASSERT_EQ(created->tags.size(), 2u);
  EXPECT_EQ(created->tags[0].key, "a");  // sorted by key
  EXPECT_EQ(created->tags[1].value, "nlp");
  EXPECT_TRUE(created->latest_versions.empty());

  TY_ASSERT_OK_AND_ASSIGN(RegisteredModel got, registry_->GetRegisteredModel("intent"));
  EXPECT_EQ(got.user_id, "alice");
  EXPECT_EQ(got.tags.size(), 2u);

  EXPECT_ERROR(registry_->CreateRegisteredModel(As("bob"), {.name = "intent"}),
               StatusCode::kAlreadyExists, "already exists");
  EXPECT_ERROR(registry_->GetRegisteredModel("nope"), StatusCode::kNotFound, "'nope'");
  EXPECT_ERROR(registry_->CreateRegisteredModel(As("bob"), {.name = ""}),
               StatusCode::kInvalidArgument, "'name'");
  EXPECT_ERROR(registry_->CreateRegisteredModel(As("bob"), {.name = std::string(300, 'x')}),
               StatusCode::kInvalidArgument, "longer than 256");
}

TEST_P(RegistryServiceTest, UpdateAndTags) {
  CreateModel("m");
  clock_.AdvanceMillis(10);
  TY_ASSERT_OK_AND_ASSIGN(RegisteredModel m,
                          registry_->UpdateRegisteredModel(kAdmin, "m", "new text"));
  EXPECT_EQ(m.description, "new text");
  EXPECT_EQ(m.last_updated_timestamp, m.creation_timestamp + 10);
  EXPECT_ERROR(registry_->UpdateRegisteredModel(kAdmin, "zz", "x"), StatusCode::kNotFound, "'zz'");

  TY_ASSERT_OK(registry_->SetRegisteredModelTag(kAdmin, "m", {"k", "v1"}));
  TY_ASSERT_OK(registry_->SetRegisteredModelTag(kAdmin, "m", {"k", "v2"}));  // overwrite
  TY_ASSERT_OK_AND_ASSIGN(m, registry_->GetRegisteredModel("m"));
  ASSERT_EQ(m.tags.size(), 1u);
  EXPECT_EQ(m.tags[0].value, "v2");
  TY_ASSERT_OK(registry_->DeleteRegisteredModelTag(kAdmin, "m", "k"));
  TY_ASSERT_OK(registry_->DeleteRegisteredModelTag(kAdmin, "m", "k"));  // absent: ok, as MLflow
  TY_ASSERT_OK_AND_ASSIGN(m, registry_->GetRegisteredModel("m"));
  EXPECT_TRUE(m.tags.empty());
  EXPECT_ERROR(registry_->SetRegisteredModelTag(kAdmin, "zz", {"k", "v"}), StatusCode::kNotFound,
               "zz");
  EXPECT_ERROR(registry_->DeleteRegisteredModelTag(kAdmin, "zz", "k"), StatusCode::kNotFound, "zz");

  // Tag keys follow MLflow's rules.
  for (const char* bad : {"", "a//b", "/a", "a/", "../a", "a$b", "a/./b"}) {
    EXPECT_ERROR(registry_->SetRegisteredModelTag(kAdmin, "m", {bad, "v"}),
                 StatusCode::kInvalidArgument, "key");
  }
  TY_ASSERT_OK(registry_->SetRegisteredModelTag(kAdmin, "m", {"mlflow.prompt/x y-z_1", "v"}));
  EXPECT_ERROR(registry_->SetRegisteredModelTag(kAdmin, "m", {std::string(251, 'k'), "v"}),
               StatusCode::kInvalidArgument, "longer than 250");
  EXPECT_ERROR(registry_->SetRegisteredModelTag(kAdmin, "m", {"k", std::string(100'001, 'v')}),
               StatusCode::kInvalidArgument, "value is longer");
}

TEST_P(RegistryServiceTest, VersionsAreNumberedPerModelAndNeverReused) {
  CreateModel("a");
  CreateModel("b");
  EXPECT_EQ(CreateVersion("a"), 1);
  EXPECT_EQ(CreateVersion("a"), 2);
  EXPECT_EQ(CreateVersion("b"), 1);
  TY_ASSERT_OK(registry_->DeleteModelVersion(kAdmin, "a", 2));
  EXPECT_EQ(CreateVersion("a"), 3);

  clock_.AdvanceMillis(5);
  TY_ASSERT_OK_AND_ASSIGN(ModelVersion v,
                          registry_->CreateModelVersion(As("carol"), {.name = "a",
                                                                      .source = "s3://bucket/path",
                                                                      .tags = {{"x", "1"}},
                                                                      .run_link = "http://link",
                                                                      .description = "fourth"}));
  EXPECT_EQ(v.version, 4);
  EXPECT_EQ(v.name, "a");
  EXPECT_EQ(v.user_id, "carol");
  EXPECT_EQ(v.status, ModelVersionStatus::kReady);
  EXPECT_EQ(v.current_stage, Stage::kNone);
  EXPECT_EQ(v.source, "s3://bucket/path");
  EXPECT_EQ(v.storage_location, "s3://bucket/path");
  EXPECT_EQ(v.run_link, "http://link");
  EXPECT_EQ(v.description, "fourth");
  EXPECT_EQ(v.run_id, "");
  ASSERT_EQ(v.tags.size(), 1u);
  EXPECT_EQ(v.tags[0].key, "x");

  // Creating a version touches the model.
  TY_ASSERT_OK_AND_ASSIGN(RegisteredModel a, registry_->GetRegisteredModel("a"));
  EXPECT_EQ(a.last_updated_timestamp, v.creation_timestamp);
  // The latest version of the None stage.
  ASSERT_EQ(a.latest_versions.size(), 1u);
  EXPECT_EQ(a.latest_versions[0].version, 4);

  EXPECT_ERROR(registry_->CreateModelVersion(As("alice"), {.name = "zz", .source = "s3://x"}),
               StatusCode::kNotFound, "'zz'");
  EXPECT_ERROR(registry_->CreateModelVersion(As("alice"), {.name = "a"}),
               StatusCode::kInvalidArgument, "'source'");
  EXPECT_ERROR(registry_->GetModelVersion("a", 2), StatusCode::kNotFound, "no version 2");
  EXPECT_ERROR(registry_->GetModelVersion("zz", 1), StatusCode::kNotFound, "'zz'");
  EXPECT_ERROR(registry_->DeleteModelVersion(kAdmin, "a", 2), StatusCode::kNotFound,
               "no version 2");

  // Issue 13: sources outside the server's stores are refused, as MLflow's server does.
  for (const char* bad :
       {"file:///etc/passwd", "/etc/passwd", "model/dir", "mlflow-artifacts:/1/../../etc",
        "mlflow-artifacts:/1/%2e%2e/x", "s3://b/a/../../c", "http://evil/x", "ftp://h/x",
        "mlflow-artifacts:/1/a\nb"}) {
    EXPECT_ERROR(registry_->CreateModelVersion(As("alice"), {.name = "a", .source = bad}),
                 StatusCode::kInvalidArgument, "source");
  }
  TY_ASSERT_OK_AND_ASSIGN(
      ModelVersion ok,
      registry_->CreateModelVersion(
          As("alice"), {.name = "a", .source = "mlflow-artifacts:/1/abc/artifacts/model"}));
  EXPECT_EQ(ok.source, "mlflow-artifacts:/1/abc/artifacts/model");
}

TEST_P(RegistryServiceTest, VersionTagsAndDescription) {
  CreateModel("m");
  CreateVersion("m");
  TY_ASSERT_OK(registry_->SetModelVersionTag(kAdmin, "m", 1, {"k", "v"}));
  TY_ASSERT_OK(registry_->SetModelVersionTag(kAdmin, "m", 1, {"a", "w"}));
  TY_ASSERT_OK_AND_ASSIGN(ModelVersion v, registry_->GetModelVersion("m", 1));
  ASSERT_EQ(v.tags.size(), 2u);
  EXPECT_EQ(v.tags[0].key, "a");
  TY_ASSERT_OK(registry_->DeleteModelVersionTag(kAdmin, "m", 1, "k"));
  TY_ASSERT_OK(registry_->DeleteModelVersionTag(kAdmin, "m", 1, "k"));
  EXPECT_ERROR(registry_->SetModelVersionTag(kAdmin, "m", 9, {"k", "v"}), StatusCode::kNotFound,
               "no version 9");
  EXPECT_ERROR(registry_->DeleteModelVersionTag(kAdmin, "m", 9, "k"), StatusCode::kNotFound,
               "no version 9");
  EXPECT_ERROR(registry_->SetModelVersionTag(kAdmin, "m", 1, {"a//b", "v"}),
               StatusCode::kInvalidArgument, "key");

  clock_.AdvanceMillis(3);
  TY_ASSERT_OK_AND_ASSIGN(v, registry_->UpdateModelVersion(kAdmin, "m", 1, "better"));
  EXPECT_EQ(v.description, "better");
  EXPECT_EQ(v.last_updated_timestamp, v.creation_timestamp + 3);
  ASSERT_EQ(v.tags.size(), 1u);
  EXPECT_ERROR(registry_->UpdateModelVersion(kAdmin, "m", 2, "x"), StatusCode::kNotFound,
               "no version 2");
}

TEST_P(RegistryServiceTest, AliasesSetMoveDelete) {
  CreateModel("m");
  CreateVersion("m");
  CreateVersion("m");
  TY_ASSERT_OK(registry_->SetRegisteredModelAlias(kAdmin, "m", "champion", 1));
  TY_ASSERT_OK(registry_->SetRegisteredModelAlias(kAdmin, "m", "candidate", 2));
  TY_ASSERT_OK_AND_ASSIGN(ModelVersion v, registry_->GetModelVersionByAlias("m", "champion"));
  EXPECT_EQ(v.version, 1);
  EXPECT_EQ(v.aliases, std::vector<std::string>{"champion"});

  // Move champion to version 2: both aliases now point there.
  TY_ASSERT_OK(registry_->SetRegisteredModelAlias(kAdmin, "m", "champion", 2));
  TY_ASSERT_OK_AND_ASSIGN(v, registry_->GetModelVersionByAlias("m", "champion"));
  EXPECT_EQ(v.version, 2);
  EXPECT_EQ(v.aliases, (std::vector<std::string>{"candidate", "champion"}));
  TY_ASSERT_OK_AND_ASSIGN(v, registry_->GetModelVersion("m", 1));
  EXPECT_TRUE(v.aliases.empty());
  TY_ASSERT_OK_AND_ASSIGN(RegisteredModel m, registry_->GetRegisteredModel("m"));
  ASSERT_EQ(m.aliases.size(), 2u);
  EXPECT_EQ(m.aliases[0].alias, "candidate");
  EXPECT_EQ(m.aliases[1].alias, "champion");
  EXPECT_EQ(m.aliases[1].version, 2);

  TY_ASSERT_OK(registry_->DeleteRegisteredModelAlias(kAdmin, "m", "candidate"));
  TY_ASSERT_OK(registry_->DeleteRegisteredModelAlias(kAdmin, "m", "candidate"));  // absent: ok
  EXPECT_ERROR(registry_->GetModelVersionByAlias("m", "candidate"), StatusCode::kNotFound,
               "no alias 'candidate'");
  EXPECT_ERROR(registry_->GetModelVersionByAlias("zz", "champion"), StatusCode::kNotFound, "'zz'");
  EXPECT_ERROR(registry_->DeleteRegisteredModelAlias(kAdmin, "zz", "champion"),
               StatusCode::kNotFound, "'zz'");

  // Aliases need an existing version, and go away with their version.
  EXPECT_ERROR(registry_->SetRegisteredModelAlias(kAdmin, "m", "x", 7), StatusCode::kNotFound,
               "no version 7");
  EXPECT_ERROR(registry_->SetRegisteredModelAlias(kAdmin, "zz", "x", 1), StatusCode::kNotFound,
               "'zz'");
  TY_ASSERT_OK(registry_->DeleteModelVersion(kAdmin, "m", 2));
  EXPECT_ERROR(registry_->GetModelVersionByAlias("m", "champion"), StatusCode::kNotFound,
               "no alias 'champion'");
  TY_ASSERT_OK_AND_ASSIGN(m, registry_->GetRegisteredModel("m"));
  EXPECT_TRUE(m.aliases.empty());
  EXPECT_ERROR(registry_->SetRegisteredModelAlias(kAdmin, "m", "champion", 2),
               StatusCode::kNotFound, "no version 2");
}

TEST_P(RegistryServiceTest, AliasNamesAreValidated) {
  CreateModel("m");
  CreateVersion("m");
  for (const char* bad : {"v1", "V12", "1", "42", "latest", "LaTeSt", "", "a b", "a.b", "a/b"}) {
    EXPECT_EQ(registry_->SetRegisteredModelAlias(kAdmin, "m", bad, 1).code(),
              StatusCode::kInvalidArgument)
        << "alias '" << bad << "'";
  }
  EXPECT_ERROR(registry_->SetRegisteredModelAlias(kAdmin, "m", std::string(256, 'a'), 1),
               StatusCode::kInvalidArgument, "longer than 255");
  for (const char* good : {"champion", "v1x", "prod-1", "Staging_2", "v", "x1"}) {
    EXPECT_TRUE(registry_->SetRegisteredModelAlias(kAdmin, "m", good, 1).ok()) << good;
  }
}

TEST_P(RegistryServiceTest, StagesAndArchiveExistingVersions) {
  CreateModel("m");
  for (int i = 0; i < 4; ++i) CreateVersion("m");
  TY_ASSERT_OK_AND_ASSIGN(ModelVersion v,
                          registry_->TransitionModelVersionStage(kAdmin, "m", 1, "staging", false));
  EXPECT_EQ(v.current_stage, Stage::kStaging);  // canonical spelling on output
  TY_ASSERT_OK(
      registry_->TransitionModelVersionStage(kAdmin, "m", 2, "PRODUCTION", false).status());
  TY_ASSERT_OK(
      registry_->TransitionModelVersionStage(kAdmin, "m", 3, "Production", false).status());

  // latest_versions: the highest version per stage (None: 4, Staging: 1, Production: 3).
  TY_ASSERT_OK_AND_ASSIGN(RegisteredModel m, registry_->GetRegisteredModel("m"));
  EXPECT_EQ(Keys(m.latest_versions), (std::vector<std::string>{"m/1", "m/3", "m/4"}));

  TY_ASSERT_OK_AND_ASSIGN(auto latest, registry_->GetLatestVersions("m", {}));
  EXPECT_EQ(Keys(latest), (std::vector<std::string>{"m/1", "m/3", "m/4"}));
  TY_ASSERT_OK_AND_ASSIGN(latest, registry_->GetLatestVersions("m", {"production"}));
  EXPECT_EQ(Keys(latest), (std::vector<std::string>{"m/3"}));
  TY_ASSERT_OK_AND_ASSIGN(latest, registry_->GetLatestVersions("m", {"Archived"}));
  EXPECT_TRUE(latest.empty());
  EXPECT_ERROR(registry_->GetLatestVersions("m", {"Prod"}), StatusCode::kInvalidArgument, "stages");
  EXPECT_ERROR(registry_->GetLatestVersions("zz", {}), StatusCode::kNotFound, "'zz'");

  // Moving 4 to Production archives 2 and 3, and leaves Staging alone.
  TY_ASSERT_OK_AND_ASSIGN(
      v, registry_->TransitionModelVersionStage(kAdmin, "m", 4, "Production", true));
  EXPECT_EQ(v.current_stage, Stage::kProduction);
  TY_ASSERT_OK_AND_ASSIGN(v, registry_->GetModelVersion("m", 2));
  EXPECT_EQ(v.current_stage, Stage::kArchived);
  TY_ASSERT_OK_AND_ASSIGN(v, registry_->GetModelVersion("m", 3));
  EXPECT_EQ(v.current_stage, Stage::kArchived);
  TY_ASSERT_OK_AND_ASSIGN(v, registry_->GetModelVersion("m", 1));
  EXPECT_EQ(v.current_stage, Stage::kStaging);
  TY_ASSERT_OK_AND_ASSIGN(latest, registry_->GetLatestVersions("m", {"archived", "production"}));
  EXPECT_EQ(Keys(latest), (std::vector<std::string>{"m/3", "m/4"}));

  EXPECT_ERROR(registry_->TransitionModelVersionStage(kAdmin, "m", 1, "Archived", true),
               StatusCode::kInvalidArgument, "archive_existing_versions");
  EXPECT_ERROR(registry_->TransitionModelVersionStage(kAdmin, "m", 1, "Gold", false),
               StatusCode::kInvalidArgument, "stage");
  EXPECT_ERROR(registry_->TransitionModelVersionStage(kAdmin, "m", 9, "None", false),
               StatusCode::kNotFound, "no version 9");
}

TEST_P(RegistryServiceTest, RenameCarriesVersionsTagsAndAliases) {
  CreateModel("old", {{"t", "1"}});
  CreateVersion("old", "s3://x", {{"vt", "2"}});
  CreateVersion("old");
  TY_ASSERT_OK(registry_->SetRegisteredModelAlias(kAdmin, "old", "champion", 1));
  CreateModel("taken");
  EXPECT_ERROR(registry_->RenameRegisteredModel(kAdmin, "old", "taken"), StatusCode::kAlreadyExists,
               "'taken'");
  EXPECT_ERROR(registry_->RenameRegisteredModel(kAdmin, "zz", "yy"), StatusCode::kNotFound, "'zz'");
  EXPECT_ERROR(registry_->RenameRegisteredModel(kAdmin, "old", ""), StatusCode::kInvalidArgument,
               "'new_name'");
  EXPECT_EQ(*registry_->RegisteredModelOwner("old"), "alice");

  clock_.AdvanceMillis(9);
  TY_ASSERT_OK_AND_ASSIGN(RegisteredModel m,
                          registry_->RenameRegisteredModel(kAdmin, "old", "new"));
  EXPECT_EQ(m.name, "new");
  EXPECT_EQ(m.user_id, "alice");
  ASSERT_EQ(m.tags.size(), 1u);
  ASSERT_EQ(m.aliases.size(), 1u);
  EXPECT_EQ(Keys(m.latest_versions), std::vector<std::string>{"new/2"});
  EXPECT_EQ(m.last_updated_timestamp, m.creation_timestamp + 9);

  EXPECT_ERROR(registry_->GetRegisteredModel("old"), StatusCode::kNotFound, "'old'");
  EXPECT_ERROR(registry_->RegisteredModelOwner("old"), StatusCode::kNotFound, "'old'");
  EXPECT_EQ(*registry_->RegisteredModelOwner("new"), "alice");
  TY_ASSERT_OK_AND_ASSIGN(ModelVersion v, registry_->GetModelVersionByAlias("new", "champion"));
  EXPECT_EQ(v.name, "new");
  EXPECT_EQ(v.version, 1);
  ASSERT_EQ(v.tags.size(), 1u);
  EXPECT_EQ(v.tags[0].key, "vt");
  EXPECT_EQ(SearchVersions("name = 'new'"), (std::vector<std::string>{"new/2", "new/1"}));
  EXPECT_EQ(CreateVersion("new"), 3);  // numbering continues
}

TEST_P(RegistryServiceTest, DeleteModelCascades) {
  CreateModel("m", {{"t", "1"}}, "alice");
  CreateVersion("m", "s3://x", {{"vt", "1"}});
  CreateVersion("m");
  TY_ASSERT_OK(registry_->SetRegisteredModelAlias(kAdmin, "m", "champion", 2));
  EXPECT_EQ(*registry_->RegisteredModelOwner("m"), "alice");
  TY_ASSERT_OK(registry_->DeleteRegisteredModel(kAdmin, "m"));
  EXPECT_ERROR(registry_->DeleteRegisteredModel(kAdmin, "m"), StatusCode::kNotFound, "'m'");
  EXPECT_ERROR(registry_->GetModelVersion("m", 1), StatusCode::kNotFound, "'m'");
  EXPECT_ERROR(registry_->RegisteredModelOwner("m"), StatusCode::kNotFound, "'m'");
  EXPECT_TRUE(SearchVersions("").empty());

  // A new model of the same name starts afresh, with its new owner.
  CreateModel("m", {}, "bob");
  EXPECT_EQ(*registry_->RegisteredModelOwner("m"), "bob");
  EXPECT_EQ(CreateVersion("m"), 1);
  TY_ASSERT_OK_AND_ASSIGN(RegisteredModel m, registry_->GetRegisteredModel("m"));
  EXPECT_TRUE(m.tags.empty());
  EXPECT_TRUE(m.aliases.empty());
  TY_ASSERT_OK_AND_ASSIGN(ModelVersion v, registry_->GetModelVersion("m", 1));
  EXPECT_TRUE(v.tags.empty());
  EXPECT_TRUE(v.aliases.empty());
}

TEST_P(RegistryServiceTest, DownloadUriResolvesModelsAndRunsSources) {
  TY_ASSERT_OK_AND_ASSIGN(tracking::Run run,
                          tracking_->CreateRun(kAdmin, "0", "alice", "r", {}, {}));
  TY_ASSERT_OK_AND_ASSIGN(
      tracking::LoggedModel logged,
      tracking_->CreateLoggedModel(As("alice"), "0", "model", "", run.info.run_id, {}, {}));
  ASSERT_FALSE(logged.artifact_uri.empty());
  CreateModel("m");

  // models:/<model_id>, as mlflow 3's register_model sends it.
  TY_ASSERT_OK_AND_ASSIGN(ModelVersion v1, registry_->CreateModelVersion(
                                               As("alice"), {.name = "m",
                                                             .source = "models:/" + logged.model_id,
                                                             .model_id = logged.model_id}));
  EXPECT_EQ(v1.source, "models:/" + logged.model_id);
  EXPECT_EQ(v1.model_id, logged.model_id);
  EXPECT_EQ(v1.run_id, run.info.run_id);  // from the logged model
  EXPECT_EQ(*registry_->GetModelVersionDownloadUri("m", 1), logged.artifact_uri);
  EXPECT_EQ(logged.artifact_uri, "mlflow-artifacts:/0/models/" + logged.model_id + "/artifacts");

  // model_id alone.
  TY_ASSERT_OK_AND_ASSIGN(
      ModelVersion v2,
      registry_->CreateModelVersion(As("alice"), {.name = "m", .model_id = logged.model_id}));
  EXPECT_EQ(v2.source, "models:/" + logged.model_id);
  EXPECT_EQ(*registry_->GetModelVersionDownloadUri("m", 2), logged.artifact_uri);

  // runs:/<run_id>/<path>.
  TY_ASSERT_OK_AND_ASSIGN(
      ModelVersion v3,
      registry_->CreateModelVersion(
          As("alice"), {.name = "m", .source = "runs:/" + run.info.run_id + "/sub/model"}));
  EXPECT_EQ(v3.run_id, run.info.run_id);
  EXPECT_EQ(*registry_->GetModelVersionDownloadUri("m", 3), run.info.artifact_uri + "/sub/model");
  EXPECT_EQ(v3.source, "runs:/" + run.info.run_id + "/sub/model");

  // Anything else, as given.
  TY_ASSERT_OK(
      registry_
          ->CreateModelVersion(
              As("alice"), {.name = "m", .source = "s3://bucket/model", .run_id = run.info.run_id})
          .status());
  EXPECT_EQ(*registry_->GetModelVersionDownloadUri("m", 4), "s3://bucket/model");

  // models:/<name>/<version> and models:/<name>@<alias> copy that version's location.
  TY_ASSERT_OK(registry_->SetRegisteredModelAlias(kAdmin, "m", "champion", 3));
  CreateModel("copy");
  CreateVersion("copy", "models:/m/1");
  CreateVersion("copy", "models:/m@champion");
  CreateVersion("copy", "models:/m/latest");
  EXPECT_EQ(*registry_->GetModelVersionDownloadUri("copy", 1), logged.artifact_uri);
  EXPECT_EQ(*registry_->GetModelVersionDownloadUri("copy", 2),
            run.info.artifact_uri + "/sub/model");
  EXPECT_EQ(*registry_->GetModelVersionDownloadUri("copy", 3), "s3://bucket/model");

  // What does not exist is NotFound, naming it; nothing is created.
  EXPECT_ERROR(
      registry_->CreateModelVersion(As("alice"), {.name = "m", .source = "models:/m-nope"}),
      StatusCode::kNotFound, "m-nope");
  EXPECT_ERROR(registry_->CreateModelVersion(
                   As("alice"), {.name = "m", .source = "s3://x", .model_id = "m-nope"}),
               StatusCode::kNotFound, "model_id");
  EXPECT_ERROR(
      registry_->CreateModelVersion(As("alice"), {.name = "m", .source = "s3://x", .run_id = "r0"}),
      StatusCode::kNotFound, "run_id");
  EXPECT_ERROR(
      registry_->CreateModelVersion(As("alice"), {.name = "m", .source = "runs:/r0/model"}),
      StatusCode::kNotFound, "r0");
  EXPECT_ERROR(registry_->CreateModelVersion(As("alice"), {.name = "m", .source = "models:/m/99"}),
               StatusCode::kNotFound, "no version 99");
  EXPECT_ERROR(
      registry_->CreateModelVersion(As("alice"), {.name = "m", .source = "models:/m@nope"}),
      StatusCode::kNotFound, "no alias 'nope'");
  EXPECT_ERROR(registry_->CreateModelVersion(As("alice"), {.name = "m", .source = "runs:/"}),
               StatusCode::kInvalidArgument, "runs:/<run_id>");
  EXPECT_EQ(CreateVersion("m"), 5);
  EXPECT_ERROR(registry_->GetModelVersionDownloadUri("m", 99), StatusCode::kNotFound,
               "no version 99");
}

TEST_P(RegistryServiceTest, SearchRegisteredModelsFiltersOrdersAndPages) {
  CreateModel("alpha", {{"team", "nlp"}});
  clock_.AdvanceMillis(10);
  CreateModel("beta", {{"team", "vision"}});
  clock_.AdvanceMillis(10);
  CreateModel("gamma", {{"team", "nlp"}, {"tier", "gold"}});
  clock_.AdvanceMillis(10);
  CreateVersion("alpha");  // alpha is now the most recently updated

  // Default order: name ASC.
  EXPECT_EQ(SearchModels(""), (std::vector<std::string>{"alpha", "beta", "gamma"}));
  EXPECT_EQ(SearchModels("name = 'alpha'"), std::vector<std::string>{"alpha"});
  EXPECT_EQ(SearchModels("name != 'alpha'"), (std::vector<std::string>{"beta", "gamma"}));
  EXPECT_EQ(SearchModels("name LIKE '%a'"), (std::vector<std::string>{"alpha", "beta", "gamma"}));
  EXPECT_EQ(SearchModels("name LIKE 'B%'"), std::vector<std::string>{});
  EXPECT_EQ(SearchModels("name ILIKE 'B%'"), std::vector<std::string>{"beta"});
  EXPECT_EQ(SearchModels("tags.team = 'nlp'"), (std::vector<std::string>{"alpha", "gamma"}));
  EXPECT_EQ(SearchModels("tags.team = 'nlp' AND tags.tier = 'gold'"),
            std::vector<std::string>{"gamma"});
  EXPECT_EQ(SearchModels("tags.team != 'nlp'"), std::vector<std::string>{"beta"});

  EXPECT_EQ(SearchModels("", {"last_updated_timestamp DESC"}),
            (std::vector<std::string>{"alpha", "gamma", "beta"}));
  EXPECT_EQ(SearchModels("", {"timestamp DESC"}),
            (std::vector<std::string>{"alpha", "gamma", "beta"}));
  EXPECT_EQ(SearchModels("", {"creation_timestamp DESC"}),
            (std::vector<std::string>{"gamma", "beta", "alpha"}));
  EXPECT_EQ(SearchModels("", {"name DESC"}), (std::vector<std::string>{"gamma", "beta", "alpha"}));

  // Paging.
  TY_ASSERT_OK_AND_ASSIGN(auto page, registry_->SearchRegisteredModels({.max_results = 2}));
  EXPECT_EQ(Names(page.items), (std::vector<std::string>{"alpha", "beta"}));
  ASSERT_FALSE(page.next_page_token.empty());
  TY_ASSERT_OK_AND_ASSIGN(page, registry_->SearchRegisteredModels(
                                    {.max_results = 2, .page_token = page.next_page_token}));
  EXPECT_EQ(Names(page.items), std::vector<std::string>{"gamma"});
  EXPECT_TRUE(page.next_page_token.empty());

  // The search results carry tags and latest versions.
  TY_ASSERT_OK_AND_ASSIGN(page, registry_->SearchRegisteredModels({.filter = "name = 'alpha'"}));
  ASSERT_EQ(page.items.size(), 1u);
  EXPECT_EQ(page.items[0].tags.size(), 1u);
  EXPECT_EQ(page.items[0].latest_versions.size(), 1u);

  EXPECT_ERROR(registry_->SearchRegisteredModels({.max_results = 1001}),
               StatusCode::kInvalidArgument, "max_results");
  EXPECT_ERROR(registry_->SearchRegisteredModels({.max_results = 0}), StatusCode::kInvalidArgument,
               "max_results");
  EXPECT_ERROR(registry_->SearchRegisteredModels({.filter = "run_id = 'x'"}),
               StatusCode::kInvalidArgument, "run_id");
  EXPECT_ERROR(registry_->SearchRegisteredModels({.filter = "name = "}),
               StatusCode::kInvalidArgument, "filter");
  EXPECT_ERROR(registry_->SearchRegisteredModels({.order_by = {"bogus"}}),
               StatusCode::kInvalidArgument, "bogus");
  EXPECT_ERROR(registry_->SearchRegisteredModels({.order_by = {"name", "name DESC"}}),
               StatusCode::kInvalidArgument, "more than once");
  EXPECT_ERROR(registry_->SearchRegisteredModels({.page_token = "garbage"}),
               StatusCode::kInvalidArgument, "page_token");
}

TEST_P(RegistryServiceTest, SearchLeavesOutPromptsUnlessAsked) {
  CreateModel("model");
  CreateModel("prompt", {{"mlflow.prompt.is_prompt", "true"}});
  CreateVersion("model");
  CreateVersion("prompt", "s3://p", {{"mlflow.prompt.is_prompt", "true"}});

  EXPECT_EQ(SearchModels(""), std::vector<std::string>{"model"});
  // What the mlflow 3 client appends to every search_registered_models call.
  EXPECT_EQ(SearchModels("tag.`mlflow.prompt.is_prompt` != 'true'"),
            std::vector<std::string>{"model"});
  EXPECT_EQ(SearchModels("name LIKE '%' AND tags.`mlflow.prompt.is_prompt` = 'false'"),
            std::vector<std::string>{"model"});
  EXPECT_EQ(SearchModels("tags.`mlflow.prompt.is_prompt` = 'true'"),
            std::vector<std::string>{"prompt"});
  EXPECT_EQ(SearchModels("tags.`mlflow.prompt.is_prompt` != 'false'"),
            std::vector<std::string>{"prompt"});

  EXPECT_EQ(SearchVersions(""), std::vector<std::string>{"model/1"});
  EXPECT_EQ(SearchVersions("tags.`mlflow.prompt.is_prompt` = 'true'"),
            std::vector<std::string>{"prompt/1"});
}

TEST_P(RegistryServiceTest, SearchModelVersionsFiltersOrdersAndPages) {
  TY_ASSERT_OK_AND_ASSIGN(tracking::Run run,
                          tracking_->CreateRun(kAdmin, "0", "alice", "r", {}, {}));
  CreateModel("a");
  CreateModel("b");
  CreateVersion("a", "s3://one");
  clock_.AdvanceMillis(1);
  CreateVersion("a", "s3://two", {{"env", "prod"}}, run.info.run_id);
  clock_.AdvanceMillis(1);
  CreateVersion("b", "s3://three", {{"env", "dev"}});
  clock_.AdvanceMillis(1);
  CreateVersion("a", "s3://four");

  // Default order: name ASC, version DESC.
  EXPECT_EQ(SearchVersions(""), (std::vector<std::string>{"a/3", "a/2", "a/1", "b/1"}));
  EXPECT_EQ(SearchVersions("name = 'a'"), (std::vector<std::string>{"a/3", "a/2", "a/1"}));
  EXPECT_EQ(SearchVersions("name = 'a' AND version_number >= 2"),
            (std::vector<std::string>{"a/3", "a/2"}));
  EXPECT_EQ(SearchVersions("run_id = '" + run.info.run_id + "'"), std::vector<std::string>{"a/2"});
  EXPECT_EQ(SearchVersions("run_id IN ('" + run.info.run_id + "', 'other')"),
            std::vector<std::string>{"a/2"});
  EXPECT_EQ(SearchVersions("source_path LIKE 's3://t%'"), (std::vector<std::string>{"a/2", "b/1"}));
  EXPECT_EQ(SearchVersions("tags.env = 'prod'"), std::vector<std::string>{"a/2"});
  EXPECT_EQ(SearchVersions("tags.env != 'prod'"), std::vector<std::string>{"b/1"});

  EXPECT_EQ(SearchVersions("", {"version_number ASC"}),
            (std::vector<std::string>{"a/1", "b/1", "a/2", "a/3"}));
  EXPECT_EQ(SearchVersions("", {"creation_timestamp DESC"}),
            (std::vector<std::string>{"a/3", "b/1", "a/2", "a/1"}));
  EXPECT_EQ(SearchVersions("", {"name DESC"}),
            (std::vector<std::string>{"b/1", "a/3", "a/2", "a/1"}));

  TY_ASSERT_OK_AND_ASSIGN(auto page, registry_->SearchModelVersions({.max_results = 3}));
  EXPECT_EQ(Keys(page.items), (std::vector<std::string>{"a/3", "a/2", "a/1"}));
  ASSERT_FALSE(page.next_page_token.empty());
  EXPECT_EQ(page.items[1].tags.size(), 1u);
  TY_ASSERT_OK_AND_ASSIGN(
      page, registry_->SearchModelVersions({.max_results = 3, .page_token = page.next_page_token}));
  EXPECT_EQ(Keys(page.items), std::vector<std::string>{"b/1"});
  EXPECT_TRUE(page.next_page_token.empty());

  TY_ASSERT_OK_AND_ASSIGN(page, registry_->SearchModelVersions({.max_results = 200'000}));
  EXPECT_EQ(page.items.size(), 4u);
  EXPECT_ERROR(registry_->SearchModelVersions({.max_results = 200'001}),
               StatusCode::kInvalidArgument, "max_results");
  EXPECT_ERROR(registry_->SearchModelVersions({.filter = "status = 'READY'"}),
               StatusCode::kInvalidArgument, "status");
}

TEST_P(RegistryServiceTest, OwnerIsTheCreator) {
  CreateModel("m", {}, "dave");
  EXPECT_EQ(*registry_->RegisteredModelOwner("m"), "dave");
  EXPECT_EQ(*registry_->RegisteredModelOwner("m"), "dave");  // cached
  EXPECT_ERROR(registry_->RegisteredModelOwner("zz"), StatusCode::kNotFound, "'zz'");
  EXPECT_ERROR(registry_->RegisteredModelOwner(""), StatusCode::kInvalidArgument, "'name'");
}

// Changes go through the Authorizer: the owner and admins may, others need a grant of
// EDIT, a job's scoped token may not, and an unknown model is NotFound for anyone.
TEST_P(RegistryServiceTest, Authorization) {
  CreateModel("m", {}, "alice");
  identity::Principal alice;
  alice.user = "alice";
  identity::Principal bob;
  bob.user = "bob";
  identity::Principal alices_job = alice;
  alices_job.scope = "job:j-1";
  TY_ASSERT_OK(identity_->CreateUser(kAdmin, {.name = "bob"}).status());

  TY_ASSERT_OK(registry_->SetRegisteredModelTag(alice, "m", {"k", "v"}));
  EXPECT_ERROR(registry_->SetRegisteredModelTag(bob, "m", {"k", "v"}),
               StatusCode::kPermissionDenied, "lacks EDIT permission on registered_model 'm'");
  EXPECT_ERROR(registry_->CreateModelVersion(bob, {.name = "m", .source = "s3://b/x"}),
               StatusCode::kPermissionDenied, "lacks EDIT");
  EXPECT_ERROR(registry_->DeleteRegisteredModel(bob, "m"), StatusCode::kPermissionDenied,
               "lacks EDIT");
  EXPECT_ERROR(registry_->SetRegisteredModelTag(alices_job, "m", {"k", "v"}),
               StatusCode::kPermissionDenied, "scoped to job:j-1");
  EXPECT_ERROR(registry_->SetRegisteredModelTag(bob, "zz", {"k", "v"}), StatusCode::kNotFound,
               "'zz'");

  TY_ASSERT_OK(
      identity_->Grant(alice, {"registered_model", "m", "alice"}, "bob", identity::Action::kEdit));
  TY_ASSERT_OK(registry_->SetRegisteredModelTag(bob, "m", {"k", "w"}));
  TY_ASSERT_OK_AND_ASSIGN(ModelVersion v,
                          registry_->CreateModelVersion(bob, {.name = "m", .source = "s3://b/x"}));
  EXPECT_EQ(v.user_id, "bob");
}

TEST_P(RegistryServiceTest, UploadedVersionsArePendingUntilFinalized) {
  CreateModel("m");
  // The client writes the files under storage_root; the source is only recorded.
  TY_ASSERT_OK_AND_ASSIGN(
      ModelVersion v,
      registry_->CreateModelVersion(As("alice"), {.name = "m",
                                                  .source = "file:///home/alice/model",
                                                  .storage_root = "file:///data/models/abc/"}));
  EXPECT_EQ(v.status, ModelVersionStatus::kPendingRegistration);
  EXPECT_EQ(v.storage_location, "file:///data/models/abc/versions/1");
  EXPECT_EQ(v.source, "file:///home/alice/model");
  EXPECT_ERROR(registry_->FinalizeModelVersion(identity::Principal{"bob", false, "", ""}, "m", 1),
               StatusCode::kPermissionDenied, "bob");
  TY_ASSERT_OK_AND_ASSIGN(ModelVersion ready, registry_->FinalizeModelVersion(As("alice"), "m", 1));
  EXPECT_EQ(ready.status, ModelVersionStatus::kReady);
  EXPECT_ERROR(registry_->FinalizeModelVersion(As("alice"), "m", 1),
               StatusCode::kFailedPrecondition, "READY");
  EXPECT_ERROR(registry_->FinalizeModelVersion(As("alice"), "m", 2), StatusCode::kNotFound,
               "no version 2");
  // A run named explicitly must exist, uploaded or not.
  EXPECT_ERROR(registry_->CreateModelVersion(As("alice"), {.name = "m",
                                                           .source = "runs:/nope/model",
                                                           .run_id = "nope",
                                                           .storage_root = "file:///data/m"}),
               StatusCode::kNotFound, "nope");
  // Versions resolved from their source stay READY at once.
  EXPECT_EQ(registry_->GetModelVersion("m", CreateVersion("m"))->status,
            ModelVersionStatus::kReady);
}

INSTANTIATE_TEST_SUITE_P(Backends, RegistryServiceTest, ::testing::Values("sqlite", "postgres"),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace trainyard::registry
