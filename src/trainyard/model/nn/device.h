// Device and precision selection for the trainer: "auto" picks CUDA when libtorch sees a GPU,
// else the CPU; precision "auto" is bf16 autocast on CUDA and fp32 on the CPU.
#pragma once

#include <torch/torch.h>

#include <string>

#include "trainyard/common/status.h"

namespace trainyard::model {

Result<torch::Device> ResolveDevice(const std::string& name);  // auto | cpu | cuda | cuda:N
// True when the forward pass runs under bf16 autocast; InvalidArgument for bf16 on a CPU
// without support or an unknown name.
Result<bool> ResolveBf16(const std::string& precision, const torch::Device& device);

// CUDA autocast's state (on or off, and its dtype), the same on every libtorch this builds
// against: libtorch 2 takes the device type where 1.13 had GPU-only functions.
bool CudaAutocastEnabled();
at::ScalarType CudaAutocastDtype();
void SetCudaAutocast(bool enabled, at::ScalarType dtype);

}  // namespace trainyard::model
