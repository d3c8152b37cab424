// Unit tests log at warn and above unless TRAINYARD_TEST_LOG_LEVEL says otherwise: the
// services' info lines (job events, executor launches) would bury the test results.
#include "trainyard/common/log.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace {

class QuietLogs : public ::testing::Environment {
 public:
  void SetUp() override {
    const char* level = std::getenv("TRAINYARD_TEST_LOG_LEVEL");
    trainyard::InitLogging(level && *level ? level : "warn");
  }
};

const ::testing::Environment* const kQuietLogs = ::testing::AddGlobalTestEnvironment(new QuietLogs);

}  // namespace
