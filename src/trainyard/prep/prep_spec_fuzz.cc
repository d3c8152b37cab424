// Fuzzes the pipeline-spec parser: any input gives a PipelineSpec or an InvalidArgument, never a
// crash; a parsed spec keeps its invariants (steps labelled, split last, an output for every
// split, bounded sizes).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "trainyard/prep/pipeline_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto spec = trainyard::prep::ParsePipelineSpec(text, "fuzz.yaml");
  if (!spec.ok()) {
    if (!spec.status().IsInvalidArgument()) std::abort();
    return 0;
  }
  if (spec->version.size() != 64 || spec->name.empty()) std::abort();
  if (spec->source.table.empty() == spec->source.files.empty()) std::abort();
  if (spec->steps.size() > trainyard::prep::kMaxSteps) std::abort();
  for (size_t i = 0; i < spec->steps.size(); ++i) {
    const auto& step = spec->steps[i];
    if (step.label.empty() || step.column.empty()) std::abort();
    if (step.kind == trainyard::prep::StepKind::kSplit) {
      if (i + 1 != spec->steps.size()) std::abort();
      for (const auto& [name, ratio] : step.split.ratios) {
        if (!spec->Output(name) || !(ratio > 0 && ratio <= 1)) std::abort();
      }
    }
    if (step.kind == trainyard::prep::StepKind::kDedupNear &&
        step.dedup_near.bands * step.dedup_near.rows > 1024) {
      std::abort();
    }
  }
  if (!spec->SplitStepOrNull() && !spec->Output("rows")) std::abort();
  return 0;
}
