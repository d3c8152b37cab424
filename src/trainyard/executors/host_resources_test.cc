#include "trainyard/executors/host_resources.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

namespace trainyard::executors {
namespace {

TEST(HostResourcesTest, DescribesThisMachine) {
  HostResources r = DetectHostResources();
  EXPECT_FALSE(r.hostname.empty());
  EXPECT_GE(r.cpus, 1);
  EXPECT_LE(r.cpus, sysconf(_SC_NPROCESSORS_CONF));
  EXPECT_GT(r.memory_bytes, 0);
  EXPECT_LE(r.memory_bytes, int64_t{sysconf(_SC_PHYS_PAGES)} * sysconf(_SC_PAGESIZE));
}

TEST(HostResourcesTest, GpusComeFromNvmlWhenItIsPresent) {
  HostResources r = DetectHostResources();
  void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (nvml == nullptr) {
    EXPECT_TRUE(r.gpus.empty());
    return;
  }
  dlclose(nvml);
  for (size_t i = 0; i < r.gpus.size(); ++i) {
    EXPECT_EQ(r.gpus[i].index, static_cast<int>(i));
    EXPECT_FALSE(r.gpus[i].name.empty());
    EXPECT_EQ(r.gpus[i].uuid.rfind("GPU-", 0), 0u) << r.gpus[i].uuid;
    EXPECT_GT(r.gpus[i].memory_bytes, 0);
  }
}

}  // namespace
}  // namespace trainyard::executors
