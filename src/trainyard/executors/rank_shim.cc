#include "trainyard/executors/rank_shim.h"

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "trainyard/common/json.h"
#include "trainyard/common/os_account.h"
#include "trainyard/executors/cgroups.h"

namespace trainyard::executors {
namespace {

// The status of a rank whose workload could not be started (no log, no cgroup, no such
// account, no /bin/sh): what a shell reports for a command it cannot run.
constexpr int kCannotRunExitCode = 127;
// Where descriptors are closed one by one (no close_range), and the system names no limit.
constexpr int kFallbackOpenMax = 1024;

void CloseInheritedDescriptors() {
#ifdef SYS_close_range
  if (syscall(SYS_close_range, 3U, ~0U, 0U) == 0) return;
#endif
  long max_fd = sysconf(_SC_OPEN_MAX);
  for (int fd = 3; fd < (max_fd > 0 ? max_fd : kFallbackOpenMax); ++fd) close(fd);
}

// Writes `text` to the log (our stderr); the shim must never fail because of it.
void Say(const std::string& text) {
  std::string line = "trainyard rank shim: " + text + "\n";
  [[maybe_unused]] ssize_t n = write(STDERR_FILENO, line.data(), line.size());
}

bool WriteExitFile(const std::string& path, int exit_code, int signal_number) {
  char body[96];
  int len = std::snprintf(body, sizeof(body), "{\"exit_code\":%d,\"signal\":%d}\n", exit_code,
                          signal_number);
  std::string tmp = path + ".tmp";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    Say("cannot write " + tmp + ": " + std::strerror(errno));
    return false;
  }
  bool ok = write(fd, body, len) == len && fsync(fd) == 0;
  ok = close(fd) == 0 && ok;
  if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
    Say("cannot write " + path + ": " + std::strerror(errno));
    return false;
  }
  // Make the rename itself durable.
  std::string dir = std::filesystem::path(path).parent_path().string();
  int dir_fd = open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    fsync(dir_fd);
    close(dir_fd);
  }
  return true;
}

// Our children that are still running (not zombies). The shim is single-threaded, so its
// thread's children are all of them.
std::set<pid_t> LiveChildren() {
  std::set<pid_t> out;
  std::ifstream in("/proc/self/task/" + std::to_string(getpid()) + "/children");
  pid_t pid = 0;
  while (in >> pid) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string text;
    std::getline(stat, text);
    size_t paren = text.rfind(')');
    if (paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] != 'Z') {
      out.insert(pid);
    }
  }
  return out;
}

volatile sig_atomic_t g_stop_requested = 0;

// What the local executor asked this shim to do, and the account resolved for it.
struct ShimRequest {
  std::vector<std::string> cgroups;
  std::string run_as;
  std::string log_file, exit_file, working_dir;
  const char* command = nullptr;
  OsAccount account;  // the account named by run_as, once resolved
};

// Reads `[--cgroup DIR]... [--user ACCOUNT] LOG_FILE EXIT_FILE WORKING_DIR COMMAND`; prints
// the usage and returns false when argv does not fit it.
bool ParseShimArguments(int argc, char** argv, ShimRequest* req) {
  int first = 1;
  while (first + 1 < argc &&
         (std::strcmp(argv[first], "--cgroup") == 0 || std::strcmp(argv[first], "--user") == 0)) {
    if (argv[first][2] == 'c') {
      req->cgroups.emplace_back(argv[first + 1]);
    } else {
      req->run_as = argv[first + 1];
    }
    first += 2;
  }
  if (argc - first != 4) {
    std::fprintf(stderr,
                 "usage: trainyard __rank-shim [--cgroup DIR]... [--user ACCOUNT] LOG_FILE "
                 "EXIT_FILE WORKING_DIR COMMAND\n"
                 "(internal: the local executor starts one per rank)\n");
    return false;
  }
  req->log_file = argv[first];
  req->exit_file = argv[first + 1];
  req->working_dir = argv[first + 2];
  req->command = argv[first + 3];
  return true;
}

// Makes the shim its own process group, closes what it inherited and points stdout and stderr
// at the log (stdin at /dev/null). Returns false, having said why, when the log cannot be opened.
bool RedirectToLog(const ShimRequest& req) {
  if (getpgrp() != getpid() && setsid() < 0) setpgid(0, 0);
  CloseInheritedDescriptors();
  int log_fd = open(req.log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (log_fd < 0) {
    std::fprintf(stderr, "trainyard rank shim: cannot open log %s: %s\n", req.log_file.c_str(),
                 std::strerror(errno));
    return false;
  }
  // dup2 clears FD_CLOEXEC on the copies, so the workload inherits them.
  dup2(log_fd, STDOUT_FILENO);
  dup2(log_fd, STDERR_FILENO);
  close(log_fd);
  int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_fd >= 0) {
    dup2(null_fd, STDIN_FILENO);
    close(null_fd);
  }
  return true;
}

// Joins the attempt's cgroups and resolves the account to run as. Returns false, having said
// why, when either fails.
bool JoinCgroupsAndResolveAccount(ShimRequest* req) {
  // Join the attempt's cgroups before anything is forked, so no process of the rank can be
  // outside them.
  if (Status s = JoinCgroups(req->cgroups); !s.ok()) {
    Say(s.message());
    return false;
  }
  // The account the workload runs as, resolved now: the child may only make system calls.
  if (!req->run_as.empty()) {
    auto found = LookupOsAccount(req->run_as);
    if (!found.ok() || found->uid == 0) {
      Say("cannot run the job as OS account '" + req->run_as +
          "': " + (found.ok() ? std::string("it is root") : found.status().message()));
      return false;
    }
    req->account = *found;
  }
  return true;
}

// The shim outlives the workload's grace period to record its result: it notes a stop
// request instead of dying. It is also the subreaper of the workload's processes, so that
// when `sh` dies of the SIGTERM at once while the program it started is still saving a
// checkpoint, the shim waits for that program instead of ending the rank under it.
void NoteStopRequestsAndAdoptDescendants() {
  struct sigaction note_stop {};
  note_stop.sa_handler = [](int) { g_stop_requested = 1; };
  sigemptyset(&note_stop.sa_mask);
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaction(sig, &note_stop, nullptr);
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  sigset_t empty;
  sigemptyset(&empty);
  sigprocmask(SIG_SETMASK, &empty, nullptr);
}

// In the forked child: restores the default signal actions, drops to the job's account,
// enters the working directory and execs the command; exits 127 when any of that fails.
[[noreturn]] void ExecWorkload(const ShimRequest& req) {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaction(sig, &dfl, nullptr);
  // A stop request that reached the shim before the fork, or this child before the line above,
  // was only noted (in this process's copy of the flag): the workload must still see it, so
  // the rank ends now as it would have, instead of at the grace period's SIGKILL.
  if (g_stop_requested) raise(SIGTERM);
  // The server runs with umask 077 to keep its data directory private; the workload gets
  // the usual 022 (its private job directory is 0700, so that exposes nothing), so that
  // outputs it writes for others to read (a shared model directory) are readable.
  umask(022);
  if (!req.run_as.empty()) {
    const OsAccount& account = req.account;
    // Groups first, then the gid, then the uid (after which nothing else can be changed).
    if (setgroups(account.groups.size(), account.groups.data()) != 0 || setgid(account.gid) != 0 ||
        setuid(account.uid) != 0 || getuid() == 0 || geteuid() == 0) {
      Say("cannot switch to OS account " + req.run_as + ": " + std::strerror(errno));
      _exit(kCannotRunExitCode);
    }
  }
  // As the job's account, so that a directory it may not enter is refused.
  if (!req.working_dir.empty() && chdir(req.working_dir.c_str()) != 0) {
    Say("cannot change to working directory " + req.working_dir + ": " + std::strerror(errno));
    _exit(kCannotRunExitCode);
  }
  execl("/bin/sh", "sh", "-c", req.command, static_cast<char*>(nullptr));
  Say(std::string("cannot run /bin/sh: ") + std::strerror(errno));
  _exit(kCannotRunExitCode);
}

// Waits for the workload's shell, retrying when a stop request interrupts the wait. Returns
// false, having said why, when waitpid fails otherwise.
bool WaitForWorkload(pid_t child, int* status) {
  while (waitpid(child, status, 0) < 0) {
    if (errno != EINTR) {
      Say(std::string("waitpid failed: ") + std::strerror(errno));
      return false;
    }
  }
  return true;
}

// Stopping: wait for every remaining descendant (the server sends SIGKILL to the whole
// group when the grace period ends). When the shell died of the signal, a program it
// started that was still running then and later exits on its own (e.g. after saving a
// checkpoint) carries the workload's result; the last such one to end decides. A helper
// that had already exited (a zombie handed to us with its dead parent) does not. Returns
// the status that stands for the workload's result.
int WaitForDescendants(int status) {
  const std::set<pid_t> carriers = LiveChildren();
  int other = 0, carried = 0;
  bool any_carried = false;
  while (true) {
    pid_t reaped = waitpid(-1, &other, 0);
    if (reaped > 0) {
      if (carriers.count(reaped)) {
        carried = other;
        any_carried = true;
      }
      continue;
    }
    if (errno == EINTR) continue;
    break;
  }
  if (any_carried && WIFSIGNALED(status) && WIFEXITED(carried)) status = carried;
  return status;
}

// Records a wait status in the exit file and returns the shim's exit code for it (128 + the
// signal number when it was killed).
int RecordResult(const std::string& exit_file, int status) {
  int exit_code = 0, signal_number = 0;
  if (WIFEXITED(status)) {
    exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    signal_number = WTERMSIG(status);
    exit_code = 128 + signal_number;
  }
  WriteExitFile(exit_file, exit_code, signal_number);
  return exit_code;
}

}  // namespace

int RunRankShim(int argc, char** argv) {
  ShimRequest req;
  if (!ParseShimArguments(argc, argv, &req)) return 2;
  if (!RedirectToLog(req) || !JoinCgroupsAndResolveAccount(&req)) {
    WriteExitFile(req.exit_file, kCannotRunExitCode, 0);
    return kCannotRunExitCode;
  }
  NoteStopRequestsAndAdoptDescendants();

  // The shim is single-threaded, so a plain fork is safe here.
  pid_t child = fork();
  if (child < 0) {
    Say(std::string("cannot fork: ") + std::strerror(errno));
    WriteExitFile(req.exit_file, kCannotRunExitCode, 0);
    return kCannotRunExitCode;
  }
  if (child == 0) ExecWorkload(req);

  int status = 0;
  if (!WaitForWorkload(child, &status)) {
    WriteExitFile(req.exit_file, kCannotRunExitCode, 0);
    return kCannotRunExitCode;
  }
  if (g_stop_requested) status = WaitForDescendants(status);
  return RecordResult(req.exit_file, status);
}

Result<ShimExit> ReadShimExitFile(const std::filesystem::path& path) {
  // The file sits in the job's log directory, so its content is the job's to choose: open it
  // without following a link or blocking on a FIFO, read a bounded amount, check the ranges.
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) return Status::NotFound("no exit file " + path.string());
    return Status::IOError(path.string() + ": " + std::strerror(errno));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return Status::InvalidArgument(path.string() + " is not a regular file");
  }
  constexpr size_t kMaxExitFileBytes = 4096;
  std::string text(kMaxExitFileBytes + 1, '\0');
  size_t got = 0;
  while (got < text.size()) {
    ssize_t n = read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  close(fd);
  if (got > kMaxExitFileBytes) {
    return Status::InvalidArgument(path.string() + " is larger than " +
                                   std::to_string(kMaxExitFileBytes) + " bytes");
  }
  text.resize(got);
  auto parsed = ParseJsonObject(text);
  if (!parsed.ok()) return parsed.status().WithContext(path.string());
  TY_ASSIGN_OR_RETURN(int64_t exit_code, RequiredInt64(*parsed, "exit_code"));
  TY_ASSIGN_OR_RETURN(std::optional<int64_t> sig, OptionalInt64(*parsed, "signal"));
  if (exit_code < 0 || exit_code > 255 + 128 || sig.value_or(0) < 0 || sig.value_or(0) > 128) {
    return Status::InvalidArgument(path.string() + ": exit_code or signal out of range");
  }
  return ShimExit{static_cast<int>(exit_code), static_cast<int>(sig.value_or(0))};
}

}  // namespace trainyard::executors
