#include "trainyard/cli/checkpoint_commands.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

#include "trainyard/cli/client.h"
#include "trainyard/cli/table.h"
#include "trainyard/common/paths.h"
#include "trainyard/common/strings.h"

namespace trainyard::cli {
namespace {

namespace fs = std::filesystem;

std::string CheckpointsPath(const std::string& job_id, const std::string& tail = "") {
  return "/api/trainyard/v1/checkpoints/jobs/" + UrlEncode(job_id) + tail;
}

std::string StepPath(const std::string& job_id, int64_t step, const std::string& tail = "") {
  return CheckpointsPath(job_id, "/steps/" + std::to_string(step) + tail);
}

std::string Metrics(const json::value& v) {
  std::string out;
  if (!v.is_object()) return out;
  for (const auto& m : v.as_object()) {
    out += (out.empty() ? "" : " ") + std::string(m.key()) + "=" + FormatNumber(m.value());
  }
  return out;
}

std::string Shape(const json::value& blob) {
  std::string out;
  for (const auto& d : Arr(blob, "shape")) out += (out.empty() ? "" : "x") + json::serialize(d);
  return Str(blob, "kind") == "tensor" && out.empty() ? "scalar" : out;
}

// A blob name as a path under the restore directory: kept when it is a safe relative path,
// otherwise percent-encoded into one file name.
fs::path BlobPath(const std::string& name) {
  bool safe = ValidateRelativePath(name, "name").ok() && !StartsWith(name, ".trainyard-restore-");
  return safe ? fs::path(name) : fs::path(UrlEncode(name));
}

int List(Client& client, const std::string& job_id) {
  auto r = client.Call("GET", CheckpointsPath(job_id));
  if (!r.ok()) return Fail(r.status());
  const auto& list = Arr(*r, "checkpoints");
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < list.size(); ++i) {
    const auto& c = list[i];
    rows.push_back({Str(c, "step") + (i + 1 == list.size() ? " (latest)" : ""),
                    FormatTime(Int(c, "created_ms")), Str(c, "attempt"), Str(c, "world_size"),
                    Str(c, "blobs"), FormatBytes(Num(c, "total_bytes")),
                    FormatBytes(Num(c, "written_bytes")), Metrics(c.as_object().at("metrics"))});
  }
  if (rows.empty()) {
    std::cout << "Job " << job_id << " has no complete checkpoints.\n";
  } else {
    PrintTable(std::cout,
               {"STEP", "CREATED", "ATTEMPT", "RANKS", "BLOBS", "SIZE", "WRITTEN", "METRICS"}, rows,
               60);
  }
  std::string incomplete;
  for (const auto& s : Arr(*r, "incomplete_steps")) {
    incomplete += (incomplete.empty() ? "" : ", ") + json::serialize(s);
  }
  if (!incomplete.empty()) {
    std::cout << "Incomplete (saving, or abandoned): steps " << incomplete << "\n";
  }
  const json::value& ret = r->as_object().at("retention");
  std::string policy;
  if (Int(ret, "keep_last") > 0) policy += " last " + Str(ret, "keep_last") + ";";
  if (Int(ret, "keep_best") > 0) {
    policy += " best " + Str(ret, "keep_best") + " by " + Str(ret, "metric") + " (" +
              Str(ret, "mode") + ");";
  }
  if (Int(ret, "keep_every") > 0) policy += " every " + Str(ret, "keep_every") + " steps;";
  std::cout << "Retention:" << (policy.empty() ? " keep everything" : policy) << "\n";
  return 0;
}

int Show(Client& client, const std::string& job_id, int64_t step) {
  auto r = client.Call("GET", StepPath(job_id, step));
  if (!r.ok()) return Fail(r.status());
  const json::value& c = r->as_object().at("checkpoint");
  std::cout << "Checkpoint " << Str(c, "uri") << "\n"
            << "  step:     " << Str(c, "step") << " (attempt " << Str(c, "attempt") << ", "
            << Str(c, "world_size") << " rank(s))\n"
            << "  created:  " << FormatTime(Int(c, "created_ms")) << "\n"
            << "  size:     " << FormatBytes(Num(c, "total_bytes")) << " (this save wrote "
            << FormatBytes(Num(c, "written_bytes")) << "; the rest was deduplicated)\n"
            << "  metrics:  " << Metrics(c.as_object().at("metrics")) << "\n";
  std::vector<std::vector<std::string>> rows;
  for (const auto& rank : Arr(c, "ranks")) {
    const json::value& meta = rank.as_object().at("metadata");
    if (!meta.is_null()) {
      std::cout << "  metadata (rank " << Str(rank, "rank")
                << "): " << Abbreviate(Str(rank, "metadata"), 200) << "\n";
    }
    for (const auto& b : Arr(rank, "blobs")) {
      rows.push_back({Str(rank, "rank"), Str(b, "name"), Str(b, "kind"), Str(b, "dtype"), Shape(b),
                      FormatBytes(Num(b, "size")), std::to_string(Arr(b, "chunks").size())});
    }
  }
  std::cout << "\n";
  PrintTable(std::cout, {"RANK", "BLOB", "KIND", "DTYPE", "SHAPE", "SIZE", "CHUNKS"}, rows, 60);
  return 0;
}

int Verify(Client& client, const std::string& job_id, int64_t step) {
  auto r = client.Call("POST", StepPath(job_id, step, "/verify"));
  if (!r.ok()) return Fail(r.status());
  std::cout << "OK: checkpoint of job " << job_id << " at step " << step << " verified ("
            << Str(*r, "verified_chunks") << " chunks, " << FormatBytes(Num(*r, "verified_bytes"))
            << ")\n";
  return 0;
}

// Writes beneath `root` only: a symbolic link planted there is refused, never followed.
Status WriteFile(const fs::path& root, const fs::path& rel, std::string_view data) {
  return WriteFileBeneath(root.string(), rel.string(), data);
}

// Downloads into a temporary directory beside `to`, and moves the files into place only when
// every blob arrived verified: a damaged checkpoint leaves nothing behind.
Status Restore(Client& client, const std::string& job_id, int64_t step, const fs::path& to) {
  TY_ASSIGN_OR_RETURN(json::value r, client.Call("GET", StepPath(job_id, step)));
  const json::value& c = r.as_object().at("checkpoint");
  const bool multi = Int(c, "world_size") > 1;
  std::error_code ec;
  fs::create_directories(to, ec);
  if (ec) return Status::IOError("cannot create " + to.string() + ": " + ec.message());
  fs::path tmp = to / (".trainyard-restore-" + std::to_string(::getpid()));
  fs::remove_all(tmp, ec);  // a link there is removed, not followed
  if (!fs::create_directory(tmp, ec) || ec) {
    return Status::IOError("cannot create " + tmp.string() + ": " + ec.message());
  }
  std::vector<fs::path> written;
  bool tty = isatty(STDERR_FILENO);
  Status s = [&]() -> Status {
    for (const auto& rank : Arr(c, "ranks")) {
      std::string rank_id = Str(rank, "rank");
      fs::path dir = multi ? fs::path("rank-" + rank_id) : fs::path();
      bool has_tensors = false;
      for (const auto& b : Arr(rank, "blobs")) {
        std::string name = Str(b, "name");
        if (tty) std::cerr << "\r\033[K  " << Abbreviate(name, 60) << std::flush;
        TY_ASSIGN_OR_RETURN(auto body, client.GetRaw(StepPath(job_id, step, "/blob"),
                                                     {{"name", name}, {"rank", rank_id}}));
        fs::path rel = dir / BlobPath(name);
        TY_RETURN_IF_ERROR(WriteFile(tmp, rel, body.body));
        written.push_back(rel);
        has_tensors = has_tensors || Str(b, "kind") == "tensor";
      }
      if (has_tensors) {
        TY_ASSIGN_OR_RETURN(
            auto st, client.GetRaw(StepPath(job_id, step, "/safetensors"), {{"rank", rank_id}}));
        fs::path rel = dir / "model.safetensors";
        TY_RETURN_IF_ERROR(WriteFile(tmp, rel, st.body));
        written.push_back(rel);
      }
    }
    if (tty) std::cerr << "\r\033[K" << std::flush;
    for (const fs::path& rel : written) {
      TY_RETURN_IF_ERROR(RenameBeneath(tmp.string(), rel.string(), to.string(), rel.string()));
    }
    return Status::Ok();
  }();
  fs::remove_all(tmp, ec);
  if (!s.ok()) {
    return Status(s.code(), s.message() + "\nnothing was restored into " + to.string());
  }
  std::cout << "Restored " << written.size() << " file(s) of checkpoint step " << step << " into "
            << to.string() << "\n";
  return Status::Ok();
}

int Gc(Client& client, const std::string& project) {
  json::object body;
  if (!project.empty()) body["project"] = project;
  auto r = client.Call("POST", "/api/trainyard/v1/checkpoints/gc", body);
  if (!r.ok()) return Fail(r.status());
  std::vector<std::vector<std::string>> rows;
  for (const auto& p : Arr(*r, "projects")) {
    rows.push_back({Str(p, "project"), Str(p, "manifests_read"), Str(p, "chunks_scanned"),
                    Str(p, "chunks_live"), Str(p, "chunks_deleted"),
                    FormatBytes(Num(p, "bytes_deleted"))});
  }
  if (rows.empty()) {
    std::cout << "No checkpoints stored yet.\n";
    return 0;
  }
  PrintTable(std::cout, {"PROJECT", "MANIFESTS", "CHUNKS", "LIVE", "DELETED", "FREED"}, rows);
  return 0;
}

struct Options {
  std::string job_id;
  int64_t step = 0;
  std::string to;
  std::string project;
  int keep_last = -1, keep_best = -1;
  int64_t keep_every = -1;
  std::string metric, mode;
  CLI::App *list = nullptr, *show = nullptr, *verify = nullptr, *restore = nullptr, *gc = nullptr,
           *retention = nullptr;
};

int Retention(Client& client, const Options& o) {
  bool change = o.keep_last >= 0 || o.keep_best >= 0 || o.keep_every >= 0 || !o.metric.empty() ||
                !o.mode.empty();
  Result<json::value> r = json::value();  // set below
  if (change) {
    auto current = client.Call("GET", CheckpointsPath(o.job_id, "/retention"));
    if (!current.ok()) return Fail(current.status());
    json::object body = current->as_object().at("retention").as_object();
    if (o.keep_last >= 0) body["keep_last"] = o.keep_last;
    if (o.keep_best >= 0) body["keep_best"] = o.keep_best;
    if (o.keep_every >= 0) body["keep_every"] = o.keep_every;
    if (!o.metric.empty()) body["metric"] = o.metric;
    if (!o.mode.empty()) body["mode"] = o.mode;
    r = client.Call("PUT", CheckpointsPath(o.job_id, "/retention"), body);
  } else {
    r = client.Call("GET", CheckpointsPath(o.job_id, "/retention"));
  }
  if (!r.ok()) return Fail(r.status());
  const json::value& p = r->as_object().at("retention");
  std::cout << "keep_last:  " << Str(p, "keep_last") << "\n"
            << "keep_best:  " << Str(p, "keep_best") << " by '" << Str(p, "metric") << "' ("
            << Str(p, "mode") << ")\n"
            << "keep_every: " << Str(p, "keep_every") << "\n";
  std::string deleted;
  for (const auto& s : Arr(*r, "deleted_steps")) {
    deleted += (deleted.empty() ? "" : ", ") + json::serialize(s);
  }
  if (!deleted.empty()) std::cout << "Deleted steps " << deleted << "\n";
  return 0;
}

}  // namespace

std::function<std::optional<int>(Client&)> AddCheckpointCommands(
    CLI::App& app, const std::function<void(CLI::App*)>& add_client_options) {
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("checkpoints", "list, inspect, verify and restore checkpoints");
  cmd->require_subcommand(1);
  auto job_step = [&](CLI::App* sub) {
    sub->add_option("job", o->job_id, "job id")->required();
    sub->add_option("step", o->step, "step")->required()->check(CLI::NonNegativeNumber);
    add_client_options(sub);
  };
  o->list = cmd->add_subcommand("list", "a job's checkpoints, its latest and its retention");
  o->list->add_option("job", o->job_id, "job id")->required();
  add_client_options(o->list);
  o->show = cmd->add_subcommand("show", "one checkpoint: blobs, sizes, chunks, metrics");
  job_step(o->show);
  o->verify = cmd->add_subcommand("verify", "read every chunk and check it against its hash");
  job_step(o->verify);
  o->restore = cmd->add_subcommand("restore",
                                   "write each blob to a file (tensors also as model.safetensors)");
  job_step(o->restore);
  o->restore->add_option("--to", o->to, "directory to write into")->required();
  o->gc = cmd->add_subcommand("gc", "delete chunks no checkpoint uses (admins; safe during saves)");
  o->gc->add_option("--project", o->project, "only this project (default: all)");
  add_client_options(o->gc);
  o->retention = cmd->add_subcommand("retention", "show or set a job's retention policy");
  o->retention->add_option("job", o->job_id, "job id")->required();
  o->retention->add_option("--keep-last", o->keep_last, "keep the N highest steps");
  o->retention->add_option("--keep-best", o->keep_best, "keep the K best by --metric");
  o->retention->add_option("--metric", o->metric, "metric for --keep-best, e.g. eval_loss");
  o->retention->add_option("--mode", o->mode, "min or max: which values of the metric are best")
      ->check(CLI::IsMember({"min", "max"}));
  o->retention->add_option("--keep-every", o->keep_every, "keep steps that are multiples of N");
  add_client_options(o->retention);

  return [o](Client& client) -> std::optional<int> {
    if (o->list->parsed()) return List(client, o->job_id);
    if (o->show->parsed()) return Show(client, o->job_id, o->step);
    if (o->verify->parsed()) return Verify(client, o->job_id, o->step);
    if (o->restore->parsed()) {
      Status s = Restore(client, o->job_id, o->step, o->to);
      return s.ok() ? 0 : Fail(s);
    }
    if (o->gc->parsed()) return Gc(client, o->project);
    if (o->retention->parsed()) return Retention(client, *o);
    return std::nullopt;
  };
}

}  // namespace trainyard::cli
