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

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>

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
  // removed when it ends): its port file on cluster nodes, and in multi-user mode (where
  // owner_account is set) a copy of its model: replicas run as their endpoint owner's OS
  // account, which cannot read the server's private artifact store. staging_root must be a
  // directory no job account may write (the jobs' root, 0711). "": neither (replicas read
  // their model in place).
  std::string staging_root;
  // The uid and gid of an owner's OS account (multi-user mode); an error says why there is
  // none.
  std::function<Result<std::pair<uid_t, gid_t>>(const std::string& owner)> owner_account;
};

// Copies the regular files and directories under `from` into `to` (created), each owned by
// uid:gid, directories 0700 and files 0600; symbolic links are not copied. For the staged model
// copies above.
Status CopyTreeAs(const std::string& from, const std::string& to, uid_t uid, gid_t gid);

// The launcher; sets `jobs`' finish listener to it (before jobs.Start()). `jobs` must outlive
// it.
std::unique_ptr<serving::ReplicaLauncher> MakeScheduledReplicaLauncher(
    jobs::JobService& jobs, ScheduledReplicaLauncherOptions options);

}  // namespace trainyard::server
