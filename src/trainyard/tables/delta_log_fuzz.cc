// libFuzzer target for the Delta log's line parser: ParseCommit must never crash on any bytes,
// and an action it decodes must encode to a line that decodes to the same encoding.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "trainyard/tables/delta_log.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto actions = trainyard::tables::ParseCommit(text);
  if (!actions.ok()) return 0;
  for (const auto& action : *actions) {
    std::string line = trainyard::tables::ActionLine(action);
    auto again = trainyard::tables::ParseActionLine(line);
    if (!again.ok() || trainyard::tables::ActionLine(*again) != line) std::abort();
    if (action.add) (void)trainyard::tables::DecodePathUri(action.add->path);
  }
  return 0;
}
