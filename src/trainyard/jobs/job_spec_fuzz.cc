// Fuzzes the job-spec parser: any input must give a JobSpec or an InvalidArgument
// status, never a crash, and a parsed spec must round-trip through JSON.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "trainyard/common/json.h"
#include "trainyard/jobs/job_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto spec = trainyard::jobs::ParseJobSpec(text, "fuzz.yaml");
  if (spec.ok()) {
    auto again = trainyard::jobs::ParseJobSpecJson(trainyard::jobs::JobSpecToJson(*spec));
    if (!again.ok()) std::abort();
  } else if (!spec.status().IsInvalidArgument()) {
    std::abort();
  }
  return 0;
}
