#include "trainyard/catalog/names.h"

#include "trainyard/common/strings.h"

namespace trainyard::catalog {
namespace {

bool ValidNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-' || c == '@';
}

// Splits on '.' outside backticks, removing the backticks; InvalidArgument on an
// unterminated quote or text glued to a quoted level.
Result<std::vector<std::string>> SplitLevels(std::string_view field, std::string_view text) {
  std::vector<std::string> parts(1);
  bool quoted = false;
  bool was_quoted = false;  // the current level was a quoted one, now closed
  for (char c : text) {
    if (c == '`') {
      if (!quoted && (!parts.back().empty() || was_quoted)) {
        return Status::InvalidArgument(std::string(field) + ": a backtick may only quote a " +
                                       "whole level (got '" + Abbreviate(text) + "')");
      }
      was_quoted = quoted;
      quoted = !quoted;
    } else if (c == '.' && !quoted) {
      parts.emplace_back();
      was_quoted = false;
    } else if (was_quoted) {
      return Status::InvalidArgument(std::string(field) + ": text after a quoted level (got '" +
                                     Abbreviate(text) + "')");
    } else {
      parts.back().push_back(c);
    }
  }
  if (quoted) {
    return Status::InvalidArgument(std::string(field) + ": unterminated backtick (got '" +
                                   Abbreviate(text) + "')");
  }
  return parts;
}

}  // namespace

Status ValidateName(std::string_view field, std::string_view name) {
  if (name.empty()) return Status::InvalidArgument(std::string(field) + " must not be empty");
  if (name.size() > kMaxNameLength) {
    return Status::InvalidArgument(std::string(field) + " must be at most " +
                                   std::to_string(kMaxNameLength) + " characters (got " +
                                   std::to_string(name.size()) + ")");
  }
  for (char c : name) {
    if (!ValidNameChar(c)) {
      return Status::InvalidArgument(
          std::string(field) + " may contain only letters, digits, '_', '-' and '@' (no '.', " +
          "space, '/' or control characters); got '" + Abbreviate(name) + "'");
    }
  }
  return Status::Ok();
}

Result<std::string> NormalizeName(std::string_view field, std::string_view name) {
  TY_RETURN_IF_ERROR(ValidateName(field, name));
  return ToLower(name);
}

std::string FullName::ToString() const {
  std::string out;
  for (const auto& p : parts) {
    if (!out.empty()) out += '.';
    out += p;
  }
  return out;
}

Result<FullName> ParseFullName(std::string_view field, std::string_view text, int levels) {
  static const char* kShapes[] = {"", "catalog", "catalog.schema", "catalog.schema.name"};
  if (levels < 1 || levels > 3) return Status::Internal("ParseFullName: levels must be 1-3");
  if (text.empty()) {
    return Status::InvalidArgument(std::string(field) + " must not be empty (expected '" +
                                   kShapes[levels] + "')");
  }
  if (text.size() > 3 * (kMaxNameLength + 2) + 2) {
    return Status::InvalidArgument(std::string(field) + " is too long (" +
                                   std::to_string(text.size()) + " characters)");
  }
  TY_ASSIGN_OR_RETURN(auto parts, SplitLevels(field, text));
  if (static_cast<int>(parts.size()) != levels) {
    return Status::InvalidArgument(std::string(field) + " must have " + std::to_string(levels) +
                                   " level" + (levels == 1 ? "" : "s") + " ('" + kShapes[levels] +
                                   "'); got '" + Abbreviate(text) + "'");
  }
  FullName out;
  for (const auto& p : parts) {
    TY_ASSIGN_OR_RETURN(std::string level, NormalizeName(field, p));
    out.parts.push_back(std::move(level));
  }
  return out;
}

}  // namespace trainyard::catalog
