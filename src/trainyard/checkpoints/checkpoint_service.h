// CheckpointService: the server's side of checkpoints. Workloads upload a checkpoint's blobs
// (one upload per rank), the commit saves them atomically through the CheckpointStore,
// registers a complete checkpoint with its job (so recovery passes it in
// TRAINYARD_RESUME_FROM) and applies the job's retention policy. Also lists, inspects,
// verifies, reads, deletes and garbage-collects checkpoints.
//
// A checkpoint of job J in project P at step S is named by the URI
// trainyard-checkpoint://P/J/S (what the job's latest checkpoint path and
// TRAINYARD_RESUME_FROM hold).
//
// Uploads are staged as files under `staging_dir/<upload id>/` (so they survive a server
// restart and need no memory until the commit); the commit reads one rank's blobs into
// memory and saves them. Staged uploads untouched for a day are removed by CollectGarbage.
// The store has one save in flight at a time, so commits (of all jobs) run one after another;
// disk bandwidth, not the queue, is what limits them on one machine.
//
// Authorization: writes need the job's own scoped token, or EDIT on the job (owner, admin, a
// grant); a token scoped to another job is refused. Reads are open to every authenticated
// caller; garbage collection is for admins.
//
// Thread-safe. Retention policies live in the metadata store (table checkpoint_retention).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "trainyard/checkpoints/checkpoint_store.h"
#include "trainyard/checkpoints/retention.h"
#include "trainyard/common/clock.h"
#include "trainyard/common/mutex.h"
#include "trainyard/common/status.h"
#include "trainyard/identity/identity_service.h"
#include "trainyard/store/database.h"

namespace trainyard::jobs {
class JobService;
struct JobInfo;
}  // namespace trainyard::jobs

namespace trainyard::checkpoints {

inline constexpr std::string_view kCheckpointUriScheme = "trainyard-checkpoint://";

std::string CheckpointUri(std::string_view project, std::string_view job, int64_t step);

struct CheckpointAddress {
  std::string project;
  std::string job;
  int64_t step = 0;
};
// Parses trainyard-checkpoint://P/J/S; InvalidArgument for anything else.
Result<CheckpointAddress> ParseCheckpointUri(std::string_view uri);

// What BeginUpload starts: one rank's upload of a checkpoint of a job.
struct UploadRequest {
  std::string job_id;
  int64_t step = 0;
  int rank = 0;
  int world_size = 1;
};

struct UploadInfo {
  std::string upload_id;
  std::string project;
  std::string job_id;
  int64_t step = 0;
  int rank = 0;
  int world_size = 1;
  int64_t attempt = 0;
  int64_t created_ms = 0;
};

struct StagedBlob {
  std::string name;
  BlobKind kind = BlobKind::kFile;
  DType dtype = DType::kU8;
  std::vector<int64_t> shape;
  uint64_t size = 0;
};

// One blob for PutBlob: its description and its bytes, either in `body_file` (a file the
// service takes: it is moved into staging) or, when that is empty, in `body` (borrowed).
struct PutBlobRequest {
  std::string upload_id;
  StagedBlob blob;
  std::string body_file;
  std::string_view body;
};

struct CommitRequest {
  std::map<std::string, double> metrics;
  std::string user_metadata;  // free-form (JSON text by convention)
  std::string rng_state;
  // When not empty: the blobs of the checkpoint, in order; every one must have been
  // uploaded and no other. Empty: every uploaded blob, by name.
  std::vector<std::string> blob_order;
};

struct CommitResult {
  Manifest manifest;                   // this rank's
  bool complete = false;               // every rank has committed
  std::string uri;                     // trainyard-checkpoint://...
  bool registered = false;             // reported to the job (complete and the job is active)
  std::vector<int64_t> deleted_steps;  // by the retention policy
};

struct GcReport {
  std::string project;
  GcStats stats;
  int64_t staged_uploads_removed = 0;
};

class CheckpointService {
 public:
  // `store` is shared with nobody else that deletes checkpoints; `staging_dir` is a local
  // directory on the same filesystem as the HTTP server's upload directory (so uploaded
  // bodies are moved, not copied).
  CheckpointService(store::Database& db, Clock& clock, Random& random,
                    identity::IdentityService& identity, jobs::JobService& jobs,
                    std::shared_ptr<CheckpointStore> store, std::string staging_dir);
  CheckpointService(const CheckpointService&) = delete;
  CheckpointService& operator=(const CheckpointService&) = delete;

  static std::vector<store::Migration> Migrations();
  // Called after a checkpoint becomes complete (every rank committed) with the committing
  // caller, its job, step and URI (the server records lineage from it). Set once, before
  // serving; it must be cheap and must not call back into this service.
  using CompleteListener =
      std::function<void(const identity::Principal& who, const std::string& job_id, int64_t step,
                         const std::string& uri)>;
  void SetCompleteListener(CompleteListener listener) { complete_listener_ = std::move(listener); }

  // --- the upload path (one upload per rank)
  Result<UploadInfo> BeginUpload(const identity::Principal& who, const UploadRequest& request);
  // Stages one blob. A tensor's size must match dtype × shape. Uploading a name again
  // replaces it.
  Status PutBlob(const identity::Principal& who, const PutBlobRequest& request) TY_EXCLUDES(mu_);
  Result<CommitResult> Commit(const identity::Principal& who, const std::string& upload_id,
                              CommitRequest request) TY_EXCLUDES(mu_);
  Status AbortUpload(const identity::Principal& who, const std::string& upload_id) TY_EXCLUDES(mu_);

  // --- reading
  Result<std::vector<CheckpointInfo>> List(const std::string& job_id);
  Result<std::vector<int64_t>> ListIncomplete(const std::string& job_id);
  Result<std::optional<CheckpointInfo>> Latest(const std::string& job_id);
  Result<CheckpointInfo> Get(const std::string& job_id, int64_t step);
  Status Verify(const std::string& job_id, int64_t step);
  Result<Blob> ReadBlob(const std::string& job_id, int64_t step, int rank, const std::string& name);
  // Writes rank `rank`'s tensors as safetensors to a new temporary file, returned; the
  // caller deletes it.
  Result<std::string> ExportSafetensors(const std::string& job_id, int64_t step, int rank);

  // --- changing
  Status Delete(const identity::Principal& who, const std::string& job_id, int64_t step);
  Result<RetentionPolicy> GetRetention(const std::string& job_id);
  // Stores the policy and applies it at once; returns the steps it deleted.
  Result<std::vector<int64_t>> SetRetention(const identity::Principal& who,
                                            const std::string& job_id,
                                            const RetentionPolicy& policy);
  // One project, or every project when `project` is empty.
  Result<std::vector<GcReport>> CollectGarbage(const identity::Principal& who,
                                               const std::string& project);
  // At start, before serving: removes what a crashed server left in staging (exports,
  // half-written files, uploads that never got a session) and stale uploads; uploads that
  // may still be resumed stay. Returns how many entries were removed.
  int64_t RemoveLeftoversAtStart() TY_EXCLUDES(mu_);

 private:
  struct Session;
  Status AuthorizeWrite(const identity::Principal& who, const jobs::JobInfo& job);
  Result<Session> LoadSession(const std::string& upload_id);
  // The session's staged blobs read into memory, in `order`, with the request's metadata.
  Result<CheckpointData> LoadStagedCheckpoint(const Session& s, CommitRequest& request);
  // After a rank's save: registers a complete checkpoint with its job and applies the job's
  // retention policy (failures of either are logged, not returned: the save stands).
  void AfterCommit(const identity::Principal& who, const jobs::JobInfo& job,
                   const CheckpointRef& ref, CommitResult& out);
  Result<std::vector<int64_t>> ApplyRetention(const std::string& project,
                                              const std::string& job_id);
  Result<std::string> ProjectOf(const std::string& job_id);
  int64_t RemoveStaleUploads() TY_EXCLUDES(mu_);

  store::Database& db_;
  Clock& clock_;
  Random& random_;
  identity::IdentityService& identity_;
  jobs::JobService& jobs_;
  const std::shared_ptr<CheckpointStore> store_;
  const std::string staging_dir_;
  CompleteListener complete_listener_;

  Mutex mu_;
  std::set<std::string> committing_ TY_GUARDED_BY(mu_);  // uploads whose commit runs
};

// The order of a commit's blobs: `requested` when not empty (every name staged, each once,
// and no staged blob left out), else every staged name in ascending order. InvalidArgument
// names the blob that is wrong and `upload_id`. Pure.
Result<std::vector<std::string>> CommitBlobOrder(const std::set<std::string>& staged,
                                                 const std::vector<std::string>& requested,
                                                 const std::string& upload_id);

}  // namespace trainyard::checkpoints
