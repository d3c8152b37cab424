#include "trainyard/checkpoints/checkpoint_store.h"

#include <fcntl.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
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

  mutable std::mutex mu;
  mutable std::condition_variable cv;
  std::optional<Result<Manifest>> result;  // guarded by mu; set once
};

Result<Manifest> SaveHandle::Wait() const {
  if (state_ == nullptr) return Status::FailedPrecondition("this SaveHandle refers to no save");
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->cv.wait(lock, [this] { return state_->result.has_value(); });
  return *state_->result;
}

bool SaveHandle::Done() const {
  if (state_ == nullptr) return true;
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->result.has_value();
}

int64_t SaveHandle::BlockedMicros() const { return state_ == nullptr ? 0 : state_->blocked_us; }

namespace {

constexpr uint64_t kSnapshotPiece = 8ull << 20;

std::string StepDirName(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%020lld", static_cast<long long>(step));
  return buf;
}

std::optional<int64_t> ParseStepDirName(std::string_view name) {
  if (name.size() != 20) return std::nullopt;
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

int64_t SteadyMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
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

// The first error in task order, so that reports are deterministic.
class ErrorSlot {
 public:
  void Set(size_t index, Status s) {
    std::lock_guard<std::mutex> lock(mu_);
    if (failed_.load() && index >= index_) return;
    index_ = index;
    status_ = std::move(s);
    failed_.store(true);
  }
  bool failed() const { return failed_.load(std::memory_order_relaxed); }
  Status status() const {
    std::lock_guard<std::mutex> lock(mu_);
    return status_;
  }

 private:
  mutable std::mutex mu_;
  std::atomic<bool> failed_{false};
  size_t index_ = 0;
  Status status_;
};

}  // namespace

Status ValidateCheckpointName(std::string_view what, std::string_view name) {
  if (name.empty() || name.size() > 128 || name.front() == '.') {
    return Status::InvalidArgument(std::string(what) + " must be 1-128 characters and not start " +
                                   "with '.' (got '" + Abbreviate(name) + "')");
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

CheckpointStore::CheckpointStore(std::shared_ptr<blob::BlobStore> blobs,
                                 CheckpointStoreOptions options)
    : blobs_(std::move(blobs)),
      options_(std::move(options)),
      clock_(options_.clock ? options_.clock : std::make_shared<SystemClock>()),
      pool_(std::make_unique<ThreadPool>(std::max(options_.io_threads, 1) - 1)) {}

CheckpointStore::~CheckpointStore() {
  std::lock_guard<std::mutex> lock(save_mu_);
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
         std::string(hash) + (compressed ? ".zst" : "");
}

Bytes CheckpointStore::TakeSnapshotBuffer(size_t size) {
  if (options_.reuse_snapshot_buffers) {
    std::lock_guard<std::mutex> lock(spare_mu_);
    for (Bytes& b : spare_buffers_) {
      if (b.size() == size && b.data() != nullptr) return std::move(b);
    }
  }
  return Bytes(size);
}

void CheckpointStore::RecycleSnapshotBuffers(std::vector<Bytes> buffers) {
  if (!options_.reuse_snapshot_buffers) return;
  std::lock_guard<std::mutex> lock(spare_mu_);
  spare_buffers_ = std::move(buffers);
}

Result<SaveHandle> CheckpointStore::SaveAsync(const CheckpointRef& ref, CheckpointData&& data) {
  int64_t start_us = SteadyMicros();
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

  std::unique_lock<std::mutex> lock(save_mu_);
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

  // Snapshot: copy borrowed bytes into owned buffers, in parallel pieces.
  struct Piece {
    size_t blob;
    uint64_t offset;
    uint64_t size;
  };
  std::vector<Piece> pieces;
  std::vector<Bytes> buffers(state->data.blobs.size());
  for (size_t i = 0; i < state->data.blobs.size(); ++i) {
    const Blob& b = state->data.blobs[i];
    if (!b.is_borrowed()) continue;
    buffers[i] = TakeSnapshotBuffer(b.size());
    state->snapshot_blobs.push_back(i);
    for (uint64_t off = 0; off < b.size(); off += kSnapshotPiece) {
      pieces.push_back({i, off, std::min<uint64_t>(kSnapshotPiece, b.size() - off)});
    }
  }
  pool_->ParallelFor(pieces.size(), [&](size_t i, size_t) {
    const Piece& p = pieces[i];
    std::memcpy(buffers[p.blob].data() + p.offset, state->data.blobs[p.blob].data() + p.offset,
                p.size);
  });
  for (size_t i : state->snapshot_blobs) state->data.blobs[i].AdoptOwned(std::move(buffers[i]));
  state->blocked_us = SteadyMicros() - start_us;

  in_flight_ = state;
  save_thread_ = std::thread([this, state] {
    Result<Manifest> r = RunSave(state);
    std::vector<Bytes> spare;
    for (size_t i : state->snapshot_blobs) spare.push_back(state->data.blobs[i].ReleaseOwned());
    state->data = CheckpointData();
    RecycleSnapshotBuffers(std::move(spare));
    {
      std::lock_guard<std::mutex> l(state->mu);
      state->result = std::move(r);
    }
    state->cv.notify_all();
  });
  return SaveHandle(state);
}

Result<Manifest> CheckpointStore::Save(const CheckpointRef& ref, CheckpointData&& data) {
  TY_ASSIGN_OR_RETURN(SaveHandle h, SaveAsync(ref, std::move(data)));
  return h.Wait();
}

Status CheckpointStore::WaitForGarbageCollectors(const std::string& project) {
  std::string dir = ProjectKey(project) + "/gc";
  for (;;) {
    TY_ASSIGN_OR_RETURN(std::vector<blob::BlobEntry> markers, blobs_->List(dir));
    bool running = false;
    int64_t now = clock_->NowMillis();
    for (const blob::BlobEntry& e : markers) {
      if (e.is_dir || !EndsWith(e.name, ".json")) continue;
      Result<std::string> text = blobs_->GetBytes(dir + "/" + e.name);
      if (!text.ok()) {
        if (text.status().IsNotFound()) continue;  // that collection just finished
        return text.status();
      }
      Result<json::object> o = ParseJsonObject(*text);
      if (!o.ok()) continue;  // not ours; markers are written atomically
      Result<int64_t> expires = RequiredInt64(*o, "expires_ms");
      if (expires.ok() && *expires > now) running = true;
    }
    if (!running) return Status::Ok();
    std::this_thread::sleep_for(std::chrono::milliseconds(options_.gc_poll_interval_ms));
  }
}

Result<Manifest> CheckpointStore::RunSave(const std::shared_ptr<SaveHandle::State>& state) {
  const CheckpointRef& ref = state->ref;
  const CheckpointData& data = state->data;
  const uint64_t chunk_size = std::max<uint64_t>(options_.chunk_size, 1);

  // 1. Cut.
  std::vector<ChunkTask> tasks;
  Manifest m;
  m.ref = ref;
  m.chunk_size = chunk_size;
  m.metrics = data.metrics;
  m.rng_state = data.rng_state;
  m.user_metadata = data.user_metadata;
  for (size_t b = 0; b < data.blobs.size(); ++b) {
    const Blob& blob = data.blobs[b];
    BlobManifest bm;
    bm.name = blob.name;
    bm.kind = blob.kind;
    bm.dtype = blob.dtype;
    bm.shape = blob.shape;
    bm.size = blob.size();
    for (uint64_t off = 0; off < blob.size(); off += chunk_size) {
      ChunkRef c;
      c.size = std::min(chunk_size, blob.size() - off);
      tasks.push_back({b, bm.chunks.size(), off});
      bm.chunks.push_back(std::move(c));
    }
    m.total_bytes += blob.size();
    m.blobs.push_back(std::move(bm));
  }
  auto chunk_of = [&](size_t task) -> ChunkRef& {
    return m.blobs[tasks[task].blob].chunks[tasks[task].chunk];
  };
  auto bytes_of = [&](size_t task) {
    return reinterpret_cast<const char*>(data.blobs[tasks[task].blob].data() + tasks[task].offset);
  };

  // 2-4. Chunks go in batches that grow (so writing starts early). A batch's chunks are
  // announced in an intent once all of them are hashed, and the worker that records it waits
  // out any collection that started before; only then are they looked up and the ones the
  // project lacks written. An intent precedes every look at which chunks exist: a collection
  // that starts later sees it and keeps them. The pool takes one task list with no barrier
  // between batches: batch b's writes are interleaved with batch b+1's hashes, so the disk
  // stays busy while the next intent is prepared.
  const std::string project_key = ProjectKey(ref.project);
  const std::string intent_prefix = project_key + "/intents/" + ref.job + "-" +
                                    StepDirName(ref.step) + "-r" + std::to_string(ref.rank) + "-" +
                                    SecureRandom().Hex(8) + "-";
  std::mutex mu;  // guards intent_keys, owner, prefixes, the batches' states
  std::condition_variable batch_cv;
  std::vector<std::string> intent_keys;
  auto drop_intents = [&] {
    for (const std::string& key : intent_keys) {
      Status s = blobs_->Delete(key);
      if (!s.ok() && !s.IsNotFound()) {
        spdlog::warn("cannot remove checkpoint save intent {}: {} (garbage collection expires it)",
                     key, s.ToString());
      }
    }
  };
  struct Batch {
    size_t begin = 0, end = 0;  // [begin, end) of tasks
    std::atomic<size_t> hashes_left{0};
    int state = 0;  // 0 hashing, 1 announced (writes may start), 2 failed; guarded by mu
  };
  std::vector<std::unique_ptr<Batch>> batches;
  for (size_t begin = 0, size = 2 * pool_->Concurrency(); begin < tasks.size();
       size = std::min<size_t>(size * 2, 1024)) {
    auto batch = std::make_unique<Batch>();
    batch->begin = begin;
    batch->end = std::min(tasks.size(), begin + size);
    batch->hashes_left = batch->end - batch->begin;
    begin = batch->end;
    batches.push_back(std::move(batch));
  }
  std::vector<size_t> batch_of(tasks.size());
  for (size_t bi = 0; bi < batches.size(); ++bi) {
    for (size_t i = batches[bi]->begin; i < batches[bi]->end; ++i) batch_of[i] = bi;
  }
  // The order the pool takes tasks in: every hash of batch b is claimed before any write of
  // batch b, so a worker waiting for an intent never waits on work nobody has claimed.
  struct Step {
    bool write = false;
    size_t task = 0;
  };
  std::vector<Step> order;
  order.reserve(2 * tasks.size());
  if (!batches.empty()) {
    for (size_t i = batches[0]->begin; i < batches[0]->end; ++i) order.push_back({false, i});
  }
  for (size_t bi = 0; bi < batches.size(); ++bi) {
    const Batch& w = *batches[bi];
    size_t wn = w.end - w.begin;
    size_t hb = bi + 1 < batches.size() ? batches[bi + 1]->begin : 0;
    size_t hn = bi + 1 < batches.size() ? batches[bi + 1]->end - hb : 0;
    size_t hashed = 0;
    for (size_t j = 0; j < wn; ++j) {
      order.push_back({true, w.begin + j});
      for (size_t upto = (j + 1) * hn / wn; hashed < upto; ++hashed) {
        order.push_back({false, hb + hashed});
      }
    }
  }

  // hash -> the task that writes it (the first of this save to announce it).
  std::unordered_map<std::string, size_t> owner;
  std::vector<char> compressed(tasks.size(), 0);
  std::atomic<uint64_t> written_bytes{0}, written_chunks{0}, reused_chunks{0};
  std::vector<std::string> scratch(pool_->Concurrency());
  std::set<std::string> prefixes;
  ErrorSlot error;

  // Run by the worker that hashed a batch's last chunk.
  auto announce = [&](size_t bi) {
    Batch& batch = *batches[bi];
    json::array hashes;
    {
      std::lock_guard<std::mutex> lock(mu);
      for (size_t i = batch.begin; i < batch.end; ++i) {
        if (owner.emplace(chunk_of(i).hash, i).second) {
          hashes.push_back(json::value(chunk_of(i).hash));
          prefixes.insert(chunk_of(i).hash.substr(0, 2));
        }
      }
    }
    Status s;
    if (!hashes.empty() && !error.failed()) {
      json::object intent;
      intent["created_ms"] = clock_->NowMillis();
      intent["job"] = ref.job;
      intent["step"] = ref.step;
      intent["rank"] = ref.rank;
      intent["chunks"] = std::move(hashes);
      std::string key = intent_prefix + std::to_string(bi) + ".json";
      s = blobs_->PutBytes(key, json::serialize(intent));
      if (s.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        intent_keys.push_back(key);
      } else {
        s = s.WithContext(Describe(ref) + ": cannot record the save's intent");
      }
      if (s.ok()) s = WaitForGarbageCollectors(ref.project).WithContext(Describe(ref));
    }
    if (!s.ok()) error.Set(batch.begin, std::move(s));
    {
      std::lock_guard<std::mutex> lock(mu);
      batch.state = s.ok() ? 1 : 2;
    }
    batch_cv.notify_all();
  };

  auto write = [&](size_t i, size_t worker) {
    {
      std::unique_lock<std::mutex> lock(mu);
      const Batch& batch = *batches[batch_of[i]];
      batch_cv.wait(lock, [&] { return batch.state != 0; });
      if (batch.state == 2 || owner.at(chunk_of(i).hash) != i) return;  // failed, or a copy
    }
    if (error.failed()) return;
    const ChunkRef& c = chunk_of(i);
    const char* bytes = bytes_of(i);
    auto fail = [&](const Status& s) {
      error.Set(i, s.WithContext(Describe(ref) + ": blob '" + m.blobs[tasks[i].blob].name +
                                 "' chunk " + std::to_string(tasks[i].chunk)));
    };
    Result<bool> raw = blobs_->Exists(ChunkKey(ref.project, c.hash, false));
    if (!raw.ok()) return fail(raw.status());
    if (*raw) {
      reused_chunks.fetch_add(1);
      return;
    }
    Result<bool> zst = blobs_->Exists(ChunkKey(ref.project, c.hash, true));
    if (!zst.ok()) return fail(zst.status());
    if (*zst) {
      compressed[i] = 1;
      reused_chunks.fetch_add(1);
      return;
    }
    if (options_.compression == Compression::kZstd) {
      std::string& out = scratch[worker];
      out.resize(ZSTD_compressBound(c.size));
      size_t n = ZSTD_compress(out.data(), out.size(), bytes, c.size, options_.zstd_level);
      if (!ZSTD_isError(n) &&
          static_cast<double>(n) <= (1.0 - options_.min_compression_gain) * c.size) {
        Status s = blobs_->PutBytes(ChunkKey(ref.project, c.hash, true), {out.data(), n});
        if (!s.ok()) return fail(s);
        compressed[i] = 1;
        written_bytes.fetch_add(n);
        written_chunks.fetch_add(1);
        return;
      }
    }
    Status s = blobs_->PutBytes(ChunkKey(ref.project, c.hash, false), {bytes, c.size});
    if (!s.ok()) return fail(s);
    written_bytes.fetch_add(c.size);
    written_chunks.fetch_add(1);
  };

  pool_->ParallelFor(order.size(), [&](size_t step, size_t worker) {
    const size_t i = order[step].task;
    if (order[step].write) return write(i, worker);
    chunk_of(i).hash = ChunkHash(bytes_of(i), chunk_of(i).size);
    if (batches[batch_of[i]]->hashes_left.fetch_sub(1) == 1) announce(batch_of[i]);
  });
  if (error.failed()) {
    drop_intents();
    return error.status();
  }
  for (size_t i = 0; i < tasks.size(); ++i) {
    chunk_of(i).compressed = compressed[owner.at(chunk_of(i).hash)] != 0;
  }

  // 5. Make the chunks' names durable (their bytes were fsynced by PutBytes).
  std::vector<std::string> dirs;
  for (const std::string& p : prefixes) dirs.push_back(project_key + "/chunks/" + p);
  dirs.push_back(project_key + "/chunks");
  pool_->ParallelFor(dirs.size(), [&](size_t i, size_t) {
    Status s = blobs_->SyncDirectory(dirs[i]);
    if (!s.ok()) error.Set(i, s.WithContext(Describe(ref)));
  });
  if (error.failed()) {
    drop_intents();
    return error.status();
  }

  // 6. Commit: the manifest appears atomically, then its name is made durable.
  m.created_ms = clock_->NowMillis();
  m.written_bytes = written_bytes.load();
  m.written_chunks = written_chunks.load();
  m.reused_chunks = reused_chunks.load();
  std::string step_key = StepKey(ref.project, ref.job, ref.step);
  Status put = blobs_->PutBytes(step_key + "/" + RankFileName(ref.rank), EncodeManifest(m));
  if (!put.ok()) {
    drop_intents();
    return put.WithContext(Describe(ref) + ": cannot write the manifest; nothing was committed");
  }
  std::string job_key = project_key + "/jobs/" + ref.job;
  for (const std::string& d : {step_key, job_key + "/steps", job_key, project_key + "/jobs"}) {
    if (Status s = blobs_->SyncDirectory(d); !s.ok()) {
      drop_intents();
      return s.WithContext(Describe(ref) +
                           ": the manifest was written but may not survive a crash");
    }
  }
  drop_intents();
  return m;
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

Result<GcStats> CheckpointStore::CollectGarbage(std::string_view project_view) {
  TY_RETURN_IF_ERROR(ValidateCheckpointName("project", project_view));
  const std::string project(project_view);
  const std::string project_key = ProjectKey(project);
  const int64_t started = clock_->NowMillis();
  const int64_t expires = started + options_.gc_lease_ms;
  const std::string marker_key = project_key + "/gc/" + SecureRandom().Hex(8) + ".json";
  {
    json::object marker;
    marker["started_ms"] = started;
    marker["expires_ms"] = expires;
    TY_RETURN_IF_ERROR(blobs_->PutBytes(marker_key, json::serialize(marker)));
  }
  GcStats stats;
  Status result = [&]() -> Status {
    std::unordered_set<std::string> live;
    std::vector<std::string> expired_intents;
    // Intents before manifests: a save deletes its intent only after its manifest is
    // committed, so a save is seen through one or the other.
    const std::string intents_dir = project_key + "/intents";
    TY_ASSIGN_OR_RETURN(std::vector<blob::BlobEntry> intents, blobs_->List(intents_dir));
    for (const blob::BlobEntry& e : intents) {
      if (e.is_dir || !EndsWith(e.name, ".json")) continue;
      std::string key = intents_dir + "/" + e.name;
      Result<std::string> text = blobs_->GetBytes(key);
      if (!text.ok()) {
        if (text.status().IsNotFound()) continue;
        return text.status();
      }
      Result<json::object> o = ParseJsonObject(*text);
      if (!o.ok()) return o.status().WithContext("save intent " + key + " is corrupt");
      TY_ASSIGN_OR_RETURN(int64_t created, RequiredInt64(*o, "created_ms"));
      if (created + options_.intent_ttl_ms < started) {
        expired_intents.push_back(key);
        ++stats.intents_expired;
        continue;
      }
      ++stats.intents_live;
      TY_ASSIGN_OR_RETURN(const json::array* chunks, OptionalArray(*o, "chunks"));
      if (chunks != nullptr) {
        for (const json::value& h : *chunks) {
          if (h.is_string()) live.insert(std::string(h.get_string()));
        }
      }
    }
    TY_ASSIGN_OR_RETURN(std::vector<std::string> jobs, ListJobs(project));
    for (const std::string& job : jobs) {
      TY_ASSIGN_OR_RETURN(std::vector<int64_t> steps, ListSteps(project, job));
      for (int64_t step : steps) {
        // Complete or not: an incomplete step may be a save whose other ranks still write.
        Result<std::vector<Manifest>> ranks = ReadStep(project, job, step);
        if (!ranks.ok()) {
          return ranks.status().WithContext(
              "garbage collection stopped: it cannot tell which chunks that manifest uses");
        }
        for (const Manifest& m : *ranks) {
          ++stats.manifests_read;
          for (const BlobManifest& b : m.blobs) {
            for (const ChunkRef& c : b.chunks) live.insert(c.hash);
          }
        }
      }
    }
    const std::string chunks_dir = project_key + "/chunks";
    TY_ASSIGN_OR_RETURN(std::vector<blob::BlobEntry> prefixes, blobs_->List(chunks_dir));
    std::mutex mu;
    ErrorSlot error;
    pool_->ParallelFor(prefixes.size(), [&](size_t i, size_t) {
      if (error.failed() || !prefixes[i].is_dir) return;
      std::string dir = chunks_dir + "/" + prefixes[i].name;
      Result<std::vector<blob::BlobEntry>> files = blobs_->List(dir);
      if (!files.ok()) return error.Set(i, files.status());
      GcStats local;
      for (const blob::BlobEntry& f : *files) {
        if (f.is_dir) continue;
        std::string_view hash = f.name;
        if (EndsWith(hash, ".zst")) hash.remove_suffix(4);
        if (!IsChunkHash(hash)) continue;
        ++local.chunks_scanned;
        if (live.count(std::string(hash)) > 0) {
          ++local.chunks_live;
          continue;
        }
        if (clock_->NowMillis() >= expires) {
          return error.Set(
              i, Status::Unavailable("garbage collection ran past its lease of " +
                                     std::to_string(options_.gc_lease_ms) +
                                     " ms and stopped; run it again (or raise gc_lease_ms)"));
        }
        Status s = blobs_->Delete(dir + "/" + f.name);
        if (!s.ok() && !s.IsNotFound()) return error.Set(i, s);
        ++local.chunks_deleted;
        local.bytes_deleted += static_cast<uint64_t>(f.size);
      }
      std::lock_guard<std::mutex> lock(mu);
      stats.chunks_scanned += local.chunks_scanned;
      stats.chunks_live += local.chunks_live;
      stats.chunks_deleted += local.chunks_deleted;
      stats.bytes_deleted += local.bytes_deleted;
    });
    if (error.failed()) return error.status();
    for (const std::string& key : expired_intents) {
      Status s = blobs_->Delete(key);
      if (!s.ok() && !s.IsNotFound()) return s;
    }
    // Markers of collections that died past their lease.
    TY_ASSIGN_OR_RETURN(std::vector<blob::BlobEntry> markers, blobs_->List(project_key + "/gc"));
    for (const blob::BlobEntry& e : markers) {
      std::string key = project_key + "/gc/" + e.name;
      if (e.is_dir || key == marker_key) continue;
      Result<std::string> text = blobs_->GetBytes(key);
      if (!text.ok()) continue;
      Result<json::object> o = ParseJsonObject(*text);
      if (!o.ok()) continue;
      Result<int64_t> exp = RequiredInt64(*o, "expires_ms");
      if (exp.ok() && *exp < clock_->NowMillis()) (void)blobs_->Delete(key);
    }
    return Status::Ok();
  }();
  Status removed = blobs_->Delete(marker_key);
  if (!result.ok()) return result;
  if (!removed.ok() && !removed.IsNotFound()) return removed;
  return stats;
}

Status CheckpointStore::ExportSafetensors(std::string_view project, std::string_view job,
                                          int64_t step, int rank, const std::string& local_path) {
  TY_ASSIGN_OR_RETURN(CheckpointInfo info, Get(project, job, step));
  if (rank < 0 || rank >= info.world_size) {
    return Status::NotFound("checkpoint has no rank " + std::to_string(rank));
  }
  const Manifest& m = info.ranks[static_cast<size_t>(rank)];
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
  text.append((8 - text.size() % 8) % 8, ' ');  // data starts 8-byte aligned
  std::string prefix(8, '\0');
  uint64_t len = text.size();
  for (int i = 0; i < 8; ++i) prefix[static_cast<size_t>(i)] = static_cast<char>(len >> (8 * i));

  std::string tmp = local_path + ".tmp-" + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::IOError("cannot create " + tmp + ": " + std::strerror(errno));
  auto write_all = [&](const char* p, size_t n) -> Status {
    while (n > 0) {
      ssize_t w = ::write(fd, p, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        std::string msg = "cannot write " + tmp + ": " + std::strerror(errno);
        return errno == ENOSPC ? Status::ResourceExhausted("disk full: " + msg)
                               : Status::IOError(msg);
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
    return Status::Ok();
  };
  Status s = [&]() -> Status {
    TY_RETURN_IF_ERROR(write_all(prefix.data(), prefix.size()));
    TY_RETURN_IF_ERROR(write_all(text.data(), text.size()));
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
        TY_RETURN_IF_ERROR(write_all(dst, b.chunks[ci].size));
        off += b.chunks[ci].size;
      }
    }
    if (::fsync(fd) != 0)
      return Status::IOError("cannot sync " + tmp + ": " + std::strerror(errno));
    return Status::Ok();
  }();
  ::close(fd);
  if (s.ok() && ::rename(tmp.c_str(), local_path.c_str()) != 0) {
    s = Status::IOError("cannot rename " + tmp + " to " + local_path + ": " + std::strerror(errno));
  }
  if (!s.ok()) ::unlink(tmp.c_str());
  return s;
}

}  // namespace trainyard::checkpoints
