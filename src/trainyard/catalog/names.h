// Names in the catalog: Unity Catalog OSS's rules, as pure functions (no I/O, thread-safe).
//
// One level of a name is 1-255 characters of letters, digits, '_', '-' and '@' (UC OSS
// rejects '.', ' ', '/', control characters and anything else). Names are stored and
// compared lower-cased, as UC does: `Main.Support` and `main.support` are the same schema.
// A full name joins its levels with '.': `catalog`, `catalog.schema`,
// `catalog.schema.object`. A level may be quoted with backticks (`main`.`support`), as in
// SQL; the quoted text must still follow the rules above.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "trainyard/common/status.h"

namespace trainyard::catalog {

inline constexpr size_t kMaxNameLength = 255;

// Ok when `name` is one valid level; InvalidArgument naming `field` otherwise.
Status ValidateName(std::string_view field, std::string_view name);
// The stored form of a valid level (lower case); InvalidArgument naming `field` otherwise.
Result<std::string> NormalizeName(std::string_view field, std::string_view name);

// A parsed full name: 1 to 3 normalized levels.
struct FullName {
  std::vector<std::string> parts;

  std::string ToString() const;  // the levels joined with '.'
  const std::string& catalog() const { return parts.at(0); }
  const std::string& schema() const { return parts.at(1); }
  const std::string& object() const { return parts.at(2); }
};

// Parses `text` as a name of exactly `levels` levels (1, 2 or 3), normalizing each;
// InvalidArgument naming `field` (and what was expected) otherwise.
Result<FullName> ParseFullName(std::string_view field, std::string_view text, int levels);

}  // namespace trainyard::catalog
