#include "trainyard/jobs/projects.h"

#include <gtest/gtest.h>

#include "trainyard/jobs/secrets.h"

namespace trainyard::jobs {
namespace {

using identity::Principal;

class ProjectsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    db_ = std::move(store::OpenDatabase({.url = ":memory:"})).value();
    auto migrations = identity::IdentityService::Migrations();
    for (auto& m : ProjectService::Migrations()) migrations.push_back(std::move(m));
    for (auto& m : SecretService::Migrations()) migrations.push_back(std::move(m));
    ASSERT_TRUE(store::ApplyMigrations(*db_, migrations).ok());
    ids_ = std::make_unique<identity::IdentityService>(*db_, clock_, random_);
    for (const char* name : {"alice", "bob"}) {
      ASSERT_TRUE(ids_->CreateUser(admin_, {.name = name}).ok());
    }
    projects_ = std::make_unique<ProjectService>(*db_, clock_);
  }

  FakeClock clock_;
  SeededRandom random_{3};
  std::unique_ptr<store::Database> db_;
  std::unique_ptr<identity::IdentityService> ids_;
  std::unique_ptr<ProjectService> projects_;
  Principal admin_{"admin", true, "", ""};
  Principal alice_{"alice", false, "", ""};
  Principal bob_{"bob", false, "", ""};
  Principal alices_job_{"alice", false, "t1", "job:j-1"};
};

TEST_F(ProjectsTest, MembershipAndCeilingGateSubmits) {
  ASSERT_TRUE(projects_->Create(admin_, "nlp", 10).ok());
  EXPECT_EQ(projects_->Create(alice_, "mine", 0).status().code(), StatusCode::kPermissionDenied);
  Status outsider = projects_->AuthorizeSubmit(alice_, "nlp", 0);
  EXPECT_EQ(outsider.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(outsider.message().find("trainyard projects add-member nlp alice"), std::string::npos);
  EXPECT_EQ(projects_->AddMember(alice_, "nlp", "alice").code(), StatusCode::kPermissionDenied);
  ASSERT_TRUE(projects_->AddMember(admin_, "nlp", "alice").ok());
  EXPECT_TRUE(projects_->AuthorizeSubmit(alice_, "nlp", 10).ok());
  Status too_high = projects_->AuthorizeSubmit(alice_, "nlp", 11);
  EXPECT_EQ(too_high.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(too_high.message().find("ceiling of 10"), std::string::npos);
  EXPECT_EQ(projects_->SetCeiling(alice_, "nlp", 1000).code(), StatusCode::kPermissionDenied);
  ASSERT_TRUE(projects_->SetCeiling(admin_, "nlp", 500).ok());
  EXPECT_TRUE(projects_->AuthorizeSubmit(alice_, "nlp", 500).ok());
  EXPECT_TRUE(projects_->SetCeiling(admin_, "nlp", 5000).IsInvalidArgument());
  EXPECT_TRUE(projects_->AuthorizeSubmit(admin_, "nlp", 1000).ok());  // admins always may
  EXPECT_EQ(projects_->AuthorizeSubmit(alices_job_, "nlp", 0).code(),
            StatusCode::kPermissionDenied);
  ASSERT_TRUE(projects_->RemoveMember(admin_, "nlp", "alice").ok());
  EXPECT_EQ(projects_->AuthorizeSubmit(alice_, "nlp", 0).code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(projects_->RemoveMember(admin_, "nlp", "alice").IsNotFound());
}

TEST_F(ProjectsTest, DefaultIsOpenWithCeilingZeroAndMissingProjectsNeedAnAdmin) {
  EXPECT_TRUE(projects_->AuthorizeSubmit(bob_, "default", 0).ok());
  EXPECT_EQ(projects_->AuthorizeSubmit(bob_, "default", 1).code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(*projects_->IsMember("bob", "default"));
  Status missing = projects_->AuthorizeSubmit(bob_, "vision", 0);
  EXPECT_EQ(missing.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(missing.message().find("does not exist"), std::string::npos);
  EXPECT_TRUE(projects_->Get("vision").status().IsNotFound());
  // An admin's submit creates it, with the admin as its member.
  ASSERT_TRUE(projects_->AuthorizeSubmit(admin_, "vision", 900).ok());
  auto vision = projects_->Get("vision");
  ASSERT_TRUE(vision.ok());
  EXPECT_EQ(vision->members, std::vector<std::string>{"admin"});
  EXPECT_EQ(projects_->AuthorizeSubmit(bob_, "vision", 0).code(), StatusCode::kPermissionDenied);
}

TEST_F(ProjectsTest, SecretsAreUsableByOwnerOrProjectMembersOnly) {
  SecretService secrets(*db_, clock_, identity::SecretCipher(std::string(32, 'k')), *projects_);
  ASSERT_TRUE(projects_->Create(admin_, "nlp", 0).ok());
  ASSERT_TRUE(projects_->AddMember(admin_, "nlp", "alice").ok());
  ASSERT_TRUE(
      secrets.Create(alice_, {.name = "alice-key", .project = "", .value = "v-alice"}).ok());
  EXPECT_EQ(
      secrets.Create(bob_, {.name = "team-key", .project = "nlp", .value = "v"}).status().code(),
      StatusCode::kPermissionDenied);
  ASSERT_TRUE(
      secrets.Create(alice_, {.name = "team-key", .project = "nlp", .value = "v-team"}).ok());
  EXPECT_EQ(secrets.Create(alices_job_, {.name = "x", .project = "", .value = "v"}).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_TRUE(secrets.Create(alice_, {.name = "alice-key", .project = "", .value = "again"})
                  .status()
                  .IsAlreadyExists());
  EXPECT_EQ(*secrets.Resolve("alice", "alice-key"), "v-alice");
  EXPECT_EQ(secrets.Resolve("bob", "alice-key").status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(secrets.CheckUse("bob", "team-key").code(), StatusCode::kPermissionDenied);
  ASSERT_TRUE(projects_->AddMember(admin_, "nlp", "bob").ok());
  EXPECT_EQ(*secrets.Resolve("bob", "team-key"), "v-team");
  EXPECT_TRUE(secrets.CheckUse("alice", "nope").IsNotFound());
  // Stored sealed, never as the value.
  ASSERT_TRUE(db_->Read([&](store::Transaction& tx) -> Status {
                   auto rows = tx.Query("SELECT sealed FROM secrets WHERE name = 'alice-key'");
                   EXPECT_EQ((*rows)[0].Text(0).find("v-alice"), std::string::npos);
                   return Status::Ok();
                 })
                  .ok());
  auto listed = secrets.List(bob_);
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].name, "team-key");
  EXPECT_EQ(secrets.Delete(bob_, "team-key").code(), StatusCode::kPermissionDenied);
  ASSERT_TRUE(secrets.Delete(alice_, "team-key").ok());
  EXPECT_TRUE(secrets.Resolve("alice", "team-key").status().IsNotFound());
}

}  // namespace
}  // namespace trainyard::jobs
