#include "trainyard/checkpoints/checkpoint_store.h"

#include <fcntl.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "trainyard/checkpoints/manifest_codec.h"
#include "trainyard/checkpoints/thread_pool.h"
#include "trainyard/common/checked.h"
#include "trainyard/common/json.h"
#include "trainyard/common/log.h"
#include "trainyard/common/strings.h"

namespace trainyard::checkpoints {

struct SaveHandle::State {
  CheckpointRef ref;
  CheckpointData data;
  std::vector<size_t> snapshot_blobs;  // blobs whose bytes live in snapshot buffers
  int64_t blocked_us = 0;

  mutable Mutex mu;
  mutable CondVar cv;
  std::optional<Result<Manifest>> result TY_GUARDED_BY(mu);  // set once
};

Result<Manifest> SaveHandle::Wait() const {
  if (state_ == nullptr) return Status::FailedPrecondition("this SaveHandle refers to no save");
  MutexLock lock(state_->mu);
  while (!state_->result.has_value()) state_->cv.Wait(state_->mu);
  return *state_->result;
}

bool SaveHandle::Done() const {
  if (state_ == nullptr) return true;
  MutexLock lock(state_->mu);
  return state_->result.has_value();
}

int64_t SaveHandle::BlockedMicros() const { return state_ == nullptr ? 0 : state_->blocked_us; }

namespace {

// The snapshot copies borrowed bytes in pieces of this size, in parallel.
constexpr uint64_t kSnapshotPiece = 8ull << 20;
// A step's directory name: the step, zero-padded to this many digits (sorts as numbers).
constexpr size_t kStepDirDigits = 20;
// The save pipeline's first batch has this many chunks per I/O thread; each next batch has
// twice as many as the one before, up to kMaxBatchChunks.
constexpr size_t kFirstBatchChunksPerThread = 2;
constexpr size_t kMaxBatchChunks = 1024;
// Random bytes in the names of intents and collection markers (unique across processes).
constexpr size_t kRandomNameBytes = 8;
constexpr std::string_view kCompressedSuffix = ".zst";
// safetensors: the little-endian header length, then the header padded to this alignment.
constexpr size_t kSafetensorsLengthBytes = 8;
constexpr size_t kSafetensorsAlignment = 8;

std::string StepDirName(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%0*lld", static_cast<int>(kStepDirDigits),
                static_cast<long long>(step));
  return buf;
}

std::optional<int64_t> ParseStepDirName(std::string_view name) {
  if (name.size() != kStepDirDigits) return std::nullopt;
  for (char c : name) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  return ParseInt64(name);
}

std::string RankFileName(int rank) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "rank-%05d.json", rank);
  return buf;
}

bool IsRankFileName(std::string_view name) {
  return StartsWith(name, "rank-") && EndsWith(name, ".json");
}

std::string Describe(const CheckpointRef& r) {
  return "checkpoint " + r.project + "/" + r.job + " step " + std::to_string(r.step) + " rank " +
         std::to_string(r.rank);
}

// A complete checkpoint from the rank manifests of one step, or nullopt.
std::optional<CheckpointInfo> Complete(std::vector<Manifest> ranks) {
  const Manifest* first = nullptr;
  for (const Manifest& m : ranks) {
    if (m.ref.rank == 0) first = &m;
  }
  if (first == nullptr) return std::nullopt;
  int world = first->ref.world_size;
  int64_t attempt = first->ref.attempt;
  std::vector<std::optional<Manifest>> by_rank(static_cast<size_t>(world));
  for (Manifest& m : ranks) {
    if (m.ref.world_size == world && m.ref.attempt == attempt && m.ref.rank < world) {
      by_rank[static_cast<size_t>(m.ref.rank)] = std::move(m);
    }
  }
  CheckpointInfo info;
  for (std::optional<Manifest>& m : by_rank) {
    if (!m) return std::nullopt;
    info.ranks.push_back(std::move(*m));
  }
  info.project = info.ranks[0].ref.project;
  info.job = info.ranks[0].ref.job;
  info.step = info.ranks[0].ref.step;
  info.world_size = world;
  info.attempt = attempt;
  return info;
}

struct ChunkTask {
  size_t blob = 0;
  size_t chunk = 0;
  uint64_t offset = 0;
};

// The index of the blob named `name` in a rank's manifest (names are unique per rank).
std::optional<size_t> BlobIndex(const Manifest& m, std::string_view name) {
  for (size_t i = 0; i < m.blobs.size(); ++i) {
    if (m.blobs[i].name == name) return i;
  }
  return std::nullopt;
}

std::vector<ChunkTask> ChunkTasks(const Manifest& m) {
  std::vector<ChunkTask> tasks;
  for (size_t b = 0; b < m.blobs.size(); ++b) {
    uint64_t off = 0;
    for (size_t c = 0; c < m.blobs[b].chunks.size(); ++c) {
      tasks.push_back({b, c, off});
      off += m.blobs[b].chunks[c].size;
    }
  }
  return tasks;
}

// The expiry of a collection's marker (JSON with "expires_ms"); nullopt when the text is not
// one (markers are written atomically, so that is not a marker of ours).
std::optional<int64_t> MarkerExpiry(std::string_view text) {
  Result<json::object> o = ParseJsonObject(text);
  if (!o.ok()) return std::nullopt;
  Result<int64_t> expires = RequiredInt64(*o, "expires_ms");
  if (!expires.ok()) return std::nullopt;
  return *expires;
}

// The first error in task order, so that reports are deterministic. Thread-safe.
class ErrorSlot {
 public:
  void Set(size_t index, Status s) TY_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    if (failed_.load() && index >= index_) return;
    index_ = index;
    status_ = std::move(s);
    failed_.store(true);
  }
  bool failed() const { return failed_.load(std::memory_order_relaxed); }
  Status status() const TY_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return status_;
  }

 private:
  mutable Mutex mu_;
  std::atomic<bool> failed_{false};
  size_t index_ TY_GUARDED_BY(mu_) = 0;
  Status status_ TY_GUARDED_BY(mu_);
};

}  // namespace

// One rank's save, run on the save thread by FinishSave; Run() is its phases in order:
//   1. Cut: the blobs into chunks (the manifest's skeleton, one task per chunk).
//   2. Plan: chunks go in batches that grow (so writing starts early), and one task list
//      orders the pool's work.
//   3. Hash, announce, write (one pipeline): a batch's chunks are announced in an intent once
//      all of them are hashed, and the worker that records it waits out any collection that
//      started before; only then are they looked up and the ones the project lacks written
//      (each fsynced by PutBytes). An intent precedes every look at which chunks exist: a
//      collection that starts later sees it and keeps them. There is no barrier between
//      batches: batch b's writes are interleaved with batch b+1's hashes, so the disk stays
//      busy while the next intent is prepared.
//   4. Make the chunks' names durable (their directories synced).
//   5. Commit: the manifest is written to a temporary name, fsynced and renamed into place
//      (atomically, by PutBytes), then its directories are synced.
// Crash safety rests on that order: chunks durable → manifest → atomic rename. Until the
// rename this rank has no manifest, so a crash leaves nothing half-visible; the intents
// (dropped at the end, whatever happened) keep a collection from deleting chunks the save
// relies on until then.
class SaveOperation {
 public:
  SaveOperation(CheckpointStore& store, const CheckpointRef& ref, const CheckpointData& data);
  SaveOperation(const SaveOperation&) = delete;
  SaveOperation& operator=(const SaveOperation&) = delete;

  Result<Manifest> Run();

 private:
  // Where a batch is: its chunks are being hashed; it is announced in an intent (its writes
  // may start); or announcing it failed (its writes are skipped).
  enum class BatchState { kHashing, kAnnounced, kFailed };
  enum class StepKind { kHash, kWrite };
  struct Batch {
    size_t begin = 0, end = 0;  // [begin, end) of tasks_
    std::atomic<size_t> hashes_left{0};
  };
  struct PipelineStep {
    StepKind kind = StepKind::kHash;
    size_t task = 0;
  };

  void Cut();
  void PlanBatches() TY_EXCLUDES(mu_);
  void PlanOrder();
  Status HashAndWriteChunks() TY_EXCLUDES(mu_);
  void HashChunk(size_t task) TY_EXCLUDES(mu_);
  void Announce(size_t batch) TY_EXCLUDES(mu_);
  Status RecordIntent(size_t batch, json::array hashes) TY_EXCLUDES(mu_);
  void WriteStep(size_t task, size_t worker) TY_EXCLUDES(mu_);
  Status WriteChunk(size_t task, size_t worker);
  Result<bool> WriteCompressed(size_t task, size_t worker);
  void RecordCodecs() TY_EXCLUDES(mu_);
  Status SyncChunkDirectories() TY_EXCLUDES(mu_);
  Result<Manifest> Commit();
  void DropIntents() TY_EXCLUDES(mu_);

  ChunkRef& chunk_of(size_t task) {
    return manifest_.blobs[tasks_[task].blob].chunks[tasks_[task].chunk];
  }
  const char* bytes_of(size_t task) const {
    return reinterpret_cast<const char*>(data_.blobs[tasks_[task].blob].data() +
                                         tasks_[task].offset);
  }

  CheckpointStore& store_;
  const CheckpointRef& ref_;
  const CheckpointData& data_;
  const uint64_t chunk_size_;
  const std::string project_key_;
  const std::string intent_prefix_;

  // Set by Cut and PlanBatches/PlanOrder, before the pipeline starts; read-only during it
  // (but each chunk's hash, written once by the worker that hashes it).
  Manifest manifest_;
  std::vector<ChunkTask> tasks_;
  std::vector<std::unique_ptr<Batch>> batches_;
  std::vector<size_t> batch_of_;
  std::vector<PipelineStep> order_;

  // Per task: its stored copy is compressed. Written only by the task's own worker.
  std::vector<char> compressed_;
  std::atomic<uint64_t> written_bytes_{0}, written_chunks_{0}, reused_chunks_{0};
  std::vector<std::string> scratch_;  // per worker
  ErrorSlot error_;

  Mutex mu_;
  CondVar batch_cv_;  // a batch left BatchState::kHashing
  std::vector<BatchState> batch_states_ TY_GUARDED_BY(mu_);
  // hash -> the task that writes it (the first of this save to announce it).
  std::unordered_map<std::string, size_t> owner_ TY_GUARDED_BY(mu_);
  std::set<std::string> prefixes_ TY_GUARDED_BY(mu_);  // chunk directories written into
  std::vector<std::string> intent_keys_ TY_GUARDED_BY(mu_);
};

SaveOperation::SaveOperation(CheckpointStore& store, const CheckpointRef& ref,
                             const CheckpointData& data)
    : store_(store),
      ref_(ref),
      data_(data),
      chunk_size_(std::max<uint64_t>(store.options_.chunk_size, 1)),
      project_key_(store.ProjectKey(ref.project)),
      intent_prefix_(project_key_ + "/intents/" + ref.job + "-" + StepDirName(ref.step) + "-r" +
                     std::to_string(ref.rank) + "-" + store.random_.Hex(kRandomNameBytes) + "-"),
      scratch_(store.pool_->Concurrency()) {}

Result<Manifest> SaveOperation::Run() {
  Cut();
  PlanBatches();
  PlanOrder();
  Status s = HashAndWriteChunks();
  if (s.ok()) s = SyncChunkDirectories();
  if (!s.ok()) {
    DropIntents();
    return s;
  }
  Result<Manifest> committed = Commit();
  DropIntents();
  return committed;
}

// Phase 1: the manifest without hashes, and one task per chunk.
void SaveOperation::Cut() {
  manifest_.ref = ref_;
  manifest_.chunk_size = chunk_size_;
  manifest_.metrics = data_.metrics;
  manifest_.rng_state = data_.rng_state;
  manifest_.user_metadata = data_.user_metadata;
  for (size_t b = 0; b < data_.blobs.size(); ++b) {
    const Blob& blob = data_.blobs[b];
    BlobManifest bm;
    bm.name = blob.name;
    bm.kind = blob.kind;
    bm.dtype = blob.dtype;
    bm.shape = blob.shape;
    bm.size = blob.size();
    for (uint64_t off = 0; off < blob.size(); off += chunk_size_) {
      ChunkRef c;
      c.size = std::min(chunk_size_, blob.size() - off);
      tasks_.push_back({b, bm.chunks.size(), off});
      bm.chunks.push_back(std::move(c));
    }
    manifest_.total_bytes += blob.size();
    manifest_.blobs.push_back(std::move(bm));
  }
  compressed_.assign(tasks_.size(), 0);
}

// Phase 2a: batches that double in size, so the first intent (and the first write) comes
// early.
void SaveOperation::PlanBatches() {
  for (size_t begin = 0, size = kFirstBatchChunksPerThread * store_.pool_->Concurrency();
       begin < tasks_.size(); size = std::min(size * 2, kMaxBatchChunks)) {
    auto batch = std::make_unique<Batch>();
    batch->begin = begin;
    batch->end = std::min(tasks_.size(), begin + size);
    batch->hashes_left = batch->end - batch->begin;
    begin = batch->end;
    batches_.push_back(std::move(batch));
  }
  batch_of_.resize(tasks_.size());
  for (size_t bi = 0; bi < batches_.size(); ++bi) {
    for (size_t i = batches_[bi]->begin; i < batches_[bi]->end; ++i) batch_of_[i] = bi;
  }
  MutexLock lock(mu_);
  batch_states_.assign(batches_.size(), BatchState::kHashing);
}

// Phase 2b: the order the pool takes steps in. Every hash of batch b is claimed before any
// write of batch b, so a worker waiting for an intent never waits on work nobody has
// claimed; batch b's writes are spread evenly between batch b+1's hashes.
void SaveOperation::PlanOrder() {
  order_.reserve(2 * tasks_.size());
  if (!batches_.empty()) {
    for (size_t i = batches_[0]->begin; i < batches_[0]->end; ++i) {
      order_.push_back({StepKind::kHash, i});
    }
  }
  for (size_t bi = 0; bi < batches_.size(); ++bi) {
    const Batch& w = *batches_[bi];
    size_t wn = w.end - w.begin;
    size_t hb = bi + 1 < batches_.size() ? batches_[bi + 1]->begin : 0;
    size_t hn = bi + 1 < batches_.size() ? batches_[bi + 1]->end - hb : 0;
    size_t hashed = 0;
    for (size_t j = 0; j < wn; ++j) {
      order_.push_back({StepKind::kWrite, w.begin + j});
      for (size_t upto = (j + 1) * hn / wn; hashed < upto; ++hashed) {
        order_.push_back({StepKind::kHash, hb + hashed});
      }
    }
  }
}

// Phase 3: the pipeline, then every chunk reference gets its stored copy's codec.
Status SaveOperation::HashAndWriteChunks() {
  store_.pool_->ParallelFor(order_.size(), [this](size_t step, size_t worker) {
    const PipelineStep& s = order_[step];
    if (s.kind == StepKind::kWrite) return WriteStep(s.task, worker);
    HashChunk(s.task);
  });
  if (error_.failed()) return error_.status();
  RecordCodecs();
  return Status::Ok();
}

void SaveOperation::HashChunk(size_t i) {
  chunk_of(i).hash = ChunkHash(bytes_of(i), chunk_of(i).size);
  // The worker that hashed a batch's last chunk announces it.
  if (batches_[batch_of_[i]]->hashes_left.fetch_sub(1) == 1) Announce(batch_of_[i]);
}

void SaveOperation::Announce(size_t bi) {
  const Batch& batch = *batches_[bi];
  json::array hashes;
  {
    MutexLock lock(mu_);
    for (size_t i = batch.begin; i < batch.end; ++i) {
      if (owner_.emplace(chunk_of(i).hash, i).second) {
        hashes.push_back(json::value(chunk_of(i).hash));
        prefixes_.insert(chunk_of(i).hash.substr(0, 2));
      }
    }
  }
  Status s;
  if (!hashes.empty() && !error_.failed()) s = RecordIntent(bi, std::move(hashes));
  const bool announced = s.ok();
  if (!announced) error_.Set(batch.begin, std::move(s));
  {
    MutexLock lock(mu_);
    batch_states_[bi] = announced ? BatchState::kAnnounced : BatchState::kFailed;
  }
  batch_cv_.NotifyAll();
}

// Writes the intent naming `hashes`, then waits out collections that started before it.
Status SaveOperation::RecordIntent(size_t bi, json::array hashes) {
  json::object intent;
  intent["created_ms"] = store_.clock_.NowMillis();  // wall time: other processes read it
  intent["job"] = ref_.job;
  intent["step"] = ref_.step;
  intent["rank"] = ref_.rank;
  intent["chunks"] = std::move(hashes);
  std::string key = intent_prefix_ + std::to_string(bi) + ".json";
  Status s = store_.blobs_->PutBytes(key, json::serialize(intent));
  if (!s.ok()) return s.WithContext(Describe(ref_) + ": cannot record the save's intent");
  {
    MutexLock lock(mu_);
    intent_keys_.push_back(key);
  }
  return store_.WaitForGarbageCollectors(ref_.project).WithContext(Describe(ref_));
}

void SaveOperation::WriteStep(size_t i, size_t worker) {
  {
    MutexLock lock(mu_);
    const size_t bi = batch_of_[i];
    while (batch_states_[bi] == BatchState::kHashing) batch_cv_.Wait(mu_);
    // The batch failed, or another task of this save writes these bytes.
    if (batch_states_[bi] == BatchState::kFailed || owner_.at(chunk_of(i).hash) != i) return;
  }
  if (error_.failed()) return;
  Status s = WriteChunk(i, worker);
  if (!s.ok()) {
    error_.Set(i, s.WithContext(Describe(ref_) + ": blob '" + manifest_.blobs[tasks_[i].blob].name +
                                "' chunk " + std::to_string(tasks_[i].chunk)));
  }
}

// Writes chunk `i` unless the project already has it, raw or compressed.
Status SaveOperation::WriteChunk(size_t i, size_t worker) {
  const ChunkRef& c = chunk_of(i);
  blob::BlobStore& blobs = *store_.blobs_;
  TY_ASSIGN_OR_RETURN(bool raw, blobs.Exists(store_.ChunkKey(ref_.project, c.hash, false)));
  if (raw) {
    reused_chunks_.fetch_add(1);
    return Status::Ok();
  }
  TY_ASSIGN_OR_RETURN(bool zst, blobs.Exists(store_.ChunkKey(ref_.project, c.hash, true)));
  if (zst) {
    compressed_[i] = 1;
    reused_chunks_.fetch_add(1);
    return Status::Ok();
  }
  if (store_.options_.compression == Compression::kZstd) {
    TY_ASSIGN_OR_RETURN(bool written, WriteCompressed(i, worker));
    if (written) return Status::Ok();
  }
  TY_RETURN_IF_ERROR(
      blobs.PutBytes(store_.ChunkKey(ref_.project, c.hash, false), {bytes_of(i), c.size}));
  written_bytes_.fetch_add(c.size);
  written_chunks_.fetch_add(1);
  return Status::Ok();
}

// Writes chunk `i` compressed when that saves enough; false when it does not (nothing written).
Result<bool> SaveOperation::WriteCompressed(size_t i, size_t worker) {
  const ChunkRef& c = chunk_of(i);
  const CheckpointStoreOptions& options = store_.options_;
  std::string& out = scratch_[worker];
  out.resize(ZSTD_compressBound(c.size));
  size_t n = ZSTD_compress(out.data(), out.size(), bytes_of(i), c.size, options.zstd_level);
  if (ZSTD_isError(n) ||
      static_cast<double>(n) > (1.0 - options.min_compression_gain) * static_cast<double>(c.size)) {
    return false;
  }
  TY_RETURN_IF_ERROR(
      store_.blobs_->PutBytes(store_.ChunkKey(ref_.project, c.hash, true), {out.data(), n}));
  compressed_[i] = 1;
  written_bytes_.fetch_add(n);
  written_chunks_.fetch_add(1);
  return true;
}

// Repeats of a chunk inside this save refer to the copy its owner stored (raw or compressed).
void SaveOperation::RecordCodecs() {
  MutexLock lock(mu_);
  for (size_t i = 0; i < tasks_.size(); ++i) {
    chunk_of(i).compressed = compressed_[owner_.at(chunk_of(i).hash)] != 0;
  }
}

// Phase 4: the chunks' names made durable (their bytes were fsynced by PutBytes).
Status SaveOperation::SyncChunkDirectories() {
  std::vector<std::string> dirs;
  {
    MutexLock lock(mu_);
    for (const std::string& p : prefixes_) dirs.push_back(project_key_ + "/chunks/" + p);
  }
  dirs.push_back(project_key_ + "/chunks");
  store_.pool_->ParallelFor(dirs.size(), [&](size_t i, size_t) {
    Status s = store_.blobs_->SyncDirectory(dirs[i]);
    if (!s.ok()) error_.Set(i, s.WithContext(Describe(ref_)));
  });
  return error_.failed() ? error_.status() : Status::Ok();
}

// Phase 5, the commit point: PutBytes writes the manifest to a temporary name, fsyncs it and
// renames it into place (atomically); then its name is made durable.
Result<Manifest> SaveOperation::Commit() {
  manifest_.created_ms = store_.clock_.NowMillis();
  manifest_.written_bytes = written_bytes_.load();
  manifest_.written_chunks = written_chunks_.load();
  manifest_.reused_chunks = reused_chunks_.load();
  std::string step_key = store_.StepKey(ref_.project, ref_.job, ref_.step);
  Status put =
      store_.blobs_->PutBytes(step_key + "/" + RankFileName(ref_.rank), EncodeManifest(manifest_));
  if (!put.ok()) {
    return put.WithContext(Describe(ref_) + ": cannot write the manifest; nothing was committed");
  }
  std::string job_key = project_key_ + "/jobs/" + ref_.job;
  for (const std::string& d : {step_key, job_key + "/steps", job_key, project_key_ + "/jobs"}) {
    if (Status s = store_.blobs_->SyncDirectory(d); !s.ok()) {
      return s.WithContext(Describe(ref_) +
                           ": the manifest was written but may not survive a crash");
    }
  }
  return std::move(manifest_);
}

void SaveOperation::DropIntents() {
  std::vector<std::string> keys;
  {
    MutexLock lock(mu_);
    keys.swap(intent_keys_);
  }
  for (const std::string& key : keys) {
    Status s = store_.blobs_->Delete(key);
    if (!s.ok() && !s.IsNotFound()) {
      spdlog::warn("cannot remove checkpoint save intent {}: {} (garbage collection expires it)",
                   key, s.ToString());
    }
  }
}

Status ValidateCheckpointName(std::string_view what, std::string_view name) {
  if (name.empty() || name.size() > kMaxCheckpointNameLength || name.front() == '.') {
    return Status::InvalidArgument(
        std::string(what) + " must be 1-" + std::to_string(kMaxCheckpointNameLength) +
        " characters and not start with '.' (got '" + Abbreviate(name) + "')");
  }
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    if (!ok) {
      return Status::InvalidArgument(std::string(what) + " may contain only letters, digits, " +
                                     "'.', '_' and '-' (got '" + Abbreviate(name) + "')");
    }
  }
  return Status::Ok();
}

CheckpointStore::CheckpointStore(std::shared_ptr<blob::BlobStore> blobs, Clock& clock,
                                 Random& random, CheckpointStoreOptions options)
    : blobs_(std::move(blobs)),
      options_(std::move(options)),
      clock_(clock),
      random_(random),
      pool_(std::make_unique<ThreadPool>(std::max(options_.io_threads, 1) - 1)) {}

CheckpointStore::~CheckpointStore() {
  MutexLock lock(save_mu_);
  if (save_thread_.joinable()) save_thread_.join();
}

std::string CheckpointStore::ProjectKey(std::string_view project) const {
  if (options_.root.empty()) return std::string(project);
  return options_.root + "/" + std::string(project);
}

std::string CheckpointStore::StepKey(std::string_view project, std::string_view job,
                                     int64_t step) const {
  return ProjectKey(project) + "/jobs/" + std::string(job) + "/steps/" + StepDirName(step);
}

std::string CheckpointStore::ChunkKey(std::string_view project, std::string_view hash,
                                      bool compressed) const {
  return ProjectKey(project) + "/chunks/" + std::string(hash.substr(0, 2)) + "/" +
         std::string(hash) + (compressed ? std::string(kCompressedSuffix) : "");
}

Bytes CheckpointStore::TakeSnapshotBuffer(size_t size) {
  if (options_.reuse_snapshot_buffers) {
    MutexLock lock(spare_mu_);
    for (Bytes& b : spare_buffers_) {
      if (b.size() == size && b.data() != nullptr) return std::move(b);
    }
  }
  return Bytes(size);
}

void CheckpointStore::RecycleSnapshotBuffers(std::vector<Bytes> buffers) {
  if (!options_.reuse_snapshot_buffers) return;
  MutexLock lock(spare_mu_);
  spare_buffers_ = std::move(buffers);
}

Status CheckpointStore::ValidateSave(const CheckpointRef& ref, const CheckpointData& data) {
  TY_RETURN_IF_ERROR(ValidateCheckpointName("project", ref.project));
  TY_RETURN_IF_ERROR(ValidateCheckpointName("job", ref.job));
  if (ref.step < 0) return Status::InvalidArgument("step must not be negative");
  if (ref.world_size < 1 || ref.rank < 0 || ref.rank >= ref.world_size) {
    return Status::InvalidArgument("rank " + std::to_string(ref.rank) + " is not in [0, " +
                                   "world_size " + std::to_string(ref.world_size) + ")");
  }
  std::set<std::string_view> names;
  for (const Blob& b : data.blobs) {
    if (b.name.empty()) return Status::InvalidArgument("every blob needs a name");
    if (!names.insert(b.name).second) {
      return Status::InvalidArgument("blob name '" + b.name + "' is used twice in one checkpoint");
    }
    if (b.is_borrowed() && b.data() == nullptr && b.size() > 0) {
      return Status::InvalidArgument("blob '" + b.name + "' has no data pointer");
    }
    if (b.kind == BlobKind::kTensor) {
      TY_ASSIGN_OR_RETURN(
          uint64_t need,
          ShapeBytes(DTypeSize(b.dtype), b.shape, "shape of tensor '" + Abbreviate(b.name) + "'"));
      if (need != b.size()) {
        return Status::InvalidArgument("tensor '" + b.name + "' has " + std::to_string(b.size()) +
                                       " bytes, but its shape and " +
                                       std::string(DTypeName(b.dtype)) + " need " +
                                       std::to_string(need));
      }
    }
  }
  return Status::Ok();
}

void CheckpointStore::Snapshot(SaveHandle::State& state) {
  struct Piece {
    size_t blob;
    uint64_t offset;
    uint64_t size;
  };
  std::vector<Piece> pieces;
  std::vector<Bytes> buffers(state.data.blobs.size());
  for (size_t i = 0; i < state.data.blobs.size(); ++i) {
    const Blob& b = state.data.blobs[i];
    if (!b.is_borrowed()) continue;
    buffers[i] = TakeSnapshotBuffer(b.size());
    state.snapshot_blobs.push_back(i);
    for (uint64_t off = 0; off < b.size(); off += kSnapshotPiece) {
      pieces.push_back({i, off, std::min<uint64_t>(kSnapshotPiece, b.size() - off)});
    }
  }
  pool_->ParallelFor(pieces.size(), [&](size_t i, size_t) {
    const Piece& p = pieces[i];
    std::memcpy(buffers[p.blob].data() + p.offset, state.data.blobs[p.blob].data() + p.offset,
                p.size);
  });
  for (size_t i : state.snapshot_blobs) state.data.blobs[i].AdoptOwned(std::move(buffers[i]));
}

Result<SaveHandle> CheckpointStore::SaveAsync(const CheckpointRef& ref, CheckpointData&& data) {
  const Clock::MonotonicTime start = clock_.MonotonicNow();
  TY_RETURN_IF_ERROR(ValidateSave(ref, data));

  MutexLock lock(save_mu_);
  if (save_thread_.joinable()) save_thread_.join();  // the previous save has finished
  in_flight_.reset();
  {
    TY_ASSIGN_OR_RETURN(std::vector<Manifest> existing, ReadStep(ref.project, ref.job, ref.step));
    if (Complete(std::move(existing))) {
      return Status::AlreadyExists("checkpoint " + ref.project + "/" + ref.job + " step " +
                                   std::to_string(ref.step) +
                                   " is already complete; save a new step or delete it first");
    }
  }

  auto state = std::make_shared<SaveHandle::State>();
  state->ref = ref;
  state->data = std::move(data);
  Snapshot(*state);
  state->blocked_us =
      std::chrono::duration_cast<std::chrono::microseconds>(clock_.MonotonicNow() - start).count();

  in_flight_ = state;
  save_thread_ = std::thread([this, state] { FinishSave(state); });
  return SaveHandle(state);
}

void CheckpointStore::FinishSave(const std::shared_ptr<SaveHandle::State>& state) {
  Result<Manifest> r = SaveOperation(*this, state->ref, state->data).Run();
  std::vector<Bytes> spare;
  for (size_t i : state->snapshot_blobs) spare.push_back(state->data.blobs[i].ReleaseOwned());
  state->data = CheckpointData();
  RecycleSnapshotBuffers(std::move(spare));
  {
    MutexLock lock(state->mu);
    state->result = std::move(r);
  }
  state->cv.NotifyAll();
}

Result<Manifest> CheckpointStore::Save(const CheckpointRef& ref, CheckpointData&& data) {
  TY_ASSIGN_OR_RETURN(SaveHandle h, SaveAsync(ref, std::move(data)));
  return h.Wait();
}

// Polls the project's collection markers; their leases are wall time, as the collectors
// (perhaps in other processes) wrote them.
Status CheckpointStore::WaitForGarbageCollectors(const std::string& project) {
  std::string dir = ProjectKey(project) + "/gc";
  for (;;) {
    TY_ASSIGN_OR_RETURN(std::vector<blob::BlobEntry> markers, blobs_->List(dir));
    bool running = false;
    int64_t now = clock_.NowMillis();
    for (const blob::BlobEntry& e : markers) {
      if (e.is_dir || !EndsWith(e.name, ".json")) continue;
      Result<std::string> text = blobs_->GetBytes(dir + "/" + e.name);
      if (!text.ok()) {
        if (text.status().IsNotFound()) continue;  // that collection just finished
        return text.status();
      }
      std::optional<int64_t> expires = MarkerExpiry(*text);
      if (expires && *expires > now) running = true;
    }
    if (!running) return Status::Ok();
    std::this_thread::sleep_for(std::chrono::milliseconds(options_.gc_poll_interval_ms));
  }
}

Result<std::vector<Manifest>> CheckpointStore::ReadStep(std::string_view project,
                                                        std::string_view job, int64_t step) {
  std::string dir = StepKey(project, job, step);
  TY_ASSIGN_OR_RETURN(std::vector<blob::BlobEntry> entries, blobs_->List(dir));
  std::vector<Manifest> out;
  for (const blob::BlobEntry& e : entries) {
    if (e.is_dir || !IsRankFileName(e.name)) continue;
    std::string key = dir + "/" + e.name;
    Result<std::string> text = blobs_->GetBytes(key);
    if (!text.ok()) {
      if (text.status().IsNotFound()) continue;  // deleted since the listing
      return text.status();
    }
    TY_ASSIGN_OR_RETURN(Manifest m, DecodeManifest(*text, key));
    out.push_back(std::move(m));
  }
  return out;
}

Result<std::vector<int64_t>> CheckpointStore::ListSteps(std::string_view project,
                                                        std::string_view job) {
  TY_RETURN_IF_ERROR(ValidateCheckpointName("project", project));
  TY_RETURN_IF_ERROR(ValidateCheckpointName("job", job));
  TY_ASSIGN_OR_RETURN(std::vector<blob::BlobEntry> entries,
                      blobs_->List(ProjectKey(project) + "/jobs/" + std::string(job) + "/steps"));
  std::vector<int64_t> steps;
  for (const blob::BlobEntry& e : entries) {
    if (!e.is_dir) continue;
    if (std::optional<int64_t> s = ParseStepDirName(e.name)) steps.push_back(*s);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

Result<std::vector<std::string>> CheckpointStore::ListProjects() {
  TY_ASSIGN_OR_RETURN(std::vector<blob::BlobEntry> entries, blobs_->List(options_.root));
  std::vector<std::string> projects;
  for (const blob::BlobEntry& e : entries) {
    if (e.is_dir && ValidateCheckpointName("project", e.name).ok()) projects.push_back(e.name);
  }
  return projects;
}

Result<std::vector<std::string>> CheckpointStore::ListJobs(std::string_view project) {
  TY_RETURN_IF_ERROR(ValidateCheckpointName("project", project));
  TY_ASSIGN_OR_RETURN(std::vector<blob::BlobEntry> entries,
                      blobs_->List(ProjectKey(project) + "/jobs"));
  std::vector<std::string> jobs;
  for (const blob::BlobEntry& e : entries) {
    if (e.is_dir && ValidateCheckpointName("job", e.name).ok()) jobs.push_back(e.name);
  }
  return jobs;
}

Result<std::vector<CheckpointInfo>> CheckpointStore::List(std::string_view project,
                                                          std::string_view job) {
  TY_ASSIGN_OR_RETURN(std::vector<int64_t> steps, ListSteps(project, job));
  std::vector<CheckpointInfo> out;
  for (int64_t step : steps) {
    TY_ASSIGN_OR_RETURN(std::vector<Manifest> ranks, ReadStep(project, job, step));
    if (std::optional<CheckpointInfo> info = Complete(std::move(ranks))) {
      out.push_back(std::move(*info));
    }
  }
  return out;
}

Result<std::vector<int64_t>> CheckpointStore::ListIncomplete(std::string_view project,
                                                             std::string_view job) {
  TY_ASSIGN_OR_RETURN(std::vector<int64_t> steps, ListSteps(project, job));
  std::vector<int64_t> out;
  for (int64_t step : steps) {
    TY_ASSIGN_OR_RETURN(std::vector<Manifest> ranks, ReadStep(project, job, step));
    if (!Complete(std::move(ranks))) out.push_back(step);
  }
  return out;
}

Result<std::optional<CheckpointInfo>> CheckpointStore::Latest(std::string_view project,
                                                              std::string_view job) {
  TY_ASSIGN_OR_RETURN(std::vector<int64_t> steps, ListSteps(project, job));
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    TY_ASSIGN_OR_RETURN(std::vector<Manifest> ranks, ReadStep(project, job, *it));
    if (std::optional<CheckpointInfo> info = Complete(std::move(ranks))) {
      return std::optional<CheckpointInfo>(std::move(*info));
    }
  }
  return std::optional<CheckpointInfo>();
}

Result<CheckpointInfo> CheckpointStore::Get(std::string_view project, std::string_view job,
                                            int64_t step) {
  TY_RETURN_IF_ERROR(ValidateCheckpointName("project", project));
  TY_RETURN_IF_ERROR(ValidateCheckpointName("job", job));
  TY_ASSIGN_OR_RETURN(std::vector<Manifest> ranks, ReadStep(project, job, step));
  bool any = !ranks.empty();
  if (std::optional<CheckpointInfo> info = Complete(std::move(ranks))) return std::move(*info);
  std::string what = "checkpoint " + std::string(project) + "/" + std::string(job) + " step " +
                     std::to_string(step);
  if (any) {
    return Status::NotFound(what + " is incomplete (a save is in progress or was interrupted); " +
                            "load the latest complete checkpoint instead");
  }
  return Status::NotFound(what + " does not exist");
}

Status CheckpointStore::ReadChunk(const Manifest& m, size_t blob_index, size_t chunk_index,
                                  uint64_t offset, char* dst, std::string& scratch) {
  const BlobManifest& b = m.blobs[blob_index];
  const ChunkRef& c = b.chunks[chunk_index];
  std::string key = ChunkKey(m.ref.project, c.hash, c.compressed);
  auto where = [&] {
    return Describe(m.ref) + ": blob '" + b.name + "' chunk " + std::to_string(chunk_index) +
           " (bytes " + std::to_string(offset) + ".." + std::to_string(offset + c.size) +
           ", object " + key + ")";
  };
  auto corrupt = [&](const std::string& why) {
    return Status::IOError(where() + " is corrupt: " + why +
                           "; restore an older checkpoint or delete this one");
  };
  if (!c.compressed) {
    Result<size_t> n = blobs_->ReadInto(key, dst, c.size);
    if (!n.ok()) {
      if (n.status().IsNotFound()) {
        return Status::IOError(where() + " is missing from the store (deleted outside " +
                               "Trainyard?); restore an older checkpoint or delete this one");
      }
      if (n.status().code() == StatusCode::kFailedPrecondition) {
        return corrupt("the object is longer than the " + std::to_string(c.size) +
                       " bytes the manifest records");
      }
      return n.status().WithContext(where());
    }
    if (*n != c.size) {
      return corrupt("the object has " + std::to_string(*n) + " bytes, the manifest records " +
                     std::to_string(c.size));
    }
  } else {
    Result<std::string> z = blobs_->GetBytes(key);
    if (!z.ok()) {
      if (z.status().IsNotFound()) {
        return Status::IOError(where() + " is missing from the store (deleted outside " +
                               "Trainyard?); restore an older checkpoint or delete this one");
      }
      return z.status().WithContext(where());
    }
    scratch = std::move(*z);
    size_t n = ZSTD_decompress(dst, c.size, scratch.data(), scratch.size());
    if (ZSTD_isError(n)) return corrupt(std::string("zstd: ") + ZSTD_getErrorName(n));
    if (n != c.size) {
      return corrupt("it decompresses to " + std::to_string(n) + " bytes, the manifest records " +
                     std::to_string(c.size));
    }
  }
  std::string got = ChunkHash(dst, c.size);
  if (got != c.hash) return corrupt("its bytes hash to " + got + ", expected " + c.hash);
  return Status::Ok();
}

Result<Manifest> CheckpointStore::RankManifest(std::string_view project, std::string_view job,
                                               int64_t step, int rank) {
  TY_ASSIGN_OR_RETURN(CheckpointInfo info, Get(project, job, step));
  if (rank < 0 || rank >= info.world_size) {
    return Status::NotFound("checkpoint " + std::string(project) + "/" + std::string(job) +
                            " step " + std::to_string(step) + " has no rank " +
                            std::to_string(rank) + " (world_size " +
                            std::to_string(info.world_size) + ")");
  }
  return std::move(info.ranks[static_cast<size_t>(rank)]);
}

Status CheckpointStore::ReadBlobs(const Manifest& m, const std::vector<char*>& dst) {
  std::vector<ChunkTask> tasks;
  for (const ChunkTask& t : ChunkTasks(m)) {
    if (dst[t.blob] != nullptr) tasks.push_back(t);
  }
  std::vector<std::string> scratch(pool_->Concurrency());
  ErrorSlot error;
  pool_->ParallelFor(tasks.size(), [&](size_t i, size_t worker) {
    if (error.failed()) return;
    const ChunkTask& t = tasks[i];
    Status s = ReadChunk(m, t.blob, t.chunk, t.offset, dst[t.blob] + t.offset, scratch[worker]);
    if (!s.ok()) error.Set(i, std::move(s));
  });
  return error.failed() ? error.status() : Status::Ok();
}

Result<CheckpointData> CheckpointStore::Load(std::string_view project, std::string_view job,
                                             int64_t step, int rank) {
  TY_ASSIGN_OR_RETURN(Manifest m, RankManifest(project, job, step, rank));
  std::vector<Bytes> buffers;
  std::vector<char*> dst;
  for (const BlobManifest& b : m.blobs) {
    buffers.emplace_back(b.size);
    dst.push_back(reinterpret_cast<char*>(buffers.back().data()));
  }
  TY_RETURN_IF_ERROR(ReadBlobs(m, dst));
  CheckpointData out;
  for (size_t i = 0; i < m.blobs.size(); ++i) {
    const BlobManifest& b = m.blobs[i];
    out.blobs.push_back(b.kind == BlobKind::kTensor
                            ? Blob::OwnedTensor(b.name, b.dtype, b.shape, std::move(buffers[i]))
                            : Blob::OwnedFile(b.name, std::move(buffers[i])));
  }
  out.metrics = m.metrics;
  out.rng_state = m.rng_state;
  out.user_metadata = m.user_metadata;
  return out;
}

Result<Manifest> CheckpointStore::LoadInto(std::string_view project, std::string_view job,
                                           int64_t step, int rank,
                                           const std::vector<LoadTarget>& targets) {
  TY_ASSIGN_OR_RETURN(Manifest m, RankManifest(project, job, step, rank));
  std::vector<char*> dst(m.blobs.size(), nullptr);
  std::vector<bool> targeted(m.blobs.size(), false);
  for (const LoadTarget& t : targets) {
    std::string where = Describe(m.ref) + ": blob '" + t.name + "'";
    std::optional<size_t> index = BlobIndex(m, t.name);
    if (!index) return Status::InvalidArgument(where + " is not in the checkpoint");
    if (targeted[*index]) return Status::InvalidArgument(where + " has two targets");
    targeted[*index] = true;
    if (t.size != m.blobs[*index].size) {
      return Status::InvalidArgument(where + " has " + std::to_string(m.blobs[*index].size) +
                                     " bytes; the target has " + std::to_string(t.size));
    }
    if (t.data == nullptr && t.size > 0) {
      return Status::InvalidArgument(where + ": the target's memory is null");
    }
    if (t.size > 0) dst[*index] = static_cast<char*>(t.data);  // empty blobs: nothing to read
  }
  TY_RETURN_IF_ERROR(ReadBlobs(m, dst));
  return m;
}

Result<Blob> CheckpointStore::LoadBlob(std::string_view project, std::string_view job, int64_t step,
                                       int rank, std::string_view name) {
  TY_ASSIGN_OR_RETURN(Manifest m, RankManifest(project, job, step, rank));
  std::optional<size_t> index = BlobIndex(m, name);
  if (!index) {
    return Status::NotFound("checkpoint " + std::string(project) + "/" + std::string(job) +
                            " step " + std::to_string(step) + " rank " + std::to_string(rank) +
                            " has no blob named '" + std::string(name) + "'");
  }
  const BlobManifest& b = m.blobs[*index];
  Bytes buffer(b.size);
  std::vector<char*> dst(m.blobs.size(), nullptr);
  dst[*index] = reinterpret_cast<char*>(buffer.data());
  TY_RETURN_IF_ERROR(ReadBlobs(m, dst));
  return b.kind == BlobKind::kTensor
             ? Blob::OwnedTensor(b.name, b.dtype, b.shape, std::move(buffer))
             : Blob::OwnedFile(b.name, std::move(buffer));
}

Status CheckpointStore::Verify(std::string_view project, std::string_view job, int64_t step) {
  TY_ASSIGN_OR_RETURN(CheckpointInfo info, Get(project, job, step));
  std::vector<Bytes> buffers(pool_->Concurrency());
  std::vector<std::string> scratch(pool_->Concurrency());
  for (const Manifest& m : info.ranks) {
    std::vector<ChunkTask> tasks = ChunkTasks(m);
    ErrorSlot error;
    pool_->ParallelFor(tasks.size(), [&](size_t i, size_t worker) {
      if (error.failed()) return;
      const ChunkTask& t = tasks[i];
      uint64_t size = m.blobs[t.blob].chunks[t.chunk].size;
      if (buffers[worker].size() < size) buffers[worker] = Bytes(size);
      char* dst = reinterpret_cast<char*>(buffers[worker].data());
      Status s = ReadChunk(m, t.blob, t.chunk, t.offset, dst, scratch[worker]);
      if (!s.ok()) error.Set(i, std::move(s));
    });
    if (error.failed()) return error.status();
  }
  return Status::Ok();
}

Status CheckpointStore::Delete(std::string_view project, std::string_view job, int64_t step) {
  TY_RETURN_IF_ERROR(ValidateCheckpointName("project", project));
  TY_RETURN_IF_ERROR(ValidateCheckpointName("job", job));
  std::string dir = StepKey(project, job, step);
  TY_ASSIGN_OR_RETURN(bool is_dir, blobs_->IsDirectory(dir));
  if (!is_dir) {
    return Status::NotFound("checkpoint " + std::string(project) + "/" + std::string(job) +
                            " step " + std::to_string(step) + " does not exist");
  }
  // Rank 0's manifest first: without it the checkpoint is incomplete, so it disappears from
  // readers in one step even if the rest of the deletion is interrupted.
  Status s = blobs_->Delete(dir + "/" + RankFileName(0));
  if (!s.ok() && !s.IsNotFound()) return s;
  TY_RETURN_IF_ERROR(blobs_->SyncDirectory(dir));
  s = blobs_->Delete(dir);
  if (!s.ok() && !s.IsNotFound()) return s;
  return blobs_->SyncDirectory(ProjectKey(project) + "/jobs/" + std::string(job) + "/steps");
}

// One collection of a project's unreferenced chunks; Run() is its phases in order:
//   1. The lease: a marker with its expiry is written first, so a save that starts later
//      waits for the collection (WaitForGarbageCollectors).
//   2. Live chunks from intents, then from manifests: a save deletes its intent only after
//      its manifest is committed, so a save is seen through one or the other. An intent
//      older than intent_ttl_ms is from a save that died: it stops protecting.
//   3. The sweep: every chunk that is not live is deleted, in parallel per directory, until
//      the lease runs out (savers stop waiting then; the collection stops with an error).
//   4. Expired intents and the markers of collections that died past their lease go.
//   5. The marker goes (also when a phase failed).
// The lease and the intents' ages are wall time: other processes wrote and read them.
class GarbageCollection {
 public:
  GarbageCollection(CheckpointStore& store, std::string project);
  GarbageCollection(const GarbageCollection&) = delete;
  GarbageCollection& operator=(const GarbageCollection&) = delete;

  Result<GcStats> Run() TY_EXCLUDES(mu_);

 private:
  Status WriteMarker();
  Status Collect() TY_EXCLUDES(mu_);
  Status ReadIntents() TY_EXCLUDES(mu_);
  // Adds the chunks of one intent to live_ (false: it has expired).
  Result<bool> ReadIntent(const std::string& key);
  Status ReadManifests() TY_EXCLUDES(mu_);
  Status Sweep() TY_EXCLUDES(mu_);
  Status SweepDirectory(const std::string& dir, GcStats& swept);
  Status RemoveExpiredIntents();
  Status RemoveDeadMarkers();

  CheckpointStore& store_;
  const std::string project_;
  const std::string project_key_;
  const int64_t started_ms_;
  const int64_t expires_ms_;
  const std::string marker_key_;

  // Filled before the sweep, read-only during it.
  std::unordered_set<std::string> live_;
  std::vector<std::string> expired_intents_;

  Mutex mu_;
  GcStats stats_ TY_GUARDED_BY(mu_);
};

GarbageCollection::GarbageCollection(CheckpointStore& store, std::string project)
    : store_(store),
      project_(std::move(project)),
      project_key_(store.ProjectKey(project_)),
      started_ms_(store.clock_.NowMillis()),
      expires_ms_(started_ms_ + store.options_.gc_lease_ms),
      marker_key_(project_key_ + "/gc/" + store.random_.Hex(kRandomNameBytes) + ".json") {}

Result<GcStats> GarbageCollection::Run() {
  TY_RETURN_IF_ERROR(WriteMarker());
  Status result = Collect();
  Status removed = store_.blobs_->Delete(marker_key_);
  if (!result.ok()) return result;
  if (!removed.ok() && !removed.IsNotFound()) return removed;
  MutexLock lock(mu_);
  return stats_;
}

Status GarbageCollection::WriteMarker() {
  json::object marker;
  marker["started_ms"] = started_ms_;
  marker["expires_ms"] = expires_ms_;
  return store_.blobs_->PutBytes(marker_key_, json::serialize(marker));
}

Status GarbageCollection::Collect() {
  TY_RETURN_IF_ERROR(ReadIntents());
  TY_RETURN_IF_ERROR(ReadManifests());
  TY_RETURN_IF_ERROR(Sweep());
  TY_RETURN_IF_ERROR(RemoveExpiredIntents());
  return RemoveDeadMarkers();
}

Status GarbageCollection::ReadIntents() {
  const std::string intents_dir = project_key_ + "/intents";
  TY_ASSIGN_OR_RETURN(std::vector<blob::BlobEntry> intents, store_.blobs_->List(intents_dir));
  uint64_t live = 0, expired = 0;
  for (const blob::BlobEntry& e : intents) {
    if (e.is_dir || !EndsWith(e.name, ".json")) continue;
    std::string key = intents_dir + "/" + e.name;
    Result<bool> read = ReadIntent(key);
    if (!read.ok()) {
      if (read.status().IsNotFound()) continue;  // its save just finished
      return read.status();
    }
    if (*read) {
      ++live;
    } else {
      expired_intents_.push_back(key);
      ++expired;
    }
  }
  MutexLock lock(mu_);
  stats_.intents_live += live;
  stats_.intents_expired += expired;
  return Status::Ok();
}

Result<bool> GarbageCollection::ReadIntent(const std::string& key) {
  TY_ASSIGN_OR_RETURN(std::string text, store_.blobs_->GetBytes(key));
  Result<json::object> o = ParseJsonObject(text);
  if (!o.ok()) return o.status().WithContext("save intent " + key + " is corrupt");
  TY_ASSIGN_OR_RETURN(int64_t created, RequiredInt64(*o, "created_ms"));
  if (created + store_.options_.intent_ttl_ms < started_ms_) return false;
  TY_ASSIGN_OR_RETURN(const json::array* chunks, OptionalArray(*o, "chunks"));
  if (chunks != nullptr) {
    for (const json::value& h : *chunks) {
      if (h.is_string()) live_.insert(std::string(h.get_string()));
    }
  }
  return true;
}

Status GarbageCollection::ReadManifests() {
  uint64_t manifests = 0;
  TY_ASSIGN_OR_RETURN(std::vector<std::string> jobs, store_.ListJobs(project_));
  for (const std::string& job : jobs) {
    TY_ASSIGN_OR_RETURN(std::vector<int64_t> steps, store_.ListSteps(project_, job));
    for (int64_t step : steps) {
      // Complete or not: an incomplete step may be a save whose other ranks still write.
      Result<std::vector<Manifest>> ranks = store_.ReadStep(project_, job, step);
      if (!ranks.ok()) {
        return ranks.status().WithContext(
            "garbage collection stopped: it cannot tell which chunks that manifest uses");
      }
      for (const Manifest& m : *ranks) {
        ++manifests;
        for (const BlobManifest& b : m.blobs) {
          for (const ChunkRef& c : b.chunks) live_.insert(c.hash);
        }
      }
    }
  }
  MutexLock lock(mu_);
  stats_.manifests_read += manifests;
  return Status::Ok();
}

Status GarbageCollection::Sweep() {
  const std::string chunks_dir = project_key_ + "/chunks";
  TY_ASSIGN_OR_RETURN(std::vector<blob::BlobEntry> prefixes, store_.blobs_->List(chunks_dir));
  ErrorSlot error;
  store_.pool_->ParallelFor(prefixes.size(), [&](size_t i, size_t) {
    if (error.failed() || !prefixes[i].is_dir) return;
    GcStats swept;
    Status s = SweepDirectory(chunks_dir + "/" + prefixes[i].name, swept);
    MutexLock lock(mu_);
    stats_.chunks_scanned += swept.chunks_scanned;
    stats_.chunks_live += swept.chunks_live;
    stats_.chunks_deleted += swept.chunks_deleted;
    stats_.bytes_deleted += swept.bytes_deleted;
    if (!s.ok()) error.Set(i, std::move(s));
  });
  return error.failed() ? error.status() : Status::Ok();
}

// Deletes the chunks of one directory that are not live; counts into `swept`.
Status GarbageCollection::SweepDirectory(const std::string& dir, GcStats& swept) {
  TY_ASSIGN_OR_RETURN(std::vector<blob::BlobEntry> files, store_.blobs_->List(dir));
  for (const blob::BlobEntry& f : files) {
    if (f.is_dir) continue;
    std::string_view hash = f.name;
    if (EndsWith(hash, kCompressedSuffix)) hash.remove_suffix(kCompressedSuffix.size());
    if (!IsChunkHash(hash)) continue;
    ++swept.chunks_scanned;
    if (live_.count(std::string(hash)) > 0) {
      ++swept.chunks_live;
      continue;
    }
    if (store_.clock_.NowMillis() >= expires_ms_) {
      return Status::Unavailable("garbage collection ran past its lease of " +
                                 std::to_string(store_.options_.gc_lease_ms) +
                                 " ms and stopped; run it again (or raise gc_lease_ms)");
    }
    Status s = store_.blobs_->Delete(dir + "/" + f.name);
    if (!s.ok() && !s.IsNotFound()) return s;
    ++swept.chunks_deleted;
    swept.bytes_deleted += static_cast<uint64_t>(f.size);
  }
  return Status::Ok();
}

Status GarbageCollection::RemoveExpiredIntents() {
  for (const std::string& key : expired_intents_) {
    Status s = store_.blobs_->Delete(key);
    if (!s.ok() && !s.IsNotFound()) return s;
  }
  return Status::Ok();
}

// Markers of collections that died past their lease (deleted on a best-effort basis).
Status GarbageCollection::RemoveDeadMarkers() {
  TY_ASSIGN_OR_RETURN(std::vector<blob::BlobEntry> markers,
                      store_.blobs_->List(project_key_ + "/gc"));
  for (const blob::BlobEntry& e : markers) {
    std::string key = project_key_ + "/gc/" + e.name;
    if (e.is_dir || key == marker_key_) continue;
    Result<std::string> text = store_.blobs_->GetBytes(key);
    if (!text.ok()) continue;
    std::optional<int64_t> expires = MarkerExpiry(*text);
    if (expires && *expires < store_.clock_.NowMillis()) (void)store_.blobs_->Delete(key);
  }
  return Status::Ok();
}

Result<GcStats> CheckpointStore::CollectGarbage(std::string_view project) {
  TY_RETURN_IF_ERROR(ValidateCheckpointName("project", project));
  return GarbageCollection(*this, std::string(project)).Run();
}

namespace {

// The safetensors header of rank `m`'s tensors (files are skipped), padded so that the data
// starts aligned: 8 bytes of little-endian length, then the JSON text.
Result<std::string> SafetensorsHeader(const Manifest& m) {
  json::object header;
  json::object meta;
  meta["format"] = "pt";
  meta["trainyard.project"] = m.ref.project;
  meta["trainyard.job"] = m.ref.job;
  meta["trainyard.step"] = std::to_string(m.ref.step);
  for (const auto& [k, v] : m.metrics)
    meta["trainyard.metric." + k] = json::serialize(DoubleToJson(v));
  header["__metadata__"] = std::move(meta);
  uint64_t offset = 0;
  for (const BlobManifest& b : m.blobs) {
    if (b.kind != BlobKind::kTensor) continue;
    if (b.name == "__metadata__") {
      return Status::InvalidArgument(
          "a tensor named __metadata__ cannot be written to safetensors");
    }
    json::object t;
    t["dtype"] = DTypeName(b.dtype);
    json::array shape;
    for (int64_t d : b.shape) shape.push_back(d);
    t["shape"] = std::move(shape);
    t["data_offsets"] = json::array{offset, offset + b.size};
    offset += b.size;
    header[b.name] = std::move(t);
  }
  std::string text = json::serialize(header);
  text.append((kSafetensorsAlignment - text.size() % kSafetensorsAlignment) % kSafetensorsAlignment,
              ' ');
  std::string out(kSafetensorsLengthBytes, '\0');
  uint64_t len = text.size();
  for (size_t i = 0; i < kSafetensorsLengthBytes; ++i) out[i] = static_cast<char>(len >> (8 * i));
  return out + text;
}

// Writes all of [p, p + n) to `fd`; `path` names it in errors.
Status WriteAll(int fd, const std::string& path, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      std::string msg = "cannot write " + path + ": " + std::strerror(errno);
      return errno == ENOSPC ? Status::ResourceExhausted("disk full: " + msg)
                             : Status::IOError(msg);
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

}  // namespace

Status CheckpointStore::WriteSafetensors(const Manifest& m, int fd, const std::string& path) {
  TY_ASSIGN_OR_RETURN(std::string header, SafetensorsHeader(m));
  TY_RETURN_IF_ERROR(WriteAll(fd, path, header.data(), header.size()));
  Bytes buffer(m.chunk_size);
  std::string scratch;
  for (size_t bi = 0; bi < m.blobs.size(); ++bi) {
    const BlobManifest& b = m.blobs[bi];
    if (b.kind != BlobKind::kTensor) continue;
    uint64_t off = 0;
    for (size_t ci = 0; ci < b.chunks.size(); ++ci) {
      if (buffer.size() < b.chunks[ci].size) buffer = Bytes(b.chunks[ci].size);
      char* dst = reinterpret_cast<char*>(buffer.data());
      TY_RETURN_IF_ERROR(ReadChunk(m, bi, ci, off, dst, scratch));
      TY_RETURN_IF_ERROR(WriteAll(fd, path, dst, b.chunks[ci].size));
      off += b.chunks[ci].size;
    }
  }
  if (::fsync(fd) != 0) return Status::IOError("cannot sync " + path + ": " + std::strerror(errno));
  return Status::Ok();
}

Status CheckpointStore::ExportSafetensors(std::string_view project, std::string_view job,
                                          int64_t step, int rank, const std::string& local_path) {
  TY_ASSIGN_OR_RETURN(CheckpointInfo info, Get(project, job, step));
  if (rank < 0 || rank >= info.world_size) {
    return Status::NotFound("checkpoint has no rank " + std::to_string(rank));
  }
  const Manifest& m = info.ranks[static_cast<size_t>(rank)];
  std::string tmp = local_path + ".tmp-" + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::IOError("cannot create " + tmp + ": " + std::strerror(errno));
  Status s = WriteSafetensors(m, fd, tmp);
  ::close(fd);
  if (s.ok() && ::rename(tmp.c_str(), local_path.c_str()) != 0) {
    s = Status::IOError("cannot rename " + tmp + " to " + local_path + ": " + std::strerror(errno));
  }
  if (!s.ok()) ::unlink(tmp.c_str());
  return s;
}

}  // namespace trainyard::checkpoints
