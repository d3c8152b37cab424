// Groups and service principals on SQLite and PostgreSQL (OpenTestDatabase).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "trainyard/identity/identity_service.h"
#include "trainyard/testing/status_matchers.h"
#include "trainyard/testing/test_database.h"

namespace trainyard::identity {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class PrincipalsTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    TY_ASSERT_OK_AND_ASSIGN(db_,
                            store::OpenTestDatabase(GetParam(), IdentityService::Migrations()));
    ids_ = std::make_unique<IdentityService>(*db_, clock_, random_);
    TY_ASSERT_OK(ids_->CreateUser(admin_, {.name = "carol"}));
  }
  FakeClock clock_;
  SeededRandom random_{3};
  std::unique_ptr<store::Database> db_;
  std::unique_ptr<IdentityService> ids_;
  Principal admin_ = Principal::System();
};

TEST_P(PrincipalsTest, NestedGroupsAndTheirClosure) {
  for (const char* g : {"all", "analysts", "ds"}) TY_ASSERT_OK(ids_->CreateGroup(admin_, g));
  TY_ASSERT_OK(ids_->AddGroupMember(admin_, "all", "analysts"));
  TY_ASSERT_OK(ids_->AddGroupMember(admin_, "analysts", "ds"));
  TY_ASSERT_OK(ids_->AddGroupMember(admin_, "ds", "carol"));
  TY_ASSERT_OK_AND_ASSIGN(auto groups, ids_->GroupsOf("carol"));
  EXPECT_THAT(*groups, ElementsAre("all", "analysts", "ds"));
  TY_ASSERT_OK_AND_ASSIGN(auto members, ids_->ListGroupMembers("ds"));
  ASSERT_EQ(members.size(), 1u);
  EXPECT_EQ(members[0].kind, PrincipalKind::kUser);
  // A change is seen by the next call (the cache is dropped).
  TY_ASSERT_OK(ids_->RemoveGroupMember(admin_, "analysts", "ds"));
  TY_ASSERT_OK_AND_ASSIGN(groups, ids_->GroupsOf("carol"));
  EXPECT_THAT(*groups, ElementsAre("ds"));
  TY_ASSERT_OK(ids_->DeleteGroup(admin_, "ds"));
  TY_ASSERT_OK_AND_ASSIGN(groups, ids_->GroupsOf("carol"));
  EXPECT_TRUE(groups->empty());
  EXPECT_THAT(ids_->GetPrincipalKind("ds"), StatusIs(StatusCode::kNotFound));
  TY_ASSERT_OK_AND_ASSIGN(auto kind, ids_->GetPrincipalKind("all"));
  EXPECT_EQ(kind, PrincipalKind::kGroup);
}

TEST_P(PrincipalsTest, CyclesAndBadMembersAreRefused) {
  for (const char* g : {"a", "b", "c"}) TY_ASSERT_OK(ids_->CreateGroup(admin_, g));
  TY_ASSERT_OK(ids_->AddGroupMember(admin_, "a", "b"));
  TY_ASSERT_OK(ids_->AddGroupMember(admin_, "b", "c"));
  EXPECT_THAT(ids_->AddGroupMember(admin_, "c", "a"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("c -> b -> a -> c")));
  EXPECT_THAT(ids_->AddGroupMember(admin_, "a", "a"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("cycle")));
  EXPECT_THAT(ids_->AddGroupMember(admin_, "a", "ghost"), StatusIs(StatusCode::kNotFound));
  EXPECT_THAT(ids_->AddGroupMember(admin_, "a", "b"), StatusIs(StatusCode::kAlreadyExists));
  EXPECT_THAT(ids_->AddGroupMember(Principal{"carol", false, "", ""}, "a", "carol"),
              StatusIs(StatusCode::kPermissionDenied));
  EXPECT_THAT(ids_->CreateGroup(admin_, "carol"), StatusIs(StatusCode::kAlreadyExists));
  EXPECT_THAT(ids_->CreateUser(admin_, {.name = "a"}), StatusIs(StatusCode::kAlreadyExists));
  EXPECT_THAT(ids_->CreateGroup(admin_, "bad name"), StatusIs(StatusCode::kInvalidArgument));
}

TEST_P(PrincipalsTest, ServicePrincipalsHaveTokensAndAreAdminMade) {
  EXPECT_THAT(ids_->CreateServicePrincipal(Principal{"carol", false, "", ""}, "bot"),
              StatusIs(StatusCode::kPermissionDenied));
  TY_ASSERT_OK_AND_ASSIGN(auto sp, ids_->CreateServicePrincipal(admin_, "bot"));
  EXPECT_EQ(sp.kind, PrincipalKind::kServicePrincipal);
  TY_ASSERT_OK_AND_ASSIGN(auto got, ids_->GetUser("bot"));
  EXPECT_EQ(got.kind, PrincipalKind::kServicePrincipal);
  TY_ASSERT_OK_AND_ASSIGN(auto token, ids_->CreateToken(admin_, {.user = "bot", .scope = "job:j"}));
  TY_ASSERT_OK_AND_ASSIGN(auto who, ids_->Authenticate(token.first));
  EXPECT_EQ(who.user, "bot");
  EXPECT_FALSE(who.is_admin);
  // Deleting a member drops its memberships.
  TY_ASSERT_OK(ids_->CreateGroup(admin_, "bots"));
  TY_ASSERT_OK(ids_->AddGroupMember(admin_, "bots", "bot"));
  TY_ASSERT_OK_AND_ASSIGN(auto groups, ids_->GroupsOf("bot"));
  EXPECT_THAT(*groups, ElementsAre("bots"));
  TY_ASSERT_OK(ids_->DeleteUser(admin_, "bot"));
  TY_ASSERT_OK_AND_ASSIGN(groups, ids_->GroupsOf("bot"));
  EXPECT_TRUE(groups->empty());
}

TEST_P(PrincipalsTest, RunAsIsForAdminsTheServicePrincipalAndUsersGrantedItsUse) {
  TY_ASSERT_OK(ids_->CreateServicePrincipal(admin_, "bot"));
  TY_ASSERT_OK(ids_->CreateUser(admin_, {.name = "dave"}));
  TY_ASSERT_OK(ids_->CreateGroup(admin_, "team"));
  const Principal carol{"carol", false, "", ""}, dave{"dave", false, "", ""};
  const Securable bot{std::string(kServicePrincipalSecurable), "bot", ""};
  TY_EXPECT_OK(ids_->AuthorizeRunAs(admin_, "bot"));
  TY_EXPECT_OK(ids_->AuthorizeRunAs(Principal{"bot", false, "", ""}, "bot"));
  EXPECT_THAT(ids_->AuthorizeRunAs(carol, "bot"),
              StatusIs(StatusCode::kPermissionDenied,
                       HasSubstr("run_as: user 'carol' may not run jobs as service principal "
                                 "'bot'; an admin grants its use with 'trainyard "
                                 "service-principals grant-use bot carol'")));
  // Granting its use is for admins and MANAGE holders; a scoped token never runs as another.
  EXPECT_THAT(ids_->Grant(carol, bot, "carol", Action::kEdit),
              StatusIs(StatusCode::kPermissionDenied));
  TY_ASSERT_OK(ids_->Grant(admin_, bot, "carol", Action::kEdit));
  TY_EXPECT_OK(ids_->AuthorizeRunAs(carol, "bot"));
  EXPECT_THAT(ids_->AuthorizeRunAs(Principal{"carol", false, "t", "job:j-1"}, "bot"),
              StatusIs(StatusCode::kPermissionDenied, HasSubstr("run_as: a token scoped")));
  EXPECT_THAT(ids_->Grant(carol, bot, "dave", Action::kEdit),
              StatusIs(StatusCode::kPermissionDenied));
  TY_ASSERT_OK(ids_->Grant(admin_, bot, "carol", Action::kManage));
  TY_ASSERT_OK(ids_->Grant(carol, bot, "dave", Action::kEdit));
  TY_EXPECT_OK(ids_->AuthorizeRunAs(dave, "bot"));
  // Only service principals; a disabled one is refused to everyone.
  EXPECT_THAT(ids_->AuthorizeRunAs(admin_, "carol"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("'carol' is a user")));
  EXPECT_THAT(ids_->AuthorizeRunAs(admin_, "team"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("'team' is a group")));
  EXPECT_THAT(ids_->AuthorizeRunAs(admin_, "ghost"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("no service principal")));
  TY_ASSERT_OK(ids_->SetUserDisabled(admin_, "bot", true));
  EXPECT_THAT(ids_->AuthorizeRunAs(admin_, "bot"),
              StatusIs(StatusCode::kFailedPrecondition, HasSubstr("disabled")));
}

INSTANTIATE_TEST_SUITE_P(Backends, PrincipalsTest, ::testing::Values("sqlite", "postgres"),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace trainyard::identity
