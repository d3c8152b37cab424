// libFuzzer target for what a table's policies parse from clients: the column-mask body
// ({"kind", "except"}) and row filters with current_user() / is_member() bound to a reader.
// Never a crash; rejections are InvalidArgument; a bound filter has no reader functions left
// and prints to text that parses back to itself.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "trainyard/catalog/table_policy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace trainyard;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto mask = catalog::DecodeColumnMask(text);
  if (!mask.ok() && mask.status().code() != StatusCode::kInvalidArgument) std::abort();
  if (mask.ok() && mask->except.size() > catalog::kMaxMaskExceptions) std::abort();
  auto p = tables::Predicate::Parse(text);
  if (!p.ok()) return 0;
  for (const tables::PredicateReader& reader :
       {tables::PredicateReader{"bob", {}}, tables::PredicateReader{"o'neil", {"leads", "x"}}}) {
    tables::Predicate bound = p->BindReader(reader);
    if (bound.UsesReader()) std::abort();
    auto again = tables::Predicate::Parse(bound.ToString());
    if (!again.ok() || again->ToString() != bound.ToString()) std::abort();
  }
  return 0;
}
