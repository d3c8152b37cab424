// Runs real processes: the rank shim is the `trainyard` binary built next to this test
// binary (scripts/build builds both).
#include "trainyard/executors/local_executor.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "trainyard/common/clock.h"
#include "trainyard/common/os_account.h"
#include "trainyard/common/strings.h"
#include "trainyard/executors/exit_collector_for_test.h"
#include "trainyard/executors/rank_shim.h"

namespace trainyard::executors {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr seconds kDeadline{30};

std::string ShimPath() { return (fs::read_symlink("/proc/self/exe").parent_path() / "trainyard"); }

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void Touch(const fs::path& path) { std::ofstream(path) << "\n"; }

// Polls `done` every few milliseconds until it holds or the deadline passes.
template <typename Pred>
bool WaitUntil(Pred done, std::chrono::steady_clock::duration timeout = kDeadline) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return true;
}

// A process that no longer runs: gone, or a zombie nobody reaped yet.
bool ProcessEnded(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!in || !std::getline(in, stat)) return true;
  size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() &&
         (stat[paren + 2] == 'Z' || stat[paren + 2] == 'X');
}

int ReadPid(const fs::path& path) {
  int pid = 0;
  std::ifstream(path) >> pid;
  return pid;
}

// Collects the callbacks of one executor.
// Waits use the suite's deadline.
class Exits : public ExitCollector {
 public:
  std::optional<AttemptExit> WaitFor(const std::string& job_id, int attempt) {
    return ExitCollector::WaitFor(job_id, attempt, kDeadline);
  }
};

class LocalExecutorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(ShimPath())) << "build the trainyard binary first (scripts/build)";
    dir_ = fs::temp_directory_path() /
           ("ty-exec-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    executor_ = NewExecutor(&exits_);
  }
  void TearDown() override {
    executor_.reset();
    // A failed test must not leave its workloads running (executors never kill on exit).
    // The group outlives its leader (the shim) while members remain; a pid now naming
    // another process is left alone.
    for (const auto& p : launched_) {
      auto start = ProcessStartTime(p.pid);
      if (!start.ok() || *start == p.start_time) killpg(p.pid, SIGKILL);
    }
    fs::remove_all(dir_);
  }

  // Launches through executor_ and remembers the processes for TearDown.
  Result<std::vector<RankProcess>> Launch(const AttemptLaunch& launch) {
    auto r = executor_->Launch(launch);
    if (r.ok()) launched_.insert(launched_.end(), r->begin(), r->end());
    return r;
  }

  // On clock_ unless another clock is given.
  std::unique_ptr<Executor> NewExecutor(Exits* exits, milliseconds gang_grace = seconds(10),
                                        Clock* clock = nullptr) {
    LocalExecutorOptions options;
    options.shim_path = ShimPath();
    options.gang_stop_grace = gang_grace;
    auto e = MakeLocalExecutor(options, clock ? *clock : clock_);
    e->SetExitCallback(exits->Callback());
    return e;
  }

  // An attempt of `n` ranks on one node running `command` in dir_, logging to dir_/logs.
  AttemptLaunch Attempt(const std::string& job_id, const std::string& command, int n = 1) {
    AttemptLaunch launch;
    launch.job_id = job_id;
    launch.attempt = 1;
    launch.command = command;
    launch.working_dir = dir_.string();
    launch.local_world_size = n;
    launch.log_dir = dir_ / "logs";
    launch.env["LOGS"] = (dir_ / "logs").string();
    for (int r = 0; r < n; ++r) launch.ranks.push_back({r, r, 0, "local", {}});
    return launch;
  }

  fs::path Log(int rank) { return dir_ / "logs" / ("rank-" + std::to_string(rank) + ".log"); }

  // The executors' time: a grace period ends (and SIGKILL follows) only when a test advances
  // it, so a slow machine cannot turn a SIGTERM result into a SIGKILL one.
  FakeClock clock_;
  SystemClock system_clock_;
  fs::path dir_;
  Exits exits_;
  std::unique_ptr<Executor> executor_;
  std::vector<RankProcess> launched_;
};

TEST_F(LocalExecutorTest, TwoRanksSeeTheirEnvironmentAndWriteTheirOwnLogs) {
  // The server's own environment is never inherited (it holds the server's credentials).
  setenv("TY_EXEC_TEST_INHERITED", "yes", 1);
  fs::create_directories(dir_ / "work");
  AttemptLaunch launch = Attempt(
      "job-env",
      "echo \"rank=$RANK local=$LOCAL_RANK node=$NODE_RANK group=$GROUP_RANK role=$ROLE_RANK "
      "world=$WORLD_SIZE lws=$LOCAL_WORLD_SIZE cvd=[$CUDA_VISIBLE_DEVICES] addr=$MASTER_ADDR "
      "run=$TORCHELASTIC_RUN_ID ty=$TRAINYARD_RANK foo=$FOO inherited=$TY_EXEC_TEST_INHERITED "
      "pwd=$(pwd)\"; echo \"port=$MASTER_PORT\"; echo \"path=$PATH tmp=$TMPDIR\"; "
      "echo to-stderr >&2",
      2);
  launch.working_dir = (dir_ / "work").string();
  launch.env["FOO"] = "bar baz";
  launch.tmp_dir = "/job-tmp";
  launch.ranks[0].gpu_ids = {0, 3};
  auto processes = Launch(launch);
  ASSERT_TRUE(processes.ok()) << processes.status().ToString();
  ASSERT_EQ(processes->size(), 2u);
  for (const auto& p : *processes) {
    EXPECT_GT(p.pid, 0);
    EXPECT_GT(p.start_time, 0);
  }

  auto exit = exits_.WaitFor("job-env", 1);
  ASSERT_TRUE(exit.has_value());
  EXPECT_TRUE(exit->success);
  EXPECT_EQ(exit->failed_rank, -1);
  ASSERT_EQ(exit->ranks.size(), 2u);
  EXPECT_EQ(exit->ranks[1].rank, 1);
  EXPECT_EQ(exit->ranks[1].exit_code, 0);

  std::string log0 = ReadFile(Log(0)), log1 = ReadFile(Log(1));
  const std::string work = fs::canonical(dir_ / "work").string();
  EXPECT_NE(log0.find("rank=0 local=0 node=0 group=0 role=0 world=2 lws=2 cvd=[0,3] "
                      "addr=127.0.0.1 run=job-env ty=0 foo=bar baz inherited= pwd=" +
                      work + "\n"),
            std::string::npos)
      << log0;
  EXPECT_NE(log1.find("rank=1 local=1 node=0 group=0 role=1 world=2 lws=2 cvd=[] "),
            std::string::npos)
      << log1;
  EXPECT_EQ(log1.find("rank=0"), std::string::npos) << log1;
  EXPECT_NE(log0.find("path=/usr/local/bin:/usr/bin:/bin tmp=/job-tmp\n"), std::string::npos)
      << log0;
  EXPECT_NE(log0.find("to-stderr"), std::string::npos);
  // Both ranks got the same picked port.
  auto port_of = [](const std::string& log) {
    size_t at = log.find("port=");
    return at == std::string::npos ? std::string() : log.substr(at, log.find('\n', at) - at);
  };
  EXPECT_EQ(port_of(log0), port_of(log1));
  auto port = ParseInt64(port_of(log0).substr(5));
  ASSERT_TRUE(port.has_value()) << log0;
  EXPECT_GT(*port, 0);
  EXPECT_LE(*port, 65535);
}

TEST_F(LocalExecutorTest, ReportsExitCodeAndSignal) {
  ASSERT_TRUE(Launch(Attempt("job-code", "exit 7")).ok());
  AttemptLaunch signalled = Attempt("job-signal", "kill -USR1 $$");
  signalled.log_dir = dir_ / "logs-signal";
  ASSERT_TRUE(Launch(signalled).ok());
  auto code = exits_.WaitFor("job-code", 1);
  ASSERT_TRUE(code.has_value());
  EXPECT_FALSE(code->success);
  EXPECT_EQ(code->failed_rank, 0);
  EXPECT_EQ(code->exit_code, 7);
  EXPECT_EQ(code->signal, 0);
  EXPECT_FALSE(code->lost);
  EXPECT_FALSE(code->stopped);

  auto sig = exits_.WaitFor("job-signal", 1);
  ASSERT_TRUE(sig.has_value());
  EXPECT_FALSE(sig->success);
  EXPECT_EQ(sig->signal, SIGUSR1);
  EXPECT_EQ(sig->exit_code, 128 + SIGUSR1);
}

TEST_F(LocalExecutorTest, ExitFileRecordsTheWorkloadStatus) {
  ASSERT_TRUE(Launch(Attempt("job-file", "exit 42")).ok());
  ASSERT_TRUE(exits_.WaitFor("job-file", 1).has_value());
  auto file = ReadShimExitFile(dir_ / "logs" / "rank-0.exit");
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ(file->exit_code, 42);
  EXPECT_EQ(file->signal, 0);
  EXPECT_TRUE(ReadShimExitFile(dir_ / "logs" / "rank-9.exit").status().IsNotFound());
}

TEST_F(LocalExecutorTest, OneFailingRankStopsTheGang) {
  // Rank 1 installs a TERM trap, then rank 0 fails.
  AttemptLaunch launch = Attempt("job-gang",
                                 "if [ \"$RANK\" = 0 ]; then "
                                 "  until grep -q ready \"$LOGS/rank-1.log\"; do sleep 0.01; done;"
                                 "  exit 3; "
                                 "else "
                                 "  trap 'echo got-term; exit 143' TERM; echo ready;"
                                 "  sleep 1000 & wait; "
                                 "fi",
                                 2);
  ASSERT_TRUE(Launch(launch).ok());
  auto exit = exits_.WaitFor("job-gang", 1);
  ASSERT_TRUE(exit.has_value());
  EXPECT_FALSE(exit->success);
  EXPECT_FALSE(exit->stopped);
  EXPECT_EQ(exit->failed_rank, 0);
  EXPECT_EQ(exit->exit_code, 3);
  ASSERT_EQ(exit->ranks.size(), 2u);
  EXPECT_EQ(exit->ranks[1].exit_code, 143);
  EXPECT_EQ(exit->ranks[1].signal, 0);
  EXPECT_NE(ReadFile(Log(1)).find("got-term"), std::string::npos) << ReadFile(Log(1));
  EXPECT_EQ(exits_.Count("job-gang", 1), 1u);
}

TEST_F(LocalExecutorTest, StopEscalatesToSigkillWhenTheGraceHasPassedOnTheClock) {
  ASSERT_TRUE(Launch(Attempt("job-stubborn", "trap '' TERM; echo ready; sleep 1000")).ok());
  ASSERT_TRUE(WaitUntil([&] { return ReadFile(Log(0)).find("ready") != std::string::npos; }));
  // An hour's grace on the executor's (fake) clock: the test waits for none of it. Were the
  // grace measured on real time, the exit would not come within the suite's deadline.
  ASSERT_TRUE(executor_->Stop("job-stubborn", 1, std::chrono::hours(1)).ok());
  clock_.AdvanceMillis(int64_t{3600} * 1000);
  // Stop wakes the watcher, which compares the deadline with the clock; the sooner deadline
  // (the first Stop's) stays.
  ASSERT_TRUE(executor_->Stop("job-stubborn", 1, std::chrono::hours(1)).ok());
  auto exit = exits_.WaitFor("job-stubborn", 1);
  ASSERT_TRUE(exit.has_value());
  EXPECT_TRUE(exit->stopped);
  EXPECT_FALSE(exit->success);
  EXPECT_EQ(exit->failed_rank, 0);
  EXPECT_EQ(exit->signal, SIGKILL);
  EXPECT_FALSE(exit->lost);
}

TEST_F(LocalExecutorTest, StopEscalatesToSigkillAfterGraceOnTheSystemClock) {
  // The server's configuration: real time.
  executor_ = NewExecutor(&exits_, seconds(10), &system_clock_);
  ASSERT_TRUE(Launch(Attempt("job-stubborn", "trap '' TERM; echo ready; sleep 1000")).ok());
  ASSERT_TRUE(WaitUntil([&] { return ReadFile(Log(0)).find("ready") != std::string::npos; }));
  ASSERT_TRUE(executor_->Stop("job-stubborn", 1, milliseconds(200)).ok());
  auto exit = exits_.WaitFor("job-stubborn", 1);
  ASSERT_TRUE(exit.has_value());
  EXPECT_TRUE(exit->stopped);
  EXPECT_FALSE(exit->success);
  EXPECT_EQ(exit->failed_rank, 0);
  EXPECT_EQ(exit->signal, SIGKILL);
  EXPECT_FALSE(exit->lost);
}

TEST_F(LocalExecutorTest, StopReachesGrandchildren) {
  // As in the server, SIGTERM is blocked in the launching thread: ranks must not inherit that.
  sigset_t term, old;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &term, &old);
  // `ready` is written by a shell builtin after the inner shell has reaped its `mv`: were
  // the SIGTERM to come while `mv` is still a child, the shim (the subreaper) would adopt it
  // and take its exit status 0 for the workload's result, as it should for a program that
  // outlives its shell.
  auto launched = Launch(Attempt("job-tree",
                                 "sleep 1000 & echo $! > gc1.tmp && mv gc1.tmp gc1;"
                                 "sh -c 'sleep 1000 & echo $! > gc2.tmp && mv gc2.tmp gc2; "
                                 ": > ready; wait' & wait"));
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ASSERT_TRUE(launched.ok()) << launched.status().ToString();
  ASSERT_TRUE(WaitUntil([&] { return fs::exists(dir_ / "ready"); }));
  int gc1 = ReadPid(dir_ / "gc1"), gc2 = ReadPid(dir_ / "gc2");
  ASSERT_GT(gc1, 0);
  ASSERT_GT(gc2, 0);
  EXPECT_FALSE(ProcessEnded(gc1));
  EXPECT_FALSE(ProcessEnded(gc2));
  ASSERT_TRUE(executor_->Stop("job-tree", 1, seconds(10)).ok());
  auto exit = exits_.WaitFor("job-tree", 1);
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->signal, SIGTERM);
  EXPECT_TRUE(WaitUntil([&] { return ProcessEnded(gc1) && ProcessEnded(gc2); }));
}

TEST_F(LocalExecutorTest, SuccessfulRankLeavesNoOrphans) {
  ASSERT_TRUE(Launch(Attempt("job-orphan", "sleep 1000 & echo $! > orphan; exit 0")).ok());
  auto exit = exits_.WaitFor("job-orphan", 1);
  ASSERT_TRUE(exit.has_value());
  EXPECT_TRUE(exit->success);
  int orphan = ReadPid(dir_ / "orphan");
  ASSERT_GT(orphan, 0);
  EXPECT_TRUE(WaitUntil([&] { return ProcessEnded(orphan); }));
}

TEST_F(LocalExecutorTest, AdoptAfterRestartReportsTheExitCode) {
  auto processes = Launch(Attempt("job-adopt", "until [ -f go ]; do sleep 0.01; done; exit 5"));
  ASSERT_TRUE(processes.ok()) << processes.status().ToString();
  executor_->Shutdown();
  executor_.reset();

  Exits after_restart;
  auto second = NewExecutor(&after_restart);
  ASSERT_TRUE(second->Adopt("job-adopt", 1, dir_ / "logs", *processes).ok());
  EXPECT_TRUE(second->Adopt("job-adopt", 1, dir_ / "logs", *processes).IsAlreadyExists());
  Touch(dir_ / "go");
  auto exit = after_restart.WaitFor("job-adopt", 1);
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->failed_rank, 0);
  EXPECT_EQ(exit->exit_code, 5);
  EXPECT_FALSE(exit->lost);
  EXPECT_EQ(exits_.Count("job-adopt", 1), 0u);  // the first executor stopped watching
}

TEST_F(LocalExecutorTest, AdoptOfANonChildReadsItsExitFile) {
  // Start a shim the way a previous server would have left it: not our child.
  fs::create_directories(dir_ / "logs");
  std::string script = "cd '" + dir_.string() + "' && { '" + ShimPath() +
                       "' __rank-shim logs/rank-0.log logs/rank-0.exit . "
                       "'until [ -f go ]; do sleep 0.01; done; exit 6' "
                       "</dev/null >/dev/null 2>&1 & echo $! > shim.pid; }";
  ASSERT_EQ(std::system(script.c_str()), 0);
  int pid = ReadPid(dir_ / "shim.pid");
  ASSERT_GT(pid, 0);
  auto start = ProcessStartTime(pid);
  ASSERT_TRUE(start.ok()) << start.status().ToString();
  launched_.push_back({0, pid, *start});
  ASSERT_EQ(waitpid(pid, nullptr, WNOHANG), -1);  // not ours to reap

  ASSERT_TRUE(executor_->Adopt("job-stray", 2, dir_ / "logs", {{0, pid, *start}}).ok());
  Touch(dir_ / "go");
  auto exit = exits_.WaitFor("job-stray", 2);
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->exit_code, 6);
  EXPECT_FALSE(exit->lost);
}

TEST_F(LocalExecutorTest, StopRequestBeforeTheWorkloadStartsStillStopsIt) {
  // The shim starts with a SIGTERM pending (blocked across exec), so it is delivered the moment
  // the shim installs its handler, before it forks the workload: the workload must not run on
  // until the grace period's SIGKILL.
  fs::create_directories(dir_ / "logs");
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    setpgid(0, 0);
    if (chdir(dir_.c_str()) != 0) _exit(120);
    sigset_t term;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    sigprocmask(SIG_BLOCK, &term, nullptr);
    raise(SIGTERM);
    std::string shim = ShimPath();
    execl(shim.c_str(), shim.c_str(), "__rank-shim", "logs/rank-0.log", "logs/rank-0.exit", ".",
          "sleep 120", static_cast<char*>(nullptr));
    _exit(121);
  }
  int status = 0;
  pid_t done = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while ((done = waitpid(pid, &status, WNOHANG)) == 0 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // polling with a deadline
  }
  if (done == 0) {
    kill(-pid, SIGKILL);
    waitpid(pid, &status, 0);
    FAIL() << "the workload ran on after the stop request";
  }
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM);
  auto file = ReadShimExitFile(dir_ / "logs" / "rank-0.exit");
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ(file->signal, SIGTERM);
}

TEST_F(LocalExecutorTest, AdoptOfAVanishedProcessIsLost) {
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) _exit(0);
  auto start = ProcessStartTime(pid);  // a zombie until reaped
  ASSERT_TRUE(start.ok()) << start.status().ToString();
  ASSERT_EQ(waitpid(pid, nullptr, 0), pid);
  auto self_start = ProcessStartTime(getpid());
  ASSERT_TRUE(self_start.ok());

  // Rank 0 is gone; rank 1's pid is alive but started at another time (reused).
  ASSERT_TRUE(
      executor_
          ->Adopt("job-lost", 1, dir_ / "logs", {{0, pid, *start}, {1, getpid(), *self_start + 1}})
          .ok());
  auto exit = exits_.WaitFor("job-lost", 1);
  ASSERT_TRUE(exit.has_value());
  EXPECT_FALSE(exit->success);
  EXPECT_EQ(exit->failed_rank, 0);
  EXPECT_TRUE(exit->lost);
  ASSERT_EQ(exit->ranks.size(), 2u);
  EXPECT_TRUE(exit->ranks[1].lost);
}

TEST_F(LocalExecutorTest, BadWorkingDirIsAClearError) {
  AttemptLaunch launch = Attempt("job-baddir", "true");
  launch.working_dir = (dir_ / "no-such-dir").string();
  auto r = Launch(launch);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().IsInvalidArgument());
  EXPECT_NE(r.status().message().find("working_dir"), std::string::npos);
  EXPECT_NE(r.status().message().find("no-such-dir"), std::string::npos);
  EXPECT_FALSE(fs::exists(Log(0)));
}

TEST_F(LocalExecutorTest, RejectsBadLaunchesAndUnknownStops) {
  AttemptLaunch wrong_size = Attempt("job-size", "true", 2);
  wrong_size.local_world_size = 3;
  EXPECT_TRUE(Launch(wrong_size).status().IsInvalidArgument());
  AttemptLaunch repeated = Attempt("job-rep", "true", 2);
  repeated.ranks[1].rank = 0;
  EXPECT_TRUE(Launch(repeated).status().IsInvalidArgument());
  EXPECT_EQ(executor_->Stop("job-none", 1, seconds(1)).code(), StatusCode::kNotFound);
  Exits unused;
  LocalExecutorOptions no_shim;
  no_shim.shim_path = (dir_ / "no-such-binary").string();
  auto broken = MakeLocalExecutor(no_shim, clock_);
  broken->SetExitCallback(unused.Callback());
  auto r = broken->Launch(Attempt("job-noshim", "true"));
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("shim_path"), std::string::npos);

  AttemptLaunch twice = Attempt("job-twice", "until [ -f go ]; do sleep 0.01; done");
  ASSERT_TRUE(Launch(twice).ok());
  EXPECT_TRUE(executor_->Launch(twice).status().IsAlreadyExists());
  Touch(dir_ / "go");
  auto exit = exits_.WaitFor("job-twice", 1);
  ASSERT_TRUE(exit.has_value());
  EXPECT_TRUE(exit->success);
}

TEST_F(LocalExecutorTest, ExitIsSeenWithinMilliseconds) {
  // Measured, not asserted: the workload stamps the time just before it exits.
  AttemptLaunch launch = Attempt("job-latency", "date +%s%N > exited_at; exit 1");
  ASSERT_TRUE(Launch(launch).ok());
  auto exit = exits_.WaitFor("job-latency", 1);
  auto seen = std::chrono::system_clock::now();
  ASSERT_TRUE(exit.has_value());
  auto exited_ns = ParseInt64(Trim(ReadFile(dir_ / "exited_at")));
  ASSERT_TRUE(exited_ns.has_value());
  double ms =
      (std::chrono::duration_cast<std::chrono::nanoseconds>(seen.time_since_epoch()).count() -
       *exited_ns) /
      1e6;
  std::printf("[ measured ] workload exit to callback: %.2f ms\n", ms);
  RecordProperty("exit_to_callback_ms", std::to_string(ms));
}

TEST_F(LocalExecutorTest, CallbackCanLaunchTheNextAttempt) {
  // The restart path: attempt 1 crashes, its callback launches attempt 2 right away.
  // Measured (not asserted): crash of attempt 1 to the start of attempt 2's workload.
  Exits exits;
  LocalExecutorOptions options;
  options.shim_path = ShimPath();
  auto executor = MakeLocalExecutor(options, clock_);
  Executor* raw = executor.get();
  // Rank 0 crashes once rank 1's workload runs, and rank 1 is stopped by the gang. (A SIGTERM
  // that reaches a rank before its shim has started the workload is not passed on: that rank
  // ends only at the grace's SIGKILL, which clock_ never brings.)
  AttemptLaunch launch = Attempt("job-restart",
                                 "if [ \"$TRAINYARD_ATTEMPT\" = 1 ]; then"
                                 "  if [ \"$RANK\" = 0 ]; then"
                                 "    until [ -f rank1-runs ]; do sleep 0.01; done;"
                                 "    date +%s%N > crashed_at; exit 1;"
                                 "  fi;"
                                 "  : > rank1-runs; sleep 1000; "
                                 "fi; "
                                 "if [ \"$RANK\" = 0 ]; then date +%s%N > started_at; fi",
                                 2);
  Status relaunch;
  executor->SetExitCallback([&, raw](const AttemptExit& e) {
    if (e.attempt == 1) {
      AttemptLaunch next = launch;
      next.attempt = 2;
      relaunch = raw->Launch(next).status();
    }
    exits.Callback()(e);
  });
  auto first = executor->Launch(launch);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  launched_.insert(launched_.end(), first->begin(), first->end());
  auto second = exits.WaitFor("job-restart", 2);
  ASSERT_TRUE(second.has_value());
  EXPECT_TRUE(relaunch.ok()) << relaunch.ToString();
  EXPECT_TRUE(second->success);
  auto crashed = ParseInt64(Trim(ReadFile(dir_ / "crashed_at")));
  auto started = ParseInt64(Trim(ReadFile(dir_ / "started_at")));
  ASSERT_TRUE(crashed.has_value() && started.has_value());
  std::printf("[ measured ] crash to next attempt's workload start (2 ranks): %.2f ms\n",
              (*started - *crashed) / 1e6);
}

}  // namespace
}  // namespace trainyard::executors

namespace trainyard::executors {
namespace {

class LocalExecutorIsolationTest : public LocalExecutorTest {};

// Starts a process in a session of its own (out of the rank's process group) and waits until
// it has written its pid, which it does only after setsid.
constexpr const char* kEscape =
    "setsid sh -c 'echo $$ > escapee.tmp && mv escapee.tmp escapee; exec sleep 1000' & "
    "while [ ! -s escapee ]; do sleep 0.01; done";

TEST_F(LocalExecutorIsolationTest, SetsidEscapeeDiesWithItsAttempt) {
  if (executor_->Containment().rfind("none", 0) == 0) {
    GTEST_SKIP() << "no writable cgroups here: " << executor_->Containment();
  }
  ASSERT_TRUE(Launch(Attempt("job-escape", std::string(kEscape) + "; exit 0")).ok());
  auto exit = exits_.WaitFor("job-escape", 1);
  ASSERT_TRUE(exit.has_value());
  EXPECT_TRUE(exit->success);
  int escapee = ReadPid(dir_ / "escapee");
  ASSERT_GT(escapee, 0);
  EXPECT_TRUE(WaitUntil([&] { return ProcessEnded(escapee); }));
}

TEST_F(LocalExecutorIsolationTest, SetsidEscapeeDiesWhenTheAttemptIsStopped) {
  if (executor_->Containment().rfind("none", 0) == 0) {
    GTEST_SKIP() << "no writable cgroups here: " << executor_->Containment();
  }
  ASSERT_TRUE(Launch(Attempt("job-escape2", std::string(kEscape) + "; sleep 1000")).ok());
  ASSERT_TRUE(WaitUntil([&] { return ReadPid(dir_ / "escapee") > 0; }));
  int escapee = ReadPid(dir_ / "escapee");
  ASSERT_TRUE(executor_->Stop("job-escape2", 1, seconds(10)).ok());
  // The shim waits for the escapee (it is the workload's subreaper), so the attempt ends when
  // the grace is over and its cgroup is killed: end the grace on the executor's clock (a
  // second Stop wakes the watcher to see it).
  clock_.AdvanceMillis(10'000);
  ASSERT_TRUE(executor_->Stop("job-escape2", 1, seconds(10)).ok());
  auto exit = exits_.WaitFor("job-escape2", 1);
  ASSERT_TRUE(exit.has_value());
  EXPECT_TRUE(exit->stopped);
  EXPECT_TRUE(WaitUntil([&] { return ProcessEnded(escapee); }));
}

TEST_F(LocalExecutorIsolationTest, WorkloadRunsAsTheGivenAccountAndNeverAsRoot) {
  if (geteuid() != 0) GTEST_SKIP() << "switching accounts needs root";
  AttemptLaunch launch = Attempt("job-nobody", "echo \"uid=$(id -u) user=$USER home=$HOME\"");
  launch.os_user = "nobody";
  launch.working_dir = "/";
  ASSERT_TRUE(Launch(launch).ok());
  auto exit = exits_.WaitFor("job-nobody", 1);
  ASSERT_TRUE(exit.has_value());
  EXPECT_TRUE(exit->success);
  std::string log = ReadFile(Log(0));
  auto nobody = LookupOsAccount("nobody");
  ASSERT_TRUE(nobody.ok());
  EXPECT_NE(log.find("uid=" + std::to_string(nobody->uid) + " user=nobody home=" + nobody->home),
            std::string::npos)
      << log;

  AttemptLaunch as_root = Attempt("job-root", "true");
  as_root.os_user = "root";
  auto refused = Launch(as_root);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("never run as root"), std::string::npos);
}

}  // namespace
}  // namespace trainyard::executors
