// IdentityService: users, bearer tokens, authorization and the audit log.
//
// Tokens look like `ty_<id>_<secret>`; only their SHA-256 is stored. The first
// start creates the `admin` user and an admin token, written to
// `<data_dir>/admin.token` with mode 0600 (where the CLI finds it).
//
// Authorization is one function, Authorize(), that the catalog's grants will
// grow: admins may do anything; an object's owner may do anything to it; any
// authenticated user may read; other writes need a grant of EDIT or MANAGE.
//
// Scoped tokens (a job's, "job:<id>") are limited in Authorize(), the one place
// that checks them: they may read what their user may read, write only the objects
// the scope's policy names (its job and its run; SetScopeWritePolicy), and never
// MANAGE. Token, grant and user management refuse them outright.
//
// Users can be disabled and deleted by admins; their tokens (including jobs'
// scoped tokens) stop working on the next request.
//
// Thread-safe.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "trainyard/common/clock.h"
#include "trainyard/common/status.h"
#include "trainyard/store/database.h"

namespace trainyard::identity {

struct Principal {
  std::string user;
  bool is_admin = false;
  std::string token_id;
  // Non-empty for a token handed to a workload (e.g. "job:j-1a2b"): it acts as
  // `user`, never as an admin, and may not create users or tokens.
  std::string scope;
};

enum class Action { kRead, kEdit, kManage };
std::string_view ActionName(Action a);

// What is being accessed: its kind ("experiment", "registered_model", ...), id and owner.
struct Securable {
  std::string type;
  std::string id;
  std::string owner;
};

struct User {
  std::string name;
  bool is_admin = false;
  int64_t created_at = 0;
  bool disabled = false;
};

// The job id of a token scoped to a job ("job:j-1a2b" -> "j-1a2b"), or empty.
std::string_view ScopedJob(const Principal& who);

// Whether a scoped token may write `what` (its own job, its own run). Set by the
// service that issues the scope; without one, scoped tokens may write nothing.
using ScopeWritePolicy = std::function<bool(const std::string& scope, const Securable& what)>;

struct TokenInfo {
  std::string token_id;
  std::string user;
  std::string description;
  int64_t created_at = 0;
  std::optional<int64_t> expires_at;
  std::optional<int64_t> revoked_at;
  std::optional<int64_t> last_used_at;
  std::string scope;
};

struct AuditRecord {
  int64_t timestamp = 0;
  std::string user;
  std::string method;
  std::string path;
  int status = 0;
  std::string remote;
};

class IdentityService {
 public:
  IdentityService(store::Database& db, Clock& clock, Random& random);
  ~IdentityService();
  IdentityService(const IdentityService&) = delete;
  IdentityService& operator=(const IdentityService&) = delete;

  static std::vector<store::Migration> Migrations();

  // Creates the admin user and token on first start and writes the token to
  // `<data_dir>/admin.token` (0600). Later starts keep the file as it is.
  Status Bootstrap(const std::string& data_dir);

  // Resolves a bearer token; Unauthenticated when unknown, expired or revoked.
  Result<Principal> Authenticate(std::string_view token);

  Status Authorize(const Principal& who, Action action, const Securable& what);
  // The same, for an object inside `what` (a run inside its experiment): ownership and
  // grants are those of `what`; a scoped token's limits are checked against `accessed`.
  Status Authorize(const Principal& who, Action action, const Securable& what,
                   const Securable& accessed);
  // Set once, before requests are served.
  void SetScopeWritePolicy(ScopeWritePolicy policy) { scope_write_policy_ = std::move(policy); }

  Result<User> CreateUser(const Principal& who, const std::string& name, bool is_admin);
  Result<std::vector<User>> ListUsers();
  // Admins only. A disabled user's tokens are refused until the user is enabled again;
  // a deleted user's tokens are revoked and their grants removed (objects they own
  // keep their owner's name). Neither applies to oneself.
  Status SetUserDisabled(const Principal& who, const std::string& name, bool disabled);
  Status DeleteUser(const Principal& who, const std::string& name);
  // Returns the new token's secret (shown once) and its info.
  Result<std::pair<std::string, TokenInfo>> CreateToken(const Principal& who,
                                                        const std::string& user,
                                                        const std::string& description,
                                                        std::optional<int64_t> ttl_seconds,
                                                        const std::string& scope = "");
  // Admins see all tokens; others their own.
  Result<std::vector<TokenInfo>> ListTokens(const Principal& who);
  Status RevokeToken(const Principal& who, const std::string& token_id);

  // Grants `privilege` (EDIT or MANAGE; READ is implied for everyone) on a securable
  // to `user`. Only its owner, a MANAGE holder or an admin may grant.
  Status Grant(const Principal& who, const Securable& what, const std::string& user,
               Action privilege);

  // Queued and written in batches by a background thread; Flush() waits for them.
  void Audit(AuditRecord record);
  // The newest audit records first, at or before `before` (epoch ms; 0 = now); admins only.
  Result<std::vector<AuditRecord>> ReadAudit(const Principal& who, int64_t before, int64_t limit,
                                             const std::string& user);
  void FlushAuditForTest();

 private:
  struct CachedPrincipal {
    Principal principal;
    std::optional<int64_t> expires_at;
    int64_t cached_at;
  };
  void AuditLoop();
  void InvalidateCache();

  store::Database& db_;
  Clock& clock_;
  Random& random_;
  ScopeWritePolicy scope_write_policy_;

  std::mutex cache_mu_;
  std::unordered_map<std::string, CachedPrincipal> cache_;  // by token hash; guarded

  std::mutex audit_mu_;
  std::condition_variable audit_cv_;
  std::condition_variable audit_flushed_cv_;
  std::vector<AuditRecord> audit_queue_;  // guarded by audit_mu_
  uint64_t audit_enqueued_ = 0;           // guarded by audit_mu_
  uint64_t audit_written_ = 0;            // guarded by audit_mu_
  bool audit_stop_ = false;               // guarded by audit_mu_
  std::thread audit_thread_;
};

}  // namespace trainyard::identity
