#include "trainyard/api/checkpoints_api.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "trainyard/common/page_token.h"
#include "trainyard/common/strings.h"

namespace trainyard::api {
namespace {

using checkpoints::BlobKind;
using http::Method;

constexpr char kUploadsPrefix[] = "/api/trainyard/v1/checkpoints/uploads/";

// Chunks that fail verification or cannot be read are the checkpoint's fault, not a
// transient server fault: 400 (clients do not retry it), with the store's message naming
// the blob and chunk.
Status Damaged(const Status& s) {
  if (s.code() != StatusCode::kIOError) return s;
  return Status::FailedPrecondition(s.message());
}

Result<int64_t> StepParam(const Call& c) {
  auto step = ParseInt64(c.request.path_params.at("step"));
  if (!step || *step < 0) {
    return Status::InvalidArgument("step must be a non-negative integer (got '" +
                                   Abbreviate(c.request.path_params.at("step")) + "')");
  }
  return *step;
}

Result<int> IntField(const json::object& body, std::string_view field, int64_t lo, int64_t hi,
                     int64_t fallback) {
  TY_ASSIGN_OR_RETURN(auto v, OptionalInt64(body, field));
  if (!v) return static_cast<int>(fallback);
  if (*v < lo || *v > hi) {
    return Status::InvalidArgument(std::string(field) + " must be between " + std::to_string(lo) +
                                   " and " + std::to_string(hi) + " (got " + std::to_string(*v) +
                                   ")");
  }
  return static_cast<int>(*v);
}

json::value MetricsToJson(const std::map<std::string, double>& metrics) {
  json::object o;
  for (const auto& [k, v] : metrics) o[k] = DoubleToJson(v);
  return o;
}

// User metadata is stored as text; JSON text comes back as JSON.
json::value MetadataToJson(const std::string& text) {
  if (text.empty()) return nullptr;
  auto parsed = ParseJsonExact(text);
  if (parsed.ok()) return std::move(*parsed);
  return json::value(text);
}

json::value SummaryToJson(const checkpoints::CheckpointInfo& info) {
  uint64_t written = 0;
  size_t blobs = 0;
  for (const auto& m : info.ranks) {
    written += m.written_bytes;
    blobs += m.blobs.size();
  }
  return json::object{{"step", info.step},
                      {"uri", checkpoints::CheckpointUri(info.project, info.job, info.step)},
                      {"world_size", info.world_size},
                      {"attempt", info.attempt},
                      {"created_ms", info.ranks.front().created_ms},
                      {"total_bytes", info.total_bytes()},
                      {"written_bytes", written},
                      {"blobs", blobs},
                      {"metrics", MetricsToJson(info.metrics())}};
}

json::value ManifestToJson(const checkpoints::Manifest& m) {
  json::array blobs;
  for (const auto& b : m.blobs) {
    json::array shape;
    for (int64_t d : b.shape) shape.emplace_back(d);
    json::array chunks;
    for (const auto& c : b.chunks) {
      chunks.emplace_back(json::object{
          {"hash", c.hash}, {"size", c.size}, {"stored", c.stored}, {"compressed", c.compressed}});
    }
    json::object o{{"name", b.name},
                   {"kind", b.kind == BlobKind::kTensor ? "tensor" : "file"},
                   {"size", b.size},
                   {"chunks", std::move(chunks)}};
    if (b.kind == BlobKind::kTensor) {
      o["dtype"] = checkpoints::DTypeName(b.dtype);
      o["shape"] = std::move(shape);
    }
    blobs.emplace_back(std::move(o));
  }
  return json::object{{"rank", m.ref.rank},
                      {"attempt", m.ref.attempt},
                      {"created_ms", m.created_ms},
                      {"chunk_size", m.chunk_size},
                      {"total_bytes", m.total_bytes},
                      {"written_bytes", m.written_bytes},
                      {"written_chunks", m.written_chunks},
                      {"reused_chunks", m.reused_chunks},
                      {"metrics", MetricsToJson(m.metrics)},
                      {"metadata", MetadataToJson(m.user_metadata)},
                      {"blobs", std::move(blobs)}};
}

json::value CheckpointToJson(const checkpoints::CheckpointInfo& info) {
  json::value out = SummaryToJson(info);
  json::array ranks;
  for (const auto& m : info.ranks) ranks.emplace_back(ManifestToJson(m));
  out.as_object()["ranks"] = std::move(ranks);
  return out;
}

json::value RetentionToJson(const checkpoints::RetentionPolicy& p) {
  return json::object{{"keep_last", p.keep_last},
                      {"keep_best", p.keep_best},
                      {"metric", p.metric},
                      {"mode", p.higher_is_better ? "max" : "min"},
                      {"keep_every", p.keep_every_steps}};
}

json::array StepsToJson(const std::vector<int64_t>& steps) {
  json::array out;
  for (int64_t s : steps) out.emplace_back(s);
  return out;
}

Result<checkpoints::RetentionPolicy> RetentionFromJson(const json::object& body) {
  for (const auto& field : body) {
    std::string_view k = field.key();
    if (k != "keep_last" && k != "keep_best" && k != "metric" && k != "mode" && k != "keep_every") {
      return Status::InvalidArgument("unknown retention field '" + std::string(k) +
                                     "' (expected keep_last, keep_best, metric, mode, keep_every)");
    }
  }
  checkpoints::RetentionPolicy p;
  TY_ASSIGN_OR_RETURN(p.keep_last, IntField(body, "keep_last", 0, 1000000, 0));
  TY_ASSIGN_OR_RETURN(p.keep_best, IntField(body, "keep_best", 0, 1000000, 0));
  TY_ASSIGN_OR_RETURN(auto metric, OptionalString(body, "metric"));
  p.metric = metric.value_or("");
  TY_ASSIGN_OR_RETURN(auto mode, OptionalString(body, "mode"));
  if (mode && *mode != "min" && *mode != "max") {
    return Status::InvalidArgument("mode must be 'min' or 'max' (got '" + Abbreviate(*mode) + "')");
  }
  p.higher_is_better = mode && *mode == "max";
  TY_ASSIGN_OR_RETURN(auto every, OptionalInt64(body, "keep_every"));
  if (every && *every < 0) return Status::InvalidArgument("keep_every must be >= 0");
  p.keep_every_steps = every.value_or(0);
  if (p.keep_best > 0 && p.metric.empty()) {
    return Status::InvalidArgument("metric is required when keep_best is set");
  }
  return p;
}

// The bytes of a file that is already unlinked, mapped for the response's lifetime.
Result<http::Response> MappedFileResponse(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::IOError("cannot open " + path + ": " + std::strerror(errno));
  struct stat st {};
  ::fstat(fd, &st);
  size_t size = static_cast<size_t>(st.st_size);
  void* p = size > 0 ? ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0) : nullptr;
  ::close(fd);
  std::error_code ec;
  std::filesystem::remove(path, ec);
  if (p == MAP_FAILED) return Status::IOError("cannot map " + path + ": " + std::strerror(errno));
  http::Response r;
  r.content_type = "application/octet-stream";
  if (size > 0) {
    std::shared_ptr<const void> owner(
        p, [size](const void* q) { ::munmap(const_cast<void*>(q), size); });
    r.body_pieces.push_back({owner, std::string_view(static_cast<const char*>(p), size)});
  }
  return r;
}

// --- the upload path

Result<json::value> BeginUpload(checkpoints::CheckpointService& cs, Call& c) {
  checkpoints::UploadRequest req;
  TY_ASSIGN_OR_RETURN(req.job_id, RequiredString(c.body, "job_id"));
  TY_ASSIGN_OR_RETURN(req.step, RequiredInt64(c.body, "step"));
  TY_ASSIGN_OR_RETURN(req.world_size, IntField(c.body, "world_size", 1, 65536, 1));
  TY_ASSIGN_OR_RETURN(req.rank, IntField(c.body, "rank", 0, 65535, 0));
  TY_ASSIGN_OR_RETURN(auto u, cs.BeginUpload(c.principal, req));
  return json::object{{"upload_id", u.upload_id}, {"project", u.project},
                      {"job_id", u.job_id},       {"step", u.step},
                      {"rank", u.rank},           {"world_size", u.world_size},
                      {"attempt", u.attempt}};
}

// The blob's name, and for a tensor its dtype and shape, from the query parameters.
Result<checkpoints::StagedBlob> StagedBlobFromQuery(const http::Request& r) {
  checkpoints::StagedBlob blob;
  auto name = r.Query("name");
  if (!name) return Status::InvalidArgument("name is required (a query parameter)");
  blob.name = *name;
  auto dtype = r.Query("dtype");
  auto shape = r.Query("shape");
  if (dtype) {
    auto parsed = checkpoints::ParseDType(*dtype);
    if (!parsed) {
      return Status::InvalidArgument(
          "dtype must be a safetensors dtype (F64, F32, F16, BF16, F8_E4M3, "
          "F8_E5M2, I64, I32, I16, I8, U8, BOOL; got '" +
          Abbreviate(*dtype) + "')");
    }
    blob.kind = BlobKind::kTensor;
    blob.dtype = *parsed;
    TY_ASSIGN_OR_RETURN(blob.shape, checkpoints::ParseShape(shape.value_or("")));
    if (r.query.count("shape") == 0) {
      return Status::InvalidArgument(
          "shape is required for a tensor (comma-separated; empty for a scalar)");
    }
  } else if (shape) {
    return Status::InvalidArgument("shape is only valid with dtype (for tensors)");
  }
  return blob;
}

Result<json::value> PutBlob(checkpoints::CheckpointService& cs, Call& c) {
  const http::Request& r = c.request;
  TY_ASSIGN_OR_RETURN(checkpoints::StagedBlob blob, StagedBlobFromQuery(r));
  checkpoints::PutBlobRequest put{r.path_params.at("upload_id"), std::move(blob), r.body_file,
                                  r.body};
  TY_RETURN_IF_ERROR(cs.PutBlob(c.principal, put));
  return json::object{};
}

Result<checkpoints::CommitRequest> CommitRequestFromJson(const json::object& body) {
  checkpoints::CommitRequest req;
  TY_ASSIGN_OR_RETURN(const json::object* metrics, OptionalObject(body, "metrics"));
  if (metrics) {
    for (const auto& m : *metrics) {
      TY_ASSIGN_OR_RETURN(double v, AsDouble(m.value(), "metrics." + std::string(m.key())));
      req.metrics[std::string(m.key())] = v;
    }
  }
  auto meta = body.find("metadata");
  if (meta != body.end() && !meta->value().is_null()) {
    req.user_metadata = json::serialize(meta->value());
  }
  TY_ASSIGN_OR_RETURN(auto rng, OptionalString(body, "rng_state_base64"));
  if (rng) {
    auto decoded = Base64Decode(*rng);
    if (!decoded.ok()) {
      return Status::InvalidArgument("rng_state_base64 must be base64");
    }
    req.rng_state = std::move(*decoded);
  }
  TY_ASSIGN_OR_RETURN(req.blob_order, StringList(body, "blobs"));
  return req;
}

Result<json::value> CommitUpload(checkpoints::CheckpointService& cs, Call& c) {
  TY_ASSIGN_OR_RETURN(checkpoints::CommitRequest req, CommitRequestFromJson(c.body));
  TY_ASSIGN_OR_RETURN(
      auto result, cs.Commit(c.principal, c.request.path_params.at("upload_id"), std::move(req)));
  const auto& m = result.manifest;
  return json::object{{"uri", result.uri},
                      {"step", m.ref.step},
                      {"rank", m.ref.rank},
                      {"complete", result.complete},
                      {"registered", result.registered},
                      {"total_bytes", m.total_bytes},
                      {"written_bytes", m.written_bytes},
                      {"written_chunks", m.written_chunks},
                      {"reused_chunks", m.reused_chunks},
                      {"deleted_steps", StepsToJson(result.deleted_steps)}};
}

void RegisterUploadRoutes(Api& api, checkpoints::CheckpointService* cs) {
  api.Route(Method::kPost, kTrainyardPrefixes, "/checkpoints/uploads",
            [cs](Call& c) { return BeginUpload(*cs, c); });
  api.Route(Method::kPut, kTrainyardPrefixes, "/checkpoints/uploads/{upload_id}/blob",
            [cs](Call& c) { return PutBlob(*cs, c); });
  api.Route(Method::kPost, kTrainyardPrefixes, "/checkpoints/uploads/{upload_id}/commit",
            [cs](Call& c) { return CommitUpload(*cs, c); });
  api.Route(
      Method::kDelete, kTrainyardPrefixes, "/checkpoints/uploads/{upload_id}",
      [cs](Call& c) -> Result<json::value> {
        TY_RETURN_IF_ERROR(cs->AbortUpload(c.principal, c.request.path_params.at("upload_id")));
        return json::object{};
      });
}

// --- reading

Result<json::value> ListCheckpoints(checkpoints::CheckpointService& cs, Call& c) {
  const std::string& job = c.request.path_params.at("job_id");
  TY_ASSIGN_OR_RETURN(auto list, cs.List(job));
  TY_ASSIGN_OR_RETURN(auto incomplete, cs.ListIncomplete(job));
  TY_ASSIGN_OR_RETURN(auto retention, cs.GetRetention(job));
  json::array out;
  for (const auto& info : list) out.emplace_back(SummaryToJson(info));
  return json::object{{"job_id", job},
                      {"checkpoints", std::move(out)},
                      {"incomplete_steps", StepsToJson(incomplete)},
                      {"retention", RetentionToJson(retention)}};
}

Result<json::value> VerifyCheckpoint(checkpoints::CheckpointService& cs, Call& c) {
  TY_ASSIGN_OR_RETURN(int64_t step, StepParam(c));
  const std::string& job = c.request.path_params.at("job_id");
  TY_ASSIGN_OR_RETURN(auto info, cs.Get(job, step));
  TY_RETURN_IF_ERROR(Damaged(cs.Verify(job, step)));
  uint64_t chunks = 0;
  for (const auto& m : info.ranks) {
    for (const auto& b : m.blobs) chunks += b.chunks.size();
  }
  return json::object{{"ok", true},
                      {"step", step},
                      {"verified_bytes", info.total_bytes()},
                      {"verified_chunks", chunks}};
}

Result<http::Response> ReadBlob(checkpoints::CheckpointService& cs, Call& c) {
  TY_ASSIGN_OR_RETURN(int64_t step, StepParam(c));
  TY_ASSIGN_OR_RETURN(std::string name, RequiredString(c.body, "name"));
  TY_ASSIGN_OR_RETURN(int rank, IntField(c.body, "rank", 0, 65535, 0));
  auto blob = cs.ReadBlob(c.request.path_params.at("job_id"), step, rank, name);
  if (!blob.ok()) return Damaged(blob.status());
  auto owned = std::make_shared<checkpoints::Blob>(std::move(*blob));
  http::Response r;
  r.content_type = "application/octet-stream";
  r.headers.emplace_back("X-Trainyard-Blob-Kind",
                         owned->kind == BlobKind::kTensor ? "tensor" : "file");
  if (owned->kind == BlobKind::kTensor) {
    r.headers.emplace_back("X-Trainyard-Dtype", std::string(checkpoints::DTypeName(owned->dtype)));
    r.headers.emplace_back("X-Trainyard-Shape", checkpoints::FormatShape(owned->shape));
  }
  std::string_view bytes = owned->view();
  if (!bytes.empty()) r.body_pieces.push_back({owned, bytes});
  return r;
}

void RegisterReadRoutes(Api& api, checkpoints::CheckpointService* cs) {
  api.Route(Method::kGet, kTrainyardPrefixes, "/checkpoints/jobs/{job_id}",
            [cs](Call& c) { return ListCheckpoints(*cs, c); });
  api.Route(Method::kGet, kTrainyardPrefixes, "/checkpoints/jobs/{job_id}/latest",
            [cs](Call& c) -> Result<json::value> {
              const std::string& job = c.request.path_params.at("job_id");
              TY_ASSIGN_OR_RETURN(auto latest, cs->Latest(job));
              if (!latest) {
                return Status::NotFound("job " + job + " has no complete checkpoint yet");
              }
              return json::object{{"checkpoint", CheckpointToJson(*latest)}};
            });
  api.Route(Method::kGet, kTrainyardPrefixes, "/checkpoints/jobs/{job_id}/steps/{step}",
            [cs](Call& c) -> Result<json::value> {
              TY_ASSIGN_OR_RETURN(int64_t step, StepParam(c));
              TY_ASSIGN_OR_RETURN(auto info, cs->Get(c.request.path_params.at("job_id"), step));
              return json::object{{"checkpoint", CheckpointToJson(info)}};
            });
  api.Route(Method::kPost, kTrainyardPrefixes, "/checkpoints/jobs/{job_id}/steps/{step}/verify",
            [cs](Call& c) { return VerifyCheckpoint(*cs, c); });
  api.RawRoute(Method::kGet, kTrainyardPrefixes, "/checkpoints/jobs/{job_id}/steps/{step}/blob",
               [cs](Call& c) { return ReadBlob(*cs, c); });
  api.RawRoute(Method::kGet, kTrainyardPrefixes,
               "/checkpoints/jobs/{job_id}/steps/{step}/safetensors",
               [cs](Call& c) -> Result<http::Response> {
                 TY_ASSIGN_OR_RETURN(int64_t step, StepParam(c));
                 TY_ASSIGN_OR_RETURN(int rank, IntField(c.body, "rank", 0, 65535, 0));
                 auto path = cs->ExportSafetensors(c.request.path_params.at("job_id"), step, rank);
                 if (!path.ok()) return Damaged(path.status());
                 return MappedFileResponse(*path);
               });
}

// --- changing

Result<json::value> CollectGarbage(checkpoints::CheckpointService& cs, Call& c) {
  TY_ASSIGN_OR_RETURN(auto project, OptionalString(c.body, "project"));
  TY_ASSIGN_OR_RETURN(auto reports, cs.CollectGarbage(c.principal, project.value_or("")));
  json::array out;
  for (const auto& r : reports) {
    out.emplace_back(json::object{{"project", r.project},
                                  {"manifests_read", r.stats.manifests_read},
                                  {"intents_live", r.stats.intents_live},
                                  {"chunks_scanned", r.stats.chunks_scanned},
                                  {"chunks_live", r.stats.chunks_live},
                                  {"chunks_deleted", r.stats.chunks_deleted},
                                  {"bytes_deleted", r.stats.bytes_deleted},
                                  {"staged_uploads_removed", r.staged_uploads_removed}});
  }
  return json::object{{"projects", std::move(out)}};
}

void RegisterChangeRoutes(Api& api, checkpoints::CheckpointService* cs) {
  api.Route(Method::kDelete, kTrainyardPrefixes, "/checkpoints/jobs/{job_id}/steps/{step}",
            [cs](Call& c) -> Result<json::value> {
              TY_ASSIGN_OR_RETURN(int64_t step, StepParam(c));
              TY_RETURN_IF_ERROR(cs->Delete(c.principal, c.request.path_params.at("job_id"), step));
              return json::object{};
            });
  api.Route(Method::kGet, kTrainyardPrefixes, "/checkpoints/jobs/{job_id}/retention",
            [cs](Call& c) -> Result<json::value> {
              TY_ASSIGN_OR_RETURN(auto p, cs->GetRetention(c.request.path_params.at("job_id")));
              return json::object{{"retention", RetentionToJson(p)}};
            });
  api.Route(Method::kPut, kTrainyardPrefixes, "/checkpoints/jobs/{job_id}/retention",
            [cs](Call& c) -> Result<json::value> {
              TY_ASSIGN_OR_RETURN(auto policy, RetentionFromJson(c.body));
              const std::string& job = c.request.path_params.at("job_id");
              TY_ASSIGN_OR_RETURN(auto deleted, cs->SetRetention(c.principal, job, policy));
              return json::object{{"retention", RetentionToJson(policy)},
                                  {"deleted_steps", StepsToJson(deleted)}};
            });
  api.Route(Method::kPost, kTrainyardPrefixes, "/checkpoints/gc",
            [cs](Call& c) { return CollectGarbage(*cs, c); });
}

}  // namespace

bool IsCheckpointBlobUpload(http::Method method, std::string_view path) {
  return method == http::Method::kPut && StartsWith(path, kUploadsPrefix) &&
         EndsWith(path, "/blob");
}

void RegisterCheckpointRoutes(Api& api, checkpoints::CheckpointService& service) {
  checkpoints::CheckpointService* cs = &service;
  RegisterUploadRoutes(api, cs);
  RegisterReadRoutes(api, cs);
  RegisterChangeRoutes(api, cs);
}

}  // namespace trainyard::api
