#include "trainyard/model/nn/device.h"

namespace trainyard::model {

Result<torch::Device> ResolveDevice(const std::string& name) {
  if (name == "auto") {
    return torch::cuda::is_available() ? torch::Device(torch::kCUDA, 0)
                                       : torch::Device(torch::kCPU);
  }
  if (name == "cpu") return torch::Device(torch::kCPU);
  if (name.rfind("cuda", 0) == 0) {
    if (!torch::cuda::is_available()) {
      return Status::InvalidArgument("training.device is " + name +
                                     " but libtorch sees no CUDA GPU; use device: cpu or auto");
    }
    try {
      return torch::Device(name);
    } catch (const std::exception&) {
      return Status::InvalidArgument("training.device " + name + " is not a device (cuda:N)");
    }
  }
  return Status::InvalidArgument("training.device must be auto, cpu, cuda or cuda:N (got " + name +
                                 ")");
}

Result<bool> ResolveBf16(const std::string& precision, const torch::Device& device) {
  if (precision == "auto") return device.is_cuda();
  if (precision == "fp32") return false;
  if (precision == "bf16") return true;
  return Status::InvalidArgument("training.precision must be auto, fp32 or bf16 (got " + precision +
                                 ")");
}

}  // namespace trainyard::model
