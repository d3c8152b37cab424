#include "trainyard/checkpoints/checkpoint_service.h"

#include <gtest/gtest.h>

namespace trainyard::checkpoints {
namespace {

TEST(CheckpointUriTest, RoundTrips) {
  std::string uri = CheckpointUri("default", "j-0a1b2c3d4e", 120);
  EXPECT_EQ(uri, "trainyard-checkpoint://default/j-0a1b2c3d4e/120");
  Result<CheckpointAddress> a = ParseCheckpointUri(uri);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->project, "default");
  EXPECT_EQ(a->job, "j-0a1b2c3d4e");
  EXPECT_EQ(a->step, 120);
}

TEST(CheckpointUriTest, RejectsOtherTexts) {
  for (const char* bad :
       {"", "/data/ckpt/step-5.json", "trainyard-checkpoint://default/j-1",
        "trainyard-checkpoint://default/j-1/x", "trainyard-checkpoint://default/j-1/-3",
        "trainyard-checkpoint://../j-1/3", "trainyard-checkpoint://p/j/3/extra",
        "mlflow-artifacts://p/j/3"}) {
    Result<CheckpointAddress> a = ParseCheckpointUri(bad);
    ASSERT_FALSE(a.ok()) << bad;
    EXPECT_NE(a.status().message().find("not a checkpoint URI"), std::string::npos)
        << a.status().message();
  }
}

}  // namespace
}  // namespace trainyard::checkpoints
