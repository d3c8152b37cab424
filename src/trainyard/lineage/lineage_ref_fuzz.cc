// libFuzzer target for lineage's parsers: ParseNodeRef (the `object` of every lineage query),
// ParseColumnMapping and ParseColumnLineage (the tables import API's column_lineage) must never
// crash; whatever they accept must be valid and survive a
// format/parse round trip unchanged. A difference aborts.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "trainyard/lineage/types.h"

namespace lineage = trainyard::lineage;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto ref = lineage::ParseNodeRef(text);
  if (ref.ok()) {
    if (!lineage::ValidateNodeRef(*ref).ok()) std::abort();
    std::string formatted = lineage::FormatNodeRef(*ref);
    auto again = lineage::ParseNodeRef(formatted);
    if (!again.ok() || !(*again == *ref)) std::abort();
  }
  auto mapping = lineage::ParseColumnMapping(text);
  if (mapping.ok()) {
    auto again = lineage::ParseColumnMapping(lineage::FormatColumnMapping(*mapping));
    if (!again.ok() || *again != *mapping) std::abort();
  }
  auto columns = lineage::ParseColumnLineage(text);
  if (columns.ok()) {
    for (const auto& c : *columns) {
      if (c.source.type != lineage::NodeType::kTable || !c.source.version ||
          !lineage::ValidateNodeRef(c.source).ok()) {
        std::abort();
      }
    }
    (void)lineage::ValidateColumnLineage({lineage::NodeType::kTable, "a.b.c", 1}, *columns);
  }
  (void)lineage::TableVersionOfDataset("delta_table", text, "7");
  (void)lineage::TableVersionOfDataset("trainyard_table", text, text);
  return 0;
}
