// ScheduledReplicaLauncher: serving's replicas as jobs of kind service (decision 0018). Each
// Launch submits one job through JobService::SubmitService as the endpoint's owner, asking for
// the endpoint's per-replica resources: the scheduler places it on the training pool (local or
// Slurm executor) under the same capacity, quotas and fair share as training jobs, its cost is
// accounted like a job's, and it shows in the jobs list naming its endpoint. The recovery
// policy never restarts it (recovery_policy.h, `service`); serving does, on the exit callback.
//
// It lives in server/ because it joins two components that may not depend on each other
// (serving and jobs); the class itself is in the .cc (server/'s headers name neither).
//
// Thread-safe. JobService calls OnJobFinished with its lock held; the launcher only queues
// there, and calls JobService (Cancel) and serving's exit callback from a thread of its own,
// holding no lock, so that neither service ever waits on the other's lock.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "trainyard/common/mutex.h"
#include "trainyard/common/status.h"

namespace trainyard::jobs {
class JobService;
struct JobInfo;
struct JobSpec;
}  // namespace trainyard::jobs
namespace trainyard::serving {
class ReplicaLauncher;
struct ReplicaLaunch;
struct ReplicaPlacement;
struct ReplicaEnd;
}  // namespace trainyard::serving

namespace trainyard::server {

// The job a replica runs as (pure: tested without a scheduler). It counts against the
// endpoint's project (launch.project; "default" when empty): its quotas and fair share.
jobs::JobSpec ReplicaJobSpec(const serving::ReplicaLaunch& launch);
// Where a replica is, from its job (pure). `cluster_nodes`: replicas run on the pool's nodes
// (Slurm) and are reached at the node's address in `addresses` (by node name: Slurm's
// NodeAddr), else by its name; otherwise on this machine, at 127.0.0.1. The port is not
// known here (see Placement: the replica reports it).
serving::ReplicaPlacement PlacementOfJob(const jobs::JobInfo& job, bool cluster_nodes,
                                         const std::map<std::string, std::string>& addresses = {});
// The port in a replica's port file (pure): its number, blanks around it allowed; 0 when it is
// not (yet) a port.
int ParseReplicaPort(const std::string& text);
// How the replica ended, from its finished job (pure).
serving::ReplicaEnd EndOfJob(const jobs::JobInfo& job);

// The env variable that names a replica inside its job's spec (it is how a finished job is
// matched to its replica, even one that ends before SubmitService returns).
inline constexpr char kReplicaIdEnv[] = "TRAINYARD_REPLICA_ID";

struct ScheduledReplicaLauncherOptions {
  // Replicas run on cluster nodes (Slurm), the executor pins each to the node the scheduler
  // planned, and the server reaches it at that node's address (see PlacementOfJob). A port
  // free on the server's machine may be taken there, so each replica binds a free port on its
  // node and writes it to <staging_root>/<replica id>/port ($TRAINYARD_REPLICA_PORT_FILE);
  // staging_root must then be on the filesystem the nodes share.
  bool cluster_nodes = false;
  // Each replica's private directory <staging_root>/<replica id> (owned by its account, 0700,
  // removed when it ends) holds its port file on cluster nodes. In multi-user mode (where
  // owner_account is set) replicas run as their endpoint owner's OS account, which cannot read
  // the server's private artifact store, so they read a copy of their model in
  // <staging_root>/models (SharedModelCopies below: one copy per owner and model version,
  // shared by its replicas). staging_root must be a directory no job account may write (the
  // jobs' root, 0711). "": neither (replicas read their model in place).
  std::string staging_root;
  // How long a model copy no replica uses is kept (a restart or scale-up soon after reuses it).
  std::chrono::milliseconds model_copy_grace{std::chrono::seconds(30)};
  // The uid and gid of an owner's OS account (multi-user mode); an error says why there is
  // none.
  std::function<Result<std::pair<uid_t, gid_t>>(const std::string& owner)> owner_account;
};

// Copies the regular files and directories under `from` into `to` (created), each owned by
// uid:gid, directories 0700 and files 0600; symbolic links are not copied. For the staged model
// copies above.
Status CopyTreeAs(const std::string& from, const std::string& to, uid_t uid, gid_t gid);

// The model copies replicas read in multi-user mode: one per owner account and resolved model
// directory, at <root>/<uid>/<key of the directory> (the copy owned by uid:gid, 0700; <root>
// and <root>/<uid> the server's, 0711), shared by every replica of that owner and model and
// counted. The first Acquire copies (to a temporary name, then renamed, so that a copy under
// its final name is always whole; others acquiring it meanwhile wait for it). When the last
// user releases it, it is kept for `grace` and removed by RemoveExpired after that unless
// acquired again. RemoveAll (at shutdown) removes the whole root; copies an earlier run left
// are RemoveLeftoverStaging's. Thread-safe; its lock is a leaf (it calls nothing outside while
// holding it).
class SharedModelCopies {
 public:
  using Copier =
      std::function<Status(const std::string& from, const std::string& to, uid_t uid, gid_t gid)>;
  using Clock = std::chrono::steady_clock;
  SharedModelCopies(std::string root, std::chrono::milliseconds grace, Copier copier);
  SharedModelCopies(const SharedModelCopies&) = delete;
  SharedModelCopies& operator=(const SharedModelCopies&) = delete;

  // The copy of `model_dir` owned by uid:gid (made if there is none), counted as used.
  Result<std::string> Acquire(const std::string& model_dir, uid_t uid, gid_t gid) TY_EXCLUDES(mu_);
  // One use of the copy `path` (from Acquire) ended at `now`.
  void Release(const std::string& path, Clock::time_point now) TY_EXCLUDES(mu_);
  // Removes the copies unused for the grace period at `now`; returns when the next unused one
  // expires (Clock::time_point::max() when none).
  Clock::time_point RemoveExpired(Clock::time_point now) TY_EXCLUDES(mu_);
  // Removes every copy, used or not, and the root.
  void RemoveAll() TY_EXCLUDES(mu_);
  // How many replicas use `path` (-1: no such copy).
  int UsesForTest(const std::string& path) TY_EXCLUDES(mu_);

 private:
  struct Copy {
    int uses = 0;
    bool copying = false;
    bool ready = false;
    Clock::time_point unused_since{};
  };
  const std::string root_;
  const std::chrono::milliseconds grace_;
  const Copier copier_;
  Mutex mu_;
  CondVar copied_;
  std::map<std::string, Copy> copies_ TY_GUARDED_BY(mu_);  // by path
  uint64_t temp_counter_ TY_GUARDED_BY(mu_) = 0;
};

// Removes what an earlier run of the server left in `staging_root` (see the options: replicas'
// private directories and the model copies under models/) when it ended without cleaning up
// (killed), and logs each removed directory (a warning: that run did not stop cleanly);
// returns their paths. Only a real directory owned by this process is cleaned, and nothing
// below it is followed (RemoveTreeSafely): a link a replica's account planted is removed as a
// link. For the start, before any replica.
std::vector<std::string> RemoveLeftoverStaging(const std::string& staging_root);

// The launcher; sets `jobs`' finish listener to it (before jobs.Start()). `jobs` must outlive
// it.
std::unique_ptr<serving::ReplicaLauncher> MakeScheduledReplicaLauncher(
    jobs::JobService& jobs, ScheduledReplicaLauncherOptions options);

}  // namespace trainyard::server
