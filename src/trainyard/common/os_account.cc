#include "trainyard/common/os_account.h"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

namespace trainyard {
namespace {

OsAccount FromPasswd(const passwd& pw) {
  OsAccount a;
  a.name = pw.pw_name;
  a.uid = pw.pw_uid;
  a.gid = pw.pw_gid;
  a.home = pw.pw_dir ? pw.pw_dir : "/";
  int count = 32;
  std::vector<gid_t> groups(static_cast<size_t>(count));
  if (getgrouplist(pw.pw_name, pw.pw_gid, groups.data(), &count) < 0) {
    groups.resize(static_cast<size_t>(count));
    getgrouplist(pw.pw_name, pw.pw_gid, groups.data(), &count);
  }
  groups.resize(static_cast<size_t>(std::max(count, 0)));
  if (groups.empty()) groups.push_back(pw.pw_gid);
  a.groups = std::move(groups);
  return a;
}

}  // namespace

Result<OsAccount> LookupOsAccount(const std::string& name) {
  if (name.empty() || name.size() > 256 || name.find('\0') != std::string::npos) {
    return Status::InvalidArgument("os_user must be an OS account name (got '" + name + "')");
  }
  std::vector<char> buf(16384);
  passwd pw{};
  passwd* found = nullptr;
  int err = 0;
  while ((err = getpwnam_r(name.c_str(), &pw, buf.data(), buf.size(), &found)) == ERANGE &&
         buf.size() < (1 << 20)) {
    buf.resize(buf.size() * 2);
  }
  if (err != 0) {
    return Status::Internal("cannot look up OS account '" + name + "': " + std::strerror(err));
  }
  if (found == nullptr) {
    return Status::NotFound("OS account '" + name +
                            "' does not exist on this machine; create it (e.g. useradd " + name +
                            ") or map another account");
  }
  return FromPasswd(pw);
}

Result<OsAccount> OsAccountOfUid(uid_t uid) {
  std::vector<char> buf(16384);
  passwd pw{};
  passwd* found = nullptr;
  int err = getpwuid_r(uid, &pw, buf.data(), buf.size(), &found);
  if (err != 0 || found == nullptr) {
    return Status::NotFound("uid " + std::to_string(uid) +
                            " has no entry in the password database");
  }
  return FromPasswd(pw);
}

Result<OsAccount> CurrentOsAccount() { return OsAccountOfUid(geteuid()); }

Result<OsAccount> ValidateJobAccount(const std::string& name) {
  auto account = LookupOsAccount(name);
  if (!account.ok()) {
    if (account.status().IsNotFound()) return Status::InvalidArgument(account.status().message());
    return account.status();
  }
  if (account->uid == 0) {
    return Status::InvalidArgument("os_user '" + name +
                                   "' is uid 0 (root); jobs never run as root: map an "
                                   "unprivileged account");
  }
  return account;
}

}  // namespace trainyard

namespace trainyard {
namespace {

// Makes `name` under `parent_fd` a 0700 directory owned by uid:gid; returns an fd of it.
Result<int> OwnedDirAt(int parent_fd, const std::string& name, const std::string& shown, uid_t uid,
                       gid_t gid) {
  if (mkdirat(parent_fd, name.c_str(), 0700) != 0 && errno != EEXIST) {
    return Status::IOError("cannot create " + shown + ": " + std::strerror(errno));
  }
  int fd = openat(parent_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    return Status::IOError("cannot open " + shown +
                           " (it must be a directory, not a link): " + std::strerror(errno));
  }
  if (fchown(fd, uid, gid) != 0 || fchmod(fd, 0700) != 0) {
    int err = errno;
    close(fd);
    return Status::IOError("cannot give " + shown + " to uid " + std::to_string(uid) + ": " +
                           std::strerror(err));
  }
  return fd;
}

}  // namespace

Status EnsurePrivateDirectory(const std::string& dir, uid_t uid, gid_t gid,
                              const std::vector<std::string>& subdirs) {
  std::filesystem::path path(dir);
  std::string parent = path.parent_path().string();
  int parent_fd = open(parent.empty() ? "." : parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (parent_fd < 0) return Status::IOError("cannot open " + parent + ": " + std::strerror(errno));
  auto top = OwnedDirAt(parent_fd, path.filename().string(), dir, uid, gid);
  close(parent_fd);
  if (!top.ok()) return top.status();
  Status s;
  for (const auto& sub : subdirs) {
    auto fd = OwnedDirAt(*top, sub, dir + "/" + sub, uid, gid);
    if (!fd.ok()) {
      s = fd.status();
      break;
    }
    close(*fd);
  }
  close(*top);
  return s;
}

}  // namespace trainyard
