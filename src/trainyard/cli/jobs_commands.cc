#include "trainyard/cli/jobs_commands.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "trainyard/cli/client.h"
#include "trainyard/cli/table.h"
#include "trainyard/common/strings.h"
#include "trainyard/jobs/job_spec.h"

namespace trainyard::cli {
namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(250);

bool Terminal(const std::string& state) {
  return state == "SUCCEEDED" || state == "FAILED" || state == "CANCELLED";
}

std::string Money(double usd) {
  char buf[32];
  std::snprintf(buf, sizeof buf, usd >= 10 ? "$%.2f" : usd >= 0.01 ? "$%.4f" : "$%.6f", usd);
  return buf;
}

std::string Percent(double f) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f%%", f * 100);
  return buf;
}

std::string JobsPath(const std::string& job_id, const std::string& tail = "") {
  return "/api/trainyard/v1/jobs/" + UrlEncode(job_id) + tail;
}

// Prints new log bytes of (attempt, rank) from `offset`; returns the next offset.
Result<int64_t> PrintLogChunk(Client& client, const std::string& job_id, int attempt, int rank,
                              int64_t offset) {
  json::object q{{"rank", rank}, {"offset", offset}};
  if (attempt > 0) q["attempt"] = attempt;
  TY_ASSIGN_OR_RETURN(auto r, client.GetRaw(JobsPath(job_id, "/logs"), q));
  std::cout << r.body << std::flush;
  auto it = r.headers.find("x-trainyard-next-offset");
  if (it == r.headers.end()) return offset + static_cast<int64_t>(r.body.size());
  return ParseInt64(it->second).value_or(offset);
}

std::string Duration(int64_t start, int64_t end) {
  if (start <= 0) return "";
  int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
  return FormatDuration((end > 0 ? end : now) - start);
}

}  // namespace

int SubmitJob(Client& client, const std::string& file, bool follow,
              const std::vector<std::string>& env) {
  std::ifstream in(file);
  if (!in) return Fail(Status::InvalidArgument("cannot read " + file));
  std::stringstream ss;
  ss << in.rdbuf();
  auto spec = jobs::ParseJobSpec(ss.str(), file);
  if (!spec.ok()) return Fail(spec.status());
  for (const auto& kv : env) {
    size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      return Fail(Status::InvalidArgument("--env must be NAME=VALUE (got '" + kv + "')"));
    }
    spec->env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  if (spec->working_dir.empty()) {
    // Like sbatch: the job runs where it was submitted from.
    std::error_code ec;
    spec->working_dir = std::filesystem::current_path(ec).string();
  }
  auto r = client.Call("POST", "/api/trainyard/v1/jobs", {{"spec", jobs::JobSpecToJson(*spec)}});
  if (!r.ok()) return Fail(r.status());
  const json::value& job = r->as_object().at("job");
  std::string id = Str(job, "job_id");
  if (!follow) {
    std::cout << id << "\n";
    if (isatty(STDOUT_FILENO)) {
      std::cerr << "Submitted job " << id << " (" << Str(job, "name") << ", run "
                << Str(job, "run_id") << "). Follow it with: trainyard logs " << id << " -f\n";
    }
    return 0;
  }
  std::cerr << "Submitted job " << id << "\n";
  return JobLogs(client, id, true, 0, 0);
}

int ListJobs(Client& client, bool active_only, const std::string& project, int max_results) {
  json::object q{{"max_results", max_results}};
  if (active_only) q["active"] = true;
  if (!project.empty()) q["project"] = project;
  auto r = client.Call("GET", "/api/trainyard/v1/jobs", q);
  if (!r.ok()) return Fail(r.status());
  std::vector<std::vector<std::string>> rows;
  for (const auto& j : Arr(*r, "jobs")) {
    std::string state = Str(j, "state");
    int64_t pos = Int(j, "queue_position");
    const json::value& spec = j.as_object().at("spec");
    const json::value& res = spec.as_object().at("resources");
    std::string resources =
        std::to_string(Int(res, "nodes")) + "x" +
        (Int(res, "gpus_per_node") > 0 ? std::to_string(Int(res, "gpus_per_node")) + " GPU"
                                       : std::to_string(Int(res, "cpus_per_node")) + " CPU");
    std::string name = Str(j, "name");
    if (Str(j, "kind") == "service") name += " (endpoint " + Str(j, "endpoint") + ")";
    rows.push_back({Str(j, "job_id"), name, Str(j, "project"), state,
                    std::to_string(Int(j, "attempts")), Str(spec, "priority"), resources,
                    pos > 0 ? std::to_string(pos) : "", FormatTime(Int(j, "submitted_at")),
                    Money(Num(j, "cost_usd")), Str(j, "message")});
  }
  if (rows.empty()) {
    std::cout << "No jobs" << (active_only ? " pending or running" : "")
              << ". Submit one with: trainyard submit job.yaml\n";
    return 0;
  }
  PrintTable(std::cout,
             {"JOB", "NAME", "PROJECT", "STATE", "ATTEMPTS", "PRIO", "RESOURCES", "POS",
              "SUBMITTED", "COST", "REASON / MESSAGE"},
             rows, 60);
  return 0;
}

int DescribeJob(Client& client, const std::string& job_id) {
  auto r = client.Call("GET", JobsPath(job_id));
  if (!r.ok()) return Fail(r.status());
  const json::value& j = r->as_object().at("job");
  const json::value& spec = j.as_object().at("spec");
  const json::value& res = spec.as_object().at("resources");
  std::vector<std::vector<std::string>> info = {
      {"Job", Str(j, "job_id") + " (" + Str(j, "name") + ")"},
      {"Project",
       Str(j, "project") + ", owner " + Str(j, "owner") +
           (Str(spec, "run_as").empty() ? ""
                                        : ", runs as service principal " + Str(spec, "run_as"))},
      {"State", Str(j, "state") + (Str(j, "message").empty() ? "" : ": " + Str(j, "message"))},
      {"Command", Str(spec, "command")},
      {"Resources", Str(res, "nodes") + " node(s) x " + Str(res, "gpus_per_node") + " GPU, " +
                        Str(res, "cpus_per_node") + " CPU; priority " + Str(spec, "priority") +
                        (Str(spec, "preemptible") == "true" ? ", preemptible" : "")},
      {"Restarts", Str(j, "restarts") + " of " + Str(spec, "max_restarts")},
      {"MLflow run", Str(j, "run_id") + " (experiment " + Str(j, "experiment_id") + ")"},
      {"Submitted", FormatTime(Int(j, "submitted_at"))},
      {"Cost", Money(Num(j, "cost_usd"))},
      {"Goodput", Percent(Num(j, "goodput")) + " of paid time ended in checkpointed progress"},
  };
  if (j.as_object().contains("latest_checkpoint")) {
    const json::value& ck = j.as_object().at("latest_checkpoint");
    info.push_back({"Checkpoint", "step " + Str(ck, "step") + ": " + Str(ck, "path")});
  }
  if (!Arr(j, "excluded_nodes").empty()) {
    std::string nodes;
    for (const auto& n : Arr(j, "excluded_nodes"))
      nodes += (nodes.empty() ? "" : ", ") + std::string(n.as_string());
    info.push_back({"Excluded", nodes});
  }
  for (const auto& row : info)
    std::cout << row[0] << ":" << std::string(12 - row[0].size(), ' ') << row[1] << "\n";
  std::vector<std::vector<std::string>> rows;
  for (const auto& a : Arr(j, "attempt_list")) {
    std::string nodes;
    for (const auto& n : Arr(a, "nodes"))
      nodes += (nodes.empty() ? "" : ",") + std::string(n.as_string());
    std::string exit =
        Str(a, "signal").empty() ? Str(a, "exit_code") : "signal " + Str(a, "signal");
    rows.push_back({Str(a, "attempt"), Str(a, "state"), nodes, FormatTime(Int(a, "started_at")),
                    Duration(Int(a, "started_at"), Int(a, "ended_at")), exit,
                    Money(Num(a, "cost_usd")), Str(a, "cause")});
  }
  if (!rows.empty()) {
    std::cout << "\n";
    PrintTable(std::cout,
               {"ATTEMPT", "STATE", "NODES", "STARTED", "DURATION", "EXIT", "COST", "CAUSE"}, rows,
               70);
  }
  return 0;
}

int JobLogs(Client& client, const std::string& job_id, bool follow, int attempt, int rank) {
  if (!follow) {
    int64_t offset = 0;
    while (true) {
      auto next = PrintLogChunk(client, job_id, attempt, rank, offset);
      if (!next.ok()) return Fail(next.status());
      if (*next == offset) return 0;
      offset = *next;
    }
  }
  // Follow: state changes go to stderr, the rank's output to stdout, across attempts.
  int64_t event_seq = 0;
  int current_attempt = attempt;
  int64_t offset = 0;
  while (true) {
    auto ev = client.Call("GET", JobsPath(job_id, "/events"), {{"after", event_seq}});
    if (!ev.ok()) return Fail(ev.status());
    for (const auto& e : Arr(*ev, "events")) {
      event_seq = Int(e, "seq");
      std::cerr << "[" << FormatTime(Int(e, "time")) << "] " << Str(e, "message") << "\n";
    }
    std::string state = Str(*ev, "state");
    int attempts = static_cast<int>(Int(*ev, "attempts"));
    if (attempt == 0 && attempts > current_attempt) {
      // Drain the previous attempt, then move to the new one.
      if (current_attempt > 0) (void)PrintLogChunk(client, job_id, current_attempt, rank, offset);
      current_attempt = attempts;
      offset = 0;
    }
    if (current_attempt > 0) {
      auto next = PrintLogChunk(client, job_id, current_attempt, rank, offset);
      if (next.ok()) offset = *next;
    }
    if (Terminal(state)) {
      if (current_attempt > 0) {
        while (true) {
          auto next = PrintLogChunk(client, job_id, current_attempt, rank, offset);
          if (!next.ok() || *next == offset) break;
          offset = *next;
        }
      }
      return state == "SUCCEEDED" ? 0 : 1;
    }
    std::this_thread::sleep_for(kPollInterval);
  }
}

int CancelJob(Client& client, const std::string& job_id) {
  auto r = client.Call("POST", JobsPath(job_id, "/cancel"));
  if (!r.ok()) return Fail(r.status());
  const json::value& j = r->as_object().at("job");
  std::cout << "Cancelling " << job_id << " (" << Str(j, "state") << ")\n";
  return 0;
}

int ShowCluster(Client& client) {
  auto r = client.Call("GET", "/api/trainyard/v1/cluster");
  if (!r.ok()) return Fail(r.status());
  std::vector<std::vector<std::string>> rows;
  for (const auto& n : Arr(*r, "nodes")) {
    std::string jobs;
    for (const auto& j : Arr(n, "jobs"))
      jobs += (jobs.empty() ? "" : ",") + std::string(j.as_string());
    rows.push_back({Str(n, "name"), Str(n, "gpus_used") + "/" + Str(n, "gpus"),
                    Str(n, "cpus_used") + "/" + Str(n, "cpus"),
                    FormatBytes(static_cast<double>(Int(n, "memory"))), jobs});
  }
  std::cout << "Pool " << Str(*r, "pool") << "\n";
  std::string mode = Str(*r, "mode");
  std::cout << "Mode " << mode
            << (mode == "multi-user" ? " (jobs run as their owners' mapped OS accounts)"
                                     : " (jobs run as the server's OS account; only admins submit)")
            << "\n";
  if (!Str(*r, "containment").empty()) std::cout << "Cgroups " << Str(*r, "containment") << "\n";
  PrintTable(std::cout, {"NODE", "GPUS USED", "CPUS USED", "MEMORY", "JOBS"}, rows);
  return 0;
}

}  // namespace trainyard::cli
