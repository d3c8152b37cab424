// Per-attempt cgroups: every process of an attempt (its shims, their workloads, and anything
// those start, `setsid` escapees included) lives in the attempt's cgroup, so that ending the
// attempt kills all of them and its memory request is enforced.
//
// Layouts: pure cgroup v2 (one hierarchy at /sys/fs/cgroup), or hybrid (v2 at
// /sys/fs/cgroup/unified, usually without the memory controller, and v1 controllers at
// /sys/fs/cgroup/<controller>). The layout is read from /proc/mounts and /proc/self/cgroup;
// attempt cgroups are created under this process's own cgroup, in a `trainyard` child:
//   v2:        <v2 mount><own v2 path>/trainyard/<name>   (containment, cgroup.kill, memory.max
//                                                          where the memory controller is on)
//   v1 memory: <v1 memory mount><own path>/trainyard/<name> (memory.limit_in_bytes, when v2
//                                                          has no memory controller)
// Where neither can be written (not root, read-only /sys), Available() is false and
// Describe() says why; attempts then run without cgroups.
//
// Thread-safe: the manager's state is fixed at construction; the per-attempt calls touch
// only the attempt's directories.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "trainyard/common/status.h"

namespace trainyard::executors {

struct CgroupLayout {
  std::string v2_dir;         // this process's cgroup in the v2 hierarchy; "" = no v2
  std::string v1_memory_dir;  // this process's cgroup in the v1 memory hierarchy; "" = none
};

// Pure: from the text of /proc/mounts and /proc/self/cgroup.
CgroupLayout ParseCgroupLayout(std::string_view mounts, std::string_view self_cgroup);
// Reads this process's layout.
CgroupLayout DetectCgroupLayout();

class CgroupManager {
 public:
  // Probes: creates the `trainyard` parents and enables the memory controller where it can.
  explicit CgroupManager(CgroupLayout layout);

  bool Available() const { return !v2_parent_.empty() || !v1_memory_parent_.empty(); }
  bool EnforcesMemory() const { return v2_memory_ || !v1_memory_parent_.empty(); }
  // For people: what is used, or why nothing is.
  const std::string& Describe() const { return description_; }

  // Creates the cgroups of attempt `name` (reusing existing ones, emptied first) with a memory
  // limit (0 = none). Returns the directories a process joins (write its pid to
  // <dir>/cgroup.procs). Empty when !Available().
  Result<std::vector<std::string>> Create(const std::string& name, int64_t memory_bytes);
  // The directories of attempt `name` (whether or not they exist).
  std::vector<std::string> Dirs(const std::string& name) const;
  // SIGKILLs every process in the attempt's cgroups (cgroup.kill; or freeze, kill each pid,
  // thaw; or kill each pid until none is left).
  void KillAll(const std::string& name) const;
  // Removes the attempt's cgroups; false while one still has processes (retry later).
  bool Remove(const std::string& name) const;
  // Whether any process is still in the attempt's cgroups.
  bool Populated(const std::string& name) const;

 private:
  std::string v2_parent_;         // <v2_dir>/trainyard, "" when unusable
  bool v2_memory_ = false;        // memory.max works in v2_parent_'s children
  std::string v1_memory_parent_;  // <v1_memory_dir>/trainyard, "" when unused
  std::string description_;
};

// Adds the calling process to each directory's cgroup.procs (the rank shim, before it forks).
Status JoinCgroups(const std::vector<std::string>& dirs);

}  // namespace trainyard::executors
