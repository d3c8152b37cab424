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

INSTANTIATE_TEST_SUITE_P(Backends, PrincipalsTest, ::testing::Values("sqlite", "postgres"),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace trainyard::identity
