// OS accounts (the password database): the accounts that jobs run as in multi-user mode.
//
// Thread-safe (getpwnam_r/getgrouplist, no shared state).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "trainyard/common/status.h"

namespace trainyard {

struct OsAccount {
  std::string name;
  uid_t uid = 0;
  gid_t gid = 0;
  std::string home;
  std::vector<gid_t> groups;  // supplementary groups, including gid (for setgroups)
};

// Looks `name` up. NotFound names the account and says how to create one.
Result<OsAccount> LookupOsAccount(const std::string& name);

// The account of `uid`; NotFound when the password database has none.
Result<OsAccount> OsAccountOfUid(uid_t uid);

// The account of this process's effective uid.
Result<OsAccount> CurrentOsAccount();

// What a job may run as: an existing account that is not uid 0. The error names the field
// `os_user` and what to do.
Result<OsAccount> ValidateJobAccount(const std::string& name);

}  // namespace trainyard

namespace trainyard {

// Creates `dir` (its parent must exist and must not be writable by `uid`) and its `subdirs`,
// each owned by uid:gid with mode 0700; existing ones are re-owned and re-moded. Symlinks are
// never followed (a symlink in their place is an error), so a job cannot make the server
// chown something else.
Status EnsurePrivateDirectory(const std::string& dir, uid_t uid, gid_t gid,
                              const std::vector<std::string>& subdirs);

}  // namespace trainyard
