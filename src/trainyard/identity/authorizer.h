// Authorizer: the one authorization function that services call before they read or
// change an object, and the types it speaks (Principal, Action, Securable).
//
// Services receive an Authorizer at construction and call Authorize() at the top of
// each public method that changes an experiment, run, logged model, registered model,
// job or checkpoint; IdentityService implements it today (owner/admin/grants, scoped
// tokens limited to their job and run), and the catalog's grants can replace it here,
// in one place.
//
// Implementations must be thread-safe. This header is light on purpose: services
// include it without pulling in the identity service or the store.
#pragma once

#include <string>
#include <string_view>

#include "trainyard/common/status.h"

namespace trainyard::identity {

// Who is calling: a user, the token they authenticated with, and the token's scope.
struct Principal {
  std::string user;
  bool is_admin = false;
  std::string token_id;
  // Non-empty for a token handed to a workload (e.g. "job:j-1a2b"): it acts as
  // `user`, never as an admin, and may not create users or tokens.
  std::string scope;

  // The server acting on its own behalf (bootstrap, the scheduler): the admin user,
  // no token, no scope. Only code inside the server uses it, never a request.
  static Principal System() { return Principal{"admin", true, "", ""}; }
};

enum class Action { kRead, kEdit, kManage };
std::string_view ActionName(Action a);

// What is being accessed: its kind ("experiment", "registered_model", ...), id and owner.
struct Securable {
  std::string type;
  std::string id;
  std::string owner;
};

class Authorizer {
 public:
  virtual ~Authorizer() = default;

  // Ok when `who` may do `action` to `what`; PermissionDenied (saying what to ask for)
  // otherwise, or the store's error.
  virtual Status Authorize(const Principal& who, Action action, const Securable& what) = 0;
  // The same, for an object inside `what` (a run inside its experiment): ownership and
  // grants are those of `what`; a scoped token's limits are checked against `accessed`.
  virtual Status Authorize(const Principal& who, Action action, const Securable& what,
                           const Securable& accessed) = 0;
};

}  // namespace trainyard::identity
