#include "trainyard/executors/local_executor.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>
#include <utility>

#include "trainyard/common/clock.h"
#include "trainyard/common/log.h"
#include "trainyard/common/mutex.h"
#include "trainyard/common/net.h"
#include "trainyard/common/os_account.h"
#include "trainyard/executors/cgroups.h"
#include "trainyard/executors/job_environment.h"
#include "trainyard/executors/rank_shim.h"

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

namespace trainyard::executors {
namespace {

using MonotonicTime = Clock::MonotonicTime;

// How many ready descriptors one epoll_wait reports; more wait for the next round.
constexpr int kMaxEventsPerWait = 64;
// How soon the watcher retries removing an ended attempt's cgroup whose killed processes
// had not gone yet (the kernel frees them asynchronously).
constexpr std::chrono::milliseconds kCgroupRemoveRetry{100};

std::string ErrnoText(int err) { return std::strerror(err); }

int PidfdOpen(int pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }

std::filesystem::path LogPath(const std::filesystem::path& dir, int rank) {
  return dir / ("rank-" + std::to_string(rank) + ".log");
}
std::filesystem::path ExitPath(const std::filesystem::path& dir, int rank) {
  return dir / ("rank-" + std::to_string(rank) + ".exit");
}

bool Failed(const RankExit& e) { return e.lost || e.exit_code != 0 || e.signal != 0; }

std::string CgroupName(const std::string& job_id, int attempt) {
  return job_id + "-a" + std::to_string(attempt);
}

// A spawned shim: its pid and pidfd, owned until handed to the executor.
struct Spawned {
  int pid = 0;
  int pidfd = -1;
  int64_t start_time = 0;
};

class LocalExecutor final : public Executor {
 public:
  LocalExecutor(LocalExecutorOptions options, Clock& clock)
      : options_(std::move(options)), clock_(clock) {
    if (options_.shim_path.empty()) options_.shim_path = "/proc/self/exe";
    if (options_.cgroups) {
      cgroups_ = std::make_unique<CgroupManager>(DetectCgroupLayout());
      if (cgroups_->Available()) {
        spdlog::info("executor=local per-attempt cgroups: {}", cgroups_->Describe());
      } else {
        spdlog::warn("executor=local per-attempt cgroups: {}", cgroups_->Describe());
      }
    }
    epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
    wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (epoll_fd_ >= 0 && wake_fd_ >= 0) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = kWakeToken;
      if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev) == 0) {
        watcher_ = std::thread([this] { WatchLoop(); });
        return;
      }
    }
    init_error_ = "cannot set up process watching: " + ErrnoText(errno);
  }

  ~LocalExecutor() override {
    Shutdown();
    if (watcher_.joinable()) watcher_.detach();  // only when destroyed by its own callback
    MutexLock lock(mu_);
    for (auto& [key, attempt] : attempts_) {
      for (auto& r : attempt->ranks) {
        if (r.pidfd >= 0) close(r.pidfd);
      }
    }
    if (epoll_fd_ >= 0) close(epoll_fd_);
    if (wake_fd_ >= 0) close(wake_fd_);
    for (const auto& name : cgroups_to_remove_) cgroups_->Remove(name);
  }

  std::string Containment() const override {
    return cgroups_ ? cgroups_->Describe() : "none: per-attempt cgroups are turned off";
  }

  void SetExitCallback(ExitCallback cb) override TY_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    callback_ = std::move(cb);
  }

  Result<std::vector<RankProcess>> Launch(const AttemptLaunch& launch) override TY_EXCLUDES(mu_) {
    TY_RETURN_IF_ERROR(ValidateLaunch(launch));
    std::error_code ec;
    std::filesystem::path working_dir = launch.working_dir.empty()
                                            ? std::filesystem::current_path(ec)
                                            : std::filesystem::absolute(launch.working_dir, ec);
    if (ec || !std::filesystem::is_directory(working_dir, ec)) {
      return Status::InvalidArgument("working_dir '" + launch.working_dir +
                                     "' does not exist or is not a directory on this machine; "
                                     "create it or fix the job's working_dir");
    }
    std::filesystem::create_directories(launch.log_dir, ec);
    if (ec || !std::filesystem::is_directory(launch.log_dir)) {
      return Status::IOError("cannot create log directory " + launch.log_dir.string() + ": " +
                             ec.message());
    }
    std::filesystem::path log_dir = std::filesystem::absolute(launch.log_dir, ec);
    if (access(options_.shim_path.c_str(), X_OK) != 0) {
      return Status::FailedPrecondition("rank shim '" + options_.shim_path +
                                        "' is not an executable file (" + ErrnoText(errno) +
                                        "); set the local executor's shim_path to the trainyard "
                                        "binary");
    }
    TY_ASSIGN_OR_RETURN(JobEnvironmentBasics basics,
                        JobEnvironmentBasicsFor(launch.os_user, launch.tmp_dir));
    int master_port = launch.master_port;
    if (master_port == 0) {
      TY_ASSIGN_OR_RETURN(master_port, PickFreeLocalPort());
    }
    const Key key{launch.job_id, launch.attempt};
    {
      MutexLock lock(mu_);
      if (shutdown_) return Status::FailedPrecondition("the local executor is shut down");
      if (!init_error_.empty()) return Status::Internal(init_error_);
      if (attempts_.count(key) || reserved_.count(key)) {
        return Status::AlreadyExists("attempt " + std::to_string(launch.attempt) + " of job " +
                                     launch.job_id + " is already running");
      }
      reserved_.insert(key);
    }
    // Results of an earlier use of this directory would be mistaken for this attempt's.
    for (const auto& r : launch.ranks) {
      std::filesystem::remove(ExitPath(log_dir, r.rank), ec);
      std::filesystem::remove(ExitPath(log_dir, r.rank).string() + ".tmp", ec);
    }

    const std::string cgroup = CgroupName(launch.job_id, launch.attempt);
    std::vector<std::string> cgroup_dirs;
    if (cgroups_) {
      const int64_t memory =
          launch.cluster.memory_mb_per_node * (int64_t{1} << 20) * std::max(1, launch.nnodes);
      auto dirs = cgroups_->Create(cgroup, memory);
      if (!dirs.ok()) {
        MutexLock lock(mu_);
        reserved_.erase(key);
        return Status::Internal("cannot create the attempt's cgroup: " + dirs.status().message());
      }
      cgroup_dirs = *dirs;
    }
    std::vector<std::string> base_env = BaseEnvironment(launch, basics, master_port);
    std::vector<Spawned> spawned;
    Status failure;
    for (const auto& r : launch.ranks) {
      auto s = SpawnRank(launch, r, base_env, working_dir, log_dir, cgroup_dirs);
      if (!s.ok()) {
        failure = s.status();
        break;
      }
      spawned.push_back(*s);
    }
    if (!failure.ok()) {
      KillAndReap(spawned);
      MutexLock lock(mu_);
      reserved_.erase(key);
      if (!cgroup_dirs.empty()) ReleaseCgroupLocked(cgroup);
      return failure;
    }

    auto attempt = std::make_unique<AttemptState>();
    attempt->job_id = launch.job_id;
    attempt->attempt = launch.attempt;
    attempt->log_dir = log_dir;
    if (!cgroup_dirs.empty()) attempt->cgroup = cgroup;
    std::vector<RankProcess> processes;
    for (size_t i = 0; i < launch.ranks.size(); ++i) {
      RankState rs;
      rs.exit.rank = launch.ranks[i].rank;
      rs.pid = spawned[i].pid;
      rs.pidfd = spawned[i].pidfd;
      attempt->ranks.push_back(rs);
      processes.push_back({launch.ranks[i].rank, spawned[i].pid, spawned[i].start_time});
    }
    MutexLock lock(mu_);
    reserved_.erase(key);
    if (shutdown_) {
      // Shutdown raced with us: leave the processes running, as Shutdown promises.
      for (auto& r : attempt->ranks) close(r.pidfd);
      return processes;
    }
    TY_RETURN_IF_ERROR(RegisterLocked(key, std::move(attempt)));
    spdlog::info("executor=local job={} attempt={} launched ranks={} master_port={}", launch.job_id,
                 launch.attempt, launch.ranks.size(), master_port);
    return processes;
  }

  Status Stop(const std::string& job_id, int attempt, std::chrono::milliseconds grace) override
      TY_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    auto it = attempts_.find(Key{job_id, attempt});
    if (it == attempts_.end()) {
      return Status::NotFound("attempt " + std::to_string(attempt) + " of job " + job_id +
                              " is not running on this machine");
    }
    it->second->stopped = true;
    TerminateLocked(*it->second, grace);
    Wake();
    return Status::Ok();
  }

  Status Adopt(const std::string& job_id, int attempt, const std::filesystem::path& log_dir,
               const std::vector<RankProcess>& ranks) override TY_EXCLUDES(mu_) {
    if (job_id.empty()) return Status::InvalidArgument("job_id must not be empty");
    if (ranks.empty()) return Status::InvalidArgument("ranks must not be empty");
    std::set<int> seen;
    for (const auto& r : ranks) {
      if (r.pid <= 0) {
        return Status::InvalidArgument("rank " + std::to_string(r.rank) + " has no pid");
      }
      if (!seen.insert(r.rank).second) {
        return Status::InvalidArgument("rank " + std::to_string(r.rank) + " is listed twice");
      }
    }
    auto state = std::make_unique<AttemptState>();
    state->job_id = job_id;
    state->attempt = attempt;
    state->log_dir = log_dir;
    if (cgroups_ && cgroups_->Available()) state->cgroup = CgroupName(job_id, attempt);
    for (const auto& r : ranks) {
      RankState rs;
      rs.exit.rank = r.rank;
      rs.pid = r.pid;
      // Open first, then check the start time: if it still matches, the pidfd names the
      // process we launched, not a later one that reused its pid.
      int fd = PidfdOpen(r.pid);
      auto start = ProcessStartTime(r.pid);
      if (fd >= 0 && start.ok() && *start == r.start_time) {
        rs.pidfd = fd;
      } else {
        if (fd >= 0) close(fd);
        rs.exited = true;
        ResolveFromExitFile(log_dir, rs);
      }
      state->ranks.push_back(rs);
    }
    std::sort(state->ranks.begin(), state->ranks.end(),
              [](const RankState& a, const RankState& b) { return a.exit.rank < b.exit.rank; });
    MutexLock lock(mu_);
    auto close_all = [&state] {
      for (auto& r : state->ranks) {
        if (r.pidfd >= 0) close(r.pidfd);
      }
    };
    if (shutdown_) {
      close_all();
      return Status::FailedPrecondition("the local executor is shut down");
    }
    const Key key{job_id, attempt};
    if (attempts_.count(key) || reserved_.count(key)) {
      close_all();
      return Status::AlreadyExists("attempt " + std::to_string(attempt) + " of job " + job_id +
                                   " is already being watched");
    }
    TY_RETURN_IF_ERROR(RegisterLocked(key, std::move(state)));
    AttemptState& registered = *attempts_.at(key);
    for (size_t i = 0; i < registered.ranks.size(); ++i) {
      if (registered.ranks[i].exited) NoteExitLocked(registered, i);
    }
    spdlog::info("executor=local job={} attempt={} adopted ranks={}", job_id, attempt,
                 ranks.size());
    Wake();
    return Status::Ok();
  }

  void Shutdown() override TY_EXCLUDES(mu_, join_mu_) {
    {
      MutexLock lock(mu_);
      shutdown_ = true;
    }
    Wake();
    // Every caller returns only after the watcher (and any callback it runs) has finished.
    MutexLock join_lock(join_mu_);
    if (watcher_.joinable() && watcher_.get_id() != std::this_thread::get_id()) watcher_.join();
  }

 private:
  using Key = std::pair<std::string, int>;
  static constexpr uint64_t kWakeToken = 0;

  struct RankState {
    RankExit exit;
    int pid = 0;
    int pidfd = -1;  // -1 once the exit is handled
    uint64_t token = 0;
    bool exited = false;
    bool sigkilled = false;  // we sent SIGKILL to its group
  };

  struct AttemptState {
    std::string job_id;
    int attempt = 0;
    std::filesystem::path log_dir;
    std::vector<RankState> ranks;                // ordered by rank
    int failed_index = -1;                       // into ranks: the first failure seen
    bool stopped = false;                        // by Stop()
    bool terminating = false;                    // SIGTERM sent (by Stop or the gang)
    std::optional<MonotonicTime> kill_deadline;  // on clock_
    std::string cgroup;                          // the attempt's cgroup name, "" = none
  };

  // Kills what is left in an ended attempt's cgroup and removes it (later, when its
  // processes have not gone yet).
  void ReleaseCgroupLocked(const std::string& name) TY_REQUIRES(mu_) {
    cgroups_->KillAll(name);
    if (!cgroups_->Remove(name)) cgroups_to_remove_.insert(name);
  }

  Status ValidateLaunch(const AttemptLaunch& launch) const {
    if (launch.job_id.empty()) return Status::InvalidArgument("job_id must not be empty");
    if (launch.command.empty()) return Status::InvalidArgument("command must not be empty");
    if (launch.log_dir.empty()) return Status::InvalidArgument("log_dir must not be empty");
    if (launch.nnodes < 1 || launch.local_world_size < 1) {
      return Status::InvalidArgument("nnodes and local_world_size must be at least 1");
    }
    const size_t world = static_cast<size_t>(launch.nnodes) * launch.local_world_size;
    if (launch.ranks.size() != world) {
      return Status::InvalidArgument(
          "the local executor runs every rank on this machine: expected " + std::to_string(world) +
          " ranks (nnodes " + std::to_string(launch.nnodes) + " x local_world_size " +
          std::to_string(launch.local_world_size) + "), got " +
          std::to_string(launch.ranks.size()));
    }
    std::set<int> seen;
    for (const auto& r : launch.ranks) {
      if (r.rank < 0 || static_cast<size_t>(r.rank) >= world || !seen.insert(r.rank).second) {
        return Status::InvalidArgument("rank " + std::to_string(r.rank) +
                                       " is out of range or repeated; ranks must be 0.." +
                                       std::to_string(world - 1) + ", each once");
      }
    }
    if (launch.master_port < 0 || launch.master_port > 65535) {
      return Status::InvalidArgument("master_port must be 0..65535 (got " +
                                     std::to_string(launch.master_port) + ")");
    }
    for (const auto& [name, value] : launch.env) {
      if (name.empty() || name.find('=') != std::string::npos ||
          name.find('\0') != std::string::npos || value.find('\0') != std::string::npos) {
        return Status::InvalidArgument("env name '" + name + "' is not a valid variable name");
      }
    }
    return Status::Ok();
  }

  // The environment shared by all ranks, as NAME=value strings: never the server's own.
  static std::vector<std::string> BaseEnvironment(const AttemptLaunch& launch,
                                                  const JobEnvironmentBasics& basics,
                                                  int master_port) {
    std::map<std::string, std::string> env = JobEnvironment(basics, launch.env);
    const std::string world = std::to_string(launch.nnodes * launch.local_world_size);
    env["WORLD_SIZE"] = world;
    env["ROLE_WORLD_SIZE"] = world;
    env["LOCAL_WORLD_SIZE"] = std::to_string(launch.local_world_size);
    env["GROUP_WORLD_SIZE"] = std::to_string(launch.nnodes);
    env["MASTER_ADDR"] = launch.master_addr;
    env["MASTER_PORT"] = std::to_string(master_port);
    env["TORCHELASTIC_RUN_ID"] = launch.job_id;
    env["TRAINYARD_JOB_ID"] = launch.job_id;
    env["TRAINYARD_ATTEMPT"] = std::to_string(launch.attempt);
    // Rank variables come last (SpawnRank appends them); drop inherited copies.
    for (const char* name : {"RANK", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK", "ROLE_RANK",
                             "CUDA_VISIBLE_DEVICES", "TRAINYARD_RANK"}) {
      env.erase(name);
    }
    std::vector<std::string> out;
    out.reserve(env.size() + 8);
    for (const auto& [name, value] : env) out.push_back(name + "=" + value);
    return out;
  }

  Result<Spawned> SpawnRank(const AttemptLaunch& launch, const RankLaunch& r,
                            const std::vector<std::string>& base_env,
                            const std::filesystem::path& working_dir,
                            const std::filesystem::path& log_dir,
                            const std::vector<std::string>& cgroup_dirs) {
    std::vector<std::string> env = base_env;
    std::string gpus;
    for (int id : r.gpu_ids) gpus += (gpus.empty() ? "" : ",") + std::to_string(id);
    env.push_back("RANK=" + std::to_string(r.rank));
    env.push_back("ROLE_RANK=" + std::to_string(r.rank));
    env.push_back("TRAINYARD_RANK=" + std::to_string(r.rank));
    env.push_back("LOCAL_RANK=" + std::to_string(r.local_rank));
    env.push_back("NODE_RANK=" + std::to_string(r.node_rank));
    env.push_back("GROUP_RANK=" + std::to_string(r.node_rank));
    env.push_back("CUDA_VISIBLE_DEVICES=" + gpus);

    const std::string log_file = LogPath(log_dir, r.rank).string();
    std::vector<std::string> args = {"trainyard", "__rank-shim"};
    for (const auto& dir : cgroup_dirs) {
      args.push_back("--cgroup");
      args.push_back(dir);
    }
    if (!launch.os_user.empty()) {
      args.push_back("--user");
      args.push_back(launch.os_user);
    }
    for (std::string a :
         {log_file, ExitPath(log_dir, r.rank).string(), working_dir.string(), launch.command}) {
      args.push_back(std::move(a));
    }
    // Everything the child needs is built before the spawn; posix_spawn runs only
    // async-signal-safe steps between its clone and exec.
    std::vector<char*> argv, envp;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);

    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr,
                             POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    sigset_t none, defaults;
    sigemptyset(&none);
    posix_spawnattr_setsigmask(&attr, &none);
    sigemptyset(&defaults);
    for (int sig = 1; sig < 32; ++sig) {
      if (sig != SIGKILL && sig != SIGSTOP) sigaddset(&defaults, sig);
    }
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    // The shim reopens the log itself; this catches anything it prints before that.
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_file.c_str(),
                                     O_WRONLY | O_CREAT | O_APPEND, 0600);
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);

    pid_t pid = 0;
    int err =
        posix_spawn(&pid, options_.shim_path.c_str(), &actions, &attr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    if (err != 0) {
      return Status::Internal("cannot start rank " + std::to_string(r.rank) + " (shim " +
                              options_.shim_path + "): " + ErrnoText(err));
    }
    Spawned s;
    s.pid = pid;
    // Our unreaped child cannot be replaced under this pid, so these cannot race.
    s.pidfd = PidfdOpen(pid);
    auto start = ProcessStartTime(pid);
    if (s.pidfd < 0 || !start.ok()) {
      int open_errno = errno;
      std::vector<Spawned> one{s};
      KillAndReap(one);
      return Status::Internal("cannot watch rank " + std::to_string(r.rank) + " (pidfd_open: " +
                              ErrnoText(open_errno) + "); Linux 5.3 or newer is required");
    }
    s.start_time = *start;
    return s;
  }

  // For a failed launch: the ranks already started must not outlive it.
  static void KillAndReap(std::vector<Spawned>& spawned) {
    for (auto& s : spawned) killpg(s.pid, SIGKILL);
    for (auto& s : spawned) {
      while (waitpid(s.pid, nullptr, 0) < 0 && errno == EINTR) {
      }
      if (s.pidfd >= 0) close(s.pidfd);
      s.pidfd = -1;
    }
  }

  Status RegisterLocked(const Key& key, std::unique_ptr<AttemptState> attempt) TY_REQUIRES(mu_) {
    for (auto& r : attempt->ranks) {
      if (r.pidfd < 0) continue;
      r.token = next_token_++;
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = r.token;
      if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, r.pidfd, &ev) != 0) {
        int err = errno;
        for (auto& other : attempt->ranks) {
          if (other.pidfd >= 0) {
            epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, other.pidfd, nullptr);
            tokens_.erase(other.token);
            close(other.pidfd);
          }
        }
        return Status::Internal("cannot watch job " + key.first + ": " + ErrnoText(err));
      }
      tokens_[r.token] = key;
    }
    attempts_[key] = std::move(attempt);
    return Status::Ok();
  }

  void Wake() {
    uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof(one));
  }

  // SIGTERM to every running rank's group; SIGKILL no later than now + grace.
  void TerminateLocked(AttemptState& a, std::chrono::milliseconds grace) TY_REQUIRES(mu_) {
    if (!a.terminating) {
      a.terminating = true;
      for (auto& r : a.ranks) {
        if (!r.exited) killpg(r.pid, SIGTERM);
      }
    }
    MonotonicTime deadline = clock_.MonotonicNow() + grace;
    if (!a.kill_deadline || deadline < *a.kill_deadline) a.kill_deadline = deadline;
  }

  void ResolveFromExitFile(const std::filesystem::path& log_dir, RankState& r) {
    auto file = ReadShimExitFile(ExitPath(log_dir, r.exit.rank));
    if (file.ok()) {
      r.exit.exit_code = file->exit_code;
      r.exit.signal = file->signal;
      r.exit.lost = false;
      return;
    }
    if (!file.status().IsNotFound()) {
      spdlog::warn("executor=local unreadable exit file: {}", file.status().message());
    }
    if (r.sigkilled) {
      r.exit.signal = SIGKILL;
      r.exit.exit_code = 128 + SIGKILL;
    } else {
      r.exit.lost = true;
    }
  }

  // The pidfd of rank `index` became readable: its shim has exited.
  void HandleShimExitLocked(AttemptState& a, size_t index) TY_REQUIRES(mu_) {
    RankState& r = a.ranks[index];
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, r.pidfd, nullptr);
    tokens_.erase(r.token);
    siginfo_t info{};
    bool child = waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(r.pidfd), &info,
                        WEXITED | WNOHANG | WNOWAIT) == 0 &&
                 info.si_pid != 0;
    if (child) {
      // The zombie still holds the pid, so the group id cannot name anyone else yet.
      killpg(r.pid, SIGKILL);
      waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(r.pidfd), &info, WEXITED | WNOHANG);
    }
    close(r.pidfd);
    r.pidfd = -1;
    r.exited = true;
    // The exit file carries the workload's status; a child's wait status is the shim's,
    // which matches it except when the shim itself was killed (SIGKILL of the group).
    std::error_code exists_ec;
    if (!child || std::filesystem::exists(ExitPath(a.log_dir, r.exit.rank), exists_ec)) {
      ResolveFromExitFile(a.log_dir, r);
    } else if (info.si_code == CLD_EXITED) {
      r.exit.exit_code = info.si_status;
    } else {
      r.exit.signal = info.si_status;
      r.exit.exit_code = 128 + info.si_status;
    }
    NoteExitLocked(a, index);
  }

  void NoteExitLocked(AttemptState& a, size_t index) TY_REQUIRES(mu_) {
    if (a.failed_index < 0 && Failed(a.ranks[index].exit)) {
      a.failed_index = static_cast<int>(index);
      bool others_running =
          std::any_of(a.ranks.begin(), a.ranks.end(), [](const RankState& r) { return !r.exited; });
      if (others_running) {
        spdlog::info("executor=local job={} attempt={} rank {} failed, stopping the others",
                     a.job_id, a.attempt, a.ranks[index].exit.rank);
        TerminateLocked(a, options_.gang_stop_grace);
      }
    }
  }

  static AttemptExit Summarize(const AttemptState& a) {
    AttemptExit e;
    e.job_id = a.job_id;
    e.attempt = a.attempt;
    e.stopped = a.stopped;
    for (const auto& r : a.ranks) e.ranks.push_back(r.exit);
    e.success = a.failed_index < 0;
    if (e.success) {
      e.exit_code = 0;
    } else {
      const RankExit& f = a.ranks[a.failed_index].exit;
      e.failed_rank = f.rank;
      e.exit_code = f.exit_code;
      e.signal = f.signal;
      e.lost = f.lost;
    }
    return e;
  }

  void WatchLoop() TY_EXCLUDES(mu_) {
    std::vector<epoll_event> events(kMaxEventsPerWait);
    for (;;) {
      int timeout_ms = -1;
      {
        MutexLock lock(mu_);
        if (shutdown_) return;
        auto now = clock_.MonotonicNow();
        for (const auto& [key, a] : attempts_) {
          if (!a->kill_deadline) continue;
          auto wait = std::chrono::ceil<std::chrono::milliseconds>(*a->kill_deadline - now);
          int ms = static_cast<int>(std::max<int64_t>(0, wait.count()));
          if (timeout_ms < 0 || ms < timeout_ms) timeout_ms = ms;
        }
        // Cgroups whose killed processes had not gone yet: try again soon.
        for (auto it = cgroups_to_remove_.begin(); it != cgroups_to_remove_.end();) {
          it = cgroups_->Remove(*it) ? cgroups_to_remove_.erase(it) : std::next(it);
        }
        const int retry_ms = static_cast<int>(kCgroupRemoveRetry.count());
        if (!cgroups_to_remove_.empty() && (timeout_ms < 0 || timeout_ms > retry_ms)) {
          timeout_ms = retry_ms;
        }
      }
      int n = epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), timeout_ms);
      if (n < 0 && errno != EINTR) {
        spdlog::error("executor=local epoll_wait failed: {}", ErrnoText(errno));
        return;
      }
      std::vector<AttemptExit> finished;
      ExitCallback callback;
      {
        MutexLock lock(mu_);
        if (shutdown_) return;
        for (int i = 0; i < n; ++i) {
          uint64_t token = events[i].data.u64;
          if (token == kWakeToken) {
            uint64_t count;
            [[maybe_unused]] ssize_t r = read(wake_fd_, &count, sizeof(count));
            continue;
          }
          auto t = tokens_.find(token);
          if (t == tokens_.end()) continue;
          AttemptState& a = *attempts_.at(t->second);
          for (size_t j = 0; j < a.ranks.size(); ++j) {
            if (a.ranks[j].token == token && a.ranks[j].pidfd >= 0) {
              HandleShimExitLocked(a, j);
              break;
            }
          }
        }
        auto now = clock_.MonotonicNow();
        for (auto it = attempts_.begin(); it != attempts_.end();) {
          AttemptState& a = *it->second;
          if (a.kill_deadline && *a.kill_deadline <= now) {
            a.kill_deadline.reset();
            for (auto& r : a.ranks) {
              if (r.exited) continue;
              spdlog::warn(
                  "executor=local job={} attempt={} rank {} outlived its grace period, "
                  "sending SIGKILL",
                  a.job_id, a.attempt, r.exit.rank);
              r.sigkilled = true;
              killpg(r.pid, SIGKILL);
            }
            // Processes that left their process group (setsid) are still in the cgroup.
            if (!a.cgroup.empty()) cgroups_->KillAll(a.cgroup);
          }
          bool done = std::all_of(a.ranks.begin(), a.ranks.end(),
                                  [](const RankState& r) { return r.exited; });
          if (done) {
            // Nothing of the attempt outlives it, whatever left the shims' process groups.
            if (!a.cgroup.empty()) ReleaseCgroupLocked(a.cgroup);
            finished.push_back(Summarize(a));
            it = attempts_.erase(it);
          } else {
            ++it;
          }
        }
        callback = callback_;
      }
      for (const auto& e : finished) {
        spdlog::info(
            "executor=local job={} attempt={} ended success={} failed_rank={} "
            "exit_code={} signal={} lost={}",
            e.job_id, e.attempt, e.success, e.failed_rank, e.exit_code, e.signal, e.lost);
        if (callback) callback(e);
      }
    }
  }

  // Set at construction, then only read.
  LocalExecutorOptions options_;
  Clock& clock_;  // kill deadlines (Stop's grace, the gang's) are on its monotonic time
  std::string init_error_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  std::unique_ptr<CgroupManager> cgroups_;  // null = no cgroups; CgroupManager is thread-safe

  Mutex mu_;
  bool shutdown_ TY_GUARDED_BY(mu_) = false;
  ExitCallback callback_ TY_GUARDED_BY(mu_);
  std::map<Key, std::unique_ptr<AttemptState>> attempts_ TY_GUARDED_BY(mu_);
  std::set<Key> reserved_ TY_GUARDED_BY(mu_);  // attempts being launched
  // Ended attempts' cgroups not yet removable.
  std::set<std::string> cgroups_to_remove_ TY_GUARDED_BY(mu_);
  // epoll token → the attempt of that rank's pidfd.
  std::map<uint64_t, Key> tokens_ TY_GUARDED_BY(mu_);
  uint64_t next_token_ TY_GUARDED_BY(mu_) = kWakeToken + 1;

  Mutex join_mu_;                                // serializes joining watcher_
  std::thread watcher_ TY_GUARDED_BY(join_mu_);  // started last, after every member it uses
};

}  // namespace

Result<int64_t> ProcessStartTime(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!in || !std::getline(in, stat)) {
    return Status::NotFound("process " + std::to_string(pid) + " does not exist");
  }
  // The command name (field 2) may contain spaces and parentheses: fields resume after
  // the last ')'. Field 3 is the first after it, so field 22 is the 20th.
  size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return Status::Internal("unexpected /proc stat format");
  std::istringstream fields(stat.substr(paren + 1));
  std::string field;
  for (int i = 3; i <= 22; ++i) {
    if (!(fields >> field)) return Status::Internal("unexpected /proc stat format");
  }
  try {
    return static_cast<int64_t>(std::stoll(field));
  } catch (const std::exception&) {
    return Status::Internal("unexpected /proc stat start time '" + field + "'");
  }
}

std::unique_ptr<Executor> MakeLocalExecutor(LocalExecutorOptions options, Clock& clock) {
  return std::make_unique<LocalExecutor>(std::move(options), clock);
}

}  // namespace trainyard::executors
