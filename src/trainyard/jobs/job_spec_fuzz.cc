// Fuzzes the job-spec parser: any input must give a JobSpec or an InvalidArgument
// status, never a crash, and a parsed spec must round-trip through JSON (run_as included,
// and only ever a valid principal name).
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
    if (!again.ok() || again->run_as != spec->run_as) std::abort();
    // run_as names a principal: bounded, and only characters identity allows in names.
    if (spec->run_as.size() > trainyard::jobs::kMaxRunAsBytes) std::abort();
    for (char c : spec->run_as) {
      bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '_' || c == '-' || c == '.' || c == '@';
      if (!ok) std::abort();
    }
  } else if (!spec.status().IsInvalidArgument()) {
    std::abort();
  }
  return 0;
}
