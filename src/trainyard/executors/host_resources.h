// What this machine offers to jobs: CPUs this process may run on, memory, and NVIDIA GPUs.
//
// DetectHostResources() is thread-safe and cheap enough to call at server start (it loads
// NVML for the duration of the call only).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trainyard::executors {

struct GpuInfo {
  int index = 0;  // NVML index (the CUDA_VISIBLE_DEVICES number with the default PCI order)
  std::string name;
  std::string uuid;
  int64_t memory_bytes = 0;
};

struct HostResources {
  std::string hostname;
  int cpus = 0;              // sched_getaffinity: the CPUs this process may use
  int64_t memory_bytes = 0;  // physical memory, or the cgroup (v2) limit when lower
  std::vector<GpuInfo> gpus;
};

// GPUs come from NVML, loaded with dlopen("libnvidia-ml.so.1"): a machine without the
// NVIDIA driver (or whose NVML fails to initialize) simply has no GPUs.
HostResources DetectHostResources();

}  // namespace trainyard::executors
