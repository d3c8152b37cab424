#include "trainyard/checkpoints/checkpoint_service.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "trainyard/common/checked.h"
#include "trainyard/common/json.h"
#include "trainyard/common/paths.h"
#include "trainyard/common/strings.h"
#include "trainyard/jobs/job_service.h"

namespace trainyard::checkpoints {
namespace {

namespace fs = std::filesystem;
using store::Rows;
using store::Transaction;

// Uploads untouched this long are removed by CollectGarbage and at start.
constexpr int64_t kStaleUploadMs = int64_t{24} * 3600 * 1000;
constexpr size_t kMaxBlobName = 1024;
constexpr int kMaxWorldSize = 1 << 16;
// Upload ids: the prefix, then random hex; ids longer than kMaxUploadIdLength are not ours.
constexpr std::string_view kUploadIdPrefix = "u-";
constexpr size_t kUploadIdRandomBytes = 12;
constexpr size_t kMaxUploadIdLength = 64;
constexpr size_t kExportNameRandomBytes = 8;

// Staged files are named by a hash of the blob's name (names are any text).
std::string StagedName(std::string_view name) {
  XXH128_hash_t h = XXH3_128bits(name.data(), name.size());
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(h.high64),
                static_cast<unsigned long long>(h.low64));
  return buf;
}

Status WriteFileAtomically(const fs::path& path, std::string_view data) {
  fs::path tmp = path;
  tmp += ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
    out.flush();
    if (!out) return Status::IOError("cannot write " + tmp.string());
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return Status::IOError("cannot rename " + tmp.string() + ": " + ec.message());
  return Status::Ok();
}

Result<std::string> ReadSmallFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("cannot read " + path.string());
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Reads a whole file into an owned buffer (the commit's only copy of the blob).
Result<Bytes> ReadIntoBytes(const fs::path& path, uint64_t size) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::IOError("cannot open " + path.string() + ": " + std::strerror(errno));
  Bytes bytes(size);
  uint64_t done = 0;
  while (done < size) {
    ssize_t n = ::read(fd, reinterpret_cast<char*>(bytes.data()) + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      return Status::IOError(
          "cannot read " + path.string() + ": " +
          (n == 0 ? std::string("shorter than recorded") : std::strerror(errno)));
    }
    done += static_cast<uint64_t>(n);
  }
  ::close(fd);
  return bytes;
}

json::value BlobToJson(const StagedBlob& b) {
  json::array shape;
  for (int64_t d : b.shape) shape.emplace_back(d);
  return json::object{{"name", b.name},
                      {"kind", b.kind == BlobKind::kTensor ? "tensor" : "file"},
                      {"dtype", DTypeName(b.dtype)},
                      {"shape", std::move(shape)},
                      {"size", b.size}};
}

Result<StagedBlob> BlobFromJson(std::string_view text) {
  TY_ASSIGN_OR_RETURN(json::object o, ParseJsonObject(text));
  StagedBlob b;
  TY_ASSIGN_OR_RETURN(b.name, RequiredString(o, "name"));
  TY_ASSIGN_OR_RETURN(std::string kind, RequiredString(o, "kind"));
  b.kind = kind == "tensor" ? BlobKind::kTensor : BlobKind::kFile;
  TY_ASSIGN_OR_RETURN(std::string dtype, RequiredString(o, "dtype"));
  auto parsed = ParseDType(dtype);
  if (!parsed) return Status::Internal("staged blob with unknown dtype " + dtype);
  b.dtype = *parsed;
  TY_ASSIGN_OR_RETURN(const json::array* shape, OptionalArray(o, "shape"));
  if (shape) {
    for (const auto& d : *shape) {
      TY_ASSIGN_OR_RETURN(int64_t v, AsInt64(d, "shape[]"));
      b.shape.push_back(v);
    }
  }
  TY_ASSIGN_OR_RETURN(int64_t size, RequiredInt64(o, "size"));
  b.size = static_cast<uint64_t>(size);
  return b;
}

// A file time as wall-clock milliseconds since the Unix epoch (Clock::NowMillis's scale).
int64_t FileTimeMillis(fs::file_time_type t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::file_clock::to_sys(t).time_since_epoch())
      .count();
}

std::string Describe(const std::string& job_id, int64_t step) {
  return "checkpoint of job " + job_id + " at step " + std::to_string(step);
}

}  // namespace

std::string CheckpointUri(std::string_view project, std::string_view job, int64_t step) {
  return std::string(kCheckpointUriScheme) + std::string(project) + "/" + std::string(job) + "/" +
         std::to_string(step);
}

Result<CheckpointAddress> ParseCheckpointUri(std::string_view uri) {
  auto bad = [&] {
    return Status::InvalidArgument("'" + Abbreviate(std::string(uri)) +
                                   "' is not a checkpoint URI (" +
                                   std::string(kCheckpointUriScheme) + "PROJECT/JOB/STEP)");
  };
  if (!StartsWith(uri, kCheckpointUriScheme)) return bad();
  std::vector<std::string> parts = SplitString(uri.substr(kCheckpointUriScheme.size()), '/');
  if (parts.size() != 3) return bad();
  auto step = ParseInt64(parts[2]);
  if (!step || *step < 0 || !ValidateCheckpointName("project", parts[0]).ok() ||
      !ValidateCheckpointName("job", parts[1]).ok()) {
    return bad();
  }
  return CheckpointAddress{parts[0], parts[1], *step};
}

struct CheckpointService::Session {
  UploadInfo info;
  fs::path dir;
};

CheckpointService::CheckpointService(store::Database& db, Clock& clock, Random& random,
                                     identity::IdentityService& identity, jobs::JobService& jobs,
                                     std::shared_ptr<CheckpointStore> store,
                                     std::string staging_dir)
    : db_(db),
      clock_(clock),
      random_(random),
      identity_(identity),
      jobs_(jobs),
      store_(std::move(store)),
      staging_dir_(std::move(staging_dir)) {}

std::vector<store::Migration> CheckpointService::Migrations() {
  return {{"checkpoints",
           1,
           {"CREATE TABLE checkpoint_retention (job_id TEXT PRIMARY KEY, keep_last BIGINT NOT "
            "NULL, keep_best BIGINT NOT NULL, metric TEXT NOT NULL, higher_is_better BIGINT NOT "
            "NULL, keep_every_steps BIGINT NOT NULL, updated_at BIGINT NOT NULL)"}}};
}

Status CheckpointService::AuthorizeWrite(const identity::Principal& who, const jobs::JobInfo& job) {
  if (!who.scope.empty() && who.scope != "job:" + job.job_id) {
    return Status::PermissionDenied("a token scoped to " + who.scope +
                                    " may not write checkpoints of job " + job.job_id);
  }
  return identity_.Authorize(who, identity::Action::kEdit, {"job", job.job_id, job.owner});
}

Result<std::string> CheckpointService::ProjectOf(const std::string& job_id) {
  TY_ASSIGN_OR_RETURN(jobs::JobInfo job, jobs_.GetJob(job_id));
  return job.spec.project;
}

// --- uploads

Result<UploadInfo> CheckpointService::BeginUpload(const identity::Principal& who,
                                                  const UploadRequest& request) {
  const std::string& job_id = request.job_id;
  const int64_t step = request.step;
  const int rank = request.rank;
  const int world_size = request.world_size;
  if (step < 0) return Status::InvalidArgument("step must be a non-negative integer");
  if (world_size < 1 || world_size > kMaxWorldSize) {
    return Status::InvalidArgument("world_size must be between 1 and " +
                                   std::to_string(kMaxWorldSize));
  }
  if (rank < 0 || rank >= world_size) {
    return Status::InvalidArgument("rank must be between 0 and world_size - 1 (got rank " +
                                   std::to_string(rank) + ", world_size " +
                                   std::to_string(world_size) + ")");
  }
  TY_ASSIGN_OR_RETURN(jobs::JobInfo job, jobs_.GetJob(job_id));
  TY_RETURN_IF_ERROR(AuthorizeWrite(who, job));
  TY_RETURN_IF_ERROR(ValidateCheckpointName("project", job.spec.project));
  UploadInfo info;
  info.upload_id = std::string(kUploadIdPrefix) + random_.Hex(kUploadIdRandomBytes);
  info.project = job.spec.project;
  info.job_id = job_id;
  info.step = step;
  info.rank = rank;
  info.world_size = world_size;
  info.attempt = job.attempts;
  info.created_ms = clock_.NowMillis();
  fs::path dir = fs::path(staging_dir_) / info.upload_id;
  std::error_code ec;
  fs::create_directories(dir / "blobs", ec);
  if (ec) return Status::IOError("cannot create " + dir.string() + ": " + ec.message());
  json::object session{{"upload_id", info.upload_id}, {"project", info.project},
                       {"job_id", info.job_id},       {"step", info.step},
                       {"rank", info.rank},           {"world_size", info.world_size},
                       {"attempt", info.attempt},     {"created_ms", info.created_ms}};
  TY_RETURN_IF_ERROR(WriteFileAtomically(dir / "session.json", json::serialize(session)));
  return info;
}

Result<CheckpointService::Session> CheckpointService::LoadSession(const std::string& upload_id) {
  bool valid = upload_id.size() > kUploadIdPrefix.size() &&
               upload_id.size() <= kMaxUploadIdLength && StartsWith(upload_id, kUploadIdPrefix);
  for (char c : upload_id)
    valid = valid && (std::isalnum(static_cast<unsigned char>(c)) || c == '-');
  auto missing = [&] {
    return Status::NotFound("upload '" + Abbreviate(upload_id) +
                            "' does not exist (it was committed, aborted or expired); begin a "
                            "new one with POST /api/trainyard/v1/checkpoints/uploads");
  };
  if (!valid) return missing();
  Session s;
  s.dir = fs::path(staging_dir_) / upload_id;
  auto text = ReadSmallFile(s.dir / "session.json");
  if (!text.ok()) return missing();
  TY_ASSIGN_OR_RETURN(json::object o, ParseJsonObject(*text));
  s.info.upload_id = upload_id;
  TY_ASSIGN_OR_RETURN(s.info.project, RequiredString(o, "project"));
  TY_ASSIGN_OR_RETURN(s.info.job_id, RequiredString(o, "job_id"));
  TY_ASSIGN_OR_RETURN(s.info.step, RequiredInt64(o, "step"));
  TY_ASSIGN_OR_RETURN(int64_t rank, RequiredInt64(o, "rank"));
  TY_ASSIGN_OR_RETURN(int64_t world_size, RequiredInt64(o, "world_size"));
  s.info.rank = static_cast<int>(rank);
  s.info.world_size = static_cast<int>(world_size);
  TY_ASSIGN_OR_RETURN(s.info.attempt, RequiredInt64(o, "attempt"));
  TY_ASSIGN_OR_RETURN(s.info.created_ms, RequiredInt64(o, "created_ms"));
  return s;
}

Status CheckpointService::PutBlob(const identity::Principal& who, const PutBlobRequest& request) {
  const std::string& upload_id = request.upload_id;
  const StagedBlob& blob = request.blob;
  const std::string& body_file = request.body_file;
  const std::string_view body = request.body;
  // Names become file paths on restore: only normalized relative paths, checked here at upload.
  TY_RETURN_IF_ERROR(ValidateRelativePath(blob.name, "name", kMaxBlobName));
  uint64_t size = body.size();
  if (!body_file.empty()) {
    std::error_code ec;
    size = fs::file_size(body_file, ec);
    if (ec) return Status::IOError("cannot read the uploaded body: " + ec.message());
  }
  if (blob.kind == BlobKind::kTensor) {
    TY_ASSIGN_OR_RETURN(uint64_t expected, ShapeBytes(DTypeSize(blob.dtype), blob.shape, "shape"));
    if (expected != size) {
      return Status::InvalidArgument("shape and dtype of tensor '" + Abbreviate(blob.name) +
                                     "' make " + std::to_string(expected) +
                                     " bytes, but the body has " + std::to_string(size));
    }
  }
  TY_ASSIGN_OR_RETURN(Session s, LoadSession(upload_id));
  {
    MutexLock lock(mu_);
    if (committing_.count(upload_id) > 0) {
      return Status::FailedPrecondition("upload " + upload_id + " is being committed");
    }
  }
  TY_ASSIGN_OR_RETURN(jobs::JobInfo job, jobs_.GetJob(s.info.job_id));
  TY_RETURN_IF_ERROR(AuthorizeWrite(who, job));
  StagedBlob staged = blob;
  staged.size = size;
  fs::path base = s.dir / "blobs" / StagedName(blob.name);
  fs::path data = base;
  data += ".bin";
  if (!body_file.empty()) {
    std::error_code ec;
    fs::rename(body_file, data, ec);
    if (ec) {
      ec.clear();
      fs::copy_file(body_file, data, fs::copy_options::overwrite_existing, ec);
      if (ec) return Status::IOError("cannot stage blob: " + ec.message());
    }
  } else {
    TY_RETURN_IF_ERROR(WriteFileAtomically(data, body));
  }
  fs::path meta = base;
  meta += ".json";
  return WriteFileAtomically(meta, json::serialize(BlobToJson(staged)));
}

Result<std::vector<std::string>> CommitBlobOrder(const std::set<std::string>& staged,
                                                 const std::vector<std::string>& requested,
                                                 const std::string& upload_id) {
  std::vector<std::string> order = requested;
  if (order.empty()) {
    order.assign(staged.begin(), staged.end());
  } else {
    std::set<std::string> seen;
    for (const auto& name : order) {
      if (!seen.insert(name).second) {
        return Status::InvalidArgument("blobs lists '" + Abbreviate(name) + "' twice");
      }
      if (staged.count(name) == 0) {
        return Status::InvalidArgument("blobs lists '" + Abbreviate(name) +
                                       "', which was not uploaded to " + upload_id);
      }
    }
    if (order.size() != staged.size()) {
      for (const auto& name : staged) {
        if (seen.count(name) == 0) {
          return Status::InvalidArgument("blob '" + Abbreviate(name) + "' was uploaded to " +
                                         upload_id + " but is not in blobs");
        }
      }
    }
  }
  if (order.empty()) {
    return Status::InvalidArgument("upload " + upload_id +
                                   " has no blobs: upload at least one before the commit");
  }
  return order;
}

Result<CheckpointData> CheckpointService::LoadStagedCheckpoint(const Session& s,
                                                               CommitRequest& request) {
  // The staged blobs, by name.
  std::map<std::string, std::pair<StagedBlob, fs::path>> staged;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(s.dir / "blobs", ec)) {
    if (entry.path().extension() != ".json") continue;
    TY_ASSIGN_OR_RETURN(std::string text, ReadSmallFile(entry.path()));
    TY_ASSIGN_OR_RETURN(StagedBlob b, BlobFromJson(text));
    fs::path data = entry.path();
    data.replace_extension(".bin");
    std::string name = b.name;
    staged.emplace(name, std::make_pair(std::move(b), data));
  }
  if (ec) return Status::IOError("cannot list staged blobs: " + ec.message());
  std::set<std::string> names;
  for (const auto& [name, unused] : staged) names.insert(name);
  TY_ASSIGN_OR_RETURN(std::vector<std::string> order,
                      CommitBlobOrder(names, request.blob_order, s.info.upload_id));

  CheckpointData data;
  for (const auto& name : order) {
    const auto& [b, path] = staged.at(name);
    TY_ASSIGN_OR_RETURN(Bytes bytes, ReadIntoBytes(path, b.size));
    data.blobs.push_back(b.kind == BlobKind::kTensor
                             ? Blob::OwnedTensor(b.name, b.dtype, b.shape, std::move(bytes))
                             : Blob::OwnedFile(b.name, std::move(bytes)));
  }
  data.metrics = std::move(request.metrics);
  data.user_metadata = std::move(request.user_metadata);
  data.rng_state = std::move(request.rng_state);
  return data;
}

Result<CommitResult> CheckpointService::Commit(const identity::Principal& who,
                                               const std::string& upload_id,
                                               CommitRequest request) {
  TY_ASSIGN_OR_RETURN(Session s, LoadSession(upload_id));
  TY_ASSIGN_OR_RETURN(jobs::JobInfo job, jobs_.GetJob(s.info.job_id));
  TY_RETURN_IF_ERROR(AuthorizeWrite(who, job));
  {
    MutexLock lock(mu_);
    if (!committing_.insert(upload_id).second) {
      return Status::FailedPrecondition("upload " + upload_id + " is already being committed");
    }
  }
  struct Release {
    CheckpointService* self;
    std::string id;
    ~Release() {
      MutexLock lock(self->mu_);
      self->committing_.erase(id);
    }
  } release{this, upload_id};

  TY_ASSIGN_OR_RETURN(CheckpointData data, LoadStagedCheckpoint(s, request));
  CheckpointRef ref;
  ref.project = s.info.project;
  ref.job = s.info.job_id;
  ref.step = s.info.step;
  ref.rank = s.info.rank;
  ref.world_size = s.info.world_size;
  ref.attempt = s.info.attempt;
  Result<Manifest> saved = store_->Save(ref, std::move(data));
  std::error_code ec;
  if (!saved.ok()) {
    // A checkpoint that already exists will never take this upload: drop it. Other
    // failures keep it, so the commit can be retried.
    if (saved.status().code() == StatusCode::kAlreadyExists) fs::remove_all(s.dir, ec);
    return saved.status();
  }
  fs::remove_all(s.dir, ec);

  CommitResult out;
  out.manifest = std::move(*saved);
  out.uri = CheckpointUri(ref.project, ref.job, ref.step);
  out.complete = store_->Get(ref.project, ref.job, ref.step).ok();
  if (out.complete) AfterCommit(who, job, ref, out);
  return out;
}

void CheckpointService::AfterCommit(const identity::Principal& who, const jobs::JobInfo& job,
                                    const CheckpointRef& ref, CommitResult& out) {
  if (complete_listener_) complete_listener_(who, ref.job, ref.step, out.uri);
  if (!jobs::IsTerminal(job.state)) {
    Status reported = jobs_.ReportCheckpoint(who, ref.job, ref.step, out.uri);
    if (reported.ok()) {
      out.registered = true;
    } else {
      spdlog::warn("checkpoint {} saved but not registered with its job: {}", out.uri,
                   reported.message());
    }
  }
  auto deleted = ApplyRetention(ref.project, ref.job);
  if (deleted.ok()) {
    out.deleted_steps = std::move(*deleted);
  } else {
    spdlog::warn("retention of job {} failed after saving {}: {}", ref.job, out.uri,
                 deleted.status().message());
  }
}

Status CheckpointService::AbortUpload(const identity::Principal& who,
                                      const std::string& upload_id) {
  TY_ASSIGN_OR_RETURN(Session s, LoadSession(upload_id));
  TY_ASSIGN_OR_RETURN(jobs::JobInfo job, jobs_.GetJob(s.info.job_id));
  TY_RETURN_IF_ERROR(AuthorizeWrite(who, job));
  MutexLock lock(mu_);
  if (committing_.count(upload_id) > 0) {
    return Status::FailedPrecondition("upload " + upload_id + " is being committed");
  }
  std::error_code ec;
  fs::remove_all(s.dir, ec);
  if (ec) return Status::IOError("cannot remove " + s.dir.string() + ": " + ec.message());
  return Status::Ok();
}

// --- reading

Result<std::vector<CheckpointInfo>> CheckpointService::List(const std::string& job_id) {
  TY_ASSIGN_OR_RETURN(std::string project, ProjectOf(job_id));
  return store_->List(project, job_id);
}

Result<std::vector<int64_t>> CheckpointService::ListIncomplete(const std::string& job_id) {
  TY_ASSIGN_OR_RETURN(std::string project, ProjectOf(job_id));
  return store_->ListIncomplete(project, job_id);
}

Result<std::optional<CheckpointInfo>> CheckpointService::Latest(const std::string& job_id) {
  TY_ASSIGN_OR_RETURN(std::string project, ProjectOf(job_id));
  return store_->Latest(project, job_id);
}

Result<CheckpointInfo> CheckpointService::Get(const std::string& job_id, int64_t step) {
  TY_ASSIGN_OR_RETURN(std::string project, ProjectOf(job_id));
  auto info = store_->Get(project, job_id, step);
  if (!info.ok() && info.status().IsNotFound()) {
    return Status::NotFound(Describe(job_id, step) +
                            " does not exist (or is not complete); list them with `trainyard "
                            "checkpoints list " +
                            job_id + "`");
  }
  return info;
}

Status CheckpointService::Verify(const std::string& job_id, int64_t step) {
  TY_RETURN_IF_ERROR(Get(job_id, step).status());
  TY_ASSIGN_OR_RETURN(std::string project, ProjectOf(job_id));
  return store_->Verify(project, job_id, step);
}

Result<Blob> CheckpointService::ReadBlob(const std::string& job_id, int64_t step, int rank,
                                         const std::string& name) {
  TY_RETURN_IF_ERROR(Get(job_id, step).status());
  TY_ASSIGN_OR_RETURN(std::string project, ProjectOf(job_id));
  return store_->LoadBlob(project, job_id, step, rank, name);
}

Result<std::string> CheckpointService::ExportSafetensors(const std::string& job_id, int64_t step,
                                                         int rank) {
  TY_RETURN_IF_ERROR(Get(job_id, step).status());
  TY_ASSIGN_OR_RETURN(std::string project, ProjectOf(job_id));
  fs::path dir = fs::path(staging_dir_) / "exports";
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::IOError("cannot create " + dir.string() + ": " + ec.message());
  std::string path =
      (dir / ("export-" + random_.Hex(kExportNameRandomBytes) + ".safetensors")).string();
  TY_RETURN_IF_ERROR(store_->ExportSafetensors(project, job_id, step, rank, path));
  return path;
}

// --- changing

Status CheckpointService::Delete(const identity::Principal& who, const std::string& job_id,
                                 int64_t step) {
  TY_ASSIGN_OR_RETURN(jobs::JobInfo job, jobs_.GetJob(job_id));
  TY_RETURN_IF_ERROR(AuthorizeWrite(who, job));
  Status s = store_->Delete(job.spec.project, job_id, step);
  if (s.IsNotFound()) return Status::NotFound(Describe(job_id, step) + " does not exist");
  return s;
}

Result<RetentionPolicy> CheckpointService::GetRetention(const std::string& job_id) {
  RetentionPolicy p;
  TY_RETURN_IF_ERROR(db_.Read([&](Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(Rows rows, tx.Query("SELECT keep_last, keep_best, metric, "
                                            "higher_is_better, keep_every_steps FROM "
                                            "checkpoint_retention WHERE job_id = ?",
                                            {job_id}));
    if (rows.empty()) return Status::Ok();
    p.keep_last = static_cast<int>(rows[0].Int(0));
    p.keep_best = static_cast<int>(rows[0].Int(1));
    p.metric = rows[0].Text(2);
    p.higher_is_better = rows[0].Int(3) != 0;
    p.keep_every_steps = rows[0].Int(4);
    return Status::Ok();
  }));
  return p;
}

Result<std::vector<int64_t>> CheckpointService::SetRetention(const identity::Principal& who,
                                                             const std::string& job_id,
                                                             const RetentionPolicy& policy) {
  TY_RETURN_IF_ERROR(ValidateRetentionPolicy(policy));
  TY_ASSIGN_OR_RETURN(jobs::JobInfo job, jobs_.GetJob(job_id));
  TY_RETURN_IF_ERROR(AuthorizeWrite(who, job));
  int64_t now = clock_.NowMillis();
  TY_RETURN_IF_ERROR(db_.Write([&](Transaction& tx) -> Status {
    return tx
        .Exec(
            "INSERT INTO checkpoint_retention (job_id, keep_last, keep_best, metric, "
            "higher_is_better, keep_every_steps, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?) ON "
            "CONFLICT (job_id) DO UPDATE SET keep_last = excluded.keep_last, keep_best = "
            "excluded.keep_best, metric = excluded.metric, higher_is_better = "
            "excluded.higher_is_better, keep_every_steps = excluded.keep_every_steps, "
            "updated_at = excluded.updated_at",
            {job_id, int64_t{policy.keep_last}, int64_t{policy.keep_best}, policy.metric,
             int64_t{policy.higher_is_better ? 1 : 0}, policy.keep_every_steps, now})
        .status();
  }));
  return ApplyRetention(job.spec.project, job_id);
}

Result<std::vector<int64_t>> CheckpointService::ApplyRetention(const std::string& project,
                                                               const std::string& job_id) {
  TY_ASSIGN_OR_RETURN(RetentionPolicy policy, GetRetention(job_id));
  if (policy.keep_last == 0 && policy.keep_best == 0 && policy.keep_every_steps == 0) {
    return std::vector<int64_t>{};
  }
  TY_ASSIGN_OR_RETURN(auto complete, store_->List(project, job_id));
  TY_ASSIGN_OR_RETURN(auto incomplete, store_->ListIncomplete(project, job_id));
  TY_ASSIGN_OR_RETURN(auto doomed, StepsToDelete(complete, incomplete, policy));
  std::vector<int64_t> deleted;
  for (int64_t step : doomed) {
    Status s = store_->Delete(project, job_id, step);
    if (!s.ok() && !s.IsNotFound()) return s;
    if (s.ok()) deleted.push_back(step);
  }
  return deleted;
}

Result<std::vector<GcReport>> CheckpointService::CollectGarbage(const identity::Principal& who,
                                                                const std::string& project) {
  if (!who.is_admin || !who.scope.empty()) {
    return Status::PermissionDenied("only admins may collect checkpoint garbage");
  }
  std::vector<std::string> projects;
  if (project.empty()) {
    TY_ASSIGN_OR_RETURN(projects, store_->ListProjects());
  } else {
    TY_RETURN_IF_ERROR(ValidateCheckpointName("project", project));
    projects.push_back(project);
  }
  std::vector<GcReport> out;
  int64_t removed = RemoveStaleUploads();
  for (const auto& p : projects) {
    GcReport r;
    r.project = p;
    TY_ASSIGN_OR_RETURN(r.stats, store_->CollectGarbage(p));
    r.staged_uploads_removed = out.empty() ? removed : 0;
    out.push_back(std::move(r));
  }
  return out;
}

int64_t CheckpointService::RemoveLeftoversAtStart() {
  int64_t removed = 0;
  std::error_code ec;
  auto remove = [&](const fs::path& p) {
    std::error_code rec;
    if (fs::remove_all(p, rec) > 0 && !rec) ++removed;
  };
  for (const auto& entry : fs::directory_iterator(fs::path(staging_dir_) / "exports", ec)) {
    remove(entry.path());
  }
  for (const auto& entry : fs::directory_iterator(staging_dir_, ec)) {
    std::string id = entry.path().filename().string();
    if (!StartsWith(id, kUploadIdPrefix)) continue;
    if (!LoadSession(id).ok()) {
      remove(entry.path());  // BeginUpload never finished: nobody holds its id
      continue;
    }
    std::vector<fs::path> leftovers;
    for (const fs::path& dir : {entry.path(), entry.path() / "blobs"}) {
      std::error_code dec;
      for (const auto& f : fs::directory_iterator(dir, dec)) {
        const fs::path& p = f.path();
        if (p.extension() == ".tmp") leftovers.push_back(p);
        // Data whose description was never written: PutBlob did not finish.
        if (p.extension() == ".bin" && !fs::exists(fs::path(p).replace_extension(".json"), dec)) {
          leftovers.push_back(p);
        }
      }
    }
    for (const auto& p : leftovers) remove(p);
  }
  removed += RemoveStaleUploads();
  if (removed > 0) spdlog::info("removed {} leftover(s) of checkpoint uploads", removed);
  return removed;
}

int64_t CheckpointService::RemoveStaleUploads() {
  int64_t removed = 0;
  int64_t now = clock_.NowMillis();
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(staging_dir_, ec)) {
    std::string id = entry.path().filename().string();
    if (!StartsWith(id, kUploadIdPrefix)) continue;
    auto s = LoadSession(id);
    if (s.ok() && now - s->info.created_ms < kStaleUploadMs) continue;
    if (!s.ok()) {
      // Not a session yet (being created) or a broken one: judged by its age on disk.
      std::error_code tec;
      fs::file_time_type modified = fs::last_write_time(entry.path(), tec);
      if (tec || now - FileTimeMillis(modified) < kStaleUploadMs) continue;
    }
    MutexLock lock(mu_);
    if (committing_.count(id) > 0) continue;
    std::error_code rec;
    fs::remove_all(entry.path(), rec);
    if (!rec) ++removed;
  }
  return removed;
}

}  // namespace trainyard::checkpoints
