#include "trainyard/api/jobs_api.h"

#include "trainyard/api/job_log_stream.h"
#include "trainyard/common/paths.h"
#include "trainyard/common/strings.h"
#include "trainyard/jobs/job_spec.h"

namespace trainyard::api {
namespace {

using http::Method;

// Jobs per page when a request names no max_results.
constexpr int64_t kDefaultJobsPerPage = 200;
constexpr int64_t kMaxLogChunk = 4 << 20;
// Log streams open at once (each holds a connection and one event's memory, no thread).
constexpr int kMaxLogStreams = 256;

// The values of the secrets a job's spec references, to redact from its logs; 403 unless
// `who` may see the job's logs.
Result<std::vector<std::string>> LogSecrets(jobs::JobService& jobs, jobs::ProjectService& projects,
                                            jobs::SecretService& secrets,
                                            const identity::Principal& who,
                                            const std::string& job_id);

json::value AttemptToJson(const jobs::AttemptInfo& a) {
  json::array nodes;
  for (const auto& n : a.nodes) nodes.emplace_back(n);
  json::object o{{"attempt", a.attempt},
                 {"state", jobs::AttemptStateName(a.state)},
                 {"cause", a.cause},
                 {"nodes", std::move(nodes)},
                 {"gpus", a.gpus},
                 {"cpus", a.cpus},
                 {"ranks", a.ranks},
                 {"started_at", a.started_at},
                 {"ended_at", a.ended_at},
                 {"resumed_from", a.resumed_from},
                 {"last_checkpoint_at", a.last_checkpoint_at},
                 {"cost_usd", a.cost_usd},
                 {"paid_seconds", a.paid_seconds},
                 {"productive_seconds", a.productive_seconds}};
  if (a.exit_code) o["exit_code"] = *a.exit_code;
  if (a.signal) o["signal"] = *a.signal;
  if (a.failed_rank) o["failed_rank"] = *a.failed_rank;
  return o;
}

json::value CheckpointToJson(const jobs::CheckpointInfo& c) {
  return json::object{
      {"step", c.step}, {"path", c.path}, {"attempt", c.attempt}, {"created_at", c.created_at}};
}

// Whether `who` may see a job's env and logs: its owner, its project's members, admins.
Result<bool> MaySeeDetails(jobs::ProjectService& projects, const identity::Principal& who,
                           const jobs::JobInfo& j) {
  if (who.is_admin || who.user == j.owner) return true;
  return projects.IsMember(who.user, j.spec.project);
}

Result<std::vector<std::string>> LogSecrets(jobs::JobService& jobs, jobs::ProjectService& projects,
                                            jobs::SecretService& secrets,
                                            const identity::Principal& who,
                                            const std::string& job_id) {
  TY_ASSIGN_OR_RETURN(auto job, jobs.GetJob(job_id));
  TY_ASSIGN_OR_RETURN(bool details, MaySeeDetails(projects, who, job));
  if (!details) {
    return Status::PermissionDenied(
        "the logs of job " + job.job_id + " are visible to its owner (" + job.owner +
        "), the members of project '" + job.spec.project + "' and admins");
  }
  std::vector<std::string> values;
  for (const auto& [var, name] : job.spec.secrets) {
    auto value = secrets.Resolve(job.owner, name);
    if (value.ok() && !value->empty()) values.push_back(std::move(*value));
  }
  return values;
}

json::value JobToJson(const jobs::JobInfo& j, bool with_attempts, bool show_env = true) {
  json::array excluded;
  for (const auto& n : j.excluded_nodes) excluded.emplace_back(n);
  json::object o{{"job_id", j.job_id},
                 {"name", j.spec.name},
                 {"project", j.spec.project},
                 {"owner", j.owner},
                 {"state", jobs::JobStateName(j.state)},
                 {"message", j.message},
                 {"experiment_id", j.experiment_id},
                 {"run_id", j.run_id},
                 {"submitted_at", j.submitted_at},
                 {"finished_at", j.finished_at},
                 {"attempts", j.attempts},
                 {"restarts", j.restarts},
                 {"queue_position", j.queue_position},
                 {"excluded_nodes", std::move(excluded)},
                 {"cost_usd", j.cost_usd},
                 {"goodput", j.goodput},
                 {"spec", jobs::JobSpecToJson(j.spec)},
                 {"kind", jobs::JobKindName(j.spec.kind)}};
  if (j.spec.kind == jobs::JobKind::kService) o["endpoint"] = j.spec.endpoint;
  if (!show_env) {
    json::object& spec = o["spec"].as_object();
    if (auto* env = spec.if_contains("env"); env && env->is_object()) {
      for (auto& kv : env->as_object()) kv.value() = "***";
    }
  }
  if (j.latest_checkpoint) o["latest_checkpoint"] = CheckpointToJson(*j.latest_checkpoint);
  if (with_attempts) {
    json::array attempts;
    for (const auto& a : j.attempt_list) attempts.emplace_back(AttemptToJson(a));
    o["attempt_list"] = std::move(attempts);
  }
  return o;
}

Result<std::optional<jobs::JobState>> StateField(const json::object& body) {
  TY_ASSIGN_OR_RETURN(auto state, OptionalString(body, "state"));
  if (!state) return std::optional<jobs::JobState>();
  for (auto s : {jobs::JobState::kPending, jobs::JobState::kRunning, jobs::JobState::kSucceeded,
                 jobs::JobState::kFailed, jobs::JobState::kCancelled}) {
    if (*state == jobs::JobStateName(s)) return std::optional<jobs::JobState>(s);
  }
  return Status::InvalidArgument(
      "state must be PENDING, RUNNING, SUCCEEDED, FAILED or CANCELLED (got '" + *state + "')");
}

Result<int> IntField(const json::object& body, std::string_view field, int64_t lo, int64_t hi,
                     int fallback) {
  TY_ASSIGN_OR_RETURN(auto v, OptionalInt64(body, field));
  if (!v) return fallback;
  if (*v < lo || *v > hi) {
    return Status::InvalidArgument(std::string(field) + " must be between " + std::to_string(lo) +
                                   " and " + std::to_string(hi));
  }
  return static_cast<int>(*v);
}

json::value ProjectToJson(const jobs::Project& p) {
  json::array members;
  for (const auto& m : p.members) members.emplace_back(m);
  return json::object{{"name", p.name},
                      {"priority_ceiling", p.priority_ceiling},
                      {"open", p.open},
                      {"created_at", p.created_at},
                      {"members", std::move(members)}};
}

json::value SecretToJson(const jobs::SecretInfo& s) {
  json::object o{{"name", s.name}, {"owner", s.owner}, {"created_at", s.created_at}};
  if (!s.project.empty()) o["project"] = s.project;
  return o;
}

}  // namespace

std::string RedactSecrets(const std::string& text, const std::string& more,
                          const std::vector<std::string>& values, int64_t& consumed) {
  if (values.empty()) return text;
  std::string all = text + more;
  std::string out;
  size_t i = 0;
  consumed = static_cast<int64_t>(text.size());
  while (i < text.size()) {
    size_t match = 0;
    bool partial = false;  // the file ends in what may become a value: hold it back
    for (const auto& v : values) {
      if (v.size() > match && all.compare(i, v.size(), v) == 0) match = v.size();
      partial = partial || (all.size() - i < v.size() &&
                            v.compare(0, all.size() - i, all, i, all.size() - i) == 0);
    }
    if (match == 0 && partial) {
      consumed = static_cast<int64_t>(i);
      break;
    }
    if (match > 0) {
      out += "***";
      i += match;
      consumed = std::max<int64_t>(consumed, static_cast<int64_t>(i));
    } else {
      out += all[i++];
    }
  }
  return out;
}

void RegisterSecretRoutes(Api& api, jobs::SecretService& secrets) {
  api.Route(Method::kPost, kTrainyardPrefixes, "/secrets",
            [&secrets](Call& c) -> Result<json::value> {
              TY_ASSIGN_OR_RETURN(std::string name, RequiredString(c.body, "name"));
              TY_ASSIGN_OR_RETURN(std::string value, RequiredString(c.body, "value"));
              TY_ASSIGN_OR_RETURN(auto project, OptionalString(c.body, "project"));
              jobs::CreateSecretRequest request{name, project.value_or(""), value};
              TY_ASSIGN_OR_RETURN(auto info, secrets.Create(c.principal, request));
              return json::object{{"secret", SecretToJson(info)}};
            });
  api.Route(Method::kGet, kTrainyardPrefixes, "/secrets",
            [&secrets](Call& c) -> Result<json::value> {
              TY_ASSIGN_OR_RETURN(auto list, secrets.List(c.principal));
              json::array out;
              for (const auto& s : list) out.emplace_back(SecretToJson(s));
              return json::object{{"secrets", std::move(out)}};
            });
  api.Route(Method::kDelete, kTrainyardPrefixes, "/secrets/{name}",
            [&secrets](Call& c) -> Result<json::value> {
              TY_RETURN_IF_ERROR(secrets.Delete(c.principal, c.request.path_params.at("name")));
              return json::object();
            });
}

void RegisterProjectRoutes(Api& api, jobs::ProjectService& projects) {
  api.Route(Method::kPost, kTrainyardPrefixes, "/projects",
            [&projects](Call& c) -> Result<json::value> {
              TY_ASSIGN_OR_RETURN(std::string name, RequiredString(c.body, "name"));
              TY_ASSIGN_OR_RETURN(int ceiling, IntField(c.body, "priority_ceiling", -1000, 1000,
                                                        jobs::ProjectService::kDefaultCeiling));
              TY_ASSIGN_OR_RETURN(auto p, projects.Create(c.principal, name, ceiling));
              return json::object{{"project", ProjectToJson(p)}};
            });
  api.Route(Method::kGet, kTrainyardPrefixes, "/projects",
            [&projects](Call&) -> Result<json::value> {
              TY_ASSIGN_OR_RETURN(auto list, projects.List());
              json::array out;
              for (const auto& p : list) out.emplace_back(ProjectToJson(p));
              return json::object{{"projects", std::move(out)}};
            });
  api.Route(Method::kGet, kTrainyardPrefixes, "/projects/{project}",
            [&projects](Call& c) -> Result<json::value> {
              TY_ASSIGN_OR_RETURN(auto p, projects.Get(c.request.path_params.at("project")));
              return json::object{{"project", ProjectToJson(p)}};
            });
  api.Route(Method::kPost, kTrainyardPrefixes, "/projects/{project}/members",
            [&projects](Call& c) -> Result<json::value> {
              const std::string& name = c.request.path_params.at("project");
              TY_ASSIGN_OR_RETURN(std::string user, RequiredString(c.body, "user"));
              TY_RETURN_IF_ERROR(projects.AddMember(c.principal, name, user));
              TY_ASSIGN_OR_RETURN(auto p, projects.Get(name));
              return json::object{{"project", ProjectToJson(p)}};
            });
  api.Route(Method::kDelete, kTrainyardPrefixes, "/projects/{project}/members/{user}",
            [&projects](Call& c) -> Result<json::value> {
              const std::string& name = c.request.path_params.at("project");
              TY_RETURN_IF_ERROR(
                  projects.RemoveMember(c.principal, name, c.request.path_params.at("user")));
              TY_ASSIGN_OR_RETURN(auto p, projects.Get(name));
              return json::object{{"project", ProjectToJson(p)}};
            });
  api.Route(
      Method::kPost, kTrainyardPrefixes, "/projects/{project}/ceiling",
      [&projects](Call& c) -> Result<json::value> {
        const std::string& name = c.request.path_params.at("project");
        TY_ASSIGN_OR_RETURN(int64_t ceiling, RequiredInt64(c.body, "priority_ceiling"));
        if (ceiling < -1000 || ceiling > 1000) {
          return Status::InvalidArgument("priority_ceiling must be between -1000 and 1000 (got " +
                                         std::to_string(ceiling) + ")");
        }
        TY_RETURN_IF_ERROR(projects.SetCeiling(c.principal, name, static_cast<int>(ceiling)));
        TY_ASSIGN_OR_RETURN(auto p, projects.Get(name));
        return json::object{{"project", ProjectToJson(p)}};
      });
}

void RegisterJobRoutes(Api& api, jobs::JobService& jobs, jobs::ProjectService& projects,
                       jobs::SecretService& secrets) {
  api.Route(
      Method::kPost, kTrainyardPrefixes, "/jobs",
      [&jobs, &projects, &secrets](Call& c) -> Result<json::value> {
        jobs::JobSpec spec;
        TY_ASSIGN_OR_RETURN(auto yaml, OptionalString(c.body, "spec_yaml"));
        if (yaml) {
          TY_ASSIGN_OR_RETURN(auto filename, OptionalString(c.body, "filename"));
          TY_ASSIGN_OR_RETURN(spec, jobs::ParseJobSpec(*yaml, filename.value_or("job.yaml")));
        } else {
          auto it = c.body.find("spec");
          if (it == c.body.end()) {
            return Status::InvalidArgument(
                "spec is required: the job spec as a JSON object (or "
                "spec_yaml with the YAML text)");
          }
          auto parsed = jobs::ParseJobSpecJson(it->value());
          if (!parsed.ok()) return parsed.status().WithContext("spec");
          spec = std::move(*parsed);
        }
        TY_RETURN_IF_ERROR(projects.AuthorizeSubmit(c.principal, spec.project, spec.priority));
        for (const auto& [var, name] : spec.secrets) {
          Status usable = secrets.CheckUse(c.principal.user, name);
          if (!usable.ok()) {
            auto where = spec.secret_sources.find(var);
            return usable.WithContext(where != spec.secret_sources.end() ? where->second
                                                                         : "spec.secrets." + var);
          }
        }
        TY_ASSIGN_OR_RETURN(auto job, jobs.Submit(c.principal, std::move(spec)));
        return json::object{{"job", JobToJson(job, false)}};
      });
  api.Route(Method::kGet, kTrainyardPrefixes, "/jobs",
            [&jobs, &projects](Call& c) -> Result<json::value> {
              jobs::ListJobsRequest req;
              TY_ASSIGN_OR_RETURN(req.state, StateField(c.body));
              TY_ASSIGN_OR_RETURN(auto project, OptionalString(c.body, "project"));
              req.project = project.value_or("");
              TY_ASSIGN_OR_RETURN(auto active, OptionalBool(c.body, "active"));
              req.active_only = active.value_or(false);
              TY_ASSIGN_OR_RETURN(auto max_results, OptionalInt64(c.body, "max_results"));
              req.max_results = max_results.value_or(kDefaultJobsPerPage);
              TY_ASSIGN_OR_RETURN(auto list, jobs.ListJobs(req));
              json::array out;
              for (const auto& j : list) {
                TY_ASSIGN_OR_RETURN(bool details, MaySeeDetails(projects, c.principal, j));
                out.emplace_back(JobToJson(j, false, details));
              }
              return json::object{{"jobs", std::move(out)}};
            });
  api.Route(Method::kGet, kTrainyardPrefixes, "/jobs/{job_id}",
            [&jobs, &projects](Call& c) -> Result<json::value> {
              TY_ASSIGN_OR_RETURN(auto job, jobs.GetJob(c.request.path_params.at("job_id")));
              TY_ASSIGN_OR_RETURN(bool details, MaySeeDetails(projects, c.principal, job));
              return json::object{{"job", JobToJson(job, true, details)}};
            });
  api.Route(Method::kPost, kTrainyardPrefixes, "/jobs/{job_id}/cancel",
            [&jobs](Call& c) -> Result<json::value> {
              const std::string& id = c.request.path_params.at("job_id");
              TY_RETURN_IF_ERROR(jobs.Cancel(c.principal, id));
              TY_ASSIGN_OR_RETURN(auto job, jobs.GetJob(id));
              return json::object{{"job", JobToJson(job, false)}};
            });
  api.Route(Method::kGet, kTrainyardPrefixes, "/jobs/{job_id}/my-permissions",
            [&jobs](Call& c) -> Result<json::value> {
              const std::string& id = c.request.path_params.at("job_id");
              TY_RETURN_IF_ERROR(jobs.GetJob(id).status());
              return ActionDecisionsJson({{"cancel", jobs.AuthorizeCancel(c.principal, id)}});
            });
  api.Route(Method::kPost, kTrainyardPrefixes, "/jobs/{job_id}/heartbeat",
            [&jobs](Call& c) -> Result<json::value> {
              TY_RETURN_IF_ERROR(jobs.Heartbeat(c.principal, c.request.path_params.at("job_id")));
              return json::object{};
            });
  api.Route(Method::kPost, kTrainyardPrefixes, "/jobs/{job_id}/checkpoints",
            [&jobs](Call& c) -> Result<json::value> {
              TY_ASSIGN_OR_RETURN(int64_t step, RequiredInt64(c.body, "step"));
              TY_ASSIGN_OR_RETURN(std::string path, RequiredString(c.body, "path"));
              TY_RETURN_IF_ERROR(jobs.ReportCheckpoint(
                  c.principal, c.request.path_params.at("job_id"), step, path));
              return json::object{};
            });
  api.Route(Method::kGet, kTrainyardPrefixes, "/jobs/{job_id}/checkpoints",
            [&jobs](Call& c) -> Result<json::value> {
              TY_ASSIGN_OR_RETURN(auto list,
                                  jobs.ListCheckpoints(c.request.path_params.at("job_id")));
              json::array out;
              for (const auto& ck : list) out.emplace_back(CheckpointToJson(ck));
              return json::object{{"checkpoints", std::move(out)}};
            });
  api.Route(
      Method::kGet, kTrainyardPrefixes, "/jobs/{job_id}/events",
      [&jobs](Call& c) -> Result<json::value> {
        TY_ASSIGN_OR_RETURN(auto after, OptionalInt64(c.body, "after"));
        const std::string& id = c.request.path_params.at("job_id");
        TY_ASSIGN_OR_RETURN(auto events, jobs.Events(id, after.value_or(0)));
        TY_ASSIGN_OR_RETURN(auto job, jobs.GetJob(id));
        json::array out;
        for (const auto& e : events) {
          out.emplace_back(json::object{{"seq", e.seq}, {"time", e.time}, {"message", e.message}});
        }
        return json::object{{"events", std::move(out)},
                            {"state", jobs::JobStateName(job.state)},
                            {"attempts", job.attempts}};
      });
  // A rank's log as server-sent events, followed until the attempt is over (job_log_stream.h).
  auto open_streams = std::make_shared<std::atomic<int>>(0);
  api.RawRoute(Method::kGet, kTrainyardPrefixes, "/jobs/{job_id}/logs/stream",
               [&jobs, &projects, &secrets, &api, open_streams](Call& c) -> Result<http::Response> {
                 const std::string& id = c.request.path_params.at("job_id");
                 TY_ASSIGN_OR_RETURN(auto secret_values,
                                     LogSecrets(jobs, projects, secrets, c.principal, id));
                 TY_ASSIGN_OR_RETURN(int attempt, IntField(c.body, "attempt", 0, 1000000, 0));
                 TY_ASSIGN_OR_RETURN(int rank, IntField(c.body, "rank", 0, 1000000, 0));
                 TY_ASSIGN_OR_RETURN(auto offset, OptionalInt64(c.body, "offset"));
                 std::string last_event_id = c.request.Header("last-event-id");
                 if (!last_event_id.empty()) {
                   auto parsed = ParseInt64(last_event_id);
                   if (!parsed || *parsed < 0) {
                     return Status::InvalidArgument(
                         "Last-Event-ID must be the id of an event of this stream (a byte offset, "
                         "got '" +
                         Abbreviate(last_event_id) + "')");
                   }
                   offset = *parsed;
                 }
                 if (offset && *offset < 0) return Status::InvalidArgument("offset must be >= 0");
                 TY_ASSIGN_OR_RETURN(auto job, jobs.GetJob(id));
                 if (attempt == 0) attempt = job.attempts;
                 TY_ASSIGN_OR_RETURN(std::string path, jobs.LogPath(id, attempt, rank));
                 if (open_streams->fetch_add(1) >= kMaxLogStreams) {
                   open_streams->fetch_sub(1);
                   return Status::Unavailable("the server follows " +
                                              std::to_string(kMaxLogStreams) +
                                              " logs already; close a log view and retry");
                 }
                 JobLogStreamOptions options;
                 options.path = std::move(path);
                 options.offset = offset.value_or(0);
                 options.secrets = std::move(secret_values);
                 auto state = [&jobs, id, attempt]() -> Result<LogFollowState> {
                   TY_ASSIGN_OR_RETURN(auto j, jobs.GetJob(id));
                   return LogFollowState{jobs::IsTerminal(j.state) || j.attempts > attempt,
                                         std::string(jobs::JobStateName(j.state)), j.attempts};
                 };
                 http::Response r;
                 r.content_type = "text/event-stream";
                 r.headers.emplace_back("cache-control", "no-cache");
                 r.headers.emplace_back("x-accel-buffering", "no");
                 r.headers.emplace_back("X-Trainyard-Attempt", std::to_string(attempt));
                 r.stream = std::make_shared<JobLogStream>(std::move(options), api.clock(),
                                                           std::move(state), open_streams);
                 return r;
               });
  // Plain-text log bytes from `offset`; the next offset is in X-Trainyard-Next-Offset.
  api.RawRoute(
      Method::kGet, kTrainyardPrefixes, "/jobs/{job_id}/logs",
      [&jobs, &projects, &secrets](Call& c) -> Result<http::Response> {
        TY_ASSIGN_OR_RETURN(auto secret_values, LogSecrets(jobs, projects, secrets, c.principal,
                                                           c.request.path_params.at("job_id")));
        TY_ASSIGN_OR_RETURN(int attempt, IntField(c.body, "attempt", 0, 1000000, 0));
        TY_ASSIGN_OR_RETURN(int rank, IntField(c.body, "rank", 0, 1000000, 0));
        TY_ASSIGN_OR_RETURN(auto offset, OptionalInt64(c.body, "offset"));
        TY_ASSIGN_OR_RETURN(auto max_bytes, OptionalInt64(c.body, "max_bytes"));
        if (offset && *offset < 0) return Status::InvalidArgument("offset must be >= 0");
        int64_t limit = std::clamp<int64_t>(max_bytes.value_or(kMaxLogChunk), 1, kMaxLogChunk);
        const std::string& id = c.request.path_params.at("job_id");
        TY_ASSIGN_OR_RETURN(std::string path, jobs.LogPath(id, attempt, rank));
        std::string body;
        int64_t start = offset.value_or(0);
        int64_t consumed = -1;  // file bytes behind `body` when redaction changed its length
        size_t longest = 0;     // read that much more, to redact a secret cut by the chunk's end
        for (const auto& v : secret_values) longest = std::max(longest, v.size());
        auto range = ReadFileRangeSafely(path, start, static_cast<size_t>(limit) + longest);
        if (range.ok()) {
          start = range->offset;
          size_t body_bytes = std::min(range->data.size(), static_cast<size_t>(limit));
          body = range->data.substr(0, body_bytes);
          if (!secret_values.empty()) {
            body = RedactSecrets(body, range->data.substr(body_bytes), secret_values, consumed);
          }
        } else if (!range.status().IsNotFound()) {
          return Status::FailedPrecondition("the log of rank " + std::to_string(rank) +
                                            " is not a regular file (the job replaced it); it "
                                            "is not served");
        }
        TY_ASSIGN_OR_RETURN(auto job, jobs.GetJob(id));
        http::Response r = http::Response::Text(200, std::move(body));
        r.headers.emplace_back(
            "X-Trainyard-Next-Offset",
            std::to_string(start +
                           (consumed >= 0 ? consumed : static_cast<int64_t>(r.body.size()))));
        r.headers.emplace_back("X-Trainyard-Job-State", std::string(jobs::JobStateName(job.state)));
        r.headers.emplace_back("X-Trainyard-Attempts", std::to_string(job.attempts));
        return r;
      });
  api.Route(Method::kGet, kTrainyardPrefixes, "/cluster", [&jobs](Call&) -> Result<json::value> {
    json::array nodes;
    for (const auto& u : jobs.Cluster()) {
      json::array on;
      for (const auto& j : u.jobs) on.emplace_back(j);
      nodes.emplace_back(json::object{{"name", u.node.name},
                                      {"gpus", u.node.gpus},
                                      {"cpus", u.node.cpus},
                                      {"memory", u.node.memory_bytes},
                                      {"gpus_used", u.gpus_used},
                                      {"cpus_used", u.cpus_used},
                                      {"jobs", std::move(on)}});
    }
    return json::object{{"pool", jobs.pool().name},
                        {"nodes", std::move(nodes)},
                        {"mode", jobs.multi_user() ? "multi-user" : "single-user"},
                        {"containment", jobs.Containment()}};
  });
}

}  // namespace trainyard::api
