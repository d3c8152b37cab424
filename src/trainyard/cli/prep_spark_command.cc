#include "trainyard/cli/prep_spark_command.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <vector>

#include "trainyard/cli/client.h"
#include "trainyard/common/json.h"
#include "trainyard/prep/column_lineage.h"
#include "trainyard/prep/pipeline.h"
#include "trainyard/prep/pipeline_spec.h"
#include "trainyard/prep/spark_bridge.h"

namespace trainyard::cli {
namespace {

namespace fs = std::filesystem;

// The repository the binary was built in (build/trainyard -> the directory above build/).
fs::path RepoRoot() {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  return self.parent_path().parent_path();
}

// A fresh directory for the staged source, outputs and report, removed when done.
class StagingDir {
 public:
  static Result<StagingDir> Create() {
    std::string base = EnvOr("TRAINYARD_PREP_STAGING", fs::temp_directory_path().string());
    std::string pattern = base + "/trainyard-prep-spark-XXXXXX";
    if (!mkdtemp(pattern.data())) {
      return Status::IOError("cannot create a staging directory in " + base + " (" +
                             std::strerror(errno) + "); set TRAINYARD_PREP_STAGING to a " +
                             "writable directory");
    }
    return StagingDir(pattern);
  }
  StagingDir(StagingDir&& other) noexcept : path_(std::move(other.path_)) { other.path_.clear(); }
  StagingDir(const StagingDir&) = delete;
  StagingDir& operator=(const StagingDir&) = delete;
  ~StagingDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  explicit StagingDir(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

// Runs the Spark program; its exit code.
Result<int> RunSparkProgram(const std::vector<std::string>& args) {
  std::vector<std::string> copy = args;
  std::vector<char*> argv;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::cout.flush();
  pid_t pid = fork();
  if (pid < 0) return Status::Internal(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    execvp(argv[0], argv.data());
    std::cerr << "error: cannot run " << args[0] << " (" << std::strerror(errno)
              << "); set TRAINYARD_PYTHON to a Python with pyspark and delta-spark\n";
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return Status::Internal(std::string("waitpid: ") + strerror(errno));
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return Status::Internal("the Spark engine was killed by signal " +
                          std::to_string(WTERMSIG(status)));
}

Result<json::object> ReadJsonFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) return Status::IOError("the Spark engine wrote no report (" + path + ")");
  return ParseJsonObject(text.str());
}

}  // namespace

Result<prep::PipelineReport> RunPrepOnSpark(const PrepSparkOptions& options) {
  const auto began = std::chrono::steady_clock::now();
  const prep::ServerEndpoint server{options.url, options.token};
  TY_ASSIGN_OR_RETURN(prep::PipelineSpec spec, prep::LoadPipelineSpec(options.spec));
  const fs::path root = RepoRoot();
  const std::string script =
      EnvOr("TRAINYARD_PREP_SPARK", (root / "src/trainyard/prep/spark/prep_spark.py").string());
  std::error_code ec;
  if (!fs::is_regular_file(script, ec)) {
    return Status::NotFound("the Spark engine's program " + script +
                            " does not exist; set TRAINYARD_PREP_SPARK to "
                            "src/trainyard/prep/spark/prep_spark.py of a Trainyard checkout");
  }
  std::string python = (root / ".venv/bin/python").string();
  if (!fs::exists(python, ec)) python = "python3";
  python = EnvOr("TRAINYARD_PYTHON", python);

  // Spark and the staging take minutes; the imports after them must not be refused then.
  for (const auto& o : spec.outputs) {
    if (o.table.empty()) continue;
    TY_RETURN_IF_ERROR(prep::CheckCatalogOutput(server, o.name, o.table, options.run_id));
  }
  TY_ASSIGN_OR_RETURN(StagingDir staging, StagingDir::Create());
  json::object staged_json;
  std::optional<prep::StagedSource> staged;
  if (!spec.source.table.empty()) {
    TY_ASSIGN_OR_RETURN(staged,
                        prep::StageTableSource(server, spec.source.table, spec.source.version,
                                               options.run_id, staging / "source.parquet"));
    staged_json["source"] = json::object{{"parquet", staging / "source.parquet"},
                                         {"name", staged->doc_source},
                                         {"version", staged->version},
                                         {"ordinal_column", prep::kStagedOrdinalColumn}};
  }
  json::object staged_outputs;
  for (const auto& o : spec.outputs) {
    if (!o.table.empty()) staged_outputs[o.name] = staging / ("output-" + o.name);
  }
  staged_json["outputs"] = std::move(staged_outputs);
  {
    std::ofstream out(staging / "staging.json", std::ios::binary);
    out << json::serialize(staged_json);
    if (!out.flush()) return Status::IOError("cannot write " + staging / "staging.json");
  }

  const std::string report_path = staging / "report.json";
  TY_ASSIGN_OR_RETURN(
      int code,
      RunSparkProgram({python, script, options.spec, "--master", options.master, "--report",
                       report_path, "--staging", staging / "staging.json", "--quiet"}));
  if (code != 0) {
    return Status::Internal("the Spark engine failed (exit " + std::to_string(code) +
                            "); its error is above");
  }
  TY_ASSIGN_OR_RETURN(json::object report_json, ReadJsonFile(report_path));
  auto report = prep::ReportFromJson(report_json, spec);
  if (!report.ok()) {
    return Status::Internal("the Spark engine's report: " + report.status().message());
  }

  // Outputs Spark staged go to their catalog tables, as the native engine writes them.
  for (auto& out : report->outputs) {
    const prep::OutputSpec* target = spec.Output(out.name);
    if (!target || target->table.empty()) continue;
    std::string lineage;
    if (staged && !options.run_id.empty()) {
      lineage = prep::ColumnLineageJson(spec.source.table, staged->version,
                                        out.name == "dropped"
                                            ? prep::DroppedOutputColumns(spec)
                                            : prep::DeriveOutputColumns(spec, staged->columns));
    }
    TY_ASSIGN_OR_RETURN(
        prep::OutputResult written,
        prep::ImportStagedOutput(server, staging / ("output-" + out.name), target->table,
                                 options.run_id, options.flush_rows, lineage));
    if (written.rows != out.rows) {
      return Status::Internal("outputs." + out.name + ": Spark counted " +
                              std::to_string(out.rows) + " rows and staged " +
                              std::to_string(written.rows));
    }
    out.target = target->table;
    out.version = written.version;
  }
  // The whole run, staging and imports included (the program timed its Spark part).
  report->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  return std::move(*report);
}

}  // namespace trainyard::cli
