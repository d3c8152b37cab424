#include "trainyard/executors/host_resources.h"

#include <dlfcn.h>
#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <string>

namespace trainyard::executors {
namespace {

int DetectCpus() {
  // CPU_ALLOC sizes the mask for machines with more than CPU_SETSIZE (1024) CPUs.
  for (int ncpus = 1024; ncpus <= (1 << 20); ncpus *= 2) {
    cpu_set_t* set = CPU_ALLOC(ncpus);
    if (set == nullptr) break;
    size_t size = CPU_ALLOC_SIZE(ncpus);
    CPU_ZERO_S(size, set);
    if (sched_getaffinity(0, size, set) == 0) {
      int count = CPU_COUNT_S(size, set);
      CPU_FREE(set);
      return count;
    }
    CPU_FREE(set);
    if (errno != EINVAL) break;
  }
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  return online > 0 ? static_cast<int>(online) : 1;
}

int64_t DetectMemory() {
  long pages = sysconf(_SC_PHYS_PAGES);
  long page_size = sysconf(_SC_PAGESIZE);
  int64_t physical = pages > 0 && page_size > 0 ? int64_t{pages} * page_size : 0;
  // A container's limit (cgroup v2) is what jobs can really use.
  std::ifstream in("/sys/fs/cgroup/memory.max");
  std::string limit_text;
  if (in >> limit_text && limit_text != "max") {
    try {
      int64_t limit = std::stoll(limit_text);
      if (limit > 0 && (physical == 0 || limit < physical)) return limit;
    } catch (const std::exception&) {
    }
  }
  return physical;
}

// The subset of NVML we use, declared here so no NVML header is needed at build time.
// Signatures follow NVML's public API (nvml.h); nvmlReturn_t is an int, 0 = success.
using NvmlDevice = void*;
struct NvmlMemory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
using NvmlInitFn = int (*)();
using NvmlShutdownFn = int (*)();
using NvmlDeviceGetCountFn = int (*)(unsigned int*);
using NvmlDeviceGetHandleByIndexFn = int (*)(unsigned int, NvmlDevice*);
using NvmlDeviceGetNameFn = int (*)(NvmlDevice, char*, unsigned int);
using NvmlDeviceGetUuidFn = int (*)(NvmlDevice, char*, unsigned int);
using NvmlDeviceGetMemoryInfoFn = int (*)(NvmlDevice, NvmlMemory*);

template <typename Fn>
Fn Symbol(void* lib, const char* name) {
  return reinterpret_cast<Fn>(dlsym(lib, name));
}

std::vector<GpuInfo> DetectGpus() {
  std::vector<GpuInfo> gpus;
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return gpus;
  auto init = Symbol<NvmlInitFn>(lib, "nvmlInit_v2");
  auto shutdown = Symbol<NvmlShutdownFn>(lib, "nvmlShutdown");
  auto get_count = Symbol<NvmlDeviceGetCountFn>(lib, "nvmlDeviceGetCount_v2");
  auto get_handle = Symbol<NvmlDeviceGetHandleByIndexFn>(lib, "nvmlDeviceGetHandleByIndex_v2");
  auto get_name = Symbol<NvmlDeviceGetNameFn>(lib, "nvmlDeviceGetName");
  auto get_uuid = Symbol<NvmlDeviceGetUuidFn>(lib, "nvmlDeviceGetUUID");
  auto get_memory = Symbol<NvmlDeviceGetMemoryInfoFn>(lib, "nvmlDeviceGetMemoryInfo");
  if (init && shutdown && get_count && get_handle && init() == 0) {
    unsigned int count = 0;
    if (get_count(&count) == 0) {
      for (unsigned int i = 0; i < count; ++i) {
        NvmlDevice device = nullptr;
        if (get_handle(i, &device) != 0) continue;
        GpuInfo gpu;
        gpu.index = static_cast<int>(i);
        char buf[256] = {};
        if (get_name && get_name(device, buf, sizeof(buf)) == 0) gpu.name = buf;
        buf[0] = '\0';
        if (get_uuid && get_uuid(device, buf, sizeof(buf)) == 0) gpu.uuid = buf;
        NvmlMemory memory{};
        if (get_memory && get_memory(device, &memory) == 0) {
          gpu.memory_bytes = static_cast<int64_t>(memory.total);
        }
        gpus.push_back(std::move(gpu));
      }
    }
    shutdown();
  }
  dlclose(lib);
  return gpus;
}

}  // namespace

HostResources DetectHostResources() {
  HostResources r;
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) == 0) r.hostname = name;
  r.cpus = DetectCpus();
  r.memory_bytes = DetectMemory();
  r.gpus = DetectGpus();
  return r;
}

}  // namespace trainyard::executors
