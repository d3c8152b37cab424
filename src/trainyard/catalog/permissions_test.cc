#include "trainyard/catalog/permissions.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "trainyard/testing/status_matchers.h"

namespace trainyard::catalog {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(PermissionsTest, UnityCatalogsNineteenPlusManageAndAllPrivileges) {
  EXPECT_EQ(AllPrivilegeValues().size(), 21u);
  for (Privilege p : AllPrivilegeValues()) {
    EXPECT_EQ(ParsePrivilege(PrivilegeName(p)), p) << PrivilegeName(p);
  }
  EXPECT_EQ(ParsePrivilege("use_catalog"), Privilege::kUseCatalog);
  EXPECT_EQ(ParsePrivilege("All Privileges"), Privilege::kAllPrivileges);
  EXPECT_EQ(ParsePrivilege("CREATE STORAGE CREDENTIAL"), Privilege::kCreateStorageCredential);
  EXPECT_FALSE(ParsePrivilege("SELCT"));
  EXPECT_FALSE(ParsePrivilege(""));
}

TEST(PermissionsTest, AllPrivilegesCoversEverythingButManage) {
  PrivilegeSet all = PrivilegeSet::Of({Privilege::kAllPrivileges});
  EXPECT_TRUE(all.Grants(Privilege::kSelect));
  EXPECT_TRUE(all.Grants(Privilege::kUseCatalog));
  EXPECT_FALSE(all.Grants(Privilege::kManage));
  EXPECT_TRUE(PrivilegeSet::Of({Privilege::kManage}).Grants(Privilege::kManage));
}

TEST(PermissionsTest, SecurableTypes) {
  TY_ASSERT_OK_AND_ASSIGN(auto t, ParseSecurableType("securable_type", "TABLE"));
  EXPECT_EQ(t, SecurableType::kTable);
  TY_ASSERT_OK_AND_ASSIGN(auto m, ParseSecurableType("securable_type", "registered_model"));
  EXPECT_EQ(m, SecurableType::kRegisteredModel);
  EXPECT_THAT(ParseSecurableType("securable_type", "view"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("securable_type")));
  EXPECT_TRUE(PrivilegeAppliesTo(Privilege::kCreateCatalog, SecurableType::kMetastore));
  EXPECT_FALSE(PrivilegeAppliesTo(Privilege::kCreateCatalog, SecurableType::kCatalog));
  EXPECT_TRUE(PrivilegeAppliesTo(Privilege::kSelect, SecurableType::kSchema));
  EXPECT_FALSE(PrivilegeAppliesTo(Privilege::kSelect, SecurableType::kVolume));
}

TEST(PermissionsTest, DecodesChanges) {
  TY_ASSERT_OK_AND_ASSIGN(
      auto changes,
      DecodePermissionChanges(R"({"changes":[{"principal":"analysts","add":["SELECT","USE_SCHEMA"],
                                 "remove":["MODIFY"]},{"principal":"bob","add":[]}]})",
                              SecurableType::kSchema));
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_EQ(changes[0].principal, "analysts");
  EXPECT_THAT(changes[0].add, ElementsAre(Privilege::kSelect, Privilege::kUseSchema));
  EXPECT_THAT(changes[0].remove, ElementsAre(Privilege::kModify));
  EXPECT_TRUE(changes[1].remove.empty());
}

TEST(PermissionsTest, BadChangesNameTheField) {
  auto decode = [](std::string_view body) {
    return DecodePermissionChanges(body, SecurableType::kTable).status();
  };
  EXPECT_THAT(decode("not json"), StatusIs(StatusCode::kInvalidArgument, HasSubstr("changes")));
  EXPECT_THAT(decode(R"({"changes":{}})"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("changes")));
  EXPECT_THAT(decode(R"({"changes":[{"add":["SELECT"]}]})"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("changes[0].principal")));
  EXPECT_THAT(decode(R"({"changes":[{"principal":"a","add":["SELECT"]},
                                    {"principal":"b","add":["SELECT","SELCT"]}]})"),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("changes[1].add[1]: unknown privilege 'SELCT'")));
  EXPECT_THAT(decode(R"({"changes":[{"principal":"a","remove":[7]}]})"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("changes[0].remove[0]")));
  EXPECT_THAT(decode(R"({"changes":[{"principal":"a","add":["CREATE CATALOG"]}]})"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("cannot be granted on a table")));
  EXPECT_THAT(decode(R"({"changes":[{"principal":"a","add":["SELECT"],"remove":["SELECT"]}]})"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("both added and removed")));
}

}  // namespace
}  // namespace trainyard::catalog
