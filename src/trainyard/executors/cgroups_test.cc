#include "trainyard/executors/cgroups.h"

#include <gtest/gtest.h>

namespace trainyard::executors {
namespace {

// This machine's kind: cgroup2 at /sys/fs/cgroup/unified, v1 controllers beside it.
constexpr const char* kHybridMounts =
    "sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0\n"
    "tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0\n"
    "cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0\n"
    "cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0\n"
    "cgroup /sys/fs/cgroup/freezer cgroup rw,relatime,freezer 0 0\n"
    "cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0\n";
constexpr const char* kHybridSelf =
    "6:freezer:/\n"
    "4:memory:/process_api/c5df\n"
    "1:cpu:/\n"
    "0::/\n";

TEST(CgroupLayout, HybridUsesV2ForContainmentAndFindsOurV1MemoryCgroup) {
  CgroupLayout l = ParseCgroupLayout(kHybridMounts, kHybridSelf);
  EXPECT_EQ(l.v2_dir, "/sys/fs/cgroup/unified");
  EXPECT_EQ(l.v1_memory_dir, "/sys/fs/cgroup/memory/process_api/c5df");
}

TEST(CgroupLayout, PureV2) {
  CgroupLayout l = ParseCgroupLayout(
      "proc /proc proc rw 0 0\ncgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec 0 0\n",
      "0::/system.slice/trainyard.service\n");
  EXPECT_EQ(l.v2_dir, "/sys/fs/cgroup/system.slice/trainyard.service");
  EXPECT_EQ(l.v1_memory_dir, "");
}

TEST(CgroupLayout, CombinedV1ControllersAndNoV2) {
  CgroupLayout l =
      ParseCgroupLayout("cgroup /sys/fs/cgroup/memory,cpu cgroup rw,relatime,cpu,memory 0 0\n",
                        "3:cpu,memory:/user/1000\n");
  EXPECT_EQ(l.v2_dir, "");
  EXPECT_EQ(l.v1_memory_dir, "/sys/fs/cgroup/memory,cpu/user/1000");
}

TEST(CgroupLayout, NothingMountedMeansNothingUsable) {
  CgroupLayout l = ParseCgroupLayout("proc /proc proc rw 0 0\n", "0::/\n");
  EXPECT_EQ(l.v2_dir, "");
  EXPECT_EQ(l.v1_memory_dir, "");
  CgroupManager m(l);
  EXPECT_FALSE(m.Available());
  EXPECT_NE(m.Describe().find("none"), std::string::npos) << m.Describe();
  auto dirs = m.Create("j-1-a1", 1 << 20);
  ASSERT_TRUE(dirs.ok());
  EXPECT_TRUE(dirs->empty());
}

TEST(CgroupLayout, UnwritableHierarchiesAreReportedNotFatal) {
  CgroupManager m({"/proc/no-such-cgroup", "/proc/no-such-memory"});
  EXPECT_FALSE(m.Available());
  EXPECT_NE(m.Describe().find("not writable"), std::string::npos) << m.Describe();
}

}  // namespace
}  // namespace trainyard::executors
