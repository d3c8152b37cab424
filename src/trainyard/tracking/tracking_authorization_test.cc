// TrackingService asks its Authorizer (here the real IdentityService) before every change:
// a run's and a logged model's permissions are their experiment's, a job's scoped token may
// write only its own run, and artifact paths follow their experiment.
#include <gtest/gtest.h>

#include <memory>

#include "trainyard/identity/identity_service.h"
#include "trainyard/tracking/tracking_service.h"

namespace trainyard::tracking {
namespace {

using identity::Action;
using identity::Principal;

Principal User(const std::string& name) {
  Principal p;
  p.user = name;
  return p;
}

class TrackingAuthorizationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    db_ = std::move(store::OpenDatabase({.url = ":memory:"})).value();
    std::vector<store::Migration> migrations = identity::IdentityService::Migrations();
    for (auto& m : TrackingService::Migrations()) migrations.push_back(std::move(m));
    ASSERT_TRUE(store::ApplyMigrations(*db_, migrations).ok());
    identity_ = std::make_unique<identity::IdentityService>(*db_, clock_, random_);
    tracking_ =
        std::make_unique<TrackingService>(*db_, clock_, random_, *identity_, "mlflow-artifacts:");
    ASSERT_TRUE(tracking_->Init("admin").ok());
    ASSERT_TRUE(identity_->CreateUser(Principal::System(), {.name = "bob"}).ok());
    auto experiment = tracking_->CreateExperiment(alice_, "e", "", {});
    ASSERT_TRUE(experiment.ok()) << experiment.status().ToString();
    experiment_id_ = *experiment;
    auto run = tracking_->CreateRun(alice_, experiment_id_, "alice", "r", std::nullopt, {});
    ASSERT_TRUE(run.ok()) << run.status().ToString();
    run_id_ = run->info.run_id;
    // A job's token may write the run named like its job (a stand-in for the jobs
    // service's policy).
    identity_->SetScopeWritePolicy([this](const std::string& scope, const identity::Securable& s) {
      return scope == "job:j-1" && s.type == "run" && s.id == run_id_;
    });
  }
  void TearDown() override {
    tracking_.reset();
    identity_.reset();
  }

  FakeClock clock_;
  SeededRandom random_{3};
  std::unique_ptr<store::Database> db_;
  std::unique_ptr<identity::IdentityService> identity_;
  std::unique_ptr<TrackingService> tracking_;
  const Principal alice_ = User("alice");
  const Principal bob_ = User("bob");
  std::string experiment_id_, run_id_;
};

TEST_F(TrackingAuthorizationTest, OwnerMayChangeOthersNeedAGrant) {
  EXPECT_TRUE(tracking_->LogBatch(alice_, run_id_, {}, {{"lr", "0.1"}}, {}).ok());
  Status denied = tracking_->LogBatch(bob_, run_id_, {}, {{"x", "1"}}, {});
  EXPECT_EQ(denied.code(), StatusCode::kPermissionDenied) << denied.ToString();
  EXPECT_NE(denied.message().find("lacks EDIT permission on experiment"), std::string::npos);
  EXPECT_EQ(tracking_->RenameExperiment(bob_, experiment_id_, "x").code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(
      tracking_->CreateRun(bob_, experiment_id_, "bob", "r", std::nullopt, {}).status().code(),
      StatusCode::kPermissionDenied);
  EXPECT_EQ(tracking_->DeleteRun(bob_, run_id_).code(), StatusCode::kPermissionDenied);
  // An unknown run is NotFound, whoever asks.
  EXPECT_EQ(tracking_->LogBatch(bob_, "nope", {}, {}, {}).code(), StatusCode::kNotFound);

  ASSERT_TRUE(
      identity_->Grant(alice_, {"experiment", experiment_id_, "alice"}, "bob", Action::kEdit).ok());
  EXPECT_TRUE(tracking_->LogBatch(bob_, run_id_, {}, {{"x", "1"}}, {}).ok());
  EXPECT_TRUE(tracking_->SetExperimentTag(bob_, experiment_id_, {"k", "v"}).ok());
}

TEST_F(TrackingAuthorizationTest, ScopedTokenWritesOnlyItsRun) {
  Principal job = alice_;
  job.scope = "job:j-1";
  EXPECT_TRUE(tracking_->LogBatch(job, run_id_, {}, {{"lr", "0.1"}}, {}).ok());
  auto other = tracking_->CreateRun(alice_, experiment_id_, "alice", "r2", std::nullopt, {});
  ASSERT_TRUE(other.ok());
  Status denied = tracking_->LogBatch(job, other->info.run_id, {}, {}, {{"t", "v"}});
  EXPECT_EQ(denied.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(denied.message().find("may only write to its own job and run"), std::string::npos);
  EXPECT_EQ(tracking_->SetExperimentTag(job, experiment_id_, {"k", "v"}).code(),
            StatusCode::kPermissionDenied);
  // A logged model it creates must come from its run, in that run's experiment.
  EXPECT_TRUE(tracking_->CreateLoggedModel(job, experiment_id_, "m", "", run_id_, {}, {}).ok());
  EXPECT_EQ(tracking_->CreateLoggedModel(job, "0", "m", "", run_id_, {}, {}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(tracking_->CreateLoggedModel(job, experiment_id_, "m", "", "", {}, {}).status().code(),
            StatusCode::kPermissionDenied);
}

TEST_F(TrackingAuthorizationTest, ArtifactPathsFollowTheirExperiment) {
  const std::string in_run = experiment_id_ + "/" + run_id_ + "/artifacts/model.bin";
  EXPECT_TRUE(tracking_->AuthorizeArtifactPath(alice_, in_run, Action::kEdit).ok());
  EXPECT_TRUE(tracking_->AuthorizeArtifactPath(bob_, in_run, Action::kRead).ok());
  EXPECT_EQ(tracking_->AuthorizeArtifactPath(bob_, in_run, Action::kEdit).code(),
            StatusCode::kPermissionDenied);
  Principal job = alice_;
  job.scope = "job:j-1";
  EXPECT_TRUE(tracking_->AuthorizeArtifactPath(job, in_run, Action::kEdit).ok());
  EXPECT_EQ(
      tracking_->AuthorizeArtifactPath(job, experiment_id_ + "/other/x", Action::kEdit).code(),
      StatusCode::kPermissionDenied);
  // Outside any experiment: everyone reads, only admins write.
  EXPECT_TRUE(tracking_->AuthorizeArtifactPath(bob_, "shared/x", Action::kRead).ok());
  Status outside = tracking_->AuthorizeArtifactPath(alice_, "shared/x", Action::kEdit);
  EXPECT_EQ(outside.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(outside.message().find("outside any experiment"), std::string::npos);
  EXPECT_TRUE(
      tracking_->AuthorizeArtifactPath(Principal::System(), "shared/x", Action::kEdit).ok());
}

}  // namespace
}  // namespace trainyard::tracking
