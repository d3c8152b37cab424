// Fuzzes BoundedRegex: the first line is a pattern, the rest the text (a job's log tail). Any
// pattern compiles or is InvalidArgument; any match ends (a limit is "no match"); never a crash.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "trainyard/common/regex.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  size_t nl = input.find('\n');
  std::string_view pattern = input.substr(0, nl);
  std::string_view text = nl == std::string_view::npos ? std::string_view() : input.substr(nl + 1);
  auto re = trainyard::BoundedRegex::Compile(pattern, "pattern");
  if (!re.ok()) {
    if (!re.status().IsInvalidArgument()) std::abort();
    return 0;
  }
  (*re)->Search(text);
  (*re)->FullMatch(text);
  size_t matches = 0;
  (*re)->ForEachMatch(text, [&](const std::vector<std::string_view>& groups) {
    if (groups.empty() || groups[0].size() > text.size()) std::abort();
    ++matches;
  });
  if (matches > text.size() + 1) std::abort();
  return 0;
}
