#include "trainyard/train/nn/distributed.h"

#include <cstdlib>
#include <string>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "trainyard/common/strings.h"

namespace trainyard::train {
namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

}  // namespace

DataParallel::~DataParallel() = default;

Result<std::unique_ptr<DataParallel>> DataParallel::FromEnvironment(
    const torch::Device& device, std::chrono::milliseconds timeout) {
  auto dp = std::unique_ptr<DataParallel>(new DataParallel());
  dp->device_ = device;
  std::string world = Env("WORLD_SIZE");
  std::string rank = Env("RANK");
  auto w = world.empty() ? std::optional<int64_t>(1) : ParseInt64(world);
  auto r = rank.empty() ? std::optional<int64_t>(0) : ParseInt64(rank);
  if (!w || *w < 1 || *w > 65536) {
    return Status::InvalidArgument("WORLD_SIZE must be a positive integer (got '" + world + "')");
  }
  if (!r || *r < 0 || *r >= *w) {
    return Status::InvalidArgument("RANK must be in [0, WORLD_SIZE) (got '" + rank + "')");
  }
  dp->rank_ = static_cast<int>(*r);
  dp->world_size_ = static_cast<int>(*w);
  if (dp->world_size_ == 1) return dp;

  if (device.is_cuda()) {
    return Status::FailedPrecondition(
        "multi-GPU data parallelism needs a libtorch built with NCCL; this one (Debian's "
        "libtorch-dev) has only Gloo. Train on CPU (training.device: cpu) or build with the "
        "PyTorch wheel's libtorch");
  }
  std::string addr = Env("MASTER_ADDR");
  std::string port = Env("MASTER_PORT");
  auto p = ParseInt64(port);
  if (addr.empty() || !p || *p <= 0 || *p > 65535) {
    return Status::InvalidArgument("WORLD_SIZE > 1 needs MASTER_ADDR and MASTER_PORT (got '" +
                                   addr + "' and '" + port +
                                   "'); launch through a Trainyard job or torchrun");
  }
  try {
    c10d::TCPStoreOptions opts;
    opts.port = static_cast<uint16_t>(*p);
    opts.isServer = dp->rank_ == 0;
    opts.numWorkers = dp->world_size_;
    opts.waitWorkers = true;
    opts.timeout = timeout;
    dp->store_ = c10::make_intrusive<c10d::TCPStore>(addr, opts);
    auto options = c10d::ProcessGroupGloo::Options::create(timeout);
    std::string ifname = Env("GLOO_SOCKET_IFNAME");
    if (!ifname.empty()) {
      options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
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
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> flat;
  flat.reserve(tensors.size());
  for (const auto& t : tensors) flat.push_back(t.reshape(-1));
  std::vector<torch::Tensor> buffer{torch::cat(flat)};
  group_->allreduce(buffer)->wait();
  int64_t offset = 0;
  for (const auto& t : tensors) {
    int64_t n = t.numel();
    t.copy_(buffer[0].narrow(0, offset, n).view_as(t));
    offset += n;
  }
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
  torch::NoGradGuard no_grad;  // parameters are leaves that require grad
  std::vector<torch::Tensor> flat;
  for (const auto& t : tensors) flat.push_back(t.reshape(-1));
  std::vector<torch::Tensor> buffer{torch::cat(flat)};
  c10d::BroadcastOptions opts;
  opts.rootRank = 0;
  group_->broadcast(buffer, opts)->wait();
  int64_t offset = 0;
  for (const auto& t : tensors) {
    int64_t n = t.numel();
    t.copy_(buffer[0].narrow(0, offset, n).view_as(t));
    offset += n;
  }
}

void DataParallel::Barrier() {
  if (world_size_ == 1) return;
  group_->barrier()->wait();
}

}  // namespace trainyard::train
