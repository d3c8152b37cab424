#include "trainyard/train/nn/distributed.h"

#include <string>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "trainyard/common/strings.h"

namespace trainyard::train {
namespace {

// Runs one collective on the tensors concatenated into a single buffer, then copies the
// result back: one round trip however many tensors there are.
template <typename Collective>
void InFlatBuffer(const std::vector<torch::Tensor>& tensors, Collective collective) {
  torch::NoGradGuard no_grad;  // parameters are leaves that require grad
  std::vector<torch::Tensor> flat;
  flat.reserve(tensors.size());
  for (const auto& t : tensors) flat.push_back(t.reshape(-1));
  std::vector<torch::Tensor> buffer{torch::cat(flat)};
  collective(buffer);
  int64_t offset = 0;
  for (const auto& t : tensors) {
    int64_t n = t.numel();
    t.copy_(buffer[0].narrow(0, offset, n).view_as(t));
    offset += n;
  }
}

}  // namespace

DataParallel::~DataParallel() = default;

Result<std::unique_ptr<DataParallel>> DataParallel::Join(const WorkloadEnv& env,
                                                         const torch::Device& device,
                                                         std::chrono::milliseconds timeout) {
  auto dp = std::unique_ptr<DataParallel>(new DataParallel());
  dp->device_ = device;
  dp->rank_ = env.rank;
  dp->world_size_ = env.world_size;
  if (dp->world_size_ == 1) return dp;

  if (device.is_cuda()) {
    return Status::FailedPrecondition(
        "multi-GPU data parallelism (NCCL) is not wired up yet: only Gloo on CPU tensors. "
        "Train on one GPU per job, or on CPU (training.device: cpu)");
  }
  const std::string& addr = env.master_addr;
  const std::string port = std::to_string(env.master_port);
  try {
    c10d::TCPStoreOptions opts;
    opts.port = static_cast<uint16_t>(env.master_port);
    opts.isServer = dp->rank_ == 0;
    opts.numWorkers = dp->world_size_;
    opts.waitWorkers = true;
    opts.timeout = timeout;
    dp->store_ = c10::make_intrusive<c10d::TCPStore>(addr, opts);
    auto options = c10d::ProcessGroupGloo::Options::create(timeout);
    if (!env.gloo_socket_ifname.empty()) {
      options->devices.push_back(
          c10d::ProcessGroupGloo::createDeviceForInterface(env.gloo_socket_ifname));
    } else if (addr == "127.0.0.1" || addr == "localhost") {
      options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    } else {
      options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    }
    dp->group_ = c10::make_intrusive<c10d::ProcessGroupGloo>(dp->store_, dp->rank_, dp->world_size_,
                                                             options);
  } catch (const std::exception& e) {
    return Status::Unavailable("data-parallel rendezvous at " + addr + ":" + port +
                               " failed: " + e.what());
  }
  return dp;
}

const char* DataParallel::backend() const { return world_size_ > 1 ? "gloo" : "none"; }

void DataParallel::AllReduceSum(const std::vector<torch::Tensor>& tensors) {
  if (world_size_ == 1 || tensors.empty()) return;
  InFlatBuffer(tensors,
               [this](std::vector<torch::Tensor>& buffer) { group_->allreduce(buffer)->wait(); });
}

double DataParallel::AllReduceSum(double value) {
  if (world_size_ == 1) return value;
  auto t = torch::tensor({value}, torch::kFloat64);
  std::vector<torch::Tensor> v{t};
  group_->allreduce(v)->wait();
  return v[0].item<double>();
}

void DataParallel::Broadcast(const std::vector<torch::Tensor>& tensors) {
  if (world_size_ == 1 || tensors.empty()) return;
  InFlatBuffer(tensors, [this](std::vector<torch::Tensor>& buffer) {
    c10d::BroadcastOptions opts;
    opts.rootRank = 0;
    group_->broadcast(buffer, opts)->wait();
  });
}

void DataParallel::Barrier() {
  if (world_size_ == 1) return;
  group_->barrier()->wait();
}

}  // namespace trainyard::train
