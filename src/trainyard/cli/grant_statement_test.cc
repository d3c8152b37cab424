#include "trainyard/cli/grant_statement.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "trainyard/testing/status_matchers.h"

namespace trainyard::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(GrantStatementTest, ParsesGrantFromArgv) {
  TY_ASSERT_OK_AND_ASSIGN(auto s, ParseGrantStatement(std::vector<std::string>{
                                      "grant", "SELECT", "ON", "TABLE", "main.support.tickets",
                                      "TO", "data-scientists"}));
  EXPECT_EQ(s.verb, GrantVerb::kGrant);
  EXPECT_THAT(s.privileges, ElementsAre("SELECT"));
  EXPECT_EQ(s.securable_type, "table");
  EXPECT_EQ(s.full_name, "main.support.tickets");
  EXPECT_EQ(s.principal, "data-scientists");
}

TEST(GrantStatementTest, ParsesMultiWordPrivilegeListsInAnyCase) {
  TY_ASSERT_OK_AND_ASSIGN(
      auto s, ParseGrantStatement("Grant use catalog, USE_SCHEMA,select , select ON catalog main "
                                  "to `team a`"));
  EXPECT_THAT(s.privileges, ElementsAre("USE CATALOG", "USE SCHEMA", "SELECT"));
  EXPECT_EQ(s.securable_type, "catalog");
  EXPECT_EQ(s.full_name, "main");
  EXPECT_EQ(s.principal, "team a");
  TY_ASSERT_OK_AND_ASSIGN(
      auto all, ParseGrantStatement("GRANT ALL PRIVILEGES ON SCHEMA main.support TO bob"));
  EXPECT_THAT(all.privileges, ElementsAre("ALL PRIVILEGES"));
  EXPECT_EQ(all.securable_type, "schema");
}

TEST(GrantStatementTest, ParsesRevokeAndTwoWordTypes) {
  TY_ASSERT_OK_AND_ASSIGN(
      auto s, ParseGrantStatement("REVOKE EXECUTE ON REGISTERED MODEL main.s.m FROM alice"));
  EXPECT_EQ(s.verb, GrantVerb::kRevoke);
  EXPECT_EQ(s.securable_type, "registered_model");
  EXPECT_EQ(s.full_name, "main.s.m");
  EXPECT_EQ(s.principal, "alice");
  TY_ASSERT_OK_AND_ASSIGN(auto m, ParseGrantStatement("GRANT CREATE CATALOG ON METASTORE TO bob"));
  EXPECT_EQ(m.securable_type, "metastore");
  EXPECT_EQ(m.full_name, "metastore");
}

TEST(GrantStatementTest, ParsesShowGrants) {
  TY_ASSERT_OK_AND_ASSIGN(auto all, ParseGrantStatement("show grants on table main.support.t"));
  EXPECT_EQ(all.verb, GrantVerb::kShow);
  EXPECT_TRUE(all.privileges.empty());
  EXPECT_EQ(all.principal, "");
  EXPECT_EQ(all.full_name, "main.support.t");
  TY_ASSERT_OK_AND_ASSIGN(auto one, ParseGrantStatement("SHOW GRANTS bob ON VOLUME a.b.c"));
  EXPECT_EQ(one.principal, "bob");
  EXPECT_EQ(one.securable_type, "volume");
  TY_ASSERT_OK_AND_ASSIGN(auto to, ParseGrantStatement("SHOW GRANTS TO bob ON CATALOG a"));
  EXPECT_EQ(to.principal, "bob");
}

TEST(GrantStatementTest, ErrorsSayWhatToWriteInstead) {
  auto message = [](std::string_view text) { return ParseGrantStatement(text).status().message(); };
  EXPECT_THAT(message("GRANT SELCT ON TABLE a.b.c TO x"), HasSubstr("did you mean SELECT?"));
  EXPECT_THAT(message("REVOKE SELECT ON TABLE a.b.c TO x"), HasSubstr("takes FROM <principal>"));
  EXPECT_THAT(message("GRANT SELECT ON TABLE a.b.c FROM x"), HasSubstr("takes TO <principal>"));
  EXPECT_THAT(message("GRANT SELECT TABLE a.b.c TO x"), HasSubstr("expected ON"));
  EXPECT_THAT(message("GRANT SELECT ON TABEL a.b.c TO x"), HasSubstr("expected a securable type"));
  EXPECT_THAT(message("GRANT SELECT ON TABLE tickets TO x"),
              HasSubstr("three parts, catalog.schema.name"));
  EXPECT_THAT(message("GRANT SELECT ON TABLE a..c TO x"), HasSubstr("three parts"));
  EXPECT_THAT(message("GRANT SELECT ON TABLE a.b.c TO"), HasSubstr("principal"));
  EXPECT_THAT(message("GRANT SELECT ON TABLE a.b.c TO x y"), HasSubstr("unexpected 'y'"));
  EXPECT_THAT(message("GRANT , SELECT ON TABLE a.b.c TO x"), HasSubstr("privilege is missing"));
  EXPECT_THAT(message("GRANT ON TABLE a.b.c TO x"), HasSubstr("privilege is missing"));
  EXPECT_THAT(message("GRANT SELECT ON TABLE `a.b.c TO x"), HasSubstr("unterminated"));
  EXPECT_THAT(message("SHOW TABLE a.b.c"), HasSubstr("expected GRANTS"));
  EXPECT_THAT(message("DENY SELECT ON TABLE a.b.c TO x"), HasSubstr("starts with GRANT"));
  EXPECT_THAT(message(""), HasSubstr("empty statement"));
  for (auto text : {"GRANT SELCT ON TABLE a.b.c TO x", "", "SHOW GRANTS ON TABLE a"}) {
    EXPECT_THAT(ParseGrantStatement(text), StatusIs(StatusCode::kInvalidArgument)) << text;
  }
}

TEST(GrantStatementTest, KeywordsInBackticksAreNames) {
  TY_ASSERT_OK_AND_ASSIGN(auto s, ParseGrantStatement("GRANT SELECT ON TABLE a.b.c TO `on`"));
  EXPECT_EQ(s.principal, "on");
}

}  // namespace
}  // namespace trainyard::cli
