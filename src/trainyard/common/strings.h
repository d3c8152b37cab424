// Small string helpers shared by every component.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace trainyard {

std::vector<std::string> SplitString(std::string_view s, char sep);
bool StartsWith(std::string_view s, std::string_view prefix);
bool EndsWith(std::string_view s, std::string_view suffix);
std::string ToLower(std::string_view s);
std::string Trim(std::string_view s);

// Strict integer parsing: the whole string must be a base-10 integer in range.
std::optional<int64_t> ParseInt64(std::string_view s);
std::optional<double> ParseDouble(std::string_view s);

// Percent-decoding for URL paths and query strings ('+' is a space only when `plus_is_space`).
std::optional<std::string> UrlDecode(std::string_view s, bool plus_is_space);
// Percent-encodes every byte but ASCII letters, digits, "-_.~/" and the bytes in `also_safe`.
std::string UrlEncode(std::string_view s, std::string_view also_safe = "");

// Lowercase hex SHA-256 of `data`.
std::string Sha256Hex(std::string_view data);

// Shortens `s` to at most `max` bytes, adding "..." when it was cut; for error messages.
std::string Abbreviate(std::string_view s, size_t max = 80);

// "512 B", "1.5 GiB": a byte count for people (binary units).
std::string FormatBytes(double bytes);

}  // namespace trainyard
