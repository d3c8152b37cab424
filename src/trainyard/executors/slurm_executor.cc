#include "trainyard/executors/slurm_executor.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
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
#include "trainyard/common/os_account.h"
#include "trainyard/common/paths.h"
#include "trainyard/common/regex.h"
#include "trainyard/common/strings.h"
#include "trainyard/executors/job_environment.h"
#include "trainyard/executors/rank_shim.h"

extern char** environ;

namespace trainyard::executors {
namespace {

namespace fs = std::filesystem;
using MonotonicTime = Clock::MonotonicTime;

// How long a Slurm command (sbatch, squeue, scontrol, scancel, sinfo) may take before it is
// killed and the controller taken for unreachable.
constexpr auto kCommandTimeout = std::chrono::seconds(60);
// How much of a file the job controls (its batch log, rank node and exit records) is read.
constexpr size_t kJobFileReadLimit = size_t{1} << 16;
// The longest lead time Slurm's --signal=SIG@TIME accepts, in seconds.
constexpr int64_t kMaxSignalLeadSeconds = 65535;
// Without a given port, the batch script derives MASTER_PORT from the Slurm job id, so that
// every node computes the same one without talking: base + id % range.
constexpr int kDerivedPortBase = 20000;
constexpr int kDerivedPortRange = 20000;

std::string ShellQuote(std::string_view s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

bool IsEnvName(std::string_view s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

std::string Join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out += sep;
    out += parts[i];
  }
  return out;
}

struct CommandOutput {
  int exit_code = -1;  // -1 when killed by a signal
  std::string out;
  std::string err;
};

// How a Slurm command runs: as the server (with its environment plus extra_env), or for a job
// (as its OS account when set, with only `job_env`: sbatch hands its environment to the job).
struct CommandIdentity {
  const OsAccount* account = nullptr;                           // nullptr = the server's own
  const std::map<std::string, std::string>* job_env = nullptr;  // replaces our environment
};

// argv[0] as execve needs it: looked up in our PATH unless it contains '/'.
std::string ResolveProgram(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = getenv("PATH");
  for (const auto& dir : SplitString(path ? path : kDefaultJobPath, ':')) {
    std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return name;
}

// Runs argv (looked up in PATH unless it contains '/') with `extra_env` added to ours (or, for
// a job, as `who` says), and collects its output. Not a shell: arguments are passed as they are.
// The command's timeout runs on `clock`'s monotonic time.
Result<CommandOutput> RunCommand(const std::vector<std::string>& argv,
                                 const std::map<std::string, std::string>& extra_env, Clock& clock,
                                 CommandIdentity who = {}) {
  std::vector<std::string> env_strings;
  if (who.job_env == nullptr) {
    for (char** e = environ; *e; ++e) {
      std::string_view kv(*e);
      auto eq = kv.find('=');
      if (eq != std::string_view::npos && extra_env.count(std::string(kv.substr(0, eq)))) continue;
      env_strings.emplace_back(kv);
    }
  } else {
    for (const auto& [k, v] : *who.job_env) {
      if (!extra_env.count(k)) env_strings.push_back(k + "=" + v);
    }
  }
  for (const auto& [k, v] : extra_env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = argv;
  std::vector<char*> cargv;
  for (auto& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);

  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) return Status::IOError(std::strerror(errno));
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    close(out_pipe[0]);
    close(out_pipe[1]);
    return Status::IOError(std::strerror(errno));
  }
  pid_t pid = 0;
  int rc = 0;
  if (who.account == nullptr) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, out_pipe[1], 1);
    posix_spawn_file_actions_adddup2(&fa, err_pipe[1], 2);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &all);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    rc = posix_spawnp(&pid, cargv[0], &fa, &attr, cargv.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
  } else {
    // posix_spawn cannot change the user: fork, drop privileges, exec. Everything the child
    // uses is prepared here; between fork and exec it makes only system calls.
    const OsAccount& account = *who.account;
    const std::string program = ResolveProgram(argv[0]);
    pid = fork();
    if (pid == 0) {
      int null_fd = open("/dev/null", O_RDONLY);
      if (null_fd >= 0) dup2(null_fd, 0);
      dup2(out_pipe[1], 1);
      dup2(err_pipe[1], 2);
      sigset_t none;
      sigemptyset(&none);
      for (int sig = 1; sig < NSIG; ++sig) signal(sig, SIG_DFL);
      sigprocmask(SIG_SETMASK, &none, nullptr);
      if (setgroups(account.groups.size(), account.groups.data()) != 0 ||
          setgid(account.gid) != 0 || setuid(account.uid) != 0 || getuid() == 0 ||
          chdir("/") != 0) {
        static const char kMsg[] = "trainyard: cannot switch to the job's OS account\n";
        [[maybe_unused]] ssize_t n = write(2, kMsg, sizeof(kMsg) - 1);
        _exit(126);
      }
      execve(program.c_str(), cargv.data(), envp.data());
      _exit(127);
    }
    rc = pid < 0 ? errno : 0;
  }
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (rc != 0) {
    close(out_pipe[0]);
    close(err_pipe[0]);
    return Status::FailedPrecondition("cannot run " + argv[0] + ": " + std::strerror(rc) +
                                      " (install the Slurm client commands or set the pool's "
                                      "bin_dir)");
  }
  CommandOutput result;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&result.out, &result.err};
  int open_fds = 2;
  const MonotonicTime deadline = clock.MonotonicNow() + kCommandTimeout;
  bool timed_out = false;
  while (open_fds > 0) {
    auto left =
        std::chrono::ceil<std::chrono::milliseconds>(deadline - clock.MonotonicNow()).count();
    if (left <= 0) {
      timed_out = true;
      kill(pid, SIGKILL);
      break;
    }
    int n = poll(fds, 2, static_cast<int>(left));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[4096];
      ssize_t got = read(fds[i].fd, buf, sizeof(buf));
      if (got > 0) {
        sinks[i]->append(buf, static_cast<size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (auto& f : fds) {
    if (f.fd >= 0) close(f.fd);
  }
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    return Status::Unavailable(argv[0] + " did not answer within " +
                               std::to_string(kCommandTimeout.count()) +
                               "s: is slurmctld reachable?");
  }
  result.exit_code = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1;
  return result;
}

// A file the job may control (its logs, node and exit records).
std::string ReadSmallFile(const fs::path& p) {
  return ReadFileTailSafely(p.string(), kJobFileReadLimit);
}

Status WriteFileAtomically(const fs::path& p, const std::string& text, bool executable) {
  fs::path tmp = p;
  tmp += ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    out.flush();
    if (!out) return Status::IOError("cannot write " + tmp.string());
  }
  if (executable) fs::permissions(tmp, fs::perms::owner_exec, fs::perm_options::add);
  std::error_code ec;
  fs::rename(tmp, p, ec);
  if (ec) return Status::IOError("cannot rename " + tmp.string() + ": " + ec.message());
  return Status::Ok();
}

// Nodes that srun reported failing ("srun: error: Node failure on X") in a batch log.
std::vector<std::string> NodeFailuresInLog(const fs::path& log) {
  std::string text = ReadSmallFile(log);
  if (text.size() > kJobFileReadLimit) text = text.substr(text.size() - kJobFileReadLimit);
  std::vector<std::string> nodes;
  // The log is the job's output: a bounded matcher, never std::regex (its recursion overflows
  // the stack on long runs of matching characters).
  static const auto kNodeFailure =
      BoundedRegex::Compile(R"(Node failure on ([A-Za-z0-9._\-\[\],]{1,1024}))", "node failure")
          .value();
  kNodeFailure->ForEachMatch(text, [&](const std::vector<std::string_view>& groups) {
    if (groups.size() > 1) nodes.emplace_back(groups[1]);
  });
  return nodes;
}

bool Failed(const RankExit& e) { return e.lost || e.exit_code != 0 || e.signal != 0; }

// The rank wrapper, run by srun as every task: environment, node record, the workload in the
// foreground (it gets Slurm's signals itself; traps are reset to default across exec), and the
// exit file. The shell survives TERM/INT/HUP so it can record the result.
//
// Leftovers: the workload runs with a mark in its environment (TY_RANK_MARK, which its
// processes inherit and the wrapper itself does not have). When it ends, the wrapper kills
// every process of its account that still carries the mark: one that left the step with
// `setsid` escapes Slurm's proctrack/linuxproc (proctrack/cgroup catches it anyway), but not
// this. Until none is left, or 20 rounds (an escapee that forks as fast as it is killed).
// The exit file is written first: the sweep reads every /proc entry of the node, which can
// outlast srun's KillWait on a busy node, and the SIGKILL that ends it must not lose the
// workload's result.
constexpr const char* kRankWrapper = R"SH(r=$SLURM_PROCID
export RANK=$r ROLE_RANK=$r TRAINYARD_RANK=$r LOCAL_RANK=$SLURM_LOCALID
export NODE_RANK=$SLURM_NODEID GROUP_RANK=$SLURM_NODEID
if [ -n "${TY_NO_GPUS:-}" ]; then export CUDA_VISIBLE_DEVICES=; fi
unset TY_NO_GPUS
d=$TY_RANK_LOG_DIR
printf '%s\n' "${SLURMD_NODENAME:-$(hostname)}" > "$d/rank-$r.node"
trap : TERM INT HUP
mark="$SLURM_JOB_ID.$r"
TY_RANK_MARK=$mark /bin/sh -c "$TY_RANK_COMMAND" < /dev/null
s=$?
sig=0
if [ "$s" -gt 128 ] && [ "$s" -le 192 ]; then sig=$((s - 128)); fi
printf '{"exit_code":%d,"signal":%d}\n' "$s" "$sig" > "$d/rank-$r.exit.tmp" &&
  mv -f "$d/rank-$r.exit.tmp" "$d/rank-$r.exit"
round=0
while [ "$round" -lt 20 ]; do
  found=0
  for p in /proc/[0-9]*; do
    if tr '\0' '\n' < "$p/environ" 2>/dev/null | grep -qx "TY_RANK_MARK=$mark"; then
      kill -KILL "${p#/proc/}" 2>/dev/null && found=1
    fi
  done
  [ "$found" -eq 0 ] && break
  round=$((round + 1))
done
exit "$s"
)SH";

fs::path RankFile(const fs::path& dir, int rank, const char* suffix) {
  return dir / ("rank-" + std::to_string(rank) + suffix);
}

struct Watched {
  std::string job_id;
  int attempt = 0;
  std::string os_user;  // the account that submitted it ("" = the server's)
  int64_t slurm_id = 0;
  fs::path log_dir;
  int nranks = 0;
  bool stopped = false;
  std::optional<MonotonicTime> cancel_at;  // the hard scancel after a Stop's grace (on clock_)
  int node_fail_polls = 0;                 // polls spent looking for the node a NODE_FAIL names
  ClusterJobStatus cluster_status;         // squeue's state and reason at the last poll
};

// How many polls a job that ended NODE_FAIL waits for srun's "Node failure on X" to name the
// node, before it is reported without one.
constexpr int kNodeFailPolls = 5;

class SlurmExecutor final : public Executor {
 public:
  SlurmExecutor(SlurmExecutorOptions options, Clock& clock)
      : options_(std::move(options)), clock_(clock) {
    watcher_ = std::thread([this] { WatchLoop(); });
  }

  ~SlurmExecutor() override {
    Shutdown();
    if (watcher_.joinable()) watcher_.detach();  // only when destroyed by its own callback
  }

  void SetExitCallback(ExitCallback cb) override TY_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    callback_ = std::move(cb);
  }

  Result<std::vector<RankProcess>> Launch(const AttemptLaunch& launch) override TY_EXCLUDES(mu_) {
    TY_RETURN_IF_ERROR(Validate(launch));
    {
      MutexLock lock(mu_);
      if (shutdown_) return Status::FailedPrecondition("the Slurm executor is shut down");
      if (watched_.count(Key(launch.job_id, launch.attempt))) {
        return Status::AlreadyExists("attempt " + std::to_string(launch.attempt) + " of job " +
                                     launch.job_id + " is already running");
      }
    }
    std::error_code ec;
    fs::create_directories(launch.log_dir, ec);
    if (ec) {
      return Status::IOError("cannot create log_dir " + launch.log_dir.string() + ": " +
                             ec.message());
    }
    // Multi-user mode: the job is submitted as its account, so Slurm runs it as that uid.
    std::optional<OsAccount> account;
    TY_ASSIGN_OR_RETURN(JobEnvironmentBasics basics,
                        JobEnvironmentBasicsFor(launch.os_user, launch.tmp_dir, &account));
    // sbatch hands its own environment to the job: only the basics, never the server's (the
    // job's variables are exported by the batch script).
    std::map<std::string, std::string> sbatch_env = JobEnvironment(basics, {});
    if (!options_.pool.bin_dir.empty()) sbatch_env["PATH"] += ":" + options_.pool.bin_dir;
    fs::path script = launch.log_dir / "batch.sh";
    TY_RETURN_IF_ERROR(WriteFileAtomically(script, BatchScript(launch), true));
    if (account && chown(script.c_str(), account->uid, account->gid) != 0) {
      return Status::IOError("cannot give " + script.string() + " to " + account->name + ": " +
                             std::strerror(errno));
    }
    TY_ASSIGN_OR_RETURN(auto args, SbatchArguments(options_.pool, launch, script.string()));
    args.insert(args.begin(), Bin("sbatch"));
    TY_ASSIGN_OR_RETURN(auto out, RunCommand(args, options_.pool.client_env, clock_,
                                             {account ? &*account : nullptr, &sbatch_env}));
    if (out.exit_code != 0) {
      return Status::FailedPrecondition("sbatch refused job " + launch.job_id + " attempt " +
                                        std::to_string(launch.attempt) + ": " +
                                        Trim(out.err + out.out));
    }
    auto id = ParseInt64(Trim(SplitString(Trim(out.out), ';').front()));
    if (!id || *id <= 0) {
      return Status::Internal("sbatch printed no job id: " + Abbreviate(out.out, 200));
    }
    TY_RETURN_IF_ERROR(
        WriteFileAtomically(launch.log_dir / "slurm-job-id", std::to_string(*id) + "\n", false));
    Watched w;
    w.job_id = launch.job_id;
    w.attempt = launch.attempt;
    w.os_user = launch.os_user;
    w.slurm_id = *id;
    w.log_dir = launch.log_dir;
    w.nranks = static_cast<int>(launch.ranks.size());
    {
      MutexLock lock(mu_);
      watched_[Key(w.job_id, w.attempt)] = w;
      poke_ = true;
    }
    cv_.NotifyAll();
    std::vector<RankProcess> out_ranks;
    for (const auto& r : launch.ranks) out_ranks.push_back({r.rank, static_cast<int>(*id), 0});
    std::sort(out_ranks.begin(), out_ranks.end(),
              [](const RankProcess& a, const RankProcess& b) { return a.rank < b.rank; });
    return out_ranks;
  }

  Status Stop(const std::string& job_id, int attempt, std::chrono::milliseconds grace) override
      TY_EXCLUDES(mu_) {
    int64_t id = 0;
    std::string os_user;
    {
      MutexLock lock(mu_);
      auto it = watched_.find(Key(job_id, attempt));
      if (it == watched_.end()) {
        return Status::NotFound("attempt " + std::to_string(attempt) + " of job " + job_id +
                                " is not running on this Slurm executor");
      }
      it->second.stopped = true;
      it->second.cancel_at = clock_.MonotonicNow() + grace;
      id = it->second.slurm_id;
      os_user = it->second.os_user;
      poke_ = true;
    }
    // TERM reaches the ranks of running steps; a pending job has none and is cancelled now.
    auto out = Scancel(os_user, {"--signal=TERM", std::to_string(id)});
    if (!out.ok() || out->exit_code != 0 || grace.count() == 0) {
      Scancel(os_user, {std::to_string(id)}).status().ok();
    }
    cv_.NotifyAll();
    return Status::Ok();
  }

  Status Adopt(const std::string& job_id, int attempt, const fs::path& log_dir,
               const std::vector<RankProcess>& ranks) override TY_EXCLUDES(mu_) {
    if (ranks.empty()) return Status::InvalidArgument("Adopt: no ranks given for job " + job_id);
    int64_t id = ranks.front().pid;
    if (id <= 0) {
      auto parsed = ParseInt64(Trim(ReadSmallFile(log_dir / "slurm-job-id")));
      if (!parsed) {
        return Status::NotFound("no Slurm job id for job " + job_id + " attempt " +
                                std::to_string(attempt) + " (neither in the rank records nor in " +
                                (log_dir / "slurm-job-id").string() + ")");
      }
      id = *parsed;
    }
    Watched w;
    w.job_id = job_id;
    w.attempt = attempt;
    w.slurm_id = id;
    w.log_dir = log_dir;
    w.nranks = static_cast<int>(ranks.size());
    // Who submitted it, so that a cancel after the restart runs scancel as that account too:
    // Launch hands the batch script to the job's account, so its owner names it.
    struct stat script {};
    if (::lstat((log_dir / "batch.sh").c_str(), &script) == 0 && S_ISREG(script.st_mode) &&
        script.st_uid != ::geteuid() && script.st_uid != 0) {
      if (auto account = OsAccountOfUid(script.st_uid); account.ok()) w.os_user = account->name;
    }
    {
      MutexLock lock(mu_);
      if (shutdown_) return Status::FailedPrecondition("the Slurm executor is shut down");
      if (watched_.count(Key(job_id, attempt))) {
        return Status::AlreadyExists("attempt " + std::to_string(attempt) + " of job " + job_id +
                                     " is already watched");
      }
      watched_[Key(job_id, attempt)] = w;
      poke_ = true;
    }
    cv_.NotifyAll();
    return Status::Ok();
  }

  void Shutdown() override TY_EXCLUDES(mu_) {
    {
      MutexLock lock(mu_);
      if (shutdown_) return;
      shutdown_ = true;
      watched_.clear();
    }
    cv_.NotifyAll();
    if (watcher_.joinable() && std::this_thread::get_id() != watcher_.get_id()) watcher_.join();
  }

 private:
  static std::string Key(const std::string& job_id, int attempt) {
    return job_id + "#" + std::to_string(attempt);
  }

  // scancel as the job's account where known (multi-user mode), as Slurm expects of a user
  // cancelling their own job; as the server otherwise.
  Result<CommandOutput> Scancel(const std::string& os_user, std::vector<std::string> args) {
    args.insert(args.begin(), Bin("scancel"));
    if (os_user.empty()) return RunCommand(args, options_.pool.client_env, clock_);
    auto account = LookupOsAccount(os_user);
    if (!account.ok() || account->uid == 0) {
      // The account vanished: the server (root) still may cancel the job.
      return RunCommand(args, options_.pool.client_env, clock_);
    }
    std::map<std::string, std::string> env =
        JobEnvironment({account->name, account->home, "", ""}, {});
    return RunCommand(args, options_.pool.client_env, clock_, {&*account, &env});
  }

  std::string Bin(const std::string& name) const {
    return options_.pool.bin_dir.empty() ? name : (fs::path(options_.pool.bin_dir) / name).string();
  }

  static Status Validate(const AttemptLaunch& launch) {
    if (launch.job_id.empty()) return Status::InvalidArgument("launch.job_id is empty");
    if (launch.log_dir.empty()) return Status::InvalidArgument("launch.log_dir is empty");
    if (launch.nnodes < 1 || launch.local_world_size < 1) {
      return Status::InvalidArgument("launch.nnodes and launch.local_world_size must be >= 1");
    }
    if (static_cast<int>(launch.ranks.size()) != launch.nnodes * launch.local_world_size) {
      return Status::InvalidArgument("launch.ranks must have nnodes*local_world_size entries (" +
                                     std::to_string(launch.nnodes * launch.local_world_size) +
                                     "), got " + std::to_string(launch.ranks.size()));
    }
    for (const auto& [k, v] : launch.env) {
      if (!IsEnvName(k)) {
        return Status::InvalidArgument("launch.env: \"" + Abbreviate(k) +
                                       "\" is not a valid environment variable name");
      }
    }
    return Status::Ok();
  }

  // Squeue's view of every watched job: id -> (state, reason). Jobs it does not list are absent.
  std::map<int64_t, std::pair<std::string, std::string>> PollStates(
      const std::vector<int64_t>& ids) {
    std::map<int64_t, std::pair<std::string, std::string>> states;
    std::vector<std::string> id_strings;
    for (auto id : ids) id_strings.push_back(std::to_string(id));
    auto out = RunCommand({Bin("squeue"), "--noheader", "--states=all", "--format=%i|%T|%r",
                           "--jobs=" + Join(id_strings, ",")},
                          options_.pool.client_env, clock_);
    if (out.ok() && out->exit_code == 0) {
      for (const auto& line : SplitString(out->out, '\n')) {
        auto parts = SplitString(Trim(line), '|');
        if (parts.size() != 3) continue;
        if (auto id = ParseInt64(parts[0])) states[*id] = {parts[1], parts[2]};
      }
      return states;
    }
    // squeue fails the whole request when one id is unknown; ask about each job instead.
    for (auto id : ids) {
      auto job = QueryJob(id);
      if (job.ok() && job->has_value()) states[id] = {(*job)->state, (*job)->reason};
    }
    return states;
  }

  ClusterJobStatus ClusterStatus(const std::string& job_id, int attempt) override TY_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    auto it = watched_.find(Key(job_id, attempt));
    return it == watched_.end() ? ClusterJobStatus{} : it->second.cluster_status;
  }

  // nullopt when the controller does not know the job (any more).
  Result<std::optional<SlurmJobState>> QueryJob(int64_t id) {
    TY_ASSIGN_OR_RETURN(auto out,
                        RunCommand({Bin("scontrol"), "show", "job", "-o", std::to_string(id)},
                                   options_.pool.client_env, clock_));
    if (out.exit_code != 0) {
      if (out.err.find("Invalid job id") != std::string::npos) {
        return std::optional<SlurmJobState>();
      }
      return Status::Unavailable("scontrol show job " + std::to_string(id) + ": " + Trim(out.err));
    }
    TY_ASSIGN_OR_RETURN(auto job, ParseSlurmJob(out.out));
    return std::optional<SlurmJobState>(job);
  }

  // Which of `nodes` (names or hostlist expressions) are DOWN, DRAINED or FAILing now.
  std::vector<std::string> FailedNodes(const std::vector<std::string>& nodes) {
    std::vector<std::string> failed;
    std::vector<std::string> wanted;
    for (const auto& n : nodes) {
      if (!n.empty() && n != "(null)") wanted.push_back(n);
    }
    if (wanted.empty()) return failed;
    auto out = RunCommand({Bin("scontrol"), "show", "node", "-o", Join(wanted, ",")},
                          options_.pool.client_env, clock_);
    if (!out.ok() || out->exit_code != 0) return failed;
    for (const auto& line : SplitString(out->out, '\n')) {
      auto rec = ParseScontrolLine(line);
      const std::string& state = rec["State"];
      if (state.find("DOWN") != std::string::npos || state.find("DRAIN") != std::string::npos ||
          state.find("FAIL") != std::string::npos ||
          state.find("NOT_RESPONDING") != std::string::npos) {
        failed.push_back(rec["NodeName"]);
      }
    }
    return failed;
  }

  AttemptExit Resolve(const Watched& w, const std::optional<SlurmJobState>& job) {
    SlurmJobState state;
    if (job) {
      state = *job;
    } else {
      state.state = "UNKNOWN";
      state.reason = "forgotten by slurmctld";
    }
    std::vector<RankEvidence> ev(static_cast<size_t>(w.nranks));
    for (int r = 0; r < w.nranks; ++r) {
      auto& e = ev[static_cast<size_t>(r)];
      auto ex = ReadShimExitFile(RankFile(w.log_dir, r, ".exit"));
      if (ex.ok()) {
        e.exit = RankExit{r, ex->exit_code, ex->signal, false, ""};
        struct stat st {};
        if (stat(RankFile(w.log_dir, r, ".exit").c_str(), &st) == 0) {
          e.exit_time_ns =
              static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
        }
      }
      e.node = Trim(ReadSmallFile(RankFile(w.log_dir, r, ".node")));
    }
    bool all_exited = std::all_of(ev.begin(), ev.end(), [](const RankEvidence& e) {
      return e.exit.has_value() && !Failed(*e.exit);
    });
    std::vector<std::string> failed_nodes;
    if (state.state == "NODE_FAIL" || !all_exited) {
      // While a NODE_FAIL job completes, its NodeList may already omit the failed node; the
      // ranks' own records name it.
      std::vector<std::string> nodes = {state.node_list};
      for (const auto& e : ev) nodes.push_back(e.node);
      std::sort(nodes.begin(), nodes.end());
      nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
      failed_nodes = FailedNodes(nodes);
      // A node can be back (ReturnToService=2 re-admits a DOWN node as soon as its slurmd
      // registers) before we look; srun's "Node failure on X" in the batch log remains.
      for (auto& n : NodeFailuresInLog(w.log_dir / "batch.log")) failed_nodes.push_back(n);
      std::sort(failed_nodes.begin(), failed_nodes.end());
      failed_nodes.erase(std::unique(failed_nodes.begin(), failed_nodes.end()), failed_nodes.end());
    }
    return ResolveAttemptExit(w.job_id, w.attempt, state, ev, failed_nodes, w.stopped);
  }

  void WatchLoop() TY_EXCLUDES(mu_) {
    ReleasableMutexLock lock(mu_);
    while (!shutdown_) {
      MonotonicTime wake = clock_.MonotonicNow() + options_.poll_interval;
      for (const auto& [k, w] : watched_) {
        if (w.cancel_at && *w.cancel_at < wake) wake = *w.cancel_at;
      }
      // Until the next poll or cancel is due by clock_, or there is news.
      while (!shutdown_ && !poke_) {
        const auto left = wake - clock_.MonotonicNow();
        if (left <= MonotonicTime::duration::zero()) break;
        cv_.WaitFor(mu_, left);
      }
      poke_ = false;
      if (shutdown_) break;
      const MonotonicTime now = clock_.MonotonicNow();
      std::vector<std::pair<int64_t, std::string>> to_cancel;  // (job id, account)
      std::vector<Watched> snapshot;
      for (auto& [k, w] : watched_) {
        if (w.cancel_at && *w.cancel_at <= now) {
          to_cancel.emplace_back(w.slurm_id, w.os_user);
          w.cancel_at.reset();
        }
        snapshot.push_back(w);
      }
      if (snapshot.empty()) continue;
      lock.Unlock();
      for (const auto& [id, os_user] : to_cancel) {
        Scancel(os_user, {std::to_string(id)}).status().ok();
      }
      std::vector<int64_t> ids;
      for (const auto& w : snapshot) ids.push_back(w.slurm_id);
      auto states = PollStates(ids);
      std::vector<AttemptExit> exits;
      for (const auto& w : snapshot) {
        auto it = states.find(w.slurm_id);
        std::optional<SlurmJobState> job;
        if (it != states.end()) {
          SlurmJobState s;
          s.state = it->second.first;
          {
            MutexLock relock(mu_);
            auto cur = watched_.find(Key(w.job_id, w.attempt));
            if (cur != watched_.end()) {
              cur->second.cluster_status =
                  SlurmClusterStatus(w.slurm_id, s.state, it->second.second);
            }
          }
          if (!s.ended()) continue;
        }
        auto q = QueryJob(w.slurm_id);
        if (!q.ok()) continue;  // the controller is away; try again next poll
        job = *q;
        if (job && !job->ended()) continue;
        Watched current = w;
        {
          MutexLock relock(mu_);
          auto cur = watched_.find(Key(w.job_id, w.attempt));
          if (cur == watched_.end()) continue;
          current = cur->second;
        }
        AttemptExit e = Resolve(current, job);
        if (job && job->state == "NODE_FAIL" && e.failed_node.empty() &&
            current.node_fail_polls < kNodeFailPolls) {
          // srun may not have written "Node failure on X" yet; look again next poll.
          MutexLock relock(mu_);
          auto cur = watched_.find(Key(w.job_id, w.attempt));
          if (cur != watched_.end()) ++cur->second.node_fail_polls;
          continue;
        }
        exits.push_back(std::move(e));
      }
      lock.Lock();
      std::vector<AttemptExit> deliver;
      for (auto& e : exits) {
        if (watched_.erase(Key(e.job_id, e.attempt)) == 1) deliver.push_back(std::move(e));
      }
      if (shutdown_) break;
      ExitCallback cb = callback_;
      lock.Unlock();
      for (const auto& e : deliver) {
        if (cb) cb(e);
      }
      lock.Lock();
    }
  }

  const SlurmExecutorOptions options_;
  Clock& clock_;  // polls, Stop's grace and command timeouts run on its monotonic time
  Mutex mu_;
  CondVar cv_;  // signalled on poke_ and shutdown_
  bool shutdown_ TY_GUARDED_BY(mu_) = false;
  bool poke_ TY_GUARDED_BY(mu_) = false;  // something changed: poll now
  ExitCallback callback_ TY_GUARDED_BY(mu_);
  std::map<std::string, Watched> watched_ TY_GUARDED_BY(mu_);
  std::thread watcher_;  // started by the constructor, joined by Shutdown
};

}  // namespace

bool SlurmJobState::ended() const {
  static const std::set<std::string> kFinal = {
      "COMPLETED", "FAILED",   "CANCELLED",     "NODE_FAIL", "TIMEOUT",      "PREEMPTED",
      "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY", "REVOKED",   "SPECIAL_EXIT",
  };
  return kFinal.count(state) > 0;
}

std::map<std::string, std::string> ParseScontrolLine(const std::string& text) {
  std::string line = Trim(SplitString(text, '\n').front());
  std::map<std::string, std::string> out;
  static const auto kKey =
      BoundedRegex::Compile(R"((^|\s)([A-Za-z][A-Za-z0-9_:/]*)=)", "scontrol key").value();
  struct Key {
    size_t position;  // of the whole match
    size_t length;
    std::string name;
  };
  std::vector<Key> keys;
  kKey->ForEachMatch(line, [&](const std::vector<std::string_view>& groups) {
    if (groups.size() < 3) return;
    keys.push_back({static_cast<size_t>(groups[0].data() - line.data()), groups[0].size(),
                    std::string(groups[2])});
  });
  for (size_t i = 0; i < keys.size(); ++i) {
    size_t value_start = keys[i].position + keys[i].length;
    size_t value_end = i + 1 < keys.size() ? keys[i + 1].position : line.size();
    out[keys[i].name] = Trim(line.substr(value_start, value_end - value_start));
  }
  return out;
}

ClusterJobStatus SlurmClusterStatus(int64_t slurm_id, const std::string& state,
                                    const std::string& reason) {
  ClusterJobStatus out;
  if (state.empty()) return out;
  SlurmJobState job;
  job.state = state;
  if (state == "PENDING") {
    out.state = ClusterJobStatus::State::kPending;
  } else if (job.ended()) {
    out.state = ClusterJobStatus::State::kDone;
  } else {
    out.state = ClusterJobStatus::State::kRunning;
  }
  if (reason != "None") out.reason = reason;
  out.raw = "Slurm job " + std::to_string(slurm_id) + " " + state +
            (out.reason.empty() ? "" : " (" + out.reason + ")");
  return out;
}

Result<SlurmJobState> ParseSlurmJob(const std::string& line) {
  auto rec = ParseScontrolLine(line);
  if (!rec.count("JobId") || !rec.count("JobState")) {
    return Status::Internal("unexpected scontrol show job output: " + Abbreviate(line, 200));
  }
  SlurmJobState s;
  s.state = rec["JobState"];
  s.reason = rec["Reason"];
  s.node_list = rec["NodeList"];
  if (rec.count("PreemptTime") && rec["PreemptTime"] != "None" && !rec["PreemptTime"].empty()) {
    s.preempt_time = rec["PreemptTime"];
  }
  auto parts = SplitString(rec["ExitCode"], ':');
  if (parts.size() == 2) {
    s.exit_code = static_cast<int>(ParseInt64(parts[0]).value_or(0));
    s.exit_signal = static_cast<int>(ParseInt64(parts[1]).value_or(0));
  }
  return s;
}

Result<std::vector<std::string>> SbatchArguments(const SlurmPoolConfig& pool,
                                                 const AttemptLaunch& launch,
                                                 const std::string& script_path) {
  const ClusterRequest& req = launch.cluster;
  if (req.cpus_per_rank < 0) return Status::InvalidArgument("cluster.cpus_per_rank must be >= 0");
  if (req.memory_mb_per_node < 0) {
    return Status::InvalidArgument("cluster.memory_mb_per_node must be >= 0");
  }
  if (req.term_grace.count() > kMaxSignalLeadSeconds) {
    return Status::InvalidArgument("cluster.term_grace must be at most " +
                                   std::to_string(kMaxSignalLeadSeconds) + " s (Slurm's --signal)");
  }
  size_t gpus_per_rank = launch.ranks.empty() ? 0 : launch.ranks.front().gpu_ids.size();
  for (const auto& r : launch.ranks) {
    if (r.gpu_ids.size() != gpus_per_rank) {
      return Status::InvalidArgument(
          "launch.ranks: every rank must ask for the same number of GPUs on Slurm");
    }
  }
  std::vector<std::string> a = {
      "--parsable",
      "--job-name=ty-" + launch.job_id + "-a" + std::to_string(launch.attempt),
      "--nodes=" + std::to_string(launch.nnodes),
      "--ntasks-per-node=" + std::to_string(launch.local_world_size),
      "--no-requeue",
      "--output=" + (launch.log_dir / "batch.log").string(),
      "--open-mode=append",
  };
  if (!launch.working_dir.empty()) a.push_back("--chdir=" + launch.working_dir);
  if (gpus_per_rank > 0) {
    a.push_back("--gres=gpu:" +
                std::to_string(gpus_per_rank * static_cast<size_t>(launch.local_world_size)));
  }
  if (req.cpus_per_rank > 0) a.push_back("--cpus-per-task=" + std::to_string(req.cpus_per_rank));
  if (req.memory_mb_per_node > 0) {
    a.push_back("--mem=" + std::to_string(req.memory_mb_per_node) + "M");
  }
  if (req.time_limit.count() > 0) {
    // Slurm's --time has minute granularity; round up so the job is never cut short.
    a.push_back("--time=" + std::to_string((req.time_limit.count() + 59) / 60));
  }
  if (req.term_grace.count() > 0) {
    a.push_back("--signal=TERM@" + std::to_string(req.term_grace.count()));
  }
  // The nodes the job scheduler planned: Slurm runs the attempt on exactly those, so what the
  // scheduler counts as taken is what runs (and a serving replica is where it is looked for).
  std::vector<std::string> planned;
  for (const auto& r : launch.ranks) {
    if (r.node_name.empty()) continue;
    if (std::find(planned.begin(), planned.end(), r.node_name) == planned.end()) {
      planned.push_back(r.node_name);
    }
  }
  if (!planned.empty()) {
    if (planned.size() != static_cast<size_t>(launch.nnodes)) {
      return Status::InvalidArgument("launch.ranks: the ranks name " +
                                     std::to_string(planned.size()) + " nodes, not nnodes (" +
                                     std::to_string(launch.nnodes) + ")");
    }
    a.push_back("--nodelist=" + Join(planned, ","));
  }
  if (!req.exclude_nodes.empty()) a.push_back("--exclude=" + Join(req.exclude_nodes, ","));
  if (!pool.partition.empty()) a.push_back("--partition=" + pool.partition);
  if (!pool.account.empty()) a.push_back("--account=" + pool.account);
  if (!pool.qos.empty()) a.push_back("--qos=" + pool.qos);
  for (const auto& extra : pool.extra_sbatch_args) a.push_back(extra);
  a.push_back(script_path);
  return a;
}

std::string BatchScript(const AttemptLaunch& launch) {
  int world = launch.nnodes * launch.local_world_size;
  bool gpus = !launch.ranks.empty() && !launch.ranks.front().gpu_ids.empty();
  std::ostringstream s;
  s << "#!/bin/sh\n"
    << "# Written by Trainyard: job " << launch.job_id << ", attempt " << launch.attempt
    << ". Runs every rank as a task of one srun step.\n"
    << "MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)\n";
  if (launch.master_port > 0) {
    s << "MASTER_PORT=" << launch.master_port << "\n";
  } else {
    s << "MASTER_PORT=$((" << kDerivedPortBase << " + SLURM_JOB_ID % " << kDerivedPortRange
      << "))\n";
  }
  s << "export MASTER_ADDR MASTER_PORT\n";
  for (const auto& [k, v] : launch.env) s << "export " << k << "=" << ShellQuote(v) << "\n";
  s << "export WORLD_SIZE=" << world << " ROLE_WORLD_SIZE=" << world
    << " LOCAL_WORLD_SIZE=" << launch.local_world_size << " GROUP_WORLD_SIZE=" << launch.nnodes
    << "\n"
    << "export TORCHELASTIC_RUN_ID=" << ShellQuote(launch.job_id)
    << " TRAINYARD_JOB_ID=" << ShellQuote(launch.job_id) << " TRAINYARD_ATTEMPT=" << launch.attempt
    << "\n"
    << "export TY_RANK_COMMAND=" << ShellQuote(launch.command)
    << " TY_RANK_LOG_DIR=" << ShellQuote(launch.log_dir.string()) << "\n";
  if (!gpus) s << "export TY_NO_GPUS=1\n";
  s << "exec srun --kill-on-bad-exit=1 --open-mode=append --output="
    << ShellQuote((launch.log_dir / "rank-%t.log").string()) << " /bin/sh -c "
    << ShellQuote(kRankWrapper) << "\n";
  return s.str();
}

AttemptExit ResolveAttemptExit(const std::string& job_id, int attempt, const SlurmJobState& job,
                               const std::vector<RankEvidence>& ranks,
                               const std::vector<std::string>& failed_nodes, bool stopped) {
  AttemptExit out;
  out.job_id = job_id;
  out.attempt = attempt;
  out.stopped = stopped;
  out.cluster_state = Trim(job.state + " " + job.reason);
  if (!job.preempt_time.empty() && job.state != "PREEMPTED") {
    // Preempted with a grace time: the ranks exited on SIGTERM before the kill.
    out.cluster_state = "PREEMPTED at " + job.preempt_time + " (ended " + out.cluster_state + ")";
  }
  std::set<std::string> failed(failed_nodes.begin(), failed_nodes.end());
  bool node_fail = job.state == "NODE_FAIL";
  bool forgotten = job.state == "UNKNOWN";
  bool any_rank_failed = std::any_of(
      ranks.begin(), ranks.end(), [](const RankEvidence& e) { return e.exit && Failed(*e.exit); });
  bool killed_by_slurm = job.state == "CANCELLED" || job.state == "TIMEOUT" ||
                         job.state == "PREEMPTED" || job.state == "DEADLINE";
  for (size_t i = 0; i < ranks.size(); ++i) {
    const RankEvidence& e = ranks[i];
    RankExit x;
    bool on_failed_node = !e.node.empty() && failed.count(e.node) > 0;
    if (node_fail && on_failed_node) {
      // Its node failed under it. A rank there may still have recorded SIGTERM (a node set
      // DOWN by an admin keeps its slurmd, which terminates the job's processes).
      x.lost = true;
    } else if (e.exit) {
      x = *e.exit;
    } else if (node_fail || forgotten || on_failed_node) {
      x.lost = true;
    } else if (any_rank_failed || killed_by_slurm || stopped) {
      x.exit_code = 128 + SIGKILL;
      x.signal = SIGKILL;
    } else {
      // The rank never recorded an exit: srun could not start it, or Slurm ended the job.
      x.exit_code = job.exit_code != 0 ? job.exit_code : 1;
      x.signal = job.exit_signal;
    }
    x.rank = static_cast<int>(i);
    x.node = e.node;
    out.ranks.push_back(x);
  }
  // The first failure: a lost rank (its node's failure ended the attempt), else the rank
  // whose failing exit was recorded first, else the lowest failing rank.
  int first = -1;
  for (const auto& x : out.ranks) {
    if (x.lost) {
      first = x.rank;
      break;
    }
  }
  if (first < 0) {
    int64_t best = 0;
    for (size_t i = 0; i < ranks.size(); ++i) {
      if (!ranks[i].exit || !Failed(*ranks[i].exit)) continue;
      if (first < 0 || ranks[i].exit_time_ns < best) {
        first = static_cast<int>(i);
        best = ranks[i].exit_time_ns;
      }
    }
  }
  if (first < 0) {
    for (const auto& x : out.ranks) {
      if (Failed(x)) {
        first = x.rank;
        break;
      }
    }
  }
  bool job_ok = job.state == "COMPLETED" || forgotten;
  if (first < 0 && !job_ok) first = out.ranks.empty() ? -1 : 0;
  out.success = first < 0 && job_ok && !out.ranks.empty();
  if (out.success) {
    out.exit_code = 0;
  } else if (first >= 0) {
    const RankExit& f = out.ranks[static_cast<size_t>(first)];
    out.failed_rank = first;
    out.exit_code = f.exit_code;
    out.signal = f.signal;
    out.lost = f.lost;
    const std::string& node = ranks[static_cast<size_t>(first)].node;
    if (f.lost && !node.empty() && (failed.count(node) || failed.empty())) {
      out.failed_node = node;
    } else if (node_fail && !failed_nodes.empty()) {
      out.failed_node = failed_nodes.front();
    }
  }
  return out;
}

}  // namespace trainyard::executors

namespace trainyard::executors {

std::unique_ptr<Executor> MakeSlurmExecutor(SlurmExecutorOptions options, Clock& clock) {
  return std::make_unique<SlurmExecutor>(std::move(options), clock);
}

std::vector<SlurmNode> ParseSinfoNodes(const std::string& text) {
  std::vector<SlurmNode> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    size_t start = 0;
    while (true) {
      size_t bar = line.find('|', start);
      f.push_back(line.substr(start, bar == std::string::npos ? std::string::npos : bar - start));
      if (bar == std::string::npos) break;
      start = bar + 1;
    }
    if (f.size() < 4 || f[0].empty()) continue;
    SlurmNode n;
    n.name = f[0];
    if (f.size() >= 5) n.address = Trim(f[4]);
    if (n.address == "(null)" || n.address == "N/A") n.address.clear();
    n.cpus = static_cast<int>(std::strtol(f[1].c_str(), nullptr, 10));
    n.memory_bytes = std::strtoll(f[2].c_str(), nullptr, 10) * 1024 * 1024;
    // gres: comma-separated "gpu[:type]:count[(S:...)]" entries.
    std::istringstream gres(f[3]);
    std::string entry;
    while (std::getline(gres, entry, ',')) {
      if (entry.rfind("gpu", 0) != 0) continue;
      std::string count = entry.substr(0, entry.find('('));
      size_t colon = count.rfind(':');
      if (colon != std::string::npos) {
        n.gpus += static_cast<int>(std::strtol(count.c_str() + colon + 1, nullptr, 10));
      }
    }
    bool seen = false;
    for (const auto& o : out) seen = seen || o.name == n.name;
    if (!seen) out.push_back(std::move(n));
  }
  return out;
}

Result<std::vector<SlurmNode>> DiscoverSlurmNodes(const SlurmPoolConfig& pool, Clock& clock) {
  std::vector<std::string> argv = {
      pool.bin_dir.empty() ? "sinfo" : (fs::path(pool.bin_dir) / "sinfo").string(), "-N", "-h",
      "-o", "%N|%c|%m|%G|%o"};
  if (!pool.partition.empty()) argv.push_back("--partition=" + pool.partition);
  TY_ASSIGN_OR_RETURN(CommandOutput out, RunCommand(argv, pool.client_env, clock));
  if (out.exit_code != 0) {
    return Status::Unavailable("sinfo failed (exit " + std::to_string(out.exit_code) +
                               "): " + out.err + " — is slurmctld reachable, and munge running?");
  }
  std::vector<SlurmNode> nodes = ParseSinfoNodes(out.out);
  if (nodes.empty()) {
    return Status::InvalidArgument(
        "sinfo lists no nodes" +
        (pool.partition.empty() ? std::string() : " in partition '" + pool.partition + "'"));
  }
  return nodes;
}

}  // namespace trainyard::executors
