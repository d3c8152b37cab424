#include "trainyard/cli/prep_commands.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include "trainyard/cli/client.h"
#include "trainyard/cli/prep_spark_command.h"
#include "trainyard/cli/table.h"
#include "trainyard/common/json.h"
#include "trainyard/jobs/job_spec.h"
#include "trainyard/prep/pipeline.h"

namespace trainyard::cli {
namespace {

struct PrepOptions {
  std::string spec;
  int threads = 0;
  std::string report;
  std::string memory_limit;
  int64_t flush_rows = 100000;
  std::string engine = "native";  // or "spark" (cli/prep_spark_command.h)
  std::string master;             // --engine spark only
};

std::string Count(int64_t n) {
  std::string s = std::to_string(n);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(i, ",");
  return s;
}

// Progress on a terminal's stderr: the pass, rows and rate, redrawn in place.
class Progress {
 public:
  Progress() : tty_(isatty(STDERR_FILENO) == 1) {}
  ~Progress() {
    if (tty_ && drawn_) std::fputs("\n", stderr);
  }
  void Update(int pass, int64_t rows) {
    if (!tty_) return;
    auto now = std::chrono::steady_clock::now();
    if (pass != pass_) {
      if (drawn_) std::fputs("\n", stderr);
      pass_ = pass;
      pass_start_ = now;
    }
    double s = std::chrono::duration<double>(now - pass_start_).count();
    std::fprintf(stderr, "\rpass %d/2 (%s): %s rows, %.0f rows/s   ", pass,
                 pass == 1 ? "decide" : "write", Count(rows).c_str(), s > 0 ? rows / s : 0.0);
    drawn_ = true;
  }

 private:
  bool tty_;
  bool drawn_ = false;
  int pass_ = 0;
  std::chrono::steady_clock::time_point pass_start_;
};

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// In a job, logs the report to its MLflow run. Failures are warnings: the data is written.
void LogToRun(const prep::PipelineReport& report, const std::string& json_text,
              const prep::ServerEndpoint& server, const std::string& run_id) {
  prep::ServerEndpoint tracking = server;
  if (std::string uri = Env("MLFLOW_TRACKING_URI"); uri.rfind("http", 0) == 0) {
    while (!uri.empty() && uri.back() == '/') uri.pop_back();
    tracking.url = uri;
    if (std::string t = Env("MLFLOW_TRACKING_TOKEN"); !t.empty()) tracking.token = t;
  }
  prep::RunLog log(tracking, run_id);
  std::map<std::string, std::string> tags = {{"trainyard.prep.pipeline", report.pipeline},
                                             {"trainyard.prep.version", report.version}};
  std::map<std::string, std::string> params = {{"prep.pipeline", report.pipeline},
                                               {"prep.version", report.version},
                                               {"prep.source", report.source}};
  Status s = log.LogBatch(prep::ReportMetrics(report), params, tags);
  if (s.ok()) s = log.PutArtifact("prep/report.json", json_text);
  if (!s.ok()) {
    std::cerr << "warning: the report was not logged to run " << run_id << ": " << s.message()
              << "\n";
  }
}

Result<prep::PipelineReport> RunOnSpark(const PrepOptions& o, const prep::ServerEndpoint& server,
                                        const std::string& run_id) {
  PrepSparkOptions spark;
  spark.spec = o.spec;
  spark.master = o.master.empty() ? "local[*]" : o.master;
  spark.url = server.url;
  spark.token = server.token;
  spark.run_id = run_id;
  spark.flush_rows = o.flush_rows;
  return RunPrepOnSpark(spark);
}

int RunPrep(Client& client, const PrepOptions& o) {
  if (o.engine != "spark" && !o.master.empty()) {
    return Fail(
        Status::InvalidArgument("--master is for --engine spark (the native engine runs "
                                "here, with --threads)"));
  }
  prep::PipelineOptions options;
  options.threads = o.threads;
  options.flush_rows = o.flush_rows;
  if (!o.memory_limit.empty()) {
    auto bytes = jobs::ParseBytes(o.memory_limit);
    if (!bytes.ok()) {
      return Fail(Status::InvalidArgument(
          "--memory-limit must be a size such as 4Gi or 512M (got \"" + o.memory_limit + "\")"));
    }
    options.memory_limit = *bytes;
  }
  options.server.url = client.url();
  while (!options.server.url.empty() && options.server.url.back() == '/') {
    options.server.url.pop_back();
  }
  options.server.token = client.token();
  options.run_id = Env("MLFLOW_RUN_ID");
  Result<prep::PipelineReport> report = Status::Internal("not run");
  if (o.engine == "spark") {
    report = RunOnSpark(o, options.server, options.run_id);
  } else {
    auto spec = prep::LoadPipelineSpec(o.spec);
    if (!spec.ok()) return Fail(spec.status());
    auto progress = std::make_shared<Progress>();
    options.progress = [progress](int pass, int64_t rows) { progress->Update(pass, rows); };
    report = prep::RunPipeline(*spec, options);
    progress.reset();
    options.progress = nullptr;
  }
  if (!report.ok()) return Fail(report.status());
  std::string json_text = json::serialize(prep::ReportToJson(*report));
  if (!o.report.empty()) {
    std::ofstream out(o.report, std::ios::binary | std::ios::trunc);
    out << json_text << "\n";
    if (!out.flush()) {
      return Fail(Status::IOError("cannot write the report to " + o.report +
                                  " (the outputs were written)"));
    }
  }
  if (!options.run_id.empty()) LogToRun(*report, json_text, options.server, options.run_id);
  std::cout << FormatPrepReport(*report);
  return 0;
}

}  // namespace

std::string FormatPrepReport(const prep::PipelineReport& report) {
  std::ostringstream out;
  std::vector<std::vector<std::string>> rows;
  for (const auto& s : report.steps) {
    std::string reasons;
    for (const auto& [reason, r] : s.dropped) {
      reasons += (reasons.empty() ? "" : ", ") + reason + " " + Count(r.rows);
    }
    std::string changed;
    for (const auto& [kind, n] : s.changed) {
      changed += (changed.empty() ? "" : ", ") + kind + " " + Count(n);
    }
    for (const auto& [split, n] : s.split_rows) {
      changed += (changed.empty() ? "" : ", ") + split + " " + Count(n);
    }
    rows.push_back({s.label, Count(s.rows_in), Count(s.rows_out), Count(s.dropped_rows()),
                    reasons.empty() ? "-" : reasons, changed.empty() ? "-" : changed});
  }
  PrintTable(out, {"STEP", "IN", "OUT", "DROPPED", "REASONS", "CHANGED / SPLITS"}, rows, 60);
  out << "\n";
  std::vector<std::vector<std::string>> outputs;
  for (const auto& o : report.outputs) {
    outputs.push_back(
        {o.name, o.target, Count(o.rows), o.version ? std::to_string(*o.version) : "-"});
  }
  PrintTable(out, {"OUTPUT", "TABLE", "ROWS", "VERSION"}, outputs, 60);
  char seconds[32];
  std::snprintf(seconds, sizeof(seconds), "%.2f", report.seconds);
  out << "\n"
      << report.pipeline << " (version " << report.version.substr(0, 12)
      << "): " << Count(report.rows_in) << " rows from " << report.source << ", "
      << Count(report.rows_out) << " kept, " << Count(report.rows_dropped) << " dropped in "
      << seconds << " s on "
      << (report.master.empty() ? std::to_string(report.threads) + " threads"
                                : "Spark (" + report.master + ")")
      << "\n";
  return out.str();
}

std::function<std::optional<int>(Client&)> AddPrepCommands(
    CLI::App& app, const std::function<void(CLI::App*)>& add_client_options) {
  auto o = std::make_shared<PrepOptions>();
  auto* cmd = app.add_subcommand(
      "prep",
      "prepare data: filter, deduplicate, redact, template, tokenize and split (docs/prep.md)");
  cmd->add_option("spec", o->spec, "the pipeline spec (YAML)")->required();
  cmd->add_option("--threads", o->threads, "worker threads (default: the machine's cores)")
      ->check(CLI::Range(0, 1024));
  cmd->add_option("--report", o->report, "also write the report as JSON to this file");
  cmd->add_option("--memory-limit", o->memory_limit,
                  "fail early when the state kept between the passes would exceed this (e.g. 4Gi)");
  cmd->add_option("--flush-rows", o->flush_rows, "rows per commit of an output")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40))
      ->capture_default_str();
  cmd->add_option("--engine", o->engine,
                  "native (this process) or spark (the same spec on Spark, docs/prep.md)")
      ->check(CLI::IsMember({"native", "spark"}))
      ->capture_default_str();
  cmd->add_option("--master", o->master,
                  "with --engine spark: the Spark master, local[*] (default) or spark://HOST:PORT");
  add_client_options(cmd);
  return [=](Client& client) -> std::optional<int> {
    if (!cmd->parsed()) return std::nullopt;
    return RunPrep(client, *o);
  };
}

}  // namespace trainyard::cli
