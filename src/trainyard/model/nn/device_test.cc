#include "trainyard/model/nn/device.h"

#include <gtest/gtest.h>

namespace trainyard::model {
namespace {

TEST(DeviceTest, CpuAndErrorsNameTheField) {
  auto cpu = ResolveDevice("cpu");
  ASSERT_TRUE(cpu.ok());
  EXPECT_TRUE(cpu->is_cpu());
  auto bad = ResolveDevice("tpu");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("training.device"), std::string::npos);
  auto bf16 = ResolveBf16("auto", torch::Device(torch::kCPU));
  ASSERT_TRUE(bf16.ok());
  EXPECT_FALSE(*bf16);
  EXPECT_FALSE(ResolveBf16("fp8", torch::Device(torch::kCPU)).ok());
}

}  // namespace
}  // namespace trainyard::model
