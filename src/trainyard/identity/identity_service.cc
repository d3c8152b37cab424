#include "trainyard/identity/identity_service.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "trainyard/common/os_account.h"
#include "trainyard/common/strings.h"
#include "trainyard/store/sql.h"

namespace trainyard::identity {
namespace {

// How long an authenticated token is trusted without asking the store again: a revoked
// token or a disabled user stops working within this time.
constexpr int64_t kCacheMillis = 5000;
// At most this many tokens are cached; beyond, the cache starts over (bounds memory
// against many distinct tokens).
constexpr size_t kMaxCachedTokens = 10000;
// The longest user name (CreateUser).
constexpr size_t kMaxUserNameLength = 128;
// The audit writer's batches: records nobody waits for gather for up to kAuditGatherTime
// or until kAuditBatchRecords are queued (each batch is one write transaction); the writer
// also wakes every kAuditSummaryPoll to record suppressed failed authentications.
constexpr size_t kAuditBatchRecords = 512;
constexpr auto kAuditGatherTime = std::chrono::milliseconds(20);
constexpr auto kAuditSummaryPoll = std::chrono::seconds(1);
// The most audit records one ReadAudit returns.
constexpr int64_t kMaxAuditRecordsPerRead = 10000;
constexpr int64_t kFailedAuthWindowMillis = 60000;
// How often a client's suppressed failed authentications are summed up in one record.
constexpr int64_t kFailedAuthSummaryMillis = 5000;
// Client addresses whose failed authentications are counted one by one; beyond, together.
constexpr size_t kMaxFailedAuthAddresses = 10000;

bool ValidUserName(std::string_view name) {
  if (name.empty() || name.size() > kMaxUserNameLength) return false;
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' ||
          c == '@')) {
      return false;
    }
  }
  return true;
}

constexpr auto OptInt = store::OptionalInt;

Status WriteSecretFile(const std::string& path, const std::string& contents) {
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return Status::IOError("cannot write " + tmp + ": " + std::strerror(errno));
  std::string data = contents + "\n";
  bool ok = ::write(fd, data.data(), data.size()) == static_cast<ssize_t>(data.size()) &&
            ::fsync(fd) == 0;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    return Status::IOError("cannot write " + path + ": " + std::strerror(errno));
  }
  ::chmod(path.c_str(), 0600);
  return Status::Ok();
}

}  // namespace

std::string_view ScopedJob(const Principal& who) {
  std::string_view scope = who.scope;
  if (!StartsWith(scope, "job:")) return {};
  return scope.substr(4);
}

std::string_view ActionName(Action a) {
  switch (a) {
    case Action::kRead:
      return "READ";
    case Action::kEdit:
      return "EDIT";
    case Action::kManage:
      return "MANAGE";
  }
  return "READ";
}

std::string_view PrincipalKindName(PrincipalKind k) {
  switch (k) {
    case PrincipalKind::kUser:
      return "user";
    case PrincipalKind::kServicePrincipal:
      return "service_principal";
    case PrincipalKind::kGroup:
      return "group";
  }
  return "user";
}

IdentityService::IdentityService(store::Database& db, Clock& clock, Random& random)
    : db_(db), clock_(clock), random_(random), group_store_(db) {
  audit_thread_ = std::thread([this] { AuditLoop(); });
}

IdentityService::~IdentityService() {
  {
    MutexLock lock(audit_mu_);
    audit_stop_ = true;
  }
  audit_cv_.NotifyAll();
  audit_thread_.join();
}

std::vector<store::Migration> IdentityService::Migrations() {
  return {{"identity",
           1,
           {
               "CREATE TABLE users (name TEXT PRIMARY KEY, is_admin INTEGER NOT NULL,"
               " created_at BIGINT NOT NULL)",
               "CREATE TABLE tokens (token_id TEXT PRIMARY KEY, user_name TEXT NOT NULL,"
               " token_hash TEXT NOT NULL UNIQUE, description TEXT NOT NULL,"
               " created_at BIGINT NOT NULL, expires_at BIGINT, revoked_at BIGINT,"
               " last_used_at BIGINT)",
               "CREATE TABLE grants (securable_type TEXT NOT NULL, securable_id TEXT NOT NULL,"
               " principal TEXT NOT NULL, privilege TEXT NOT NULL,"
               " PRIMARY KEY (securable_type, securable_id, principal))",
               "CREATE TABLE audit_log (timestamp BIGINT NOT NULL, user_name TEXT NOT NULL,"
               " method TEXT NOT NULL, path TEXT NOT NULL, status INTEGER NOT NULL,"
               " remote TEXT NOT NULL)",
               "CREATE INDEX audit_log_by_time ON audit_log (timestamp)",
           }},
          {"identity", 2, {"ALTER TABLE tokens ADD COLUMN scope TEXT"}},
          {"identity", 3, {"ALTER TABLE users ADD COLUMN os_user TEXT"}},
          {"identity", 4, {"ALTER TABLE users ADD COLUMN disabled_at BIGINT"}},
          {"identity", 5, {"ALTER TABLE audit_log ADD COLUMN detail TEXT"}},
          // Service principals, groups (issue 16).
          {"identity", 6,
           [] {
             auto statements = GroupStore::CreateStatements();
             statements.insert(statements.begin(), "ALTER TABLE users ADD COLUMN kind TEXT");
             return statements;
           }()},
          // Access decisions on catalog objects (issue 16).
          {"identity",
           7,
           {"ALTER TABLE audit_log ADD COLUMN securable TEXT",
            "ALTER TABLE audit_log ADD COLUMN privilege TEXT",
            "ALTER TABLE audit_log ADD COLUMN outcome TEXT",
            "CREATE INDEX audit_log_by_securable ON audit_log (securable, timestamp)"}}};
}

Status IdentityService::Bootstrap(const std::string& data_dir) {
  bool has_users = false;
  TY_RETURN_IF_ERROR(db_.Read([&](store::Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(auto rows, tx.Query("SELECT COUNT(*) FROM users"));
    has_users = rows[0].Int(0) > 0;
    return Status::Ok();
  }));
  std::string path = data_dir + "/admin.token";
  if (has_users) return Status::Ok();
  const Principal system = Principal::System();
  TY_RETURN_IF_ERROR(db_.Write([&](store::Transaction& tx) -> Status {
    auto r = tx.Exec("INSERT INTO users (name, is_admin, created_at) VALUES (?, 1, ?)",
                     {std::string("admin"), clock_.NowMillis()});
    return r.ok() ? Status::Ok() : r.status();
  }));
  TY_ASSIGN_OR_RETURN(auto created, CreateToken(system, {.user = "admin",
                                                         .description = "created on first start"}));
  TY_RETURN_IF_ERROR(WriteSecretFile(path, created.first));
  spdlog::info("created the admin user; its token is in {} (mode 0600)", path);
  return Status::Ok();
}

std::optional<Result<Principal>> IdentityService::AuthenticateCached(std::string_view token) {
  if (token.empty()) {
    return Result<Principal>(Status::Unauthenticated(
        "missing credentials: send 'Authorization: Bearer <token>' (the admin token is in the "
        "server's data directory, admin.token; MLflow clients read MLFLOW_TRACKING_TOKEN)"));
  }
  std::string hash = Sha256Hex(token);
  int64_t now = clock_.NowMillis();
  MutexLock lock(cache_mu_);
  auto it = cache_.find(hash);
  if (it != cache_.end() && now - it->second.cached_at < kCacheMillis &&
      (!it->second.expires_at || *it->second.expires_at > now)) {
    return Result<Principal>(it->second.principal);
  }
  return std::nullopt;
}

Result<Principal> IdentityService::Authenticate(std::string_view token) {
  if (auto cached = AuthenticateCached(token)) return std::move(*cached);
  std::string hash = Sha256Hex(token);
  int64_t now = clock_.NowMillis();
  Principal p;
  std::optional<int64_t> expires_at;
  Status s = db_.Read([&](store::Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(
        auto rows,
        tx.Query("SELECT t.token_id, t.user_name, u.is_admin, t.expires_at, t.revoked_at, "
                 "t.scope, u.disabled_at FROM "
                 "tokens t JOIN users u ON u.name = t.user_name WHERE t.token_hash = ?",
                 {hash}));
    if (rows.empty()) return Status::Unauthenticated("invalid token");
    const auto& row = rows[0];
    if (!row.IsNull(4)) return Status::Unauthenticated("token " + row.Text(0) + " was revoked");
    if (!row.IsNull(6)) {
      return Status::Unauthenticated("user '" + row.Text(1) +
                                     "' is disabled; ask an admin: trainyard users enable " +
                                     row.Text(1));
    }
    expires_at = OptInt(row, 3);
    if (expires_at && *expires_at <= now) {
      return Status::Unauthenticated("token " + row.Text(0) +
                                     " has expired; create a new one with 'trainyard token "
                                     "create'");
    }
    p.token_id = row.Text(0);
    p.user = row.Text(1);
    p.is_admin = row.Int(2) != 0;
    if (!row.IsNull(5)) p.scope = row.Text(5);
    if (!p.scope.empty()) p.is_admin = false;
    return Status::Ok();
  });
  if (!s.ok()) return s;
  MutexLock lock(cache_mu_);
  if (cache_.size() > kMaxCachedTokens) cache_.clear();
  cache_[hash] = CachedPrincipal{p, expires_at, now};
  return p;
}

Status IdentityService::Authorize(const Principal& who, Action action, const Securable& what) {
  return Authorize(who, action, what, what);
}

Status IdentityService::Authorize(const Principal& who, Action action, const Securable& what,
                                  const Securable& accessed) {
  if (!who.scope.empty() && action == Action::kManage) {
    return Status::PermissionDenied("a token scoped to " + who.scope + " may not manage " +
                                    what.type + " '" + what.id +
                                    "'; use the owner's own token (trainyard token create)");
  }
  if (!who.scope.empty() && action == Action::kEdit) {
    if (!(scope_write_policy_ && scope_write_policy_(who.scope, accessed))) {
      return Status::PermissionDenied("a token scoped to " + who.scope +
                                      " may only write to its own job and run, not to " +
                                      accessed.type + " '" + accessed.id +
                                      "'; use the owner's own token (trainyard token create)");
    }
    // A job that runs as a service principal (JobSpec::run_as) gives that principal's token
    // its own job and run to write, though the submitter owns them. Other scoped tokens
    // write them with their user's rights: the policy widens nothing.
    if (scope_runs_as_ && scope_runs_as_(who.scope, who.user)) return Status::Ok();
  }
  if (who.is_admin) return Status::Ok();
  if (!what.owner.empty() && what.owner == who.user) return Status::Ok();
  if (action == Action::kRead) return Status::Ok();
  std::string privilege;
  Status s = db_.Read([&](store::Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(auto rows, tx.Query("SELECT privilege FROM grants WHERE securable_type = "
                                            "? AND securable_id = ? AND principal = ?",
                                            {what.type, what.id, who.user}));
    if (!rows.empty()) privilege = rows[0].Text(0);
    return Status::Ok();
  });
  TY_RETURN_IF_ERROR(s);
  if (privilege == "MANAGE" || (privilege == "EDIT" && action == Action::kEdit)) {
    return Status::Ok();
  }
  return Status::PermissionDenied("user '" + who.user + "' lacks " +
                                  std::string(ActionName(action)) + " permission on " + what.type +
                                  " '" + what.id + "' (owner: " + what.owner +
                                  "); ask the owner or an admin to grant it");
}

Result<User> IdentityService::CreateUser(const Principal& who, const CreateUserRequest& request) {
  const std::string& name = request.name;
  const bool is_admin = request.is_admin;
  const std::string& os_user = request.os_user;
  if (!who.is_admin) return Status::PermissionDenied("only admins may create users");
  if (!who.scope.empty()) {
    return Status::PermissionDenied("a token scoped to " + who.scope + " may not create users");
  }
  if (!ValidUserName(name)) {
    return Status::InvalidArgument(
        "user name must be 1-128 letters, digits, '_', '-', '.', '@' (got '" + Abbreviate(name) +
        "')");
  }
  if (!os_user.empty()) TY_RETURN_IF_ERROR(ValidateJobAccount(os_user).status());
  User u{name, is_admin, clock_.NowMillis(), os_user};
  Status s = db_.Write([&](store::Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(bool is_group, GroupStore::Exists(tx, name));
    if (is_group) return Status::AlreadyExists("'" + name + "' is a group's name already");
    auto r = tx.Exec("INSERT INTO users (name, is_admin, created_at, os_user) VALUES (?, ?, ?, ?)",
                     {name, int64_t{is_admin ? 1 : 0}, u.created_at, store::NullIfEmpty(os_user)});
    if (!r.ok() && r.status().IsAlreadyExists()) {
      return Status::AlreadyExists("user '" + name + "' already exists");
    }
    return r.ok() ? Status::Ok() : r.status();
  });
  if (!s.ok()) return s;
  return u;
}

// Reads a row of (name, is_admin, created_at, os_user, disabled_at, kind).
static User UserFromRow(const store::Row& r) {
  User u{r.Text(0), r.Int(1) != 0, r.Int(2), r.IsNull(3) ? "" : r.Text(3)};
  u.disabled = !r.IsNull(4);
  if (!r.IsNull(5) && r.Text(5) == PrincipalKindName(PrincipalKind::kServicePrincipal)) {
    u.kind = PrincipalKind::kServicePrincipal;
  }
  return u;
}

Result<std::vector<User>> IdentityService::ListUsers() {
  std::vector<User> out;
  Status s = db_.Read([&](store::Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(auto rows, tx.Query("SELECT name, is_admin, created_at, os_user, "
                                            "disabled_at, kind FROM users ORDER BY name"));
    for (const auto& r : rows) out.push_back(UserFromRow(r));
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return out;
}

Result<User> IdentityService::GetUser(const std::string& name) {
  User u;
  Status s = db_.Read([&](store::Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(auto rows, tx.Query("SELECT name, is_admin, created_at, os_user, "
                                            "disabled_at, kind FROM users WHERE name = ?",
                                            {name}));
    if (rows.empty()) return Status::NotFound("user '" + name + "' does not exist");
    u = UserFromRow(rows[0]);
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return u;
}

Result<User> IdentityService::SetOsUser(const Principal& who, const std::string& name,
                                        const std::string& os_user) {
  if (!who.is_admin || !who.scope.empty()) {
    return Status::PermissionDenied("only admins may map users to OS accounts");
  }
  if (!os_user.empty()) TY_RETURN_IF_ERROR(ValidateJobAccount(os_user).status());
  Status s = db_.Write([&](store::Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(auto rows, tx.Query("SELECT 1 FROM users WHERE name = ?", {name}));
    if (rows.empty()) {
      return Status::NotFound("user '" + name +
                              "' does not exist; list users with 'trainyard "
                              "users list'");
    }
    auto r =
        tx.Exec("UPDATE users SET os_user = ? WHERE name = ?", {store::NullIfEmpty(os_user), name});
    return r.ok() ? Status::Ok() : r.status();
  });
  if (!s.ok()) return s;
  return GetUser(name);
}

static Status CheckUserAdministration(const Principal& who, const std::string& name,
                                      std::string_view verb) {
  if (!who.scope.empty()) {
    return Status::PermissionDenied("a token scoped to " + who.scope + " may not " +
                                    std::string(verb) + " users");
  }
  if (!who.is_admin)
    return Status::PermissionDenied("only admins may " + std::string(verb) + " users");
  if (name == who.user) {
    return Status::InvalidArgument("an admin may not " + std::string(verb) +
                                   " their own user; ask another admin");
  }
  return Status::Ok();
}

Status IdentityService::SetUserDisabled(const Principal& who, const std::string& name,
                                        bool disabled) {
  TY_RETURN_IF_ERROR(CheckUserAdministration(who, name, disabled ? "disable" : "enable"));
  Status s = db_.Write([&](store::Transaction& tx) -> Status {
    store::Value at = disabled ? store::Value(clock_.NowMillis()) : store::Value();
    TY_ASSIGN_OR_RETURN(int64_t n,
                        tx.Exec("UPDATE users SET disabled_at = ? WHERE name = ?", {at, name}));
    if (n == 0) {
      return Status::NotFound("user '" + name + "' does not exist; see 'trainyard users list'");
    }
    return Status::Ok();
  });
  if (s.ok()) InvalidateCache();
  return s;
}

Status IdentityService::DeleteUser(const Principal& who, const std::string& name) {
  TY_RETURN_IF_ERROR(CheckUserAdministration(who, name, "delete"));
  Status s = db_.Write([&](store::Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(int64_t n, tx.Exec("DELETE FROM users WHERE name = ?", {name}));
    if (n == 0) {
      return Status::NotFound("user '" + name + "' does not exist; see 'trainyard users list'");
    }
    TY_RETURN_IF_ERROR(tx.Exec("UPDATE tokens SET revoked_at = ? WHERE user_name = ? AND "
                               "revoked_at IS NULL",
                               {clock_.NowMillis(), name})
                           .status());
    TY_RETURN_IF_ERROR(GroupStore::RemoveMemberEverywhere(tx, name));
    return tx.Exec("DELETE FROM grants WHERE principal = ?", {name}).status();
  });
  if (!s.ok()) return s;
  InvalidateCache();
  InvalidateGroups();
  if (user_deleted_listener_) {
    return user_deleted_listener_(name).WithContext("user '" + name +
                                                    "' was deleted, but dropping what they held");
  }
  return Status::Ok();
}

Result<std::pair<std::string, TokenInfo>> IdentityService::CreateToken(
    const Principal& who, const CreateTokenRequest& request) {
  const std::string& user = request.user;
  const std::string& description = request.description;
  const std::optional<int64_t>& ttl_seconds = request.ttl_seconds;
  const std::string& scope = request.scope;
  if (!who.scope.empty()) {
    return Status::PermissionDenied("a token scoped to " + who.scope + " may not create tokens");
  }
  if (!who.is_admin && who.user != user) {
    return Status::PermissionDenied("only admins may create tokens for other users");
  }
  if (ttl_seconds && (*ttl_seconds <= 0 || *ttl_seconds > int64_t{10} * 365 * 86400)) {
    return Status::InvalidArgument("expires_in_seconds must be between 1 and 315360000");
  }
  if (description.size() > 1000) {
    return Status::InvalidArgument("description must be at most 1000 characters");
  }
  TokenInfo info;
  info.token_id = random_.Hex(6);
  info.user = user;
  info.description = description;
  info.created_at = clock_.NowMillis();
  info.scope = scope;
  if (ttl_seconds) info.expires_at = info.created_at + *ttl_seconds * 1000;
  std::string secret = "ty_" + info.token_id + "_" + random_.Hex(20);
  Status s = db_.Write([&](store::Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(auto users,
                        tx.Query("SELECT disabled_at FROM users WHERE name = ?", {user}));
    if (users.empty()) return Status::NotFound("user '" + user + "' does not exist");
    // Also what keeps a disabled user's queued jobs from starting: their launch needs one.
    if (!users[0].IsNull(0)) {
      return Status::FailedPrecondition("user '" + user +
                                        "' is disabled; an admin enables it with 'trainyard "
                                        "users enable " +
                                        user + "'");
    }
    store::Value expires = store::NullIfUnset(info.expires_at);
    auto r = tx.Exec(
        "INSERT INTO tokens (token_id, user_name, token_hash, description, created_at, "
        "expires_at, scope) VALUES (?, ?, ?, ?, ?, ?, ?)",
        {info.token_id, user, Sha256Hex(secret), description, info.created_at, expires,
         store::NullIfEmpty(scope)});
    return r.ok() ? Status::Ok() : r.status();
  });
  if (!s.ok()) return s;
  return std::make_pair(secret, info);
}

Result<std::vector<TokenInfo>> IdentityService::ListTokens(const Principal& who) {
  std::vector<TokenInfo> out;
  Status s = db_.Read([&](store::Transaction& tx) -> Status {
    std::string sql =
        "SELECT token_id, user_name, description, created_at, expires_at, revoked_at, "
        "last_used_at, scope FROM tokens";
    std::vector<store::Value> params;
    if (!who.is_admin) {
      sql += " WHERE user_name = ?";
      params.push_back(who.user);
    }
    sql += " ORDER BY created_at, token_id";
    TY_ASSIGN_OR_RETURN(auto rows, tx.Query(sql, params));
    for (const auto& r : rows) {
      out.push_back(TokenInfo{r.Text(0), r.Text(1), r.Text(2), r.Int(3), OptInt(r, 4), OptInt(r, 5),
                              OptInt(r, 6), r.IsNull(7) ? "" : r.Text(7)});
    }
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return out;
}

Status IdentityService::RevokeToken(const Principal& who, const std::string& token_id) {
  if (!who.scope.empty()) {
    return Status::PermissionDenied("a token scoped to " + who.scope + " may not revoke tokens");
  }
  Status s = db_.Write([&](store::Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(auto rows,
                        tx.Query("SELECT user_name FROM tokens WHERE token_id = ?", {token_id}));
    if (rows.empty()) return Status::NotFound("token '" + token_id + "' does not exist");
    if (!who.is_admin && rows[0].Text(0) != who.user) {
      return Status::PermissionDenied("token '" + token_id + "' belongs to another user");
    }
    auto r = tx.Exec("UPDATE tokens SET revoked_at = ? WHERE token_id = ? AND revoked_at IS NULL",
                     {clock_.NowMillis(), token_id});
    return r.ok() ? Status::Ok() : r.status();
  });
  if (s.ok()) InvalidateCache();
  return s;
}

Status IdentityService::Grant(const Principal& who, const Securable& what, const std::string& user,
                              Action privilege) {
  if (!who.scope.empty()) {
    return Status::PermissionDenied("a token scoped to " + who.scope + " may not grant privileges");
  }
  TY_RETURN_IF_ERROR(Authorize(who, Action::kManage, what));
  if (privilege == Action::kRead) {
    return Status::InvalidArgument("privilege must be EDIT or MANAGE (READ is implied)");
  }
  return db_.Write([&](store::Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(auto users, tx.Query("SELECT 1 FROM users WHERE name = ?", {user}));
    if (users.empty()) return Status::NotFound("user '" + user + "' does not exist");
    auto r = tx.Exec(
        "INSERT INTO grants (securable_type, securable_id, principal, privilege) VALUES (?, ?, "
        "?, ?) ON CONFLICT (securable_type, securable_id, principal) DO UPDATE SET privilege = "
        "excluded.privilege",
        {what.type, what.id, user, std::string(ActionName(privilege))});
    return r.ok() ? Status::Ok() : r.status();
  });
}

void IdentityService::InvalidateCache() {
  MutexLock lock(cache_mu_);
  cache_.clear();
}

void IdentityService::Audit(AuditRecord record) {
  MutexLock lock(audit_mu_);
  EnqueueAuditLocked(std::move(record), nullptr);
}

Status IdentityService::AuditDurably(AuditRecord record) {
  auto ticket = std::make_shared<AuditTicket>();
  MutexLock lock(audit_mu_);
  EnqueueAuditLocked(std::move(record), ticket);
  // Group commit: whoever finds no batch being written writes everything queued, its own
  // record with it; those who arrive meanwhile wait and go in the next batch.
  while (!ticket->done) {
    if (audit_writing_) {
      audit_flushed_cv_.Wait(audit_mu_);
    } else {
      WriteQueuedAuditLocked();
    }
  }
  return ticket->status;
}

void IdentityService::EnqueueAuditLocked(AuditRecord record, std::shared_ptr<AuditTicket> ticket) {
  // Records someone waits for are written by a waiter (AuditDurably). The writer thread
  // waits for a first record nobody waits for, then lets more gather (AuditLoop).
  bool wake = !ticket && (audit_queue_.empty() || audit_queue_.size() + 1 >= kAuditBatchRecords);
  audit_queue_.push_back(PendingAudit{std::move(record), std::move(ticket)});
  ++audit_enqueued_;
  if (wake) audit_cv_.NotifyOne();
}

void IdentityService::WriteQueuedAuditLocked() {
  audit_writing_ = true;
  std::vector<PendingAudit> batch;
  batch.swap(audit_queue_);
  audit_mu_.Unlock();
  Status s = db_.Write([&](store::Transaction& tx) -> Status {
    for (const auto& p : batch) {
      const AuditRecord& r = p.record;
      auto e = tx.Exec(
          "INSERT INTO audit_log (timestamp, user_name, method, path, status, remote, detail, "
          "securable, privilege, outcome) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
          {r.timestamp, r.user, r.method, r.path, int64_t{r.status}, r.remote,
           store::NullIfEmpty(r.detail), store::NullIfEmpty(r.securable),
           store::NullIfEmpty(r.privilege), store::NullIfEmpty(r.outcome)});
      if (!e.ok()) return e.status();
    }
    return Status::Ok();
  });
  if (!s.ok()) spdlog::error("audit log write failed: {}", s.ToString());
  audit_mu_.Lock();
  for (auto& p : batch) {
    if (!p.ticket) continue;
    p.ticket->done = true;
    p.ticket->status = s;
  }
  audit_written_ += batch.size();
  audit_writing_ = false;
  audit_flushed_cv_.NotifyAll();
}

void IdentityService::SetFailedAuthRecordsPerMinute(int limit) {
  MutexLock lock(audit_mu_);
  failed_auth_per_minute_ = std::max(0, limit);
}

void IdentityService::AuditFailedAuthentication(AuditRecord record) {
  int64_t now = clock_.NowMillis();
  record.user = std::string(kUnauthenticatedUser);
  MutexLock lock(audit_mu_);
  std::string key = record.remote;
  if (failed_auth_.size() >= kMaxFailedAuthAddresses && failed_auth_.count(key) == 0) {
    QueueFailedAuthSummariesLocked(now, /*all=*/true);
    for (auto it = failed_auth_.begin(); it != failed_auth_.end();) {
      it = now - it->second.window_start >= kFailedAuthWindowMillis ? failed_auth_.erase(it)
                                                                    : std::next(it);
    }
    // A flood from many addresses is counted together.
    if (failed_auth_.size() >= kMaxFailedAuthAddresses) key = "*";
  }
  FailedAuthWindow& w = failed_auth_[key];
  if (now - w.window_start >= kFailedAuthWindowMillis) {
    w.window_start = now;
    w.recorded = 0;
  }
  if (key == "*" || w.recorded >= failed_auth_per_minute_) {
    if (w.suppressed == 0 && w.last_summary == 0) w.last_summary = now;
    ++w.suppressed;
    return;
  }
  ++w.recorded;
  EnqueueAuditLocked(std::move(record), nullptr);
}

void IdentityService::QueueFailedAuthSummariesLocked(int64_t now, bool all) {
  for (auto& [remote, w] : failed_auth_) {
    if (w.suppressed == 0 || (!all && now - w.last_summary < kFailedAuthSummaryMillis)) continue;
    AuditRecord r;
    r.timestamp = now;
    r.user = std::string(kUnauthenticatedUser);
    r.status = 401;
    r.remote = remote == "*" ? "(many addresses)" : remote;
    r.detail = std::to_string(w.suppressed) + " more failed authentication" +
               (w.suppressed == 1 ? "" : "s") + " from " + r.remote +
               " not recorded one by one (at most " + std::to_string(failed_auth_per_minute_) +
               " a minute per address are)";
    w.suppressed = 0;
    w.last_summary = now;
    EnqueueAuditLocked(std::move(r), nullptr);
  }
}

Result<std::vector<AuditRecord>> IdentityService::ReadAudit(const Principal& who, int64_t before,
                                                            int64_t limit,
                                                            const std::string& user) {
  return ReadAudit(who, AuditQuery{.before = before, .limit = limit, .user = user});
}

Result<std::vector<AuditRecord>> IdentityService::ReadAudit(const Principal& who,
                                                            const AuditQuery& query) {
  if (!who.is_admin) return Status::PermissionDenied("only admins may read the audit log");
  if (query.limit <= 0 || query.limit > kMaxAuditRecordsPerRead) {
    return Status::InvalidArgument("max_results must be between 1 and " +
                                   std::to_string(kMaxAuditRecordsPerRead));
  }
  if (!query.outcome.empty() && query.outcome != "ALLOW" && query.outcome != "DENY") {
    return Status::InvalidArgument("outcome must be ALLOW or DENY (got '" +
                                   Abbreviate(query.outcome) + "')");
  }
  std::string sql =
      "SELECT timestamp, user_name, method, path, status, remote, detail, securable, privilege, "
      "outcome FROM audit_log WHERE timestamp <= ?";
  std::vector<store::Value> params{query.before > 0 ? query.before : INT64_MAX};
  auto filter = [&](const char* column, const std::string& value) {
    if (value.empty()) return;
    sql += std::string(" AND ") + column + " = ?";
    params.emplace_back(value);
  };
  filter("user_name", query.user);
  filter("securable", query.securable);
  filter("outcome", query.outcome);
  sql += " ORDER BY timestamp DESC LIMIT ?";
  params.emplace_back(query.limit);
  std::vector<AuditRecord> out;
  Status s = db_.Read([&](store::Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(auto rows, tx.Query(sql, params));
    auto text = [](const store::Row& r, size_t i) { return r.IsNull(i) ? "" : r.Text(i); };
    for (const auto& r : rows) {
      out.push_back(AuditRecord{r.Int(0), r.Text(1), r.Text(2), r.Text(3),
                                static_cast<int>(r.Int(4)), r.Text(5), text(r, 6), text(r, 7),
                                text(r, 8), text(r, 9)});
    }
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return out;
}

void IdentityService::FlushAuditForTest() {
  MutexLock lock(audit_mu_);
  uint64_t target = audit_enqueued_;
  while (audit_written_ < target) audit_flushed_cv_.Wait(audit_mu_);
}

void IdentityService::AuditLoop() {
  MutexLock lock(audit_mu_);
  while (true) {
    // Woken by records, or every second for the summaries of suppressed failed logins.
    const auto summary_due = std::chrono::steady_clock::now() + kAuditSummaryPoll;
    while (!audit_stop_ && audit_queue_.empty()) {
      if (!audit_cv_.WaitUntil(audit_mu_, summary_due)) break;
    }
    QueueFailedAuthSummariesLocked(clock_.NowMillis(), /*all=*/audit_stop_);
    if (audit_queue_.empty()) {
      if (audit_stop_) return;
      continue;
    }
    // Let records nobody waits for gather for a moment: every batch is a write transaction,
    // and one per request would take the writer from metric ingest.
    const auto gathered = std::chrono::steady_clock::now() + kAuditGatherTime;
    while (!audit_stop_ && audit_queue_.size() < kAuditBatchRecords) {
      if (!audit_cv_.WaitUntil(audit_mu_, gathered)) break;
    }
    if (audit_writing_) {
      // A waiter is writing; what it did not take is written on the next round.
      while (audit_writing_) audit_flushed_cv_.Wait(audit_mu_);
      continue;
    }
    if (!audit_queue_.empty()) WriteQueuedAuditLocked();
  }
}

}  // namespace trainyard::identity
