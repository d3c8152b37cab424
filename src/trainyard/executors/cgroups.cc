#include "trainyard/executors/cgroups.h"

#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "trainyard/common/strings.h"

namespace trainyard::executors {
namespace {

// Without cgroup.kill or the freezer, KillAll kills each listed process, in rounds, until the
// cgroup is empty: at most this many rounds (a workload that forks as fast as it is killed)...
constexpr int kMaxKillRounds = 100;
// ...with this pause between them, for the killed processes to leave cgroup.procs.
constexpr std::chrono::milliseconds kKillRoundPause{1};
// Permissions of the cgroup directories we create (as cgroupfs's own).
constexpr mode_t kCgroupDirMode = 0755;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool WriteFile(const std::string& path, const std::string& text, std::string* error = nullptr) {
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    if (error) *error = path + ": " + std::strerror(errno);
    return false;
  }
  bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  int err = errno;
  close(fd);
  if (!ok && error) *error = path + ": " + std::strerror(err);
  return ok;
}

std::string Join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? sep : "") + parts[i];
  return out;
}

bool Exists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0;
}

std::string JoinPath(const std::string& mount, const std::string& path) {
  if (path.empty() || path == "/") return mount;
  return mount + (path.front() == '/' ? "" : "/") + path;
}

// Makes `dir` (EEXIST is fine); the error text when it cannot.
bool MakeDir(const std::string& dir, std::string* error) {
  if (mkdir(dir.c_str(), kCgroupDirMode) == 0 || errno == EEXIST) return true;
  *error = "cannot create " + dir + ": " + std::strerror(errno);
  return false;
}

std::vector<int> Pids(const std::string& dir) {
  std::vector<int> pids;
  std::istringstream in(ReadFile(dir + "/cgroup.procs"));
  int pid;
  while (in >> pid) pids.push_back(pid);
  return pids;
}

}  // namespace

CgroupLayout ParseCgroupLayout(std::string_view mounts, std::string_view self_cgroup) {
  std::string v2_mount, v1_memory_mount;
  std::istringstream m{std::string(mounts)};
  std::string line;
  while (std::getline(m, line)) {
    std::istringstream f(line);
    std::string dev, dir, type, options;
    if (!(f >> dev >> dir >> type >> options)) continue;
    if (type == "cgroup2" && v2_mount.empty()) v2_mount = dir;
    if (type == "cgroup" && v1_memory_mount.empty()) {
      for (const auto& o : SplitString(options, ',')) {
        if (o == "memory") v1_memory_mount = dir;
      }
    }
  }
  std::string v2_path, v1_memory_path;
  bool has_v2_path = false, has_v1_memory_path = false;
  std::istringstream c{std::string(self_cgroup)};
  while (std::getline(c, line)) {
    // hierarchy-id:controller-list:path (the path may contain ':')
    size_t a = line.find(':');
    size_t b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    std::string id = line.substr(0, a), controllers = line.substr(a + 1, b - a - 1);
    std::string path = line.substr(b + 1);
    if (id == "0" && controllers.empty()) {
      v2_path = path;
      has_v2_path = true;
    }
    for (const auto& ctl : SplitString(controllers, ',')) {
      if (ctl == "memory") {
        v1_memory_path = path;
        has_v1_memory_path = true;
      }
    }
  }
  CgroupLayout out;
  if (!v2_mount.empty() && has_v2_path) out.v2_dir = JoinPath(v2_mount, v2_path);
  if (!v1_memory_mount.empty() && has_v1_memory_path) {
    out.v1_memory_dir = JoinPath(v1_memory_mount, v1_memory_path);
  }
  return out;
}

CgroupLayout DetectCgroupLayout() {
  return ParseCgroupLayout(ReadFile("/proc/mounts"), ReadFile("/proc/self/cgroup"));
}

CgroupManager::CgroupManager(CgroupLayout layout) {
  std::vector<std::string> notes, problems;
  std::string error;
  if (layout.v2_dir.empty()) {
    problems.push_back("no cgroup v2 hierarchy");
  } else {
    std::string parent = layout.v2_dir + "/trainyard";
    std::string probe = parent + "/probe-" + std::to_string(getpid());
    if (MakeDir(parent, &error) && MakeDir(probe, &error)) {
      rmdir(probe.c_str());
      v2_parent_ = parent;
      // The memory controller must be enabled in each ancestor's subtree_control; this works
      // where the server's own cgroup has no other processes to govern (or is the root).
      if (ReadFile(layout.v2_dir + "/cgroup.controllers").find("memory") != std::string::npos) {
        WriteFile(layout.v2_dir + "/cgroup.subtree_control", "+memory");
        v2_memory_ = WriteFile(parent + "/cgroup.subtree_control", "+memory");
      }
      notes.push_back("cgroup v2 at " + parent +
                      (Exists(parent + "/cgroup.kill") || Exists(layout.v2_dir + "/cgroup.kill")
                           ? " (cgroup.kill)"
                           : "") +
                      (v2_memory_ ? ", memory.max" : ""));
    } else {
      problems.push_back("cgroup v2 not writable (" + error + ")");
    }
  }
  if (!v2_memory_ && !layout.v1_memory_dir.empty()) {
    std::string parent = layout.v1_memory_dir + "/trainyard";
    if (MakeDir(parent, &error)) {
      v1_memory_parent_ = parent;
      notes.push_back("memory limits via cgroup v1 at " + parent);
    } else {
      problems.push_back("cgroup v1 memory not writable (" + error + ")");
    }
  }
  if (!EnforcesMemory()) problems.push_back("memory requests are not enforced");
  if (!Available()) {
    description_ = "none: " + Join(problems, "; ") +
                   " - jobs run without per-attempt cgroups (processes that leave their "
                   "process group outlive the job)";
    return;
  }
  description_ = Join(notes, "; ");
  if (!problems.empty()) description_ += " (" + Join(problems, "; ") + ")";
}

std::vector<std::string> CgroupManager::Dirs(const std::string& name) const {
  std::vector<std::string> dirs;
  if (!v2_parent_.empty()) dirs.push_back(v2_parent_ + "/" + name);
  if (!v1_memory_parent_.empty()) dirs.push_back(v1_memory_parent_ + "/" + name);
  return dirs;
}

Result<std::vector<std::string>> CgroupManager::Create(const std::string& name,
                                                       int64_t memory_bytes) {
  if (name.empty() || name.find('/') != std::string::npos || name[0] == '.') {
    return Status::InvalidArgument("bad cgroup name '" + name + "'");
  }
  std::vector<std::string> dirs = Dirs(name);
  KillAll(name);  // a leftover of the same name (e.g. an attempt relaunched after a crash)
  std::string error;
  for (const auto& dir : dirs) {
    if (!MakeDir(dir, &error)) return Status::IOError(error);
  }
  if (memory_bytes > 0) {
    const std::string limit = std::to_string(memory_bytes);
    bool set = false;
    if (v2_memory_) {
      set = WriteFile(v2_parent_ + "/" + name + "/memory.max", limit, &error);
      // Without this, a job over its limit swaps instead of being stopped.
      WriteFile(v2_parent_ + "/" + name + "/memory.swap.max", "0");
    } else if (!v1_memory_parent_.empty()) {
      std::string dir = v1_memory_parent_ + "/" + name;
      set = WriteFile(dir + "/memory.limit_in_bytes", limit, &error);
      if (Exists(dir + "/memory.memsw.limit_in_bytes")) {
        WriteFile(dir + "/memory.memsw.limit_in_bytes", limit);
      }
    }
    if (!set && EnforcesMemory()) {
      Remove(name);
      return Status::IOError("cannot set the memory limit: " + error);
    }
  }
  return dirs;
}

void CgroupManager::KillAll(const std::string& name) const {
  for (const auto& dir : Dirs(name)) {
    if (!Exists(dir)) continue;
    if (Exists(dir + "/cgroup.kill") && WriteFile(dir + "/cgroup.kill", "1")) continue;
    // No cgroup.kill: freeze (v2) so nothing forks while we kill, then kill each process.
    bool frozen = Exists(dir + "/cgroup.freeze") && WriteFile(dir + "/cgroup.freeze", "1");
    for (int round = 0; round < kMaxKillRounds; ++round) {
      std::vector<int> pids = Pids(dir);
      if (pids.empty()) break;
      for (int pid : pids) kill(pid, SIGKILL);
      if (frozen) break;  // a frozen group cannot fork; every member got its SIGKILL
      std::this_thread::sleep_for(kKillRoundPause);
    }
    if (frozen) WriteFile(dir + "/cgroup.freeze", "0");
  }
}

bool CgroupManager::Populated(const std::string& name) const {
  for (const auto& dir : Dirs(name)) {
    if (!Pids(dir).empty()) return true;
  }
  return false;
}

bool CgroupManager::Remove(const std::string& name) const {
  bool all = true;
  for (const auto& dir : Dirs(name)) {
    if (rmdir(dir.c_str()) != 0 && errno != ENOENT) all = false;
  }
  return all;
}

Status JoinCgroups(const std::vector<std::string>& dirs) {
  const std::string pid = std::to_string(getpid());
  for (const auto& dir : dirs) {
    std::string error;
    if (!WriteFile(dir + "/cgroup.procs", pid, &error)) {
      return Status::IOError("cannot join cgroup " + error);
    }
  }
  return Status::Ok();
}

}  // namespace trainyard::executors
