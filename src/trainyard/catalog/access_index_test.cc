// AccessIndex without a store: UC's rule over a small tree.
#include "trainyard/catalog/access_index.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace trainyard::catalog {
namespace {

using ::testing::HasSubstr;

class AccessIndexTest : public ::testing::Test {
 protected:
  void SetUp() override {
    index_.Reset({{"c", {SecurableType::kCatalog, kMetastoreId, "owner", "main"}},
                  {"s", {SecurableType::kSchema, "c", "owner", "main.s"}},
                  {"t", {SecurableType::kTable, "s", "owner", "main.s.t"}}},
                 {});
  }
  Subject Who(std::vector<std::string> groups = {}) {
    return Subject{"bob", false, std::make_shared<const std::vector<std::string>>(groups)};
  }
  AccessIndex index_;
};

TEST_F(AccessIndexTest, AdminsAndOwnersPass) {
  EXPECT_TRUE(index_.Decide({"root", true, nullptr}, Privilege::kSelect, "t").allowed);
  EXPECT_TRUE(index_.Decide({"owner", false, nullptr}, Privilege::kManage, "t").allowed);
  EXPECT_FALSE(index_.Decide(Who(), Privilege::kSelect, "t").allowed);
  EXPECT_FALSE(index_.Decide(Who(), Privilege::kSelect, "unknown").allowed);
}

TEST_F(AccessIndexTest, GrantsToGroupsInheritDownAndNeedUse) {
  index_.SetGrants("c", "analysts", PrivilegeSet::Of({Privilege::kSelect, Privilege::kUseCatalog}));
  Decision d = index_.Decide(Who({"analysts"}), Privilege::kSelect, "t");
  EXPECT_FALSE(d.allowed);
  EXPECT_THAT(d.reason, HasSubstr("USE SCHEMA on schema main.s"));
  index_.SetGrants("s", "bob", PrivilegeSet::Of({Privilege::kUseSchema}));
  EXPECT_TRUE(index_.Decide(Who({"analysts"}), Privilege::kSelect, "t").allowed);
  EXPECT_FALSE(index_.Decide(Who({"other"}), Privilege::kSelect, "t").allowed);
  // USE CATALOG on the catalog itself needs nothing more.
  EXPECT_TRUE(index_.Decide(Who({"analysts"}), Privilege::kUseCatalog, "c").allowed);
  index_.SetGrants("c", "analysts", PrivilegeSet());
  EXPECT_FALSE(index_.Decide(Who({"analysts"}), Privilege::kSelect, "t").allowed);
}

TEST_F(AccessIndexTest, RenamesAndRemovalsKeepNamesConsistent) {
  index_.Rename("c", "prod");
  EXPECT_EQ(index_.Find(SecurableType::kTable, "prod.s.t"), "t");
  EXPECT_FALSE(index_.Find(SecurableType::kTable, "main.s.t"));
  index_.Remove({"t"});
  EXPECT_FALSE(index_.Find(SecurableType::kTable, "prod.s.t"));
  EXPECT_EQ(index_.Find(SecurableType::kMetastore, ""), kMetastoreId);
}

TEST_F(AccessIndexTest, EffectiveNamesTheSource) {
  index_.SetGrants("c", "bob", PrivilegeSet::Of({Privilege::kSelect}));
  index_.SetGrants("t", "bob", PrivilegeSet::Of({Privilege::kModify}));
  auto e = index_.Effective("t", "bob");
  ASSERT_EQ(e.size(), 1u);
  ASSERT_EQ(e[0].privileges.size(), 2u);
  EXPECT_EQ(e[0].privileges[0].privilege, Privilege::kModify);
  EXPECT_FALSE(e[0].privileges[0].inherited);
  EXPECT_EQ(e[0].privileges[1].inherited_from_name, "main");
  EXPECT_EQ(e[0].privileges[1].inherited_from_type, SecurableType::kCatalog);
}

}  // namespace
}  // namespace trainyard::catalog
