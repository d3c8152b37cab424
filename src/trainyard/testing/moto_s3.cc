#include "trainyard/testing/moto_s3.h"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <vector>

extern char** environ;

namespace trainyard::testing {
namespace {

namespace fs = std::filesystem;

void RemoveTempDirs() {
  std::error_code ec;
  fs::remove_all(MotoS3::TempDir("cache"), ec);
  fs::remove_all(MotoS3::TempDir("tls"), ec);
}

}  // namespace

const MotoS3& MotoS3::Get() {
  static MotoS3* server = new MotoS3(false);  // left to die with the process's pipes
  return *server;
}

const MotoS3& MotoS3::GetTls() {
  static MotoS3* server = new MotoS3(true);
  return *server;
}

std::string MotoS3::TempDir(const std::string& what) {
  return (fs::temp_directory_path() / ("ty-s3-" + what + "-" + std::to_string(::getpid())))
      .string();
}

MotoS3::MotoS3(bool tls) {
  static std::once_flag cleanup;
  std::call_once(cleanup, [] { std::atexit(RemoveTempDirs); });
  error_ = Start(tls);
}

std::string MotoS3::Start(bool tls) {
  std::error_code ec;
  fs::path root = fs::canonical("/proc/self/exe", ec).parent_path().parent_path();
  fs::path script = root / "tests" / "moto_s3.py";
  const char* py_env = std::getenv("TRAINYARD_TEST_PYTHON");
  std::string python = py_env ? py_env : (root / ".venv" / "bin" / "python").string();
  if (!fs::exists(script) || !fs::exists(python)) {
    return "cannot find " + script.string() + " and " + python +
           ": run scripts/install-deps (it installs moto[server] into .venv)";
  }
  int in[2], out[2];
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) return "pipe failed";
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  std::string bucket = "trainyard-unit-" + std::to_string(::getpid());
  std::vector<std::string> args = {python, script.string(), "--bucket", bucket};
  if (tls) {
    args.push_back("--tls-dir");
    args.push_back(TempDir("tls"));
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int rc = posix_spawn(&pid_, python.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(in[0]);
  ::close(out[1]);
  if (rc != 0) return "cannot start " + python + ": " + std::strerror(rc);
  stdin_fd_ = in[1];  // closing it (at exit) stops the server
  std::string line;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  while (line.find('\n') == std::string::npos) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return "moto_s3.py printed nothing within 90 s";
    pollfd p{out[0], POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char buf[4096];
    ssize_t n = ::read(out[0], buf, sizeof(buf));
    if (n <= 0) return "moto_s3.py exited before it was ready (see its stderr above)";
    line.append(buf, static_cast<size_t>(n));
  }
  ::close(out[0]);
  try {
    auto info = boost::json::parse(line.substr(0, line.find('\n'))).as_object();
    endpoint_ = std::string(info.at("endpoint").as_string());
    region_ = std::string(info.at("region").as_string());
    bucket_ = std::string(info.at("bucket").as_string());
    access_key_ = std::string(info.at("access_key_id").as_string());
    secret_key_ = std::string(info.at("secret_access_key").as_string());
    role_arn_ = std::string(info.at("role_arn").as_string());
    if (tls) ca_file_ = std::string(info.at("ca_file").as_string());
  } catch (const std::exception& e) {
    return std::string("bad line from moto_s3.py: ") + e.what() + ": " + line;
  }
  return "";
}

}  // namespace trainyard::testing
