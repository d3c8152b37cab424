#include "trainyard/executors/job_environment.h"

#include <gtest/gtest.h>
#include <stdlib.h>

namespace trainyard::executors {
namespace {

TEST(JobEnvironment, OnlyBasicsAndTheJobsVariables) {
  // The server's environment must not leak into a job, whatever it holds.
  setenv("AWS_SECRET_ACCESS_KEY", "canary", 1);
  auto env = JobEnvironment({"alice", "/home/alice", "C.UTF-8", "/jobs/j-1/tmp"},
                            {{"TRAINYARD_TOKEN", "t"}, {"STEPS", "3"}});
  unsetenv("AWS_SECRET_ACCESS_KEY");
  std::map<std::string, std::string> want = {{"PATH", kDefaultJobPath}, {"HOME", "/home/alice"},
                                             {"USER", "alice"},         {"LOGNAME", "alice"},
                                             {"LANG", "C.UTF-8"},       {"TMPDIR", "/jobs/j-1/tmp"},
                                             {"TRAINYARD_TOKEN", "t"},  {"STEPS", "3"}};
  EXPECT_EQ(env, want);
}

TEST(JobEnvironment, TheSpecOverridesBasics) {
  auto env = JobEnvironment({"alice", "/home/alice", "", ""},
                            {{"PATH", "/opt/venv/bin:/usr/bin"}, {"LANG", "de_DE.UTF-8"}});
  EXPECT_EQ(env["PATH"], "/opt/venv/bin:/usr/bin");
  EXPECT_EQ(env["LANG"], "de_DE.UTF-8");
  EXPECT_EQ(env.count("TMPDIR"), 0u);
}

TEST(JobEnvironment, UnsetBasicsAreLeftOut) {
  auto env = JobEnvironment({}, {});
  EXPECT_EQ(env, (std::map<std::string, std::string>{{"PATH", kDefaultJobPath}}));
}

}  // namespace
}  // namespace trainyard::executors
