// Readable tables for the CLI: columns sized to their content, a header row, and
// cells shortened to fit a terminal.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace trainyard::cli {

void PrintTable(std::ostream& out, const std::vector<std::string>& header,
                const std::vector<std::vector<std::string>>& rows, size_t max_cell = 48);

// "2026-11-22 02:25" from epoch milliseconds (UTC); "" for 0.
std::string FormatTime(int64_t millis);
// "3m 12s" style durations.
std::string FormatDuration(int64_t millis);

}  // namespace trainyard::cli
