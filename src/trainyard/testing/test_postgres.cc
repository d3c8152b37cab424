#include "trainyard/testing/test_postgres.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "trainyard/common/mutex.h"
#include "trainyard/common/net.h"
#include "trainyard/common/strings.h"

namespace trainyard::store {
namespace {

namespace fs = std::filesystem;

constexpr const char* kUrlEnv = "TRAINYARD_TEST_POSTGRES_URL";
constexpr auto kStartTimeout = std::chrono::seconds(60);
constexpr int kStartAttempts = 5;  // a free port can be taken before the server binds it

// Runs the server and removes `dir` after it: the server is stopped (SIGQUIT,
// immediate shutdown) when fd 3, the read end of a pipe whose write end only the
// test process holds, reaches end of file: at a normal exit and at a crash alike.
constexpr const char* kGuardianScript = R"sh(
dir=$1
shift
"$@" 3<&- &
pg=$!
{ read -r _ <&3; kill -QUIT "$pg" 2>/dev/null; } &
wait "$pg"
echo "$?" > "$dir/postgres.exited"
wait
rm -rf "$dir"
)sh";

struct RunAs {
  bool drop = false;  // switch to uid/gid in the child
  uid_t uid = 0;
  gid_t gid = 0;
};

std::string Tail(const fs::path& path, size_t max = 1500) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string text = buffer.str();
  if (text.size() > max) text = "..." + text.substr(text.size() - max);
  return Trim(text);
}

// Starts argv with stdout and stderr appended to `log`, optionally as another
// user, in a new session (so a terminal's ^C reaches only the test process),
// with `fd3` as its fd 3 when >= 0 and no other inherited descriptors.
Result<pid_t> Spawn(const std::vector<std::string>& argv, const fs::path& log, const RunAs& as,
                    int fd3) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int log_fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) return Status::IOError("open " + log.string() + ": " + std::strerror(errno));
  pid_t pid = fork();
  if (pid < 0) {
    int err = errno;
    close(log_fd);
    return Status::IOError(std::string("fork: ") + std::strerror(err));
  }
  if (pid == 0) {
    // Only async-signal-safe calls from here to exec.
    setsid();
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int sig : {SIGINT, SIGQUIT, SIGTERM, SIGPIPE, SIGCHLD, SIGHUP}) signal(sig, SIG_DFL);
    int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) dup2(null_fd, 0);
    dup2(log_fd, 1);
    dup2(log_fd, 2);
    if (fd3 == 3) {
      fcntl(3, F_SETFD, 0);
    } else if (fd3 >= 0) {
      dup2(fd3, 3);
    }
    close_range(fd3 >= 0 ? 4 : 3, ~0U, 0);
    if (as.drop && (setgroups(1, &as.gid) != 0 || setgid(as.gid) != 0 || setuid(as.uid) != 0)) {
      _exit(126);
    }
    execv(args[0], args.data());
    _exit(127);
  }
  close(log_fd);
  return pid;
}

Status WaitForSuccess(pid_t pid, const std::string& what, const fs::path& log) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return Status::Internal("waitpid: " + std::string(std::strerror(errno)));
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return Status::Ok();
  std::string how = WIFEXITED(status) ? "exited with " + std::to_string(WEXITSTATUS(status))
                                      : "was killed by signal " + std::to_string(WTERMSIG(status));
  if (WIFEXITED(status) && WEXITSTATUS(status) == 126) how += " (could not switch user)";
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127) how += " (could not be executed)";
  return Status::Internal(what + " " + how + ":\n" + Tail(log));
}

bool IsExecutable(const fs::path& p) { return access(p.c_str(), X_OK) == 0; }

bool HasServerBinaries(const fs::path& dir) {
  return IsExecutable(dir / "initdb") && IsExecutable(dir / "postgres");
}

// PATH first (following symlinks such as /usr/local/bin/pg_ctl ->
// /usr/lib/postgresql/15/bin/pg_ctl), then Debian's versioned directories,
// newest first, then the source install's default.
Result<fs::path> FindServerBinaries() {
  std::vector<fs::path> candidates;
  if (const char* path = std::getenv("PATH")) {
    for (const std::string& dir : SplitString(path, ':')) {
      if (dir.empty()) continue;
      for (const char* tool : {"initdb", "postgres", "pg_ctl"}) {
        std::error_code ec;
        fs::path real = fs::canonical(fs::path(dir) / tool, ec);
        if (!ec) candidates.push_back(real.parent_path());
      }
    }
  }
  std::vector<std::pair<int, fs::path>> debian;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/usr/lib/postgresql", ec)) {
    if (auto version = ParseInt64(entry.path().filename().string())) {
      debian.emplace_back(static_cast<int>(*version), entry.path() / "bin");
    }
  }
  std::sort(debian.begin(), debian.end(), [](const auto& a, const auto& b) { return a > b; });
  for (const auto& [version, dir] : debian) candidates.push_back(dir);
  candidates.push_back("/usr/local/pgsql/bin");
  for (const fs::path& dir : candidates) {
    if (HasServerBinaries(dir)) return dir;
  }
  return Status::NotFound(
      "PostgreSQL server binaries (initdb, postgres) not found in PATH, /usr/lib/postgresql/*/bin "
      "or /usr/local/pgsql/bin: install them (Debian: apt-get install postgresql) or set " +
      std::string(kUrlEnv) + "=postgresql://USER@HOST:PORT/DB to use a running server");
}

// `url` with its database replaced by `dbname`; keeps user, hosts and ?params.
Result<std::string> WithDatabase(const std::string& url, const std::string& dbname) {
  size_t scheme = url.find("://");
  if (scheme == std::string::npos ||
      (!StartsWith(url, "postgresql://") && !StartsWith(url, "postgres://"))) {
    return Status::InvalidArgument(std::string(kUrlEnv) +
                                   " must be a postgresql://USER@HOST:PORT/DB URL");
  }
  size_t path = url.find_first_of("/?", scheme + 3);
  if (path == std::string::npos) return url + "/" + dbname;
  size_t query = url.find('?', path);
  std::string rest = query == std::string::npos ? "" : url.substr(query);
  return url.substr(0, path) + "/" + dbname + rest;
}

std::string ConnectionError(PGconn* conn) {
  return conn == nullptr ? "out of memory" : Trim(PQerrorMessage(conn));
}

Status Execute(PGconn* conn, const std::string& sql) {
  PGresult* res = PQexec(conn, sql.c_str());
  bool ok = res != nullptr && PQresultStatus(res) == PGRES_COMMAND_OK;
  std::string message = ok ? "" : ConnectionError(conn);
  PQclear(res);
  if (!ok) return Status::Internal(sql + ": " + message);
  return Status::Ok();
}

class TestPostgres {
 public:
  static TestPostgres& Instance() {
    static TestPostgres instance;
    return instance;
  }

  ~TestPostgres() {
    // A forked child (a death test) that exits through here must leave the
    // parent's server and databases alone.
    if (getpid() != owner_pid_) return;
    MutexLock lock(mu_);
    if (admin_ != nullptr) {
      if (external_) {
        for (const std::string& db : created_) {
          // FORCE (PostgreSQL 13+) ends sessions that a test left open.
          if (!Execute(admin_, "DROP DATABASE IF EXISTS " + db + " WITH (FORCE)").ok()) {
            (void)Execute(admin_, "DROP DATABASE IF EXISTS " + db);
          }
        }
      }
      PQfinish(admin_);
    }
    StopServer();
  }

  Result<std::string> NewDatabaseUrl() TY_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    if (!attempted_) {
      attempted_ = true;
      start_status_ = Start();
    }
    if (!start_status_.ok()) return start_status_;
    std::string db = "ty_test_" + std::to_string(getpid()) + "_" + std::to_string(++databases_);
    Status s = Execute(admin_, "CREATE DATABASE " + db);
    if (!s.ok() && PQstatus(admin_) != CONNECTION_OK) {
      PQreset(admin_);  // a test may have ended it (pg_terminate_backend, restart)
      s = Execute(admin_, "CREATE DATABASE " + db);
    }
    if (!s.ok()) {
      // Names host and port only: an external URL may hold a password.
      return s.WithContext(std::string("test PostgreSQL at ") + PQhost(admin_) + ":" +
                           PQport(admin_));
    }
    created_.push_back(db);
    return WithDatabase(base_url_, db);
  }

 private:
  TestPostgres() = default;

  Status Start() TY_REQUIRES(mu_) {
    if (const char* url = std::getenv(kUrlEnv); url != nullptr && *url != '\0') {
      external_ = true;
      base_url_ = url;
      return ConnectAdmin(base_url_);
    }
    TY_ASSIGN_OR_RETURN(fs::path bin, FindServerBinaries());
    RunAs as;
    if (geteuid() == 0) {
      struct passwd* pw = getpwnam("postgres");
      if (pw == nullptr) {
        return Status::FailedPrecondition(
            "running as root, which PostgreSQL refuses, and there is no 'postgres' user to run "
            "it as: create one (useradd --system postgres), run the tests as another user, or "
            "set " +
            std::string(kUrlEnv));
      }
      as = RunAs{true, pw->pw_uid, pw->pw_gid};
    }
    Status last;
    for (int attempt = 0; attempt < kStartAttempts; ++attempt) {
      last = StartServer(bin, as);
      if (last.ok()) return ConnectAdmin(base_url_);
      StopServer();
      if (last.message().find("Address already in use") == std::string::npos) break;
    }
    return last;
  }

  Status StartServer(const fs::path& bin, const RunAs& as) TY_REQUIRES(mu_) {
    // A short parent keeps the socket path under the 107-byte limit, and one
    // the postgres user can reach when running as root.
    std::string parent = "/tmp";
    const char* tmpdir = std::getenv("TMPDIR");
    if (!as.drop && tmpdir != nullptr && *tmpdir != '\0' && std::strlen(tmpdir) < 60) {
      parent = tmpdir;
    }
    std::string pattern = parent + "/trainyard-pg-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) {
      return Status::IOError("mkdtemp " + pattern + ": " + std::strerror(errno));
    }
    dir_ = pattern;
    if (as.drop && chown(dir_.c_str(), as.uid, as.gid) != 0) {
      return Status::IOError("chown " + dir_.string() + " to postgres: " + std::strerror(errno));
    }

    fs::path initdb_log = dir_ / "initdb.log";
    TY_ASSIGN_OR_RETURN(
        pid_t initdb, Spawn({(bin / "initdb").string(), "-D", (dir_ / "data").string(), "-U",
                             "postgres", "--auth=trust", "-E", "UTF8", "--no-locale", "--no-sync"},
                            initdb_log, as, -1));
    TY_RETURN_IF_ERROR(WaitForSuccess(initdb, (bin / "initdb").string(), initdb_log));

    TY_ASSIGN_OR_RETURN(int port, PickFreeLocalPort());
    int pipe_fds[2];
    if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
      return Status::IOError(std::string("pipe: ") + std::strerror(errno));
    }
    fs::path log = dir_ / "postgres.log";
    // Durability settings are off: the cluster is deleted at exit anyway.
    auto guardian = Spawn({"/bin/sh",
                           "-c",
                           kGuardianScript,
                           "trainyard-test-postgres",
                           dir_.string(),
                           (bin / "postgres").string(),
                           "-D",
                           (dir_ / "data").string(),
                           "-c",
                           "listen_addresses=127.0.0.1",
                           "-c",
                           "port=" + std::to_string(port),
                           "-c",
                           "unix_socket_directories=" + dir_.string(),
                           "-c",
                           "fsync=off",
                           "-c",
                           "synchronous_commit=off",
                           "-c",
                           "full_page_writes=off",
                           "-c",
                           "max_connections=200",
                           "-c",
                           "shared_buffers=32MB"},
                          log, as, pipe_fds[0]);
    close(pipe_fds[0]);
    if (!guardian.ok()) {
      close(pipe_fds[1]);
      return guardian.status();
    }
    guardian_ = *guardian;
    stop_fd_ = pipe_fds[1];

    std::string conninfo =
        "host=127.0.0.1 port=" + std::to_string(port) + " user=postgres dbname=postgres";
    auto deadline = std::chrono::steady_clock::now() + kStartTimeout;
    // Polls, as pg_ctl -w does: the server says nothing when it is ready.
    while (PQping(conninfo.c_str()) != PQPING_OK) {
      if (fs::exists(dir_ / "postgres.exited")) {
        return Status::Internal((bin / "postgres").string() + " exited while starting:\n" +
                                Tail(log));
      }
      if (std::chrono::steady_clock::now() > deadline) {
        return Status::Unavailable((bin / "postgres").string() + " did not accept connections " +
                                   "within 60 s:\n" + Tail(log));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    base_url_ = "postgresql://postgres@127.0.0.1:" + std::to_string(port) + "/postgres";
    return Status::Ok();
  }

  Status ConnectAdmin(const std::string& url) TY_REQUIRES(mu_) {
    admin_ = PQconnectdb(url.c_str());
    if (admin_ == nullptr || PQstatus(admin_) != CONNECTION_OK) {
      return Status::Unavailable("cannot connect to the test PostgreSQL: " +
                                 ConnectionError(admin_));
    }
    PQsetNoticeProcessor(
        admin_, [](void*, const char*) {}, nullptr);
    return Status::Ok();
  }

  // Closing the pipe makes the guardian stop the server and delete the dir.
  // Also called by the destructor, which the analysis does not check (no other thread is left).
  void StopServer() TY_REQUIRES(mu_) {
    if (stop_fd_ >= 0) {
      close(stop_fd_);
      stop_fd_ = -1;
    }
    if (guardian_ > 0) {
      while (waitpid(guardian_, nullptr, 0) < 0 && errno == EINTR) {
      }
      guardian_ = -1;
    } else if (!dir_.empty()) {
      std::error_code ec;
      fs::remove_all(dir_, ec);  // initdb failed: no guardian to do it
    }
    dir_.clear();
  }

  const pid_t owner_pid_ = getpid();
  Mutex mu_;
  // Start runs once; its failure is every caller's answer.
  bool attempted_ TY_GUARDED_BY(mu_) = false;
  Status start_status_ TY_GUARDED_BY(mu_);
  bool external_ TY_GUARDED_BY(mu_) = false;
  std::string base_url_ TY_GUARDED_BY(mu_);
  PGconn* admin_ TY_GUARDED_BY(mu_) = nullptr;
  std::vector<std::string> created_ TY_GUARDED_BY(mu_);
  int databases_ TY_GUARDED_BY(mu_) = 0;
  fs::path dir_ TY_GUARDED_BY(mu_);
  pid_t guardian_ TY_GUARDED_BY(mu_) = -1;
  int stop_fd_ TY_GUARDED_BY(mu_) = -1;
};

}  // namespace

Result<std::string> PostgresUrlForTest() { return TestPostgres::Instance().NewDatabaseUrl(); }

}  // namespace trainyard::store
