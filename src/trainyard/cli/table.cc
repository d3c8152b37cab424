#include "trainyard/cli/table.h"

#include <algorithm>
#include <ctime>

namespace trainyard::cli {

// Width in terminal columns, counting UTF-8 code points (not bytes).
static size_t Width(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// Shortens to `max` columns, cutting between characters, never inside one.
static std::string Fit(const std::string& s, size_t max) {
  if (Width(s) <= max) return s;
  size_t cols = 0, i = 0;
  for (; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) {
      if (cols == max - 1) break;
      ++cols;
    }
  }
  return s.substr(0, i) + "~";
}

void PrintTable(std::ostream& out, const std::vector<std::string>& header,
                const std::vector<std::vector<std::string>>& rows, size_t max_cell) {
  std::vector<size_t> width(header.size());
  for (size_t c = 0; c < header.size(); ++c) width[c] = Width(header[c]);
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size() && c < width.size(); ++c) {
      width[c] = std::max(width[c], std::min(Width(row[c]), max_cell));
    }
  }
  auto print_row = [&](const std::vector<std::string>& row) {
    std::string line;
    for (size_t c = 0; c < width.size(); ++c) {
      std::string cell = c < row.size() ? Fit(row[c], max_cell) : "";
      line += cell;
      if (c + 1 < width.size()) line += std::string(width[c] - Width(cell) + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << "\n";
  };
  print_row(header);
  if (rows.empty()) out << "(none)\n";
  for (const auto& row : rows) print_row(row);
}

std::string FormatTime(int64_t millis) {
  if (millis <= 0) return "";
  std::time_t t = static_cast<std::time_t>(millis / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M", &tm);
  return buf;
}

std::string FormatDuration(int64_t millis) {
  if (millis < 0) return "";
  int64_t s = millis / 1000;
  if (s < 60) return std::to_string(s) + "s";
  if (s < 3600) return std::to_string(s / 60) + "m " + std::to_string(s % 60) + "s";
  return std::to_string(s / 3600) + "h " + std::to_string((s % 3600) / 60) + "m";
}

}  // namespace trainyard::cli
