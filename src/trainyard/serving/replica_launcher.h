// ReplicaLauncher: places, stops and watches the processes of serving replicas. The serving
// service decides how many replicas run and which port each listens on; a launcher decides
// where they run and runs them.
//
// The server's launcher (server/scheduled_replica_launcher.h) submits each replica to the job
// scheduler as a job of kind service: it waits in the queue for the resources the endpoint
// asks for, runs on the training pool (local or Slurm executor) as the endpoint's owner, and
// shows in the jobs list (decision 0018). Serving depends on no part of that: only on this
// interface.
//
// Thread-safe. The exit callback comes once per launched replica that ends (also one that
// ends before it was placed), from a launcher thread, with no launcher lock held; the caller
// may call the launcher from it.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <string>

#include "trainyard/common/status.h"
#include "trainyard/serving/endpoint.h"

namespace trainyard::serving {

// The variable a replica's command reads its model directory from.
inline constexpr char kModelDirEnv[] = "TRAINYARD_MODEL_DIR";
// Where a replica that picks its own port (ReplicaLauncher::ReplicasReportPorts) writes it:
// the port number, once it listens, written to a temporary name and renamed to this one.
inline constexpr char kPortFileEnv[] = "TRAINYARD_REPLICA_PORT_FILE";

struct ReplicaLaunch {
  std::string id;        // unique among running replicas
  std::string endpoint;  // the endpoint it serves
  std::string served_entity;
  std::string owner;  // the endpoint's owner: whose account the replica runs as
  ReplicaResources resources;
  std::string project = "default";  // the project its resources count against
  // The directory of the model it serves. The command reads it as "$TRAINYARD_MODEL_DIR": a
  // launcher whose replicas cannot read it in place (they run as another account, on another
  // node) hands them a copy there instead.
  std::string model_dir;
  // Run with /bin/sh -c, in a working directory of the launcher's choosing. It listens on
  // BindHost() and the port serving chose, or (ReplicasReportPorts) on a free port it writes
  // to "$TRAINYARD_REPLICA_PORT_FILE".
  std::string command;
  std::map<std::string, std::string> env;
  std::chrono::milliseconds stop_grace{std::chrono::seconds(10)};
};

// Where a launched replica is now.
struct ReplicaPlacement {
  enum class State {
    kPending,  // waiting to be placed (the scheduler's queue, the cluster's)
    kRunning,  // its process runs on `host`
    kEnded,    // it ended (the exit callback comes, or came)
  };
  State state = State::kPending;
  std::string reason;  // kPending: why it waits, in the scheduler's words
  std::string host;    // kRunning: the address that reaches it from the server
  // kRunning, where ReplicasReportPorts: the port it wrote to its port file; 0 until it has
  // (it is starting: loading its model).
  int port = 0;
  std::string job_id;  // the job it runs as ("" when none)
  std::string log;     // its log file, "" until it runs
  int pid = 0;         // its process (group) where the launcher knows it; 0 otherwise
};

struct ReplicaEnd {
  bool stopped = false;  // it ended because it was asked to (Stop, or cancelled as a job)
  std::string cause;     // for people: "exit code 3 on rank 0", "cancelled by alice"
};

class ReplicaLauncher {
 public:
  virtual ~ReplicaLauncher() = default;
  using ExitCallback = std::function<void(const std::string& id, const ReplicaEnd& end)>;
  // Set before any Launch.
  virtual void SetExitCallback(ExitCallback cb) = 0;
  // Ends the replicas an earlier run of the server left running (serving starts its replicas
  // anew on each start). Called once, before any Launch.
  virtual void EndLeftovers() = 0;
  // The address a replica's server binds: loopback where replicas run on the server's own
  // machine, every interface where they run on cluster nodes.
  virtual std::string BindHost() const = 0;
  // Where a replica's port comes from. false: serving picks a free port on this machine and
  // passes it (replicas run here). true: replicas run on other machines, where a port free
  // here may be taken; each binds a free port on its node and writes it to the file
  // $TRAINYARD_REPLICA_PORT_FILE names (the launcher sets it), and Placement reports it.
  virtual bool ReplicasReportPorts() const { return false; }
  // Queues the replica for placement. InvalidArgument when it can never be placed (it asks for
  // more than a node has), naming the resources.
  virtual Status Launch(const ReplicaLaunch& launch) = 0;
  // Where it is now. kEnded for an id not (or no longer) launched.
  virtual ReplicaPlacement Placement(const std::string& id) = 0;
  // Asks it to stop (SIGTERM, SIGKILL after its stop_grace); the exit callback follows.
  // Does not wait.
  virtual Status Stop(const std::string& id) = 0;
  // Stops every replica and waits (up to `wait`) for them to end; no callback after it.
  virtual void Shutdown(std::chrono::milliseconds wait) = 0;
};

}  // namespace trainyard::serving
