#include "trainyard/serving/replica_launcher.h"

#include <set>

#include "trainyard/common/mutex.h"
#include "trainyard/executors/executor.h"

namespace trainyard::serving {
namespace {

class ExecutorReplicaLauncher : public ReplicaLauncher {
 public:
  explicit ExecutorReplicaLauncher(std::unique_ptr<executors::Executor> executor)
      : executor_(std::move(executor)) {
    executor_->SetExitCallback([this](const executors::AttemptExit& exit) {
      ExitCallback cb;
      {
        MutexLock lock(mu_);
        running_.erase(exit.job_id);
        cb = shut_down_ ? nullptr : callback_;
      }
      cv_.NotifyAll();
      if (cb) cb(exit.job_id, exit.exit_code, exit.stopped);
    });
  }
  ~ExecutorReplicaLauncher() override { Shutdown(std::chrono::milliseconds(0)); }

  void SetExitCallback(ExitCallback cb) override {
    MutexLock lock(mu_);
    callback_ = std::move(cb);
  }

  Result<int> Launch(const ReplicaLaunch& launch) override {
    executors::AttemptLaunch a;
    a.job_id = launch.id;
    a.attempt = 1;
    a.command = launch.command;
    a.env = launch.env;
    a.log_dir = launch.log_dir;
    executors::RankLaunch rank;
    rank.node_name = "local";
    a.ranks.push_back(rank);
    {
      MutexLock lock(mu_);
      if (shut_down_) return Status::Unavailable("the server is stopping");
      running_.insert(launch.id);
    }
    auto launched = executor_->Launch(a);
    if (!launched.ok()) {
      MutexLock lock(mu_);
      running_.erase(launch.id);
      return launched.status();
    }
    return launched->empty() ? 0 : launched->front().pid;
  }

  Status Stop(const std::string& id, std::chrono::milliseconds grace) override {
    return executor_->Stop(id, 1, grace);
  }

  void Shutdown(std::chrono::milliseconds wait) override {
    std::set<std::string> running;
    {
      MutexLock lock(mu_);
      if (shut_down_) return;
      shut_down_ = true;
      running = running_;
    }
    for (const auto& id : running) (void)executor_->Stop(id, 1, wait);
    {
      MutexLock lock(mu_);
      auto deadline = std::chrono::steady_clock::now() + wait + std::chrono::seconds(1);
      while (!running_.empty()) {
        if (!cv_.WaitUntil(mu_, deadline)) break;
      }
    }
    executor_->Shutdown();
  }

 private:
  std::unique_ptr<executors::Executor> executor_;
  Mutex mu_;
  CondVar cv_;
  ExitCallback callback_ TY_GUARDED_BY(mu_);
  std::set<std::string> running_ TY_GUARDED_BY(mu_);
  bool shut_down_ TY_GUARDED_BY(mu_) = false;
};

}  // namespace

std::unique_ptr<ReplicaLauncher> MakeExecutorReplicaLauncher(
    std::unique_ptr<executors::Executor> executor) {
  return std::make_unique<ExecutorReplicaLauncher>(std::move(executor));
}

}  // namespace trainyard::serving
