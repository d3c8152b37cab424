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
// Audit: records are written by one thread in group commits. AuditDurably() returns once
// its record is committed (an acknowledged change's record is as durable as the change);
// Audit() does not wait. Failed authentications are recorded at most
// `failed_auth_records_per_minute` times a minute per client address; the rest are
// counted, and the count is recorded every few seconds in one summary record.
// Scoped tokens (a job's, "job:<id>") are limited in Authorize(), the one place
// that checks them: they may read what their user may read, write only the objects
// the scope's policy names (its job and its run; SetScopeWritePolicy), with their user's
// rights (or, when the scope's job runs as the token's service principal, SetScopeRunsAs,
// without further rights), and never MANAGE. Token, grant and user management refuse them
// outright.
//
// Service principals: who may run a job as one (JobSpec::run_as) is AuthorizeRunAs's
// rule, Databricks' "Service Principal User" role kept simple: admins, the service
// principal itself, and users granted EDIT ("use") or MANAGE (use, and grant use to others)
// on securable `service_principal/<name>` (POST /grants/service_principal).
//
// Users can be disabled and deleted by admins; their tokens (including jobs'
// scoped tokens) stop working on the next request.
//
// Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "trainyard/common/clock.h"
#include "trainyard/common/mutex.h"
#include "trainyard/common/status.h"
#include "trainyard/identity/authorizer.h"
#include "trainyard/identity/group_store.h"
#include "trainyard/store/database.h"

namespace trainyard::identity {

// What a principal name stands for. Users, service principals and groups share one
// namespace: a name is at most one of them.
enum class PrincipalKind { kUser, kServicePrincipal, kGroup };
std::string_view PrincipalKindName(PrincipalKind k);  // "user", "service_principal", "group"

struct User {
  std::string name;
  bool is_admin = false;
  int64_t created_at = 0;
  // The OS account this user's jobs run as in multi-user mode ("" = none mapped).
  std::string os_user;
  bool disabled = false;
  // kServicePrincipal: an identity for workloads, created by admins, with tokens only.
  PrincipalKind kind = PrincipalKind::kUser;
};

struct Group {
  std::string name;
  int64_t created_at = 0;
  std::string created_by;
};

struct GroupMember {
  std::string name;
  PrincipalKind kind = PrincipalKind::kUser;
};

// The job id of a token scoped to a job ("job:j-1a2b" -> "j-1a2b"), or empty.
std::string_view ScopedJob(const Principal& who);

// Whether a scoped token may write `what` (its own job, its own run). Set by the
// service that issues the scope; without one, scoped tokens may write nothing.
using ScopeWritePolicy = std::function<bool(const std::string& scope, const Securable& what)>;
// Whether the job of `scope` runs as `user` (a service principal named by the job's
// run_as): that token then writes what the ScopeWritePolicy allows, its own job and run,
// which its submitter owns. Set by the service that issues the scope.
using ScopeRunsAs = std::function<bool(const std::string& scope, const std::string& user)>;

struct CreateUserRequest {
  std::string name{};
  bool is_admin = false;
  // The OS account the user's jobs run as ("" = none); must exist and not be root.
  std::string os_user{};
};

struct CreateTokenRequest {
  std::string user{};  // whose token it is
  std::string description{};
  std::optional<int64_t> ttl_seconds{};  // nullopt = never expires
  // A workload's scope ("job:<id>"; see Principal::scope), "" for a user's own token.
  std::string scope{};
};

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
  std::string detail = {};  // e.g. why an authentication failed
  // An access decision on a catalog object (empty for a request record): the securable
  // ("table main.support.tickets"), the privilege, and "ALLOW" or "DENY" (`detail` says why).
  std::string securable = {};
  std::string privilege = {};
  std::string outcome = {};
};

// ReadAudit's filters; empty strings match everything.
struct AuditQuery {
  int64_t before = 0;  // epoch ms; 0 = now
  int64_t limit = 100;
  std::string user = {};
  std::string securable = {};  // exact ("table main.support.tickets")
  std::string outcome = {};    // "ALLOW" or "DENY"
};

// The identity securable a service principal is (its id is its name): EDIT on it is the
// right to run jobs as it, MANAGE also to grant that.
inline constexpr std::string_view kServicePrincipalSecurable = "service_principal";

// The user name of audit records of failed authentications (not a valid user name).
inline constexpr std::string_view kUnauthenticatedUser = "(unauthenticated)";

class IdentityService : public Authorizer {
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
  // The same without touching the store (never blocks): nullopt when the answer needs it.
  std::optional<Result<Principal>> AuthenticateCached(std::string_view token);

  // Authorizer (see authorizer.h).
  Status Authorize(const Principal& who, Action action, const Securable& what) override;
  Status Authorize(const Principal& who, Action action, const Securable& what,
                   const Securable& accessed) override;
  // Set once, before requests are served.
  void SetScopeWritePolicy(ScopeWritePolicy policy) { scope_write_policy_ = std::move(policy); }
  void SetScopeRunsAs(ScopeRunsAs runs_as) { scope_runs_as_ = std::move(runs_as); }

  // Admins only (and never with a scoped token).
  Result<User> CreateUser(const Principal& who, const CreateUserRequest& request);
  Result<std::vector<User>> ListUsers();
  // NotFound when the user does not exist.
  Result<User> GetUser(const std::string& name);
  // Maps `name` to the OS account its jobs run as ("" removes the mapping); admins only.
  Result<User> SetOsUser(const Principal& who, const std::string& name, const std::string& os_user);
  // Admins only. A disabled user's tokens are refused until the user is enabled again;
  // a deleted user's tokens are revoked and their grants removed (objects they own
  // keep their owner's name). Neither applies to oneself.
  Status SetUserDisabled(const Principal& who, const std::string& name, bool disabled);
  Status DeleteUser(const Principal& who, const std::string& name);
  // Called after a user is deleted, so that the services that keep something per user
  // (project memberships, secrets) drop it: a later user of the same name must not inherit
  // it. Set once, before requests are served.
  using UserDeletedListener = std::function<Status(const std::string& user)>;
  void SetUserDeletedListener(UserDeletedListener listener) {
    user_deleted_listener_ = std::move(listener);
  }
  // Service principals: identities for workloads (tokens, no password); admins only.
  // Authorization treats them as users; their tokens may be scoped to a job.
  Result<User> CreateServicePrincipal(const Principal& who, const std::string& name);
  // Whether `who` may run a job as `service_principal` (see above). Errors start with
  // "run_as: ": InvalidArgument when it names no service principal, FailedPrecondition when
  // it is disabled, PermissionDenied (saying who may grant its use) otherwise.
  Status AuthorizeRunAs(const Principal& who, const std::string& service_principal);

  // Groups contain users, service principals and groups. Creating, deleting and changing
  // membership is for admins only. Adding a member that would make a cycle is
  // InvalidArgument naming the cycle ("a -> b -> a"). Deleting a group removes its
  // memberships (in both directions).
  Result<Group> CreateGroup(const Principal& who, const std::string& name);
  Status DeleteGroup(const Principal& who, const std::string& name);
  Result<std::vector<Group>> ListGroups();
  Status AddGroupMember(const Principal& who, const std::string& group, const std::string& member);
  Status RemoveGroupMember(const Principal& who, const std::string& group,
                           const std::string& member);
  Result<std::vector<GroupMember>> ListGroupMembers(const std::string& group);
  // Every group `principal` is in, directly or through other groups (sorted). Cached; the
  // cache is dropped on any membership change, so the next call sees it.
  Result<std::shared_ptr<const std::vector<std::string>>> GroupsOf(const std::string& principal);
  // The same without touching the store (never blocks): nullopt when the membership graph
  // is not loaded (the next GroupsOf loads it).
  std::optional<std::shared_ptr<const std::vector<std::string>>> GroupsOfCached(
      const std::string& principal) TY_EXCLUDES(groups_mu_);
  // NotFound when `name` is no user, service principal or group.
  Result<PrincipalKind> GetPrincipalKind(const std::string& name);

  // Returns the new token's secret (shown once) and its info.
  Result<std::pair<std::string, TokenInfo>> CreateToken(const Principal& who,
                                                        const CreateTokenRequest& request);
  // Admins see all tokens; others their own.
  Result<std::vector<TokenInfo>> ListTokens(const Principal& who);
  Status RevokeToken(const Principal& who, const std::string& token_id);

  // Grants `privilege` (EDIT or MANAGE; READ is implied for everyone) on a securable
  // to `user`. Only its owner, a MANAGE holder or an admin may grant.
  Status Grant(const Principal& who, const Securable& what, const std::string& user,
               Action privilege);

  // Queued and written in batches by a background thread; FlushAuditForTest() waits for them.
  void Audit(AuditRecord record);
  // Queued like Audit(), and returns once the record is committed (or failed to be).
  Status AuditDurably(AuditRecord record);
  // A failed authentication (status 401), recorded within the per-address rate limit.
  void AuditFailedAuthentication(AuditRecord record);
  // At most this many records of failed authentications a minute per client address
  // (kDefaultFailedAuthRecordsPerMinute until set).
  void SetFailedAuthRecordsPerMinute(int limit);
  static constexpr int kDefaultFailedAuthRecordsPerMinute = 20;
  // The newest audit records first, at or before `before` (epoch ms; 0 = now); admins only.
  Result<std::vector<AuditRecord>> ReadAudit(const Principal& who, int64_t before, int64_t limit,
                                             const std::string& user);
  Result<std::vector<AuditRecord>> ReadAudit(const Principal& who, const AuditQuery& query);
  void FlushAuditForTest();

 private:
  struct CachedPrincipal {
    Principal principal;
    std::optional<int64_t> expires_at;
    int64_t cached_at;
  };
  struct AuditTicket {
    bool done = false;
    Status status;
  };
  struct PendingAudit {
    AuditRecord record;
    std::shared_ptr<AuditTicket> ticket;  // null when nobody waits for it
  };
  struct FailedAuthWindow {
    int64_t window_start = 0;
    int recorded = 0;        // in this window
    int64_t suppressed = 0;  // since the last summary
    int64_t last_summary = 0;
  };
  void AuditLoop() TY_EXCLUDES(audit_mu_);
  void EnqueueAuditLocked(AuditRecord record, std::shared_ptr<AuditTicket> ticket)
      TY_REQUIRES(audit_mu_);
  // Writes the queued records in one transaction; called with no batch being written;
  // releases audit_mu_ while writing and takes it back before returning.
  void WriteQueuedAuditLocked() TY_REQUIRES(audit_mu_);
  // Queues summaries of suppressed failed authentications that are due (all when `all`).
  void QueueFailedAuthSummariesLocked(int64_t now, bool all) TY_REQUIRES(audit_mu_);
  void InvalidateCache() TY_EXCLUDES(cache_mu_);
  void InvalidateGroups() TY_EXCLUDES(groups_mu_);
  Status CheckGroupAdministration(const Principal& who, std::string_view verb);
  Result<PrincipalKind> PrincipalKindIn(store::Transaction& tx, const std::string& name);

  store::Database& db_;
  Clock& clock_;
  Random& random_;
  ScopeWritePolicy scope_write_policy_;
  ScopeRunsAs scope_runs_as_;
  UserDeletedListener user_deleted_listener_;

  Mutex cache_mu_;
  std::unordered_map<std::string, CachedPrincipal> cache_ TY_GUARDED_BY(cache_mu_);  // by hash

  GroupStore group_store_;
  // GroupsOf's cache: the membership graph and the closures computed from it. Dropped
  // (and the generation bumped) on any membership change; a load that raced a change is
  // not kept.
  Mutex groups_mu_;
  uint64_t groups_generation_ TY_GUARDED_BY(groups_mu_) = 0;
  std::shared_ptr<const MembershipGraph> groups_graph_ TY_GUARDED_BY(groups_mu_);
  std::unordered_map<std::string, std::shared_ptr<const std::vector<std::string>>> groups_of_
      TY_GUARDED_BY(groups_mu_);

  Mutex audit_mu_;
  CondVar audit_cv_;
  CondVar audit_flushed_cv_;
  // AuditTicket's fields are read and written with audit_mu_ held, too.
  std::vector<PendingAudit> audit_queue_ TY_GUARDED_BY(audit_mu_);
  bool audit_writing_ TY_GUARDED_BY(audit_mu_) = false;  // a batch is being written
  std::unordered_map<std::string, FailedAuthWindow> failed_auth_
      TY_GUARDED_BY(audit_mu_);  // by client address
  int failed_auth_per_minute_ TY_GUARDED_BY(audit_mu_) = kDefaultFailedAuthRecordsPerMinute;
  uint64_t audit_enqueued_ TY_GUARDED_BY(audit_mu_) = 0;
  uint64_t audit_written_ TY_GUARDED_BY(audit_mu_) = 0;
  bool audit_stop_ TY_GUARDED_BY(audit_mu_) = false;
  std::thread audit_thread_;
};

}  // namespace trainyard::identity
