// Data parallelism for the trainer over libtorch's c10d: Gloo for CPU tensors (NCCL for CUDA
// when the libtorch build has it), rendezvous through a TCPStore at MASTER_ADDR:MASTER_PORT,
// started from the torchrun-style environment the executors set (read by WorkloadEnv:
// WORLD_SIZE, RANK, MASTER_ADDR, MASTER_PORT). With one rank every collective is a no-op.
//
// Collectives must be called by every rank in the same order (as with torch.distributed).
// One thread uses a DataParallel at a time.
#pragma once

#include <torch/torch.h>
#include <torch/version.h>

#include <memory>
#include <vector>

#include "trainyard/common/status.h"
#include "trainyard/train/platform.h"

namespace c10d {
class Backend;
class ProcessGroup;
class Store;
}  // namespace c10d

namespace trainyard::train {

class DataParallel {
 public:
  // Joins the gang `env` describes; `timeout` bounds the rendezvous and each collective.
  static Result<std::unique_ptr<DataParallel>> Join(
      const WorkloadEnv& env, const torch::Device& device,
      std::chrono::milliseconds timeout = std::chrono::minutes(10));
  ~DataParallel();

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  bool distributed() const { return world_size_ > 1; }
  const char* backend() const;

  // Sums `tensors` across ranks in place (flattened into one buffer, one collective).
  void AllReduceSum(const std::vector<torch::Tensor>& tensors);
  double AllReduceSum(double value);
  // Copies rank 0's values into every rank's tensors.
  void Broadcast(const std::vector<torch::Tensor>& tensors);
  void Barrier();

 private:
  DataParallel() = default;
  int rank_ = 0;
  int world_size_ = 1;
  torch::Device device_ = torch::kCPU;
  c10::intrusive_ptr<c10d::Store> store_;
  // The Gloo process group: a c10d::Backend from libtorch 2 on (a ProcessGroup before).
#if TORCH_VERSION_MAJOR >= 2
  c10::intrusive_ptr<c10d::Backend> group_;
#else
  c10::intrusive_ptr<c10d::ProcessGroup> group_;
#endif
};

}  // namespace trainyard::train
