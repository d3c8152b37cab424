#include "trainyard/server/scheduled_replica_launcher.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <string_view>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "trainyard/common/mutex.h"
#include "trainyard/common/os_account.h"
#include "trainyard/common/paths.h"
#include "trainyard/common/strings.h"
#include "trainyard/identity/authorizer.h"
#include "trainyard/jobs/job_info.h"
#include "trainyard/jobs/job_service.h"
#include "trainyard/serving/replica_launcher.h"

namespace trainyard::server {
namespace {

// A job name from `text`: letters, digits, '.', '_' and '-' (others become '_'), at most 128.
std::string JobName(const std::string& text) {
  std::string out;
  for (char c : text) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    out += ok ? c : '_';
  }
  if (out.empty() || out[0] == '.' || out[0] == '_' || out[0] == '-') out = "r" + out;
  return out.substr(0, 128);
}

constexpr std::string_view kClusterQueued = "queued in the cluster";

namespace fs = std::filesystem;

Status ChownMode(const fs::path& p, uid_t uid, gid_t gid, mode_t mode) {
  if (::lchown(p.c_str(), uid, gid) != 0 || ::chmod(p.c_str(), mode) != 0) {
    return Status::IOError("cannot hand " + p.string() + " to uid " + std::to_string(uid) + ": " +
                           std::strerror(errno));
  }
  return Status::Ok();
}

// The file in a replica's private directory its port is reported in.
constexpr char kPortFileName[] = "port";

}  // namespace

int ParseReplicaPort(const std::string& text) {
  auto port = ParseInt64(Trim(text));
  return port && *port > 0 && *port < 65536 ? static_cast<int>(*port) : 0;
}

Status CopyTreeAs(const std::string& from, const std::string& to, uid_t uid, gid_t gid) {
  std::error_code ec;
  fs::create_directory(to, ec);
  if (ec) return Status::IOError("cannot create " + to + ": " + ec.message());
  TY_RETURN_IF_ERROR(ChownMode(to, uid, gid, 0700));
  fs::recursive_directory_iterator it(from, fs::directory_options::none, ec), end;
  if (ec) return Status::IOError("cannot read " + from + ": " + ec.message());
  for (; it != end; it.increment(ec)) {
    if (ec) return Status::IOError("cannot read " + from + ": " + ec.message());
    const fs::directory_entry& entry = *it;
    fs::path target = fs::path(to) / fs::relative(entry.path(), from);
    if (entry.is_symlink(ec)) continue;
    if (entry.is_directory(ec)) {
      fs::create_directory(target, ec);
      if (ec) return Status::IOError("cannot create " + target.string() + ": " + ec.message());
      TY_RETURN_IF_ERROR(ChownMode(target, uid, gid, 0700));
    } else if (entry.is_regular_file(ec)) {
      fs::copy_file(entry.path(), target, fs::copy_options::overwrite_existing, ec);
      if (ec) {
        return Status::IOError("cannot copy " + entry.path().string() + ": " + ec.message());
      }
      TY_RETURN_IF_ERROR(ChownMode(target, uid, gid, 0600));
    }
  }
  return Status::Ok();
}

namespace {

// The name of a model directory's copy: a hash of its absolute path (model versions' directories
// do not change).
std::string CopyKey(const std::string& model_dir) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(model_dir), ec);
  std::string text = ec ? model_dir : p.string();
  uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(h));
  return out;
}

Status ServerDirectory(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || ::chmod(dir.c_str(), 0711) != 0) {
    return Status::IOError("cannot prepare " + dir.string() + ": " +
                           (ec ? ec.message() : std::strerror(errno)));
  }
  return Status::Ok();
}

// Removes a directory a replica's account may have written into (see RemoveTreeSafely).
void RemoveReplicaTree(const std::string& path, std::string_view what) {
  auto removed = RemoveTreeSafely(path);
  if (!removed.ok()) {
    spdlog::warn("serving: cannot remove the {} {}: {}", what, path, removed.status().message());
  }
}

}  // namespace

std::vector<std::string> RemoveLeftoverStaging(const std::string& staging_root) {
  std::vector<std::string> removed;
  struct stat st {};
  if (::lstat(staging_root.c_str(), &st) != 0) return removed;  // none yet
  if (!S_ISDIR(st.st_mode) || st.st_uid != ::geteuid()) {
    spdlog::warn(
        "serving: not cleaning {}: it is not a directory of this server's account (uid {}); "
        "remove it and start again",
        staging_root, ::geteuid());
    return removed;
  }
  std::error_code ec;
  std::vector<fs::path> entries;
  for (const auto& e : fs::directory_iterator(staging_root, ec)) entries.push_back(e.path());
  if (ec) {
    spdlog::warn("serving: cannot list {}: {}", staging_root, ec.message());
    return removed;
  }
  // models/<uid>/<copy>: named one by one in the log, then removed with their root.
  std::vector<std::string> copies;
  for (const auto& owner : fs::directory_iterator(fs::path(staging_root) / "models", ec)) {
    if (!owner.is_directory(ec) || owner.is_symlink(ec)) continue;
    for (const auto& copy : fs::directory_iterator(owner.path(), ec)) {
      copies.push_back(copy.path().string());
    }
  }
  for (const auto& entry : entries) {
    std::string path = entry.string();
    auto count = RemoveTreeSafely(path);
    if (!count.ok()) {
      spdlog::warn("serving: cannot remove {}, left by an earlier run: {}", path,
                   count.status().message());
      continue;
    }
    if (entry.filename() == "models") {
      for (const auto& copy : copies) {
        spdlog::warn("serving: removed the model copy {}, left by an earlier run", copy);
        removed.push_back(copy);
      }
    } else {
      spdlog::warn("serving: removed the replica directory {} ({} entries), left by an earlier run",
                   path, *count);
      removed.push_back(path);
    }
  }
  return removed;
}

SharedModelCopies::SharedModelCopies(std::string root, std::chrono::milliseconds grace,
                                     Copier copier)
    : root_(std::move(root)), grace_(grace), copier_(std::move(copier)) {}

Result<std::string> SharedModelCopies::Acquire(const std::string& model_dir, uid_t uid, gid_t gid) {
  fs::path owner_dir = fs::path(root_) / std::to_string(uid);
  std::string path = (owner_dir / CopyKey(model_dir)).string();
  std::string temp;
  {
    MutexLock lock(mu_);
    Copy& copy = copies_[path];  // stays while it is used (uses > 0)
    ++copy.uses;
    while (copy.copying) copied_.Wait(mu_);
    if (copy.ready) return path;
    copy.copying = true;
    temp = path + ".tmp-" + std::to_string(++temp_counter_);
  }
  // Copied without the lock (a model may be large); others acquiring it wait above. Both
  // directories above the copy must be traversable by its account (the server's umask may
  // be 077).
  Status s = ServerDirectory(root_);
  if (s.ok()) s = ServerDirectory(owner_dir);
  if (s.ok()) {
    RemoveReplicaTree(path, "model copy");  // not a copy this run made: not trusted
    RemoveReplicaTree(temp, "model copy");
    s = copier_(model_dir, temp, uid, gid);
  }
  if (s.ok() && ::rename(temp.c_str(), path.c_str()) != 0) {
    s = Status::IOError("cannot rename " + temp + " to " + path + ": " + std::strerror(errno));
  }
  if (!s.ok()) RemoveReplicaTree(temp, "model copy");
  MutexLock lock(mu_);
  Copy& copy = copies_[path];
  copy.copying = false;
  copied_.NotifyAll();
  if (!s.ok()) {
    if (--copy.uses == 0) copies_.erase(path);
    return s;
  }
  copy.ready = true;
  return path;
}

void SharedModelCopies::Release(const std::string& path, Clock::time_point now) {
  MutexLock lock(mu_);
  auto it = copies_.find(path);
  if (it == copies_.end() || it->second.uses == 0) return;
  if (--it->second.uses == 0) it->second.unused_since = now;
}

SharedModelCopies::Clock::time_point SharedModelCopies::RemoveExpired(Clock::time_point now) {
  std::vector<std::string> remove;
  Clock::time_point next = Clock::time_point::max();
  {
    MutexLock lock(mu_);
    for (auto it = copies_.begin(); it != copies_.end();) {
      const Copy& c = it->second;
      if (c.uses > 0 || c.copying) {
        ++it;
      } else if (now - c.unused_since >= grace_) {
        remove.push_back(it->first);
        it = copies_.erase(it);
      } else {
        next = std::min(next, c.unused_since + grace_);
        ++it;
      }
    }
    // Removed under the lock: an Acquire of the same copy must not find it half removed.
    for (const auto& path : remove) RemoveReplicaTree(path, "model copy");
  }
  return next;
}

void SharedModelCopies::RemoveAll() {
  MutexLock lock(mu_);
  for (auto it = copies_.begin(); it != copies_.end();) {
    if (it->second.copying) {  // its Acquire (and those waiting on it) still hold the entry
      it->second.ready = false;
      ++it;
    } else {
      it = copies_.erase(it);
    }
  }
  RemoveReplicaTree(root_, "model copies in");
}

int SharedModelCopies::UsesForTest(const std::string& path) {
  MutexLock lock(mu_);
  auto it = copies_.find(path);
  return it == copies_.end() ? -1 : it->second.uses;
}

// See the header. JobService calls OnJobFinished with its lock held; the launcher only queues
// there, and calls JobService (Cancel) and serving's exit callback from a thread of its own,
// holding no lock, so that neither service ever waits on the other's lock.
class ScheduledReplicaLauncher : public serving::ReplicaLauncher {
 public:
  using Options = ScheduledReplicaLauncherOptions;
  ScheduledReplicaLauncher(jobs::JobService& jobs, Options options);
  ~ScheduledReplicaLauncher() override;
  ScheduledReplicaLauncher(const ScheduledReplicaLauncher&) = delete;
  ScheduledReplicaLauncher& operator=(const ScheduledReplicaLauncher&) = delete;

  // JobService's finish listener: queues the end of a service job's replica.
  void OnJobFinished(const jobs::JobInfo& job) TY_EXCLUDES(mu_);

  void SetExitCallback(ExitCallback cb) override TY_EXCLUDES(mu_);
  void EndLeftovers() override;
  std::string BindHost() const override { return options_.cluster_nodes ? "0.0.0.0" : "127.0.0.1"; }
  bool ReplicasReportPorts() const override { return options_.cluster_nodes; }
  Status Launch(const serving::ReplicaLaunch& launch) override TY_EXCLUDES(mu_);
  serving::ReplicaPlacement Placement(const std::string& id) override TY_EXCLUDES(mu_);
  Status Stop(const std::string& id) override TY_EXCLUDES(mu_);
  void Shutdown(std::chrono::milliseconds wait) override TY_EXCLUDES(mu_);

 private:
  struct Replica {
    std::string job_id;  // "" while SubmitService runs
    bool stop_requested = false;
    std::string staged;      // its private directory, for its port file ("" = none)
    std::string model_copy;  // the shared model copy it uses (copies_; "" = none)
  };
  // Gives the replica (see the options) the shared copy of its model as its owner's account,
  // and its private directory for the file it reports its port in on cluster nodes. Rewrites
  // launch.env's model directory and sets its port file; fills `r`'s staged and model_copy
  // (to remove and release at its end).
  Status Stage(serving::ReplicaLaunch& launch, Replica& r);
  // Ends `r`'s use of its staged directory and model copy (without mu_).
  void Unstage(const Replica& r);
  static void RemoveStaged(const std::string& dir);
  void Work() TY_EXCLUDES(mu_);
  void CancelJob(const std::string& job_id, const std::string& replica_id);

  jobs::JobService& jobs_;
  const Options options_;
  SharedModelCopies copies_;
  Mutex mu_;
  CondVar cv_;
  ExitCallback callback_ TY_GUARDED_BY(mu_);
  std::map<std::string, Replica> replicas_ TY_GUARDED_BY(mu_);                  // by replica id
  std::deque<std::pair<std::string, std::string>> cancels_ TY_GUARDED_BY(mu_);  // job, replica
  std::deque<std::pair<std::string, serving::ReplicaEnd>> ended_ TY_GUARDED_BY(mu_);
  std::deque<Replica> unstage_ TY_GUARDED_BY(mu_);  // ended replicas' directories and copies
  bool shut_down_ TY_GUARDED_BY(mu_) = false;
  bool stop_worker_ TY_GUARDED_BY(mu_) = false;
  std::thread worker_;
};

jobs::JobSpec ReplicaJobSpec(const serving::ReplicaLaunch& launch) {
  jobs::JobSpec spec;
  spec.name = JobName(launch.endpoint + "." + launch.served_entity);
  spec.kind = jobs::JobKind::kService;
  spec.endpoint = launch.endpoint;
  spec.project = launch.project.empty() ? "default" : launch.project;
  spec.experiment = "serving-endpoint-" + launch.endpoint;
  spec.command = launch.command;
  spec.env = launch.env;
  spec.env[kReplicaIdEnv] = launch.id;
  spec.env["TRAINYARD_ENDPOINT"] = launch.endpoint;
  spec.resources.nodes = 1;
  spec.resources.gpus_per_node = launch.resources.gpus;
  spec.resources.cpus_per_node = launch.resources.cpus;
  spec.resources.memory_bytes = launch.resources.memory_bytes;
  spec.processes_per_node = 1;  // one server process, however many GPUs it holds
  spec.max_restarts = 0;
  spec.preemption_grace_ms = launch.stop_grace.count();
  return spec;
}

serving::ReplicaPlacement PlacementOfJob(const jobs::JobInfo& job, bool cluster_nodes,
                                         const std::map<std::string, std::string>& addresses) {
  serving::ReplicaPlacement p;
  p.job_id = job.job_id;
  if (jobs::IsTerminal(job.state)) {
    p.state = serving::ReplicaPlacement::State::kEnded;
    p.reason = job.message;
    return p;
  }
  if (job.state == jobs::JobState::kPending) {
    p.state = serving::ReplicaPlacement::State::kPending;
    p.reason = job.message.empty() ? "queued" : job.message;
    return p;
  }
  // Running as far as the scheduler is concerned; a cluster executor may still queue it.
  if (StartsWith(job.message, kClusterQueued)) {
    p.state = serving::ReplicaPlacement::State::kPending;
    p.reason = job.message;
    return p;
  }
  p.state = serving::ReplicaPlacement::State::kRunning;
  const jobs::AttemptInfo* attempt = nullptr;
  for (const auto& a : job.attempt_list) {
    if (a.attempt == job.attempts) attempt = &a;
  }
  p.host = "127.0.0.1";
  if (attempt) {
    p.log = attempt->log_dir + "/rank-0.log";
    if (cluster_nodes && !attempt->nodes.empty()) {
      auto address = addresses.find(attempt->nodes.front());
      p.host = address != addresses.end() ? address->second : attempt->nodes.front();
    }
  }
  return p;
}

serving::ReplicaEnd EndOfJob(const jobs::JobInfo& job) {
  serving::ReplicaEnd end;
  end.stopped = job.state == jobs::JobState::kCancelled;
  end.cause =
      std::string(jobs::JobStateName(job.state)) + (job.message.empty() ? "" : ": " + job.message);
  return end;
}

ScheduledReplicaLauncher::ScheduledReplicaLauncher(jobs::JobService& jobs, Options options)
    : jobs_(jobs),
      options_(std::move(options)),
      copies_(options_.staging_root.empty() ? "" : options_.staging_root + "/models",
              options_.model_copy_grace, CopyTreeAs) {
  worker_ = std::thread([this] { Work(); });
}

ScheduledReplicaLauncher::~ScheduledReplicaLauncher() {
  Shutdown(std::chrono::milliseconds(0));
  {
    MutexLock lock(mu_);
    stop_worker_ = true;
  }
  cv_.NotifyAll();
  if (worker_.joinable()) worker_.join();
  MutexLock lock(mu_);
  for (const auto& [id, r] : replicas_) {
    if (!r.staged.empty()) RemoveStaged(r.staged);  // replicas that outlived Shutdown's wait
  }
  if (!options_.staging_root.empty()) copies_.RemoveAll();
}

void ScheduledReplicaLauncher::SetExitCallback(ExitCallback cb) {
  MutexLock lock(mu_);
  callback_ = std::move(cb);
}

void ScheduledReplicaLauncher::OnJobFinished(const jobs::JobInfo& job) {
  if (job.spec.kind != jobs::JobKind::kService) return;
  auto id = job.spec.env.find(kReplicaIdEnv);
  if (id == job.spec.env.end()) return;
  {
    MutexLock lock(mu_);
    auto it = replicas_.find(id->second);
    if (it == replicas_.end()) return;  // a leftover of an earlier run
    // Not its job (job_id is "" only while SubmitService runs).
    if (!it->second.job_id.empty() && it->second.job_id != job.job_id) return;
    unstage_.push_back(it->second);
    replicas_.erase(it);
    ended_.emplace_back(id->second, EndOfJob(job));
  }
  cv_.NotifyAll();
}

void ScheduledReplicaLauncher::EndLeftovers() {
  // Replica directories and model copies (perhaps half written) an earlier run left when it
  // was killed: none is in use yet.
  if (!options_.staging_root.empty()) RemoveLeftoverStaging(options_.staging_root);
  jobs::ListJobsRequest request;
  request.active_only = true;
  request.max_results = 1000;
  auto active = jobs_.ListJobs(request);
  if (!active.ok()) {
    spdlog::warn("serving: cannot list the replicas an earlier run left: {}",
                 active.status().message());
    return;
  }
  for (const auto& job : *active) {
    if (job.spec.kind != jobs::JobKind::kService) continue;
    spdlog::info("serving: ending replica job {} of endpoint {} left by an earlier run", job.job_id,
                 job.spec.endpoint);
    Status s = jobs_.Cancel(identity::Principal::System(), job.job_id);
    if (!s.ok()) spdlog::warn("serving: cannot end job {}: {}", job.job_id, s.message());
  }
}

Status ScheduledReplicaLauncher::Stage(serving::ReplicaLaunch& launch, Replica& r) {
  const bool copy_model = options_.owner_account && !launch.model_dir.empty();
  if (options_.staging_root.empty() || (!copy_model && !options_.cluster_nodes)) {
    return Status::Ok();
  }
  uid_t uid = ::geteuid();
  gid_t gid = ::getegid();
  if (options_.owner_account) {
    TY_ASSIGN_OR_RETURN(auto account, options_.owner_account(launch.owner));
    std::tie(uid, gid) = account;
  }
  if (copy_model) {
    auto copy = copies_.Acquire(launch.model_dir, uid, gid);
    if (!copy.ok()) return copy.status().WithContext("giving the replica a copy of its model");
    r.model_copy = *copy;
    launch.env[serving::kModelDirEnv] = *copy;
  }
  if (options_.cluster_nodes) {
    std::string dir = (fs::path(options_.staging_root) / launch.id).string();
    RemoveStaged(dir);
    Status s = EnsurePrivateDirectory(dir, uid, gid, {});
    if (!s.ok()) {
      RemoveStaged(dir);
      Unstage(r);
      r = Replica{};
      return s.WithContext("giving the replica a directory for its port file");
    }
    r.staged = dir;
    launch.env[serving::kPortFileEnv] = dir + "/" + kPortFileName;
  }
  return Status::Ok();
}

void ScheduledReplicaLauncher::Unstage(const Replica& r) {
  if (!r.staged.empty()) RemoveStaged(r.staged);
  if (!r.model_copy.empty()) copies_.Release(r.model_copy, SharedModelCopies::Clock::now());
}

void ScheduledReplicaLauncher::RemoveStaged(const std::string& dir) {
  RemoveReplicaTree(dir, "replica directory");
}

Status ScheduledReplicaLauncher::Launch(const serving::ReplicaLaunch& request) {
  serving::ReplicaLaunch launch = request;
  {
    MutexLock lock(mu_);
    if (shut_down_) return Status::Unavailable("the server is stopping");
  }
  Replica staged;
  TY_RETURN_IF_ERROR(Stage(launch, staged));
  {
    MutexLock lock(mu_);
    replicas_[launch.id] = staged;
  }
  auto job = jobs_.SubmitService(launch.owner, ReplicaJobSpec(launch));
  if (!job.ok()) {
    {
      MutexLock lock(mu_);
      replicas_.erase(launch.id);
    }
    Unstage(staged);
    cv_.NotifyAll();  // the worker times the copy's removal
    return job.status();
  }
  MutexLock lock(mu_);
  auto it = replicas_.find(launch.id);
  if (it == replicas_.end()) return Status::Ok();  // it ended already; the callback is queued
  it->second.job_id = job->job_id;
  if (it->second.stop_requested || shut_down_) {
    cancels_.emplace_back(job->job_id, launch.id);
    cv_.NotifyAll();
  }
  return Status::Ok();
}

serving::ReplicaPlacement ScheduledReplicaLauncher::Placement(const std::string& id) {
  std::string job_id;
  std::string staged;
  serving::ReplicaPlacement p;
  {
    MutexLock lock(mu_);
    auto it = replicas_.find(id);
    if (it == replicas_.end()) {
      p.state = serving::ReplicaPlacement::State::kEnded;
      return p;
    }
    job_id = it->second.job_id;
    staged = it->second.staged;
  }
  p.job_id = job_id;
  if (job_id.empty()) {
    p.reason = "submitting";
    return p;
  }
  auto job = jobs_.GetJob(job_id);
  if (!job.ok()) {
    p.reason = job.status().message();
    return p;
  }
  p = PlacementOfJob(*job, options_.cluster_nodes, jobs_.pool().node_addresses);
  if (p.state != serving::ReplicaPlacement::State::kRunning) return p;
  if (!options_.cluster_nodes) {
    auto pids = jobs_.RunningProcessIds(job_id);
    if (pids.ok() && !pids->empty()) p.pid = pids->front();
  } else if (!staged.empty()) {
    // The replica's account writes this file: read it without following links, a few bytes.
    p.port = ParseReplicaPort(ReadFileTailSafely(staged + "/" + kPortFileName, 16));
  }
  return p;
}

Status ScheduledReplicaLauncher::Stop(const std::string& id) {
  MutexLock lock(mu_);
  auto it = replicas_.find(id);
  if (it == replicas_.end()) return Status::NotFound("replica " + id + " is not running");
  if (it->second.stop_requested) return Status::Ok();
  it->second.stop_requested = true;
  if (!it->second.job_id.empty()) cancels_.emplace_back(it->second.job_id, id);
  cv_.NotifyAll();
  return Status::Ok();
}

void ScheduledReplicaLauncher::CancelJob(const std::string& job_id, const std::string& replica_id) {
  Status s = jobs_.Cancel(identity::Principal::System(), job_id);
  if (!s.ok() && s.code() != StatusCode::kFailedPrecondition) {  // it has ended already
    spdlog::warn("serving: cannot stop replica {} (job {}): {}", replica_id, job_id, s.message());
  }
}

void ScheduledReplicaLauncher::Work() {
  while (true) {
    std::vector<std::pair<std::string, std::string>> cancels;
    std::vector<std::pair<std::string, serving::ReplicaEnd>> ended;
    std::vector<Replica> unstage;
    ExitCallback cb;
    // Model copies no replica uses are removed after their grace period.
    auto next_expiry = copies_.RemoveExpired(SharedModelCopies::Clock::now());
    {
      MutexLock lock(mu_);
      while (!stop_worker_ && cancels_.empty() && ended_.empty() && unstage_.empty()) {
        if (next_expiry == SharedModelCopies::Clock::time_point::max()) {
          cv_.Wait(mu_);
        } else if (!cv_.WaitUntil(mu_, next_expiry)) {
          break;
        }
      }
      if (stop_worker_ && cancels_.empty() && ended_.empty() && unstage_.empty()) return;
      unstage.assign(unstage_.begin(), unstage_.end());
      unstage_.clear();
      cancels.assign(cancels_.begin(), cancels_.end());
      cancels_.clear();
      ended.assign(ended_.begin(), ended_.end());
      ended_.clear();
      cb = shut_down_ ? nullptr : callback_;
    }
    for (const auto& r : unstage) Unstage(r);
    for (const auto& [job_id, replica_id] : cancels) CancelJob(job_id, replica_id);
    for (const auto& [id, end] : ended) {
      if (cb) cb(id, end);
    }
    cv_.NotifyAll();  // Shutdown waits for replicas_ to empty
  }
}

void ScheduledReplicaLauncher::Shutdown(std::chrono::milliseconds wait) {
  std::vector<std::pair<std::string, std::string>> running;
  {
    MutexLock lock(mu_);
    if (shut_down_) return;
    shut_down_ = true;
    for (auto& [id, r] : replicas_) {
      if (!r.job_id.empty()) running.emplace_back(r.job_id, id);
      r.stop_requested = true;
    }
  }
  for (const auto& [job_id, replica_id] : running) CancelJob(job_id, replica_id);
  MutexLock lock(mu_);
  auto deadline = std::chrono::steady_clock::now() + wait + std::chrono::seconds(1);
  while (!replicas_.empty()) {
    if (!cv_.WaitUntil(mu_, deadline)) break;
  }
}

std::unique_ptr<serving::ReplicaLauncher> MakeScheduledReplicaLauncher(
    jobs::JobService& jobs, ScheduledReplicaLauncherOptions options) {
  auto launcher = std::make_unique<ScheduledReplicaLauncher>(jobs, std::move(options));
  jobs.SetFinishListener([l = launcher.get()](const jobs::JobInfo& job) { l->OnJobFinished(job); });
  return launcher;
}

}  // namespace trainyard::server
