// Unit tests of the Slurm executor's pure parts (sbatch arguments, the batch script run
// under a stand-in srun, scontrol parsing, how an attempt's end is resolved), and tests
// against a real two-node Slurm cluster that tests/slurm_cluster.py starts for this suite
// (root and Debian's slurm-wlm + munge needed: scripts/install-deps; the suite fails with
// the harness's reason when the cluster cannot start).
#include "trainyard/executors/slurm_executor.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "trainyard/common/json.h"
#include "trainyard/common/strings.h"
#include "trainyard/executors/exit_collector_for_test.h"

extern char** environ;

namespace trainyard::executors {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using std::chrono::seconds;

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void WriteFile(const fs::path& path, const std::string& text, bool executable = false) {
  std::ofstream(path) << text;
  if (executable) fs::permissions(path, fs::perms::owner_all);
}

template <typename Pred>
bool PollUntil(Pred pred, seconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(milliseconds(50));
  }
  return pred();
}

AttemptLaunch TwoByTwo() {
  AttemptLaunch l;
  l.job_id = "job-1";
  l.attempt = 3;
  l.command = "python train.py --lr 'a b'";
  l.nnodes = 2;
  l.local_world_size = 2;
  l.log_dir = "/shared/logs/job-1/3";
  l.working_dir = "/shared/work";
  for (int r = 0; r < 4; ++r) l.ranks.push_back({r, r % 2, r / 2, "", {r % 2, 2 + r % 2}});
  return l;
}

TEST(SlurmExecutorUnitTest, SbatchArgumentsCarryTheWholeRequest) {
  SlurmPoolConfig pool;
  pool.partition = "gpu";
  pool.account = "proj";
  pool.qos = "high";
  pool.extra_sbatch_args = {"--constraint=a100"};
  AttemptLaunch l = TwoByTwo();
  l.cluster.cpus_per_rank = 8;
  l.cluster.memory_mb_per_node = 64000;
  l.cluster.time_limit = seconds(90);
  l.cluster.term_grace = seconds(120);
  l.cluster.exclude_nodes = {"n7", "n9"};
  auto args = SbatchArguments(pool, l, "/shared/logs/job-1/3/batch.sh");
  ASSERT_TRUE(args.ok()) << args.status().ToString();
  std::vector<std::string> want = {"--parsable",
                                   "--job-name=ty-job-1-a3",
                                   "--nodes=2",
                                   "--ntasks-per-node=2",
                                   "--no-requeue",
                                   "--output=/shared/logs/job-1/3/batch.log",
                                   "--open-mode=append",
                                   "--chdir=/shared/work",
                                   "--gres=gpu:4",
                                   "--cpus-per-task=8",
                                   "--mem=64000M",
                                   "--time=2",
                                   "--signal=TERM@120",
                                   "--exclude=n7,n9",
                                   "--partition=gpu",
                                   "--account=proj",
                                   "--qos=high",
                                   "--constraint=a100",
                                   "/shared/logs/job-1/3/batch.sh"};
  EXPECT_EQ(*args, want);
}

TEST(SlurmExecutorUnitTest, SbatchArgumentsLeaveOutWhatWasNotAskedAndRejectUnevenGpus) {
  AttemptLaunch l = TwoByTwo();
  for (auto& r : l.ranks) r.gpu_ids.clear();
  l.working_dir.clear();
  auto args = SbatchArguments({}, l, "s.sh");
  ASSERT_TRUE(args.ok());
  for (const auto& a : *args) {
    for (const char* absent : {"--gres", "--cpus", "--mem", "--time", "--signal", "--exclude",
                               "--partition", "--account", "--qos", "--chdir"}) {
      EXPECT_FALSE(StartsWith(a, absent)) << a;
    }
  }
  l.ranks[1].gpu_ids = {0};
  auto bad = SbatchArguments({}, l, "s.sh");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("same number of GPUs"), std::string::npos);
}

TEST(SlurmExecutorUnitTest, SbatchArgumentsPinTheNodesTheSchedulerPlanned) {
  AttemptLaunch l = TwoByTwo();
  for (auto& r : l.ranks) r.node_name = r.node_rank == 0 ? "gpu7" : "gpu3";
  auto args = SbatchArguments({}, l, "s.sh");
  ASSERT_TRUE(args.ok()) << args.status().ToString();
  EXPECT_NE(std::find(args->begin(), args->end(), "--nodelist=gpu7,gpu3"), args->end());
  l.ranks[3].node_name = "gpu9";  // three nodes for a two-node attempt
  auto bad = SbatchArguments({}, l, "s.sh");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("nnodes"), std::string::npos);
}

// The batch script under stand-ins for srun (runs the wrapper once per task, as two nodes
// of two tasks) and scontrol (names the first node): the ranks get the torchrun
// environment, their exit files, and the workload's quoting survives.
TEST(SlurmExecutorUnitTest, BatchScriptGivesEachRankItsEnvironmentAndExitFile) {
  fs::path dir = fs::temp_directory_path() / ("ty-slurm-unit-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "bin");
  fs::create_directories(dir / "logs");
  WriteFile(dir / "bin" / "scontrol", "#!/bin/sh\necho fakenode1\necho fakenode2\n", true);
  WriteFile(dir / "bin" / "srun",
            "#!/bin/sh\n"
            "while [ \"$1\" != /bin/sh ]; do shift; done\n"
            "for t in 0 1 2 3; do\n"
            "  SLURM_PROCID=$t SLURM_LOCALID=$((t % 2)) SLURM_NODEID=$((t / 2)) "
            "SLURMD_NODENAME=fakenode$((t / 2 + 1)) \"$@\" > \"$LOGS/out-$t\" 2>&1\n"
            "done\n",
            true);
  AttemptLaunch l = TwoByTwo();
  for (auto& r : l.ranks) r.gpu_ids.clear();
  l.log_dir = dir / "logs";
  l.env["LOGS"] = (dir / "logs").string();
  l.env["QUOTED"] = "it's \"x\" $HOME";
  l.command =
      "echo rank=$RANK local=$LOCAL_RANK node=$NODE_RANK group=$GROUP_RANK world=$WORLD_SIZE "
      "lws=$LOCAL_WORLD_SIZE gws=$GROUP_WORLD_SIZE master=$MASTER_ADDR:$MASTER_PORT "
      "run=$TORCHELASTIC_RUN_ID attempt=$TRAINYARD_ATTEMPT ty=$TRAINYARD_RANK "
      "cuda=[${CUDA_VISIBLE_DEVICES-unset}] q=\"$QUOTED\"; "
      "if [ $RANK = 3 ]; then kill -TERM $$; fi; exit $RANK";
  WriteFile(dir / "batch.sh", BatchScript(l), true);
  std::string cmd = "env PATH=" + (dir / "bin").string() + ":/usr/bin:/bin SLURM_JOB_ID=7 " +
                    "SLURM_JOB_NODELIST=x /bin/sh " + (dir / "batch.sh").string();
  int status = std::system(cmd.c_str());
  // The stand-in srun ends with the last task's status, as the real one reports the worst.
  ASSERT_TRUE(WIFEXITED(status)) << ReadFile(dir / "batch.sh");
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM);
  for (int r = 0; r < 4; ++r) {
    std::string out = ReadFile(dir / "logs" / ("out-" + std::to_string(r)));
    std::string want =
        "rank=" + std::to_string(r) + " local=" + std::to_string(r % 2) +
        " node=" + std::to_string(r / 2) + " group=" + std::to_string(r / 2) +
        " world=4 lws=2 gws=2 master=fakenode1:20007 run=job-1 attempt=3 ty=" + std::to_string(r) +
        " cuda=[] q=it's \"x\" $HOME";
    EXPECT_NE(out.find(want), std::string::npos) << out;
    EXPECT_EQ(Trim(ReadFile(dir / "logs" / ("rank-" + std::to_string(r) + ".node"))),
              "fakenode" + std::to_string(r / 2 + 1));
    auto exit = ParseJsonObject(ReadFile(dir / "logs" / ("rank-" + std::to_string(r) + ".exit")));
    ASSERT_TRUE(exit.ok()) << r;
    int want_code = r == 3 ? 128 + SIGTERM : r;
    EXPECT_EQ(exit->at("exit_code").as_int64(), want_code) << r;
    EXPECT_EQ(exit->at("signal").as_int64(), r == 3 ? SIGTERM : 0) << r;
  }
  fs::remove_all(dir);
}

SlurmJobState Job(std::string state, std::string reason, int code = 0, int sig = 0,
                  std::string nodes = "") {
  SlurmJobState j;
  j.state = std::move(state);
  j.reason = std::move(reason);
  j.exit_code = code;
  j.exit_signal = sig;
  j.node_list = std::move(nodes);
  return j;
}

TEST(SlurmExecutorUnitTest, APreemptionWithAGraceTimeIsReportedAsOne) {
  auto job = ParseSlurmJob(
      "JobId=7 JobName=x JobState=COMPLETED Reason=None ExitCode=0:0 NodeList=node[1-2] "
      "PreemptTime=2026-11-22T06:22:11 SuspendTime=None");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->preempt_time, "2026-11-22T06:22:11");
  AttemptExit e = ResolveAttemptExit("j", 1, *job, {}, {}, false);
  EXPECT_EQ(e.cluster_state.rfind("PREEMPTED at 2026-11-22T06:22:11", 0), 0u) << e.cluster_state;
  auto plain =
      ParseSlurmJob("JobId=8 JobState=COMPLETED Reason=None ExitCode=0:0 PreemptTime=None");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->preempt_time, "");
}

TEST(SlurmExecutorUnitTest, ParsesSinfoNodesWithTheirGpus) {
  auto nodes = ParseSinfoNodes(
      "node1|64|512000|gpu:a100:8(S:0-1)|10.0.0.1\n"
      "node2|64|512000|gpu:4,shard:8|node2\n"
      "node2|64|512000|gpu:4,shard:8|node2\n"  // listed again for a second partition
      "cpu1|32|128000|(null)\n"                // an older format, without the address
      "garbage\n");
  ASSERT_EQ(nodes.size(), 3u);
  EXPECT_EQ(nodes[0].address, "10.0.0.1");
  EXPECT_EQ(nodes[1].address, "node2");
  EXPECT_EQ(nodes[2].address, "");
  EXPECT_EQ(nodes[0].name, "node1");
  EXPECT_EQ(nodes[0].gpus, 8);
  EXPECT_EQ(nodes[0].cpus, 64);
  EXPECT_EQ(nodes[0].memory_bytes, int64_t{512000} * 1024 * 1024);
  EXPECT_EQ(nodes[1].gpus, 4);
  EXPECT_EQ(nodes[2].gpus, 0);
}

TEST(SlurmExecutorUnitTest, ParsesScontrolJobLines) {
  const std::string line =
      "JobId=3 JobName=ty-a b-a1 UserId=root(0) JobState=NODE_FAIL Reason=NodeDown "
      "Dependency=(null) Requeue=0 Restarts=0 ExitCode=0:15 NodeList=node[1-2] "
      "Command=/tmp/x/batch.sh --opt=1 WorkDir=/tmp/w StdOut=/tmp/x/batch.log";
  auto rec = ParseScontrolLine(line);
  EXPECT_EQ(rec["JobName"], "ty-a b-a1");
  EXPECT_EQ(rec["Command"], "/tmp/x/batch.sh --opt=1");
  EXPECT_EQ(rec["WorkDir"], "/tmp/w");
  auto job = ParseSlurmJob(line);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->state, "NODE_FAIL");
  EXPECT_EQ(job->reason, "NodeDown");
  EXPECT_EQ(job->exit_code, 0);
  EXPECT_EQ(job->exit_signal, 15);
  EXPECT_EQ(job->node_list, "node[1-2]");
  EXPECT_TRUE(job->ended());
  EXPECT_FALSE(ParseSlurmJob("slurm_load_jobs error: Invalid job id specified").ok());
  EXPECT_FALSE(Job("PENDING", "Resources").ended());
}

TEST(SlurmExecutorUnitTest, ClusterStatusIsTypedFromSqueuesStateAndReason) {
  using State = ClusterJobStatus::State;
  ClusterJobStatus pending = SlurmClusterStatus(12, "PENDING", "Resources");
  EXPECT_EQ(pending.state, State::kPending);
  EXPECT_TRUE(pending.pending());
  EXPECT_EQ(pending.reason, "Resources");
  EXPECT_EQ(pending.raw, "Slurm job 12 PENDING (Resources)");

  ClusterJobStatus running = SlurmClusterStatus(12, "RUNNING", "None");
  EXPECT_EQ(running.state, State::kRunning);
  EXPECT_FALSE(running.pending());
  EXPECT_EQ(running.reason, "");
  EXPECT_EQ(running.raw, "Slurm job 12 RUNNING");
  // Holding its nodes but not running the workload yet is not pending: its clock has started.
  EXPECT_EQ(SlurmClusterStatus(7, "CONFIGURING", "").state, State::kRunning);
  EXPECT_EQ(SlurmClusterStatus(7, "COMPLETING", "").state, State::kRunning);

  ClusterJobStatus done = SlurmClusterStatus(3, "NODE_FAIL", "NodeDown");
  EXPECT_EQ(done.state, State::kDone);
  EXPECT_EQ(done.raw, "Slurm job 3 NODE_FAIL (NodeDown)");
  EXPECT_EQ(SlurmClusterStatus(3, "COMPLETED", "").state, State::kDone);

  // A reason that merely mentions PENDING does not make a job pending (the old substring test
  // of " PENDING" in the text would have).
  EXPECT_EQ(SlurmClusterStatus(4, "RUNNING", "Was PENDING").state, State::kRunning);
  EXPECT_EQ(SlurmClusterStatus(4, "", "").state, State::kUnknown);
  EXPECT_EQ(SlurmClusterStatus(4, "", "").raw, "");
}

RankEvidence Exited(int code, int sig, const std::string& node, int64_t t) {
  return {RankExit{0, code, sig, false, ""}, node, t};
}

TEST(SlurmExecutorUnitTest, ResolvesSuccessCrashNodeFailureAndStop) {
  SlurmJobState completed = Job("COMPLETED", "None");
  auto ok = ResolveAttemptExit("j", 1, completed, {Exited(0, 0, "n1", 1), Exited(0, 0, "n2", 2)},
                               {}, false);
  EXPECT_TRUE(ok.success);
  EXPECT_EQ(ok.failed_rank, -1);

  // Rank 1 crashed; srun SIGKILLed rank 0, which left no exit file.
  SlurmJobState failed = Job("FAILED", "NonZeroExitCode", 3, 0, "n[1-2]");
  auto crash = ResolveAttemptExit("j", 1, failed, {{std::nullopt, "n1", 0}, Exited(3, 0, "n2", 5)},
                                  {}, false);
  EXPECT_FALSE(crash.success);
  EXPECT_EQ(crash.failed_rank, 1);
  EXPECT_EQ(crash.exit_code, 3);
  EXPECT_EQ(crash.ranks[0].signal, SIGKILL);
  EXPECT_FALSE(crash.ranks[0].lost);
  EXPECT_EQ(crash.failed_node, "");

  // n2 went down: its rank is lost and named first; the survivor got SIGTERM.
  SlurmJobState node_fail = Job("NODE_FAIL", "NodeDown", 0, 15, "n[1-2]");
  auto lost = ResolveAttemptExit(
      "j", 1, node_fail, {Exited(143, 15, "n1", 9), {std::nullopt, "n2", 0}}, {"n2"}, false);
  EXPECT_FALSE(lost.success);
  EXPECT_EQ(lost.failed_rank, 1);
  EXPECT_TRUE(lost.lost);
  EXPECT_EQ(lost.failed_node, "n2");
  EXPECT_EQ(lost.cluster_state, "NODE_FAIL NodeDown");
  // Set DOWN by an admin, the node's slurmd terminated its rank, which recorded SIGTERM.
  auto admin_down = ResolveAttemptExit(
      "j", 1, node_fail, {Exited(143, 15, "n1", 9), Exited(143, 15, "n2", 8)}, {"n2"}, false);
  EXPECT_EQ(admin_down.failed_rank, 1);
  EXPECT_TRUE(admin_down.ranks[1].lost);
  EXPECT_FALSE(admin_down.ranks[0].lost);
  EXPECT_EQ(admin_down.failed_node, "n2");

  // Stopped while pending: no rank ran.
  SlurmJobState cancelled = Job("CANCELLED", "None");
  auto stopped = ResolveAttemptExit("j", 1, cancelled, {{}, {}}, {}, true);
  EXPECT_TRUE(stopped.stopped);
  EXPECT_FALSE(stopped.success);
  EXPECT_EQ(stopped.signal, SIGKILL);

  // The controller forgot the job: the exit files decide; a rank without one is lost.
  SlurmJobState forgotten = Job("UNKNOWN", "");
  EXPECT_TRUE(ResolveAttemptExit("j", 1, forgotten, {Exited(0, 0, "n1", 1)}, {}, false).success);
  EXPECT_TRUE(ResolveAttemptExit("j", 1, forgotten, {{}}, {}, false).lost);
}

// ---------------------------------------------------------------- against a real cluster

using Exits = ExitCollector;

// The cluster of tests/slurm_cluster.py, started once for the suite; it stops when we
// close its stdin (or die).
struct ClusterProcess {
  pid_t pid = 0;
  int stdin_fd = -1;
  std::string slurm_conf;
  fs::path shared_dir;
  std::vector<std::string> nodes;
  std::string error;
};

ClusterProcess* g_cluster = nullptr;

class SlurmExecutorClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    g_cluster = new ClusterProcess;
    fs::path script = fs::read_symlink("/proc/self/exe").parent_path().parent_path() / "tests" /
                      "slurm_cluster.py";
    if (const char* s = std::getenv("TRAINYARD_SLURM_CLUSTER_SCRIPT")) script = s;
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) {
      g_cluster->error = "pipe failed";
      return;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    std::string py = "/usr/bin/python3", s = script.string();
    char* argv[] = {py.data(), s.data(), nullptr};
    int rc = posix_spawn(&g_cluster->pid, py.c_str(), &fa, nullptr, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(in[0]);
    close(out[1]);
    g_cluster->stdin_fd = in[1];
    if (rc != 0) {
      g_cluster->error = "cannot run " + py + " " + s;
      close(out[0]);
      return;
    }
    std::string line;
    char c;
    while (read(out[0], &c, 1) == 1 && c != '\n') line += c;
    close(out[0]);
    auto info = ParseJsonObject(line);
    if (!info.ok() || !info->contains("slurm_conf")) {
      g_cluster->error =
          "the Slurm test cluster did not start (" + s + "): " +
          (info.ok() && info->contains("error") ? std::string(info->at("error").as_string())
                                                : line);
      return;
    }
    g_cluster->slurm_conf = std::string(info->at("slurm_conf").as_string());
    g_cluster->shared_dir = std::string(info->at("shared_dir").as_string());
    for (const auto& n : info->at("nodes").as_array()) {
      g_cluster->nodes.emplace_back(n.as_string());
    }
  }

  static void TearDownTestSuite() {
    if (g_cluster->stdin_fd >= 0) close(g_cluster->stdin_fd);
    if (g_cluster->pid > 0) waitpid(g_cluster->pid, nullptr, 0);
    delete g_cluster;
    g_cluster = nullptr;
  }

  void SetUp() override {
    ASSERT_TRUE(g_cluster->error.empty()) << g_cluster->error;
    dir_ = g_cluster->shared_dir / ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::create_directories(dir_);
    executor_ = NewExecutor();
  }

  void TearDown() override {
    executor_.reset();
    for (const auto& id : slurm_ids_) Scontrol("scancel " + id);
  }

  std::unique_ptr<Executor> NewExecutor() {
    SlurmExecutorOptions o;
    o.pool.client_env["SLURM_CONF"] = g_cluster->slurm_conf;
    o.poll_interval = milliseconds(200);
    auto e = MakeSlurmExecutor(o, clock_);
    e->SetExitCallback(exits_.Callback());
    return e;
  }

  // Runs a Slurm client command line against the cluster; returns its stdout.
  static std::string Scontrol(const std::string& command_line) {
    std::string cmd = "SLURM_CONF=" + g_cluster->slurm_conf + " " + command_line + " 2>&1";
    std::string out;
    if (FILE* f = popen(cmd.c_str(), "r")) {
      char buf[512];
      while (fgets(buf, sizeof(buf), f)) out += buf;
      pclose(f);
    }
    return out;
  }

  AttemptLaunch Attempt(const std::string& job_id, const std::string& command, int nnodes = 2) {
    AttemptLaunch l;
    l.job_id = job_id;
    l.attempt = 1;
    l.command = command;
    l.nnodes = nnodes;
    l.local_world_size = 1;
    l.working_dir = dir_.string();
    l.log_dir = dir_ / "logs";
    l.env["LOGS"] = l.log_dir.string();
    for (int r = 0; r < nnodes; ++r) l.ranks.push_back({r, 0, r, "", {}});
    return l;
  }

  Result<std::vector<RankProcess>> Launch(const AttemptLaunch& l) {
    auto r = executor_->Launch(l);
    if (r.ok() && !r->empty()) slurm_ids_.push_back(std::to_string(r->front().pid));
    return r;
  }

  fs::path Log(int rank) { return dir_ / "logs" / ("rank-" + std::to_string(rank) + ".log"); }
  bool Started(int n) {
    for (int r = 0; r < n; ++r) {
      if (!fs::exists(dir_ / "logs" / ("rank-" + std::to_string(r) + ".node"))) return false;
    }
    return true;
  }

  SystemClock clock_;  // a real cluster: real time
  fs::path dir_;
  Exits exits_;
  std::unique_ptr<Executor> executor_;
  std::vector<std::string> slurm_ids_;
};

TEST_F(SlurmExecutorClusterTest, TwoNodeAttemptRanksSeeTheTorchrunEnvironment) {
  auto t0 = std::chrono::steady_clock::now();
  auto procs = Launch(
      Attempt("env",
              "echo host=$(hostname) rank=$RANK local=$LOCAL_RANK node=$NODE_RANK "
              "world=$WORLD_SIZE lws=$LOCAL_WORLD_SIZE master=$MASTER_ADDR port=$MASTER_PORT "
              "attempt=$TRAINYARD_ATTEMPT logs=$LOGS"));
  ASSERT_TRUE(procs.ok()) << procs.status().ToString();
  ASSERT_EQ(procs->size(), 2u);
  EXPECT_GT(procs->front().pid, 0);
  EXPECT_EQ(Trim(ReadFile(dir_ / "logs" / "slurm-job-id")), std::to_string(procs->front().pid));
  auto exit = exits_.WaitFor("env", 1, seconds(60));
  ASSERT_TRUE(exit.has_value()) << ReadFile(dir_ / "logs" / "batch.log");
  std::printf(
      "[ measured ] 2-node attempt, launch to exit callback: %lld ms\n",
      static_cast<long long>(
          std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - t0).count()));
  EXPECT_TRUE(exit->success) << exit->cluster_state;
  EXPECT_EQ(exit->cluster_state, "COMPLETED None");
  std::set<std::string> hosts;
  std::string port;
  for (int r = 0; r < 2; ++r) {
    std::string log = ReadFile(Log(r));
    auto want = "rank=" + std::to_string(r) + " local=0 node=" + std::to_string(r) +
                " world=2 lws=1 master=" + g_cluster->nodes[0];
    EXPECT_NE(log.find(want), std::string::npos) << log;
    EXPECT_NE(log.find("attempt=1 logs=" + (dir_ / "logs").string()), std::string::npos) << log;
    auto h = log.find("host=");
    hosts.insert(log.substr(h + 5, log.find(' ', h) - h - 5));
    auto p = log.find("port=");
    std::string this_port = log.substr(p + 5, log.find(' ', p) - p - 5);
    if (r == 0) port = this_port;
    EXPECT_EQ(this_port, port);
  }
  EXPECT_EQ(hosts, std::set<std::string>(g_cluster->nodes.begin(), g_cluster->nodes.end()));
}

TEST_F(SlurmExecutorClusterTest, NodeTakenDownEndsTheAttemptWithThatRankLost) {
  ASSERT_TRUE(Launch(Attempt("down", "sleep 300")).ok());
  ASSERT_TRUE(PollUntil([&] { return Started(2); }, seconds(60)));
  std::string victim = Trim(ReadFile(dir_ / "logs" / "rank-1.node"));
  auto t0 = std::chrono::steady_clock::now();
  Scontrol("scontrol update nodename=" + victim + " state=down reason=trainyard-test");
  auto exit = exits_.WaitFor("down", 1, seconds(60));
  std::printf(
      "[ measured ] node set DOWN to exit callback: %lld ms\n",
      static_cast<long long>(
          std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - t0).count()));
  Scontrol("scontrol update nodename=" + victim + " state=resume");
  ASSERT_TRUE(exit.has_value());
  EXPECT_FALSE(exit->success);
  EXPECT_TRUE(exit->lost) << exit->cluster_state << " rank0 " << exit->ranks[0].exit_code << "/"
                          << exit->ranks[0].signal << " rank1 " << exit->ranks[1].exit_code << "/"
                          << exit->ranks[1].signal;
  EXPECT_EQ(exit->failed_rank, 1);
  EXPECT_EQ(exit->failed_node, victim);
  EXPECT_EQ(exit->cluster_state, "NODE_FAIL NodeDown");
  EXPECT_TRUE(exit->ranks[1].lost);
  EXPECT_FALSE(exit->ranks[0].lost);
  EXPECT_TRUE(PollUntil([&] { return Scontrol("sinfo -h -n " + victim + " -o %T") == "idle\n"; },
                        seconds(30)));
}

TEST_F(SlurmExecutorClusterTest, OneRankCrashingStopsTheOther) {
  ASSERT_TRUE(Launch(Attempt("crash", "if [ $RANK = 1 ]; then exit 3; fi; sleep 300")).ok());
  auto exit = exits_.WaitFor("crash", 1, seconds(60));
  ASSERT_TRUE(exit.has_value());
  EXPECT_FALSE(exit->success);
  EXPECT_EQ(exit->failed_rank, 1);
  EXPECT_EQ(exit->exit_code, 3);
  EXPECT_FALSE(exit->lost);
  // srun --kill-on-bad-exit sends SIGTERM first (SIGKILL after KillWait); our rank 0 dies of
  // the TERM and its wrapper records it.
  EXPECT_EQ(exit->ranks[0].signal, SIGTERM) << exit->cluster_state;
  EXPECT_FALSE(exit->ranks[0].lost);
  EXPECT_EQ(exit->cluster_state, "FAILED NonZeroExitCode");
}

TEST_F(SlurmExecutorClusterTest, StopSendsTermToTheRanksThenCancels) {
  ASSERT_TRUE(Launch(Attempt("stop",
                             "trap 'echo got-term; exit 143' TERM; echo trap-set; "
                             "while :; do sleep 0.2; done"))
                  .ok());
  // Both traps are in place before the stop (a rank's start is recorded before its command).
  ASSERT_TRUE(PollUntil(
      [&] {
        return ReadFile(Log(0)).find("trap-set") != std::string::npos &&
               ReadFile(Log(1)).find("trap-set") != std::string::npos;
      },
      seconds(60)));
  ASSERT_TRUE(executor_->Stop("stop", 1, seconds(5)).ok());
  auto exit = exits_.WaitFor("stop", 1, seconds(60));
  ASSERT_TRUE(exit.has_value());
  EXPECT_TRUE(exit->stopped);
  EXPECT_FALSE(exit->success);
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(ReadFile(Log(r)).find("got-term"), std::string::npos) << r;
    EXPECT_EQ(exit->ranks[r].signal, SIGTERM) << r;
  }
  EXPECT_EQ(executor_->Stop("stop", 1, seconds(1)).code(), StatusCode::kNotFound);
}

TEST_F(SlurmExecutorClusterTest, ExcludedNodeIsNotUsedAndAPendingStopCancels) {
  AttemptLaunch l = Attempt("exclude", "true", 1);
  l.cluster.exclude_nodes = {g_cluster->nodes[0]};
  ASSERT_TRUE(Launch(l).ok());
  auto exit = exits_.WaitFor("exclude", 1, seconds(60));
  ASSERT_TRUE(exit.has_value());
  EXPECT_TRUE(exit->success) << exit->cluster_state;
  EXPECT_EQ(Trim(ReadFile(dir_ / "logs" / "rank-0.node")), g_cluster->nodes[1]);

  // Three nodes never fit two: the job pends (and says so) until Stop cancels it.
  AttemptLaunch big = Attempt("toobig", "true", 3);
  big.log_dir = dir_ / "logs-big";
  ASSERT_TRUE(Launch(big).ok());
  ASSERT_TRUE(
      PollUntil([&] { return executor_->ClusterStatus("toobig", 1).pending(); }, seconds(60)));
  ClusterJobStatus pending = executor_->ClusterStatus("toobig", 1);
  EXPECT_FALSE(pending.reason.empty()) << pending.raw;
  EXPECT_NE(pending.raw.find(" PENDING"), std::string::npos) << pending.raw;
  ASSERT_TRUE(executor_->Stop("toobig", 1, seconds(0)).ok());
  auto cancelled = exits_.WaitFor("toobig", 1, seconds(60));
  ASSERT_TRUE(cancelled.has_value());
  EXPECT_TRUE(cancelled->stopped);
  EXPECT_FALSE(cancelled->success);
  EXPECT_EQ(cancelled->cluster_state.rfind("CANCELLED", 0), 0u) << cancelled->cluster_state;
}

TEST_F(SlurmExecutorClusterTest, AdoptAfterRestartSeesTheAttemptFinish) {
  auto procs = Launch(Attempt("adopt", "while [ ! -f $LOGS/go ]; do sleep 0.1; done; exit 0"));
  ASSERT_TRUE(procs.ok());
  ASSERT_TRUE(PollUntil([&] { return Started(2); }, seconds(60)));
  executor_->Shutdown();
  executor_ = NewExecutor();
  ASSERT_TRUE(executor_->Adopt("adopt", 1, dir_ / "logs", *procs).ok());
  EXPECT_EQ(executor_->Adopt("adopt", 1, dir_ / "logs", *procs).code(), StatusCode::kAlreadyExists);
  WriteFile(dir_ / "logs" / "go", "");
  auto exit = exits_.WaitFor("adopt", 1, seconds(60));
  ASSERT_TRUE(exit.has_value());
  EXPECT_TRUE(exit->success) << exit->cluster_state;
}

}  // namespace
}  // namespace trainyard::executors
