// Logging: spdlog, one process-wide logger writing structured key=value lines to stderr.
#pragma once

#include <spdlog/spdlog.h>

#include <string_view>

namespace trainyard {

// Sets up the process logger. `level` is one of trace, debug, info, warn, error.
void InitLogging(std::string_view level, bool json_format = false);

}  // namespace trainyard
