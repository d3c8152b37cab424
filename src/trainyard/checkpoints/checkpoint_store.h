// CheckpointStore: saves and restores checkpoints as content-addressed chunks in a
// BlobStore, deduplicated across every job of a project.
//
// Layout under options.root ("checkpoints" by default), per project:
//   <project>/chunks/<hh>/<hash>[.zst]   chunk bytes, named by XXH3-128 of the raw bytes
//   <project>/jobs/<job>/steps/<step:020>/rank-<rank:05>.json   one manifest per rank
//   <project>/intents/<id>.json          chunks a save in progress uses (protects them from GC)
//   <project>/gc/<id>.json               a garbage collection in progress, with its lease
//
// Commit protocol of one rank: chunks (each fsynced) → their directories synced → the
// rank's manifest written to a temporary name, fsynced, renamed into place, directory
// synced. A checkpoint is complete, and visible to List/Latest/Load, only once ranks
// 0..world_size-1 have all committed with the same world_size and attempt; a reader never
// sees a partial one. Every chunk read is verified against its hash.
//
// Asynchronous saves: SaveAsync copies borrowed bytes (in parallel, into buffers reused from
// the previous save) and returns; a background thread hashes, deduplicates, writes and
// commits. At most one save is in flight per CheckpointStore: SaveAsync first waits for the
// previous one (bounded memory: one snapshot at a time; training slows down only when it
// saves faster than the disk can write).
//
// Garbage collection (CollectGarbage) is safe while saves run in this or other processes;
// the protocol is in docs/decisions/0003-checkpoint-chunking.md.
//
// Time and randomness are injected: wall time (Clock::NowMillis) for what is stored and read
// by other processes (manifests' created_ms, intents' created_ms, collections' leases),
// monotonic time for what only this process measures (how long SaveAsync blocked); random
// names of intents and collection markers come from the Random.
//
// Thread-safe: all methods may be called from any thread. The BlobStore is shared; the Clock
// and the Random are borrowed and must outlive the store.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "trainyard/blob/blob_store.h"
#include "trainyard/checkpoints/types.h"
#include "trainyard/common/clock.h"
#include "trainyard/common/mutex.h"
#include "trainyard/common/status.h"

namespace trainyard::checkpoints {

class ThreadPool;

enum class Compression { kNone, kZstd };

struct CheckpointStoreOptions {
  // Key prefix inside the BlobStore; "" puts projects at its top (a BlobStore of their own).
  std::string root = "checkpoints";
  // Chunking: every blob is cut into chunks of this size from its own start (the last one
  // shorter). Part of a chunk's identity only through its bytes.
  uint64_t chunk_size = 4ull << 20;
  Compression compression = Compression::kNone;
  int zstd_level = 1;
  // A compressed chunk is kept only when it is at most this fraction of the raw size.
  double min_compression_gain = 0.125;
  int io_threads = 8;
  // Keep the previous save's snapshot buffers for the next one (page-faulting fresh memory
  // would double the time a save blocks). Costs one checkpoint's size of host memory.
  bool reuse_snapshot_buffers = true;
  // Garbage collection: a GC must finish within its lease (saves ignore an expired GC
  // marker); an intent older than intent_ttl is from a save that died and stops protecting.
  int64_t gc_lease_ms = 15 * 60 * 1000;
  int64_t intent_ttl_ms = 24 * 60 * 60 * 1000;
  int64_t gc_poll_interval_ms = 50;  // how often a save looks whether a GC has finished
};

// A save in progress. Copyable; all copies refer to the same save.
class SaveHandle {
 public:
  struct State;
  SaveHandle() = default;
  explicit SaveHandle(std::shared_ptr<State> state) : state_(std::move(state)) {}

  // Blocks until the checkpoint is committed (its manifest) or the save failed.
  // May be called any number of times, from any thread.
  Result<Manifest> Wait() const;
  bool Done() const;
  // How long SaveAsync blocked the caller (waiting for the previous save + the snapshot).
  int64_t BlockedMicros() const;

 private:
  std::shared_ptr<State> state_;
};

// Where LoadInto puts one blob: `size` bytes at `data`, memory the caller owns.
struct LoadTarget {
  std::string name;
  void* data = nullptr;
  size_t size = 0;
};

struct GcStats {
  uint64_t manifests_read = 0;
  uint64_t intents_live = 0;
  uint64_t intents_expired = 0;
  uint64_t chunks_scanned = 0;
  uint64_t chunks_live = 0;
  uint64_t chunks_deleted = 0;
  uint64_t bytes_deleted = 0;
};

class CheckpointStore {
 public:
  // `clock` and `random` are borrowed: they must outlive the store (the server passes its
  // system clock and SecureRandom; tests a FakeClock and a SeededRandom).
  CheckpointStore(std::shared_ptr<blob::BlobStore> blobs, Clock& clock, Random& random,
                  CheckpointStoreOptions options = {});
  // Waits for the save in flight.
  ~CheckpointStore();
  CheckpointStore(const CheckpointStore&) = delete;
  CheckpointStore& operator=(const CheckpointStore&) = delete;

  // Validates, waits for the previous save, snapshots borrowed bytes, and returns; the rest
  // runs in the background. Errors found before the snapshot are returned here; later
  // ones by the handle's Wait(). AlreadyExists when that checkpoint is already complete.
  Result<SaveHandle> SaveAsync(const CheckpointRef& ref, CheckpointData&& data);
  // SaveAsync + Wait.
  Result<Manifest> Save(const CheckpointRef& ref, CheckpointData&& data);

  // Complete checkpoints of a job, by ascending step.
  Result<std::vector<CheckpointInfo>> List(std::string_view project, std::string_view job);
  // Steps that have some rank manifests but are not complete (in progress or abandoned).
  Result<std::vector<int64_t>> ListIncomplete(std::string_view project, std::string_view job);
  // The complete checkpoint with the highest step; nullopt when there is none.
  Result<std::optional<CheckpointInfo>> Latest(std::string_view project, std::string_view job);
  // NotFound when the checkpoint is absent or not complete.
  Result<CheckpointInfo> Get(std::string_view project, std::string_view job, int64_t step);
  // Projects that have saved anything.
  Result<std::vector<std::string>> ListProjects();
  // Jobs of a project that have saved anything.
  Result<std::vector<std::string>> ListJobs(std::string_view project);

  // One rank's data, every chunk verified. An error names the blob and chunk that failed.
  Result<CheckpointData> Load(std::string_view project, std::string_view job, int64_t step,
                              int rank = 0);
  // One rank's blobs read straight into memory the caller already has (a model's parameters,
  // the optimizer's moments): nothing is allocated, so there are no page faults on fresh
  // memory and no second copy of the state. Every target must name a blob of the checkpoint
  // and have exactly its size (InvalidArgument naming the blob, before anything is read);
  // blobs without a target are not read. Every chunk read is verified. Returns the rank's
  // manifest (metrics, RNG state, user metadata). After an error the targets' contents are
  // unspecified.
  Result<Manifest> LoadInto(std::string_view project, std::string_view job, int64_t step, int rank,
                            const std::vector<LoadTarget>& targets);
  // One blob of one rank, every chunk verified (for serving a blob without loading the rest).
  // NotFound when the rank has no blob of that name.
  Result<Blob> LoadBlob(std::string_view project, std::string_view job, int64_t step, int rank,
                        std::string_view name);
  // Reads and verifies every chunk of every rank (Ok, or an error naming blob and chunk).
  Status Verify(std::string_view project, std::string_view job, int64_t step);
  // Removes a checkpoint, complete or not (it stops being visible first). Chunks stay until
  // CollectGarbage.
  Status Delete(std::string_view project, std::string_view job, int64_t step);

  // Deletes the chunks of `project` that no manifest and no live save references.
  Result<GcStats> CollectGarbage(std::string_view project);

  // Writes one rank's tensors (files are skipped) as a safetensors file at `local_path`
  // (written to a temporary name and renamed). Metadata gets step, job and metrics.
  Status ExportSafetensors(std::string_view project, std::string_view job, int64_t step, int rank,
                           const std::string& local_path);

  const CheckpointStoreOptions& options() const { return options_; }

 private:
  // One save's phases and one collection's phases (checkpoint_store.cc).
  friend class SaveOperation;
  friend class GarbageCollection;

  Status ValidateSave(const CheckpointRef& ref, const CheckpointData& data);
  // Copies the borrowed bytes of `state`'s blobs into owned (reused) buffers, in parallel.
  void Snapshot(SaveHandle::State& state);
  // Runs on the save thread: the save, then hands the snapshot buffers back and publishes
  // the result to the handle.
  void FinishSave(const std::shared_ptr<SaveHandle::State>& state);
  // Returns once no collection of `project` holds an unexpired lease (polls).
  Status WaitForGarbageCollectors(const std::string& project);
  Result<std::vector<Manifest>> ReadStep(std::string_view project, std::string_view job,
                                         int64_t step);
  Result<std::vector<int64_t>> ListSteps(std::string_view project, std::string_view job);
  Result<Manifest> RankManifest(std::string_view project, std::string_view job, int64_t step,
                                int rank);
  // Reads and verifies every chunk of blob b into dst[b]; blobs whose dst is null are skipped.
  Status ReadBlobs(const Manifest& m, const std::vector<char*>& dst);
  Status ReadChunk(const Manifest& m, size_t blob_index, size_t chunk_index, uint64_t offset,
                   char* dst, std::string& scratch);
  // Writes `m`'s tensors as safetensors to `fd` (`path` names it in errors) and fsyncs it.
  Status WriteSafetensors(const Manifest& m, int fd, const std::string& path);
  std::string ProjectKey(std::string_view project) const;
  std::string StepKey(std::string_view project, std::string_view job, int64_t step) const;
  std::string ChunkKey(std::string_view project, std::string_view hash, bool compressed) const;
  Bytes TakeSnapshotBuffer(size_t size) TY_EXCLUDES(spare_mu_);
  void RecycleSnapshotBuffers(std::vector<Bytes> buffers) TY_EXCLUDES(spare_mu_);

  const std::shared_ptr<blob::BlobStore> blobs_;
  const CheckpointStoreOptions options_;
  Clock& clock_;
  Random& random_;
  std::unique_ptr<ThreadPool> pool_;

  Mutex save_mu_;  // serializes SaveAsync's wait-for-previous and snapshot
  std::thread save_thread_ TY_GUARDED_BY(save_mu_);  // the save in flight
  std::shared_ptr<SaveHandle::State> in_flight_ TY_GUARDED_BY(save_mu_);

  Mutex spare_mu_;
  std::vector<Bytes> spare_buffers_ TY_GUARDED_BY(spare_mu_);
};

// The longest project or job name.
inline constexpr size_t kMaxCheckpointNameLength = 128;

// Validates a project or job name: 1-128 of [A-Za-z0-9._-], not starting with '.'.
Status ValidateCheckpointName(std::string_view what, std::string_view name);

}  // namespace trainyard::checkpoints
