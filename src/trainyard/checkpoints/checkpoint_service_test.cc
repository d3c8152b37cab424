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

TEST(CommitBlobOrderTest, DefaultsToEveryStagedBlobByName) {
  Result<std::vector<std::string>> order = CommitBlobOrder({"b", "a", "c"}, {}, "u-1");
  ASSERT_TRUE(order.ok()) << order.status().ToString();
  EXPECT_EQ(*order, (std::vector<std::string>{"a", "b", "c"}));
}

TEST(CommitBlobOrderTest, KeepsTheRequestedOrder) {
  Result<std::vector<std::string>> order = CommitBlobOrder({"a", "b", "c"}, {"c", "a", "b"}, "u-1");
  ASSERT_TRUE(order.ok()) << order.status().ToString();
  EXPECT_EQ(*order, (std::vector<std::string>{"c", "a", "b"}));
}

TEST(CommitBlobOrderTest, NamesWhatIsWrong) {
  auto message = [](const std::set<std::string>& staged,
                    const std::vector<std::string>& requested) {
    Result<std::vector<std::string>> order = CommitBlobOrder(staged, requested, "u-7");
    EXPECT_TRUE(order.status().IsInvalidArgument());
    return order.status().message();
  };
  EXPECT_NE(message({"a", "b"}, {"a", "a", "b"}).find("lists 'a' twice"), std::string::npos);
  EXPECT_NE(message({"a"}, {"a", "x"}).find("'x', which was not uploaded to u-7"),
            std::string::npos);
  EXPECT_NE(message({"a", "b"}, {"a"}).find("blob 'b' was uploaded to u-7 but is not in blobs"),
            std::string::npos);
  EXPECT_NE(message({}, {}).find("upload u-7 has no blobs"), std::string::npos);
}

}  // namespace
}  // namespace trainyard::checkpoints
