// Fuzzes ReportFromJson (the Spark engine's report read back by the CLI): any input gives a
// report or an error, never a crash; a report read has the spec's steps.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "trainyard/prep/spark_bridge.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const trainyard::prep::PipelineSpec* spec = [] {
    auto parsed = trainyard::prep::ParsePipelineSpec(
        "name: p\nsource: {files: [a.jsonl]}\nsteps:\n  - filter: {min_chars: 2}\n"
        "  - redact_pii: {kinds: [email]}\n  - split: {ratios: {a: 0.5, b: 0.5}}\n"
        "outputs:\n  a: {path: a}\n  b: {path: b}\n",
        "fuzz.yaml");
    if (!parsed.ok()) std::abort();
    return new trainyard::prep::PipelineSpec(std::move(*parsed));
  }();
  auto object =
      trainyard::ParseJsonObject(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!object.ok()) return 0;
  auto report = trainyard::prep::ReportFromJson(*object, *spec);
  if (report.ok() && report->steps.size() != spec->steps.size()) std::abort();
  return 0;
}
