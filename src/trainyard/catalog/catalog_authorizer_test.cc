// CatalogAuthorizer: catalog securables decided by catalog grants, everything else by
// IdentityService as before.
#include "trainyard/catalog/catalog_authorizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "trainyard/identity/identity_service.h"
#include "trainyard/testing/status_matchers.h"
#include "trainyard/testing/test_database.h"

namespace trainyard::catalog {
namespace {

using identity::Action;
using identity::Principal;

TEST(CatalogAuthorizerTest, CatalogObjectsUseGrantsOthersFallBack) {
  auto migrations = identity::IdentityService::Migrations();
  for (auto& m : CatalogService::Migrations()) migrations.push_back(m);
  TY_ASSERT_OK_AND_ASSIGN(auto db, store::OpenTestDatabase("sqlite", migrations));
  FakeClock clock;
  SeededRandom random(5);
  identity::IdentityService ids(*db, clock, random);
  CatalogService catalog(*db, ids, clock, random, {"/managed"});
  TY_ASSERT_OK(catalog.Init());
  CatalogAuthorizer authorizer(catalog, ids);
  Principal admin = Principal::System(), bob{"bob", false, "", ""};
  TY_ASSERT_OK(ids.CreateUser(admin, {.name = "bob"}));
  TY_ASSERT_OK(catalog.CreateCatalog(admin, {.name = "main"}));
  TY_ASSERT_OK(catalog.CreateSchema(admin, {.catalog_name = "main", .name = "s"}));
  TY_ASSERT_OK(catalog.CreateTable(admin, {.catalog_name = "main",
                                           .schema_name = "s",
                                           .name = "t",
                                           .columns = {{.name = "x", .type_text = "int"}}}));
  identity::Securable table{"table", "main.s.t", "admin"};
  EXPECT_THAT(authorizer.Authorize(bob, Action::kRead, table),
              StatusIs(StatusCode::kPermissionDenied));
  TY_ASSERT_OK(catalog.UpdatePermissions(
      admin, SecurableType::kCatalog, "main",
      {{"bob", {Privilege::kUseCatalog, Privilege::kUseSchema, Privilege::kSelect}, {}}}));
  TY_EXPECT_OK(authorizer.Authorize(bob, Action::kRead, table));
  EXPECT_THAT(authorizer.Authorize(bob, Action::kEdit, table),
              StatusIs(StatusCode::kPermissionDenied));
  // An experiment is not the catalog's: any user reads, only the owner edits (identity's rule).
  identity::Securable experiment{"experiment", "42", "admin"};
  TY_EXPECT_OK(authorizer.Authorize(bob, Action::kRead, experiment));
  EXPECT_THAT(authorizer.Authorize(bob, Action::kEdit, experiment),
              StatusIs(StatusCode::kPermissionDenied));
  // An MLflow registered model with a plain name falls back too.
  identity::Securable model{"registered_model", "my-model", "bob"};
  TY_EXPECT_OK(authorizer.Authorize(bob, Action::kEdit, model));
}

}  // namespace
}  // namespace trainyard::catalog
