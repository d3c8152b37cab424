#include "trainyard/identity/identity_service.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

namespace trainyard::identity {
namespace {

class IdentityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    db_ = std::move(store::OpenDatabase({.url = ":memory:"})).value();
    ASSERT_TRUE(store::ApplyMigrations(*db_, IdentityService::Migrations()).ok());
    ids_ = std::make_unique<IdentityService>(*db_, clock_, random_);
    dir_ = std::filesystem::temp_directory_path() / ("ty-identity-" + random_.Hex(4));
    std::filesystem::create_directories(dir_);
    ASSERT_TRUE(ids_->Bootstrap(dir_).ok());
    std::ifstream(dir_ + "/admin.token") >> admin_token_;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  FakeClock clock_;
  SeededRandom random_{7};
  std::unique_ptr<store::Database> db_;
  std::unique_ptr<IdentityService> ids_;
  std::string dir_;
  std::string admin_token_;
};

TEST_F(IdentityTest, BootstrapWritesAdminTokenWithMode0600Once) {
  struct stat st;
  ASSERT_EQ(stat((dir_ + "/admin.token").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600);
  auto admin = ids_->Authenticate(admin_token_);
  ASSERT_TRUE(admin.ok());
  EXPECT_TRUE(admin->is_admin);
  ASSERT_TRUE(ids_->Bootstrap(dir_).ok());  // second start keeps the token
  std::string again;
  std::ifstream(dir_ + "/admin.token") >> again;
  EXPECT_EQ(again, admin_token_);
}

TEST_F(IdentityTest, TokensAreHashedExpireAndRevoke) {
  Principal admin = *ids_->Authenticate(admin_token_);
  ASSERT_TRUE(ids_->CreateUser(admin, {.name = "bob"}).ok());
  auto created = ids_->CreateToken(admin, {.user = "bob", .description = "ci", .ttl_seconds = 60});
  ASSERT_TRUE(created.ok());
  const std::string secret = created->first;
  // Only the hash is stored.
  ASSERT_TRUE(db_->Read([&](store::Transaction& tx) -> Status {
                   auto rows = tx.Query("SELECT token_hash FROM tokens WHERE token_id = ?",
                                        {created->second.token_id});
                   EXPECT_EQ(rows->size(), 1u);
                   EXPECT_NE((*rows)[0].Text(0), secret);
                   return Status::Ok();
                 })
                  .ok());
  auto bob = ids_->Authenticate(secret);
  ASSERT_TRUE(bob.ok());
  EXPECT_EQ(bob->user, "bob");
  EXPECT_FALSE(bob->is_admin);
  clock_.AdvanceMillis(61'000);
  EXPECT_EQ(ids_->Authenticate(secret).status().code(), StatusCode::kUnauthenticated);
  auto second = ids_->CreateToken(*ids_->Authenticate(admin_token_), {.user = "bob"});
  ASSERT_TRUE(ids_->Authenticate(second->first).ok());
  ASSERT_TRUE(ids_->RevokeToken(admin, second->second.token_id).ok());
  EXPECT_EQ(ids_->Authenticate(second->first).status().code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(ids_->Authenticate("ty_nope").status().code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(ids_->Authenticate("").status().code(), StatusCode::kUnauthenticated);
}

TEST_F(IdentityTest, AuthorizeOwnersAdminsGrants) {
  Principal admin = *ids_->Authenticate(admin_token_);
  ASSERT_TRUE(ids_->CreateUser(admin, {.name = "alice"}).ok());
  ASSERT_TRUE(ids_->CreateUser(admin, {.name = "bob"}).ok());
  Principal alice{"alice", false, "", ""}, bob{"bob", false, "", ""};
  Securable exp{"experiment", "7", "alice"};
  EXPECT_TRUE(ids_->Authorize(alice, Action::kEdit, exp).ok());
  EXPECT_TRUE(ids_->Authorize(bob, Action::kRead, exp).ok());
  Status denied = ids_->Authorize(bob, Action::kEdit, exp);
  EXPECT_EQ(denied.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(denied.message().find("bob"), std::string::npos);
  EXPECT_EQ(ids_->Grant(bob, exp, "bob", Action::kEdit).code(), StatusCode::kPermissionDenied);
  ASSERT_TRUE(ids_->Grant(alice, exp, "bob", Action::kEdit).ok());
  EXPECT_TRUE(ids_->Authorize(bob, Action::kEdit, exp).ok());
  EXPECT_FALSE(ids_->Authorize(bob, Action::kManage, exp).ok());
  EXPECT_TRUE(ids_->Authorize(admin, Action::kManage, exp).ok());
  EXPECT_EQ(ids_->CreateUser(bob, {.name = "eve"}).status().code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(ids_->CreateUser(admin, {.name = "bad name!"}).status().IsInvalidArgument());
}

TEST_F(IdentityTest, ScopedTokensWriteOnlyWhatTheirPolicyNamesAndNeverManage) {
  Principal admin = *ids_->Authenticate(admin_token_);
  ASSERT_TRUE(ids_->CreateUser(admin, {.name = "alice"}).ok());
  Principal alice{"alice", false, "", ""};
  auto job_token =
      ids_->CreateToken(alice, {.user = "alice", .description = "job", .scope = "job:j-1"});
  ASSERT_TRUE(job_token.ok());
  Principal job = *ids_->Authenticate(job_token->first);
  EXPECT_EQ(ScopedJob(job), "j-1");
  Securable exp{"experiment", "7", "alice"};
  Securable own_run{"run", "r-own", "alice"}, other_run{"run", "r-other", "alice"};
  // Without a policy a scoped token writes nothing, even its owner's objects.
  EXPECT_EQ(ids_->Authorize(job, Action::kEdit, exp, own_run).code(),
            StatusCode::kPermissionDenied);
  ids_->SetScopeWritePolicy([](const std::string& scope, const Securable& what) {
    return scope == "job:j-1" && what.type == "run" && what.id == "r-own";
  });
  EXPECT_TRUE(ids_->Authorize(job, Action::kRead, exp).ok());
  EXPECT_TRUE(ids_->Authorize(job, Action::kEdit, exp, own_run).ok());
  Status other = ids_->Authorize(job, Action::kEdit, exp, other_run);
  EXPECT_EQ(other.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(other.message().find("r-other"), std::string::npos);
  EXPECT_EQ(ids_->Authorize(job, Action::kEdit, exp).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(ids_->Authorize(job, Action::kManage, exp).code(), StatusCode::kPermissionDenied);
  // The policy widens nothing beyond the owner's own rights.
  Securable bobs{"experiment", "8", "bob"};
  EXPECT_EQ(ids_->Authorize(job, Action::kEdit, bobs, {"run", "r-own", "bob"}).code(),
            StatusCode::kPermissionDenied);
  // ... unless the scope's job runs as the token's user (JobSpec::run_as): then what the
  // policy names is its to write, and still nothing else, and never MANAGE.
  ids_->SetScopeRunsAs([](const std::string& scope, const std::string& user) {
    return scope == "job:j-1" && user == "alice";
  });
  EXPECT_TRUE(ids_->Authorize(job, Action::kEdit, bobs, {"run", "r-own", "bob"}).ok());
  EXPECT_EQ(ids_->Authorize(job, Action::kEdit, bobs, {"run", "r-other", "bob"}).code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(ids_->Authorize(job, Action::kManage, bobs).code(), StatusCode::kPermissionDenied);
  ids_->SetScopeRunsAs(nullptr);
  // No token, grant or user management.
  EXPECT_EQ(ids_->Grant(job, exp, "alice", Action::kManage).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(ids_->RevokeToken(job, job_token->second.token_id).code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(ids_->CreateToken(job, {.user = "alice"}).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(ids_->SetUserDisabled(job, "alice", true).code(), StatusCode::kPermissionDenied);
  ids_->SetScopeWritePolicy(nullptr);
}

TEST_F(IdentityTest, DisabledAndDeletedUsersTokensStopAtOnce) {
  Principal admin = *ids_->Authenticate(admin_token_);
  ASSERT_TRUE(ids_->CreateUser(admin, {.name = "alice"}).ok());
  ASSERT_TRUE(ids_->CreateUser(admin, {.name = "bob"}).ok());
  Principal alice{"alice", false, "", ""};
  auto token = ids_->CreateToken(alice, {.user = "alice"});
  auto job_token =
      ids_->CreateToken(alice, {.user = "alice", .description = "job", .scope = "job:j-1"});
  ASSERT_TRUE(ids_->Authenticate(token->first).ok());  // now cached
  ASSERT_TRUE(ids_->Authenticate(job_token->first).ok());
  EXPECT_EQ(ids_->SetUserDisabled(alice, "bob", true).code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(ids_->SetUserDisabled(admin, "admin", true).IsInvalidArgument());
  EXPECT_TRUE(ids_->SetUserDisabled(admin, "nobody", true).IsNotFound());
  ASSERT_TRUE(ids_->SetUserDisabled(admin, "alice", true).ok());
  Status refused = ids_->Authenticate(token->first).status();
  EXPECT_EQ(refused.code(), StatusCode::kUnauthenticated);
  EXPECT_NE(refused.message().find("disabled"), std::string::npos);
  EXPECT_EQ(ids_->Authenticate(job_token->first).status().code(), StatusCode::kUnauthenticated);
  auto users = ids_->ListUsers();
  ASSERT_TRUE(users.ok());
  for (const auto& u : *users) EXPECT_EQ(u.disabled, u.name == "alice") << u.name;
  // No new token either, so a disabled user's queued job cannot launch.
  Status no_token =
      ids_->CreateToken(admin, {.user = "alice", .description = "job", .scope = "job:j-2"})
          .status();
  EXPECT_EQ(no_token.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(no_token.message().find("trainyard users enable alice"), std::string::npos);
  ASSERT_TRUE(ids_->SetUserDisabled(admin, "alice", false).ok());
  ASSERT_TRUE(ids_->Authenticate(token->first).ok());
  ASSERT_TRUE(ids_->Grant(admin, {"experiment", "7", "admin"}, "alice", Action::kEdit).ok());
  ASSERT_TRUE(ids_->DeleteUser(admin, "alice").ok());
  EXPECT_EQ(ids_->Authenticate(token->first).status().code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(ids_->Authenticate(job_token->first).status().code(), StatusCode::kUnauthenticated);
  EXPECT_TRUE(ids_->DeleteUser(admin, "alice").IsNotFound());
  // A new user of the same name inherits neither the tokens nor the grants.
  ASSERT_TRUE(ids_->CreateUser(admin, {.name = "alice"}).ok());
  EXPECT_EQ(ids_->Authenticate(token->first).status().code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(ids_->Authorize(alice, Action::kEdit, {"experiment", "7", "admin"}).code(),
            StatusCode::kPermissionDenied);
}

TEST_F(IdentityTest, AuditRecordsAreWritten) {
  ids_->Audit({1, "admin", "POST", "/x", 200, "127.0.0.1"});
  ids_->Audit({2, "bob", "DELETE", "/y", 403, "127.0.0.1"});
  ids_->FlushAuditForTest();
  ASSERT_TRUE(db_->Read([&](store::Transaction& tx) -> Status {
                   auto rows =
                       tx.Query("SELECT user_name, status FROM audit_log ORDER BY timestamp");
                   EXPECT_EQ(rows->size(), 2u);
                   EXPECT_EQ((*rows)[1].Text(0), "bob");
                   EXPECT_EQ((*rows)[1].Int(1), 403);
                   return Status::Ok();
                 })
                  .ok());
  Principal admin = *ids_->Authenticate(admin_token_);
  auto records = ids_->ReadAudit(admin, 0, 10, "bob");
  ASSERT_TRUE(records.ok());
  ASSERT_EQ(records->size(), 1u);
  EXPECT_EQ((*records)[0].path, "/y");
  EXPECT_EQ(ids_->ReadAudit({"bob", false, "", ""}, 0, 10, "").status().code(),
            StatusCode::kPermissionDenied);
}

int64_t CountRows(store::Database& db, const std::string& sql) {
  int64_t n = -1;
  EXPECT_TRUE(db.Read([&](store::Transaction& tx) -> Status {
                  TY_ASSIGN_OR_RETURN(auto rows, tx.Query(sql));
                  n = rows[0].Int(0);
                  return Status::Ok();
                }).ok());
  return n;
}

TEST_F(IdentityTest, DurableAuditIsCommittedWhenItReturns) {
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      for (int j = 0; j < 20; ++j) {
        EXPECT_TRUE(
            ids_->AuditDurably({i * 100 + j, "admin", "POST", "/d", 200, "127.0.0.1"}).ok());
      }
    });
  }
  for (auto& t : threads) t.join();
  // No flush: what AuditDurably acknowledged is in the store.
  EXPECT_EQ(CountRows(*db_, "SELECT COUNT(*) FROM audit_log WHERE path = '/d'"), 160);
}

TEST_F(IdentityTest, FailedAuthenticationsAreAuditedWithinARatePerAddress) {
  ids_->SetFailedAuthRecordsPerMinute(3);
  for (int i = 0; i < 10; ++i) {
    ids_->AuditFailedAuthentication({0, "", "GET", "/x", 401, "10.0.0.1", "invalid token"});
  }
  ids_->AuditFailedAuthentication({0, "", "GET", "/x", 401, "10.0.0.2", "invalid token"});
  ids_->FlushAuditForTest();
  EXPECT_EQ(CountRows(*db_,
                      "SELECT COUNT(*) FROM audit_log WHERE remote = '10.0.0.1' AND user_name = "
                      "'(unauthenticated)' AND detail = 'invalid token'"),
            3);
  EXPECT_EQ(CountRows(*db_, "SELECT COUNT(*) FROM audit_log WHERE remote = '10.0.0.2'"), 1);
  // The 7 suppressed ones are summed up a few seconds later, in one record.
  clock_.AdvanceMillis(6000);
  std::string summary =
      "SELECT COUNT(*) FROM audit_log WHERE remote = '10.0.0.1' AND detail LIKE '7 more failed "
      "authentications from 10.0.0.1%'";
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (CountRows(*db_, summary) == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling, bounded
  }
  EXPECT_EQ(CountRows(*db_, summary), 1);
  // A new minute: recorded one by one again.
  clock_.AdvanceMillis(60000);
  ids_->AuditFailedAuthentication({0, "", "GET", "/y", 401, "10.0.0.1", "invalid token"});
  ids_->FlushAuditForTest();
  EXPECT_EQ(CountRows(*db_, "SELECT COUNT(*) FROM audit_log WHERE path = '/y'"), 1);
}

TEST_F(IdentityTest, CachedAuthenticationNeverTouchesTheStore) {
  EXPECT_FALSE(ids_->AuthenticateCached(admin_token_).has_value());  // not yet looked up
  ASSERT_TRUE(ids_->Authenticate(admin_token_).ok());
  auto cached = ids_->AuthenticateCached(admin_token_);
  ASSERT_TRUE(cached.has_value());
  ASSERT_TRUE(cached->ok());
  EXPECT_TRUE((*cached)->is_admin);
  auto missing = ids_->AuthenticateCached("");
  ASSERT_TRUE(missing.has_value());
  EXPECT_EQ(missing->status().code(), StatusCode::kUnauthenticated);
  EXPECT_FALSE(ids_->AuthenticateCached("ty_unknown_token").has_value());
}

}  // namespace
}  // namespace trainyard::identity

namespace trainyard::identity {
namespace {

TEST_F(IdentityTest, UsersMapToExistingNonRootOsAccountsByAdminsOnly) {
  Principal admin = *ids_->Authenticate(admin_token_);
  // "nobody" exists on every Debian machine; root is refused, unknown accounts too.
  auto created = ids_->CreateUser(admin, {.name = "alice", .os_user = "nobody"});
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  EXPECT_EQ(created->os_user, "nobody");
  EXPECT_EQ(ids_->GetUser("alice")->os_user, "nobody");
  auto root = ids_->CreateUser(admin, {.name = "rooty", .os_user = "root"});
  EXPECT_TRUE(root.status().IsInvalidArgument()) << root.status().ToString();
  EXPECT_NE(root.status().message().find("root"), std::string::npos);
  auto unknown = ids_->SetOsUser(admin, "alice", "ty-no-such-account-here");
  EXPECT_TRUE(unknown.status().IsInvalidArgument()) << unknown.status().ToString();
  EXPECT_EQ(ids_->GetUser("alice")->os_user, "nobody");

  Principal alice{"alice", false, "t", ""};
  EXPECT_EQ(ids_->SetOsUser(alice, "alice", "").status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(ids_->SetOsUser(admin, "nobody-such", "nobody").status().code(), StatusCode::kNotFound);
  auto cleared = ids_->SetOsUser(admin, "alice", "");
  ASSERT_TRUE(cleared.ok());
  EXPECT_EQ(cleared->os_user, "");
  auto users = ids_->ListUsers();
  ASSERT_TRUE(users.ok());
  for (const auto& u : *users) EXPECT_EQ(u.os_user, "") << u.name;
}

}  // namespace
}  // namespace trainyard::identity
