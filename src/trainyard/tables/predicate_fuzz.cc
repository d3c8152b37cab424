// libFuzzer target for the filter grammar: Parse must never crash, and what it parses must
// print to text that parses to the same predicate.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "trainyard/tables/predicate.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto p = trainyard::tables::Predicate::Parse(text);
  if (!p.ok()) return 0;
  std::string printed = p->ToString();
  auto again = trainyard::tables::Predicate::Parse(printed);
  if (!again.ok() || again->ToString() != printed) std::abort();
  trainyard::tables::FileStats stats;
  (void)p->MayMatch(stats);
  return 0;
}
