// libFuzzer target for what TableService parses from clients: page tokens (whatever parses
// formats back to itself) and UC column descriptions (type_json / type_text) turned into an
// Arrow schema, which must then round-trip through the catalog's columns. Never a crash;
// rejections are InvalidArgument.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "trainyard/catalog/table_service.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace trainyard;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto token = catalog::ParsePageToken(text);
  if (token.ok()) {
    if (catalog::FormatPageToken(token->first, token->second) != text &&
        text.find_first_not_of("0123456789:") != std::string_view::npos) {
      std::abort();
    }
  } else if (token.status().code() != StatusCode::kInvalidArgument) {
    std::abort();
  }
  // Split the input into a type_json and a type_text at the first newline.
  size_t nl = text.find('\n');
  catalog::ColumnInfo c;
  c.name = "c";
  c.type_json = std::string(text.substr(0, nl));
  if (nl != std::string_view::npos) c.type_text = std::string(text.substr(nl + 1));
  auto schema = catalog::ArrowFromColumns({c});
  if (!schema.ok()) return 0;
  auto columns = catalog::ColumnsFromArrow(**schema);
  if (!columns.ok()) return 0;
  auto again = catalog::ArrowFromColumns(*columns);
  if (!again.ok() || !(*again)->Equals(**schema)) std::abort();
  return 0;
}
