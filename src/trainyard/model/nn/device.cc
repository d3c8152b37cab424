#include "trainyard/model/nn/device.h"

#include <ATen/autocast_mode.h>
#include <torch/version.h>

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

#if TORCH_VERSION_MAJOR >= 2
bool CudaAutocastEnabled() { return at::autocast::is_autocast_enabled(at::kCUDA); }
at::ScalarType CudaAutocastDtype() { return at::autocast::get_autocast_dtype(at::kCUDA); }
void SetCudaAutocast(bool enabled, at::ScalarType dtype) {
  at::autocast::set_autocast_enabled(at::kCUDA, enabled);
  at::autocast::set_autocast_dtype(at::kCUDA, dtype);
}
#else
bool CudaAutocastEnabled() { return at::autocast::is_enabled(); }
at::ScalarType CudaAutocastDtype() { return at::autocast::get_autocast_gpu_dtype(); }
void SetCudaAutocast(bool enabled, at::ScalarType dtype) {
  at::autocast::set_enabled(enabled);
  at::autocast::set_autocast_gpu_dtype(dtype);
}
#endif

}  // namespace trainyard::model
