#include "trainyard/common/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace trainyard {

void InitLogging(std::string_view level, bool json_format) {
  auto logger = spdlog::stderr_color_mt("trainyard");
  if (json_format) {
    logger->set_pattern(R"({"ts":"%Y-%m-%dT%H:%M:%S.%e%z","level":"%l","msg":%v})");
  } else {
    logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  }
  logger->set_level(spdlog::level::from_str(std::string(level)));
  spdlog::set_default_logger(logger);
}

}  // namespace trainyard
