#include "trainyard/cli/prep_spark_command.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <vector>

#include "trainyard/cli/client.h"
#include "trainyard/prep/pipeline_spec.h"

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

// What the Spark engine does not run yet, found before a JVM starts.
Status CheckSupported(const prep::PipelineSpec& spec) {
  const std::string native = "; run it with the native engine (without --engine spark)";
  if (!spec.source.table.empty()) {
    return Status::InvalidArgument(
        "source.table: the Spark engine reads local files (source.files) only for now; export "
        "the table with 'trainyard tables export', or" +
        native.substr(1));
  }
  for (size_t i = 0; i < spec.steps.size(); ++i) {
    const prep::Step& step = spec.steps[i];
    std::string field = "steps[" + std::to_string(i) + "]";
    if (step.kind == prep::StepKind::kTokenize) {
      return Status::InvalidArgument(field + ".tokenize: the Spark engine does not tokenize yet" +
                                     native);
    }
    if (step.kind == prep::StepKind::kFilter &&
        (step.filter.min_tokens || step.filter.max_tokens)) {
      return Status::InvalidArgument(field +
                                     ".filter: token-count filters need the tokenizer, which the "
                                     "Spark engine does not load yet" +
                                     native);
    }
  }
  for (const auto& o : spec.outputs) {
    if (!o.table.empty()) {
      return Status::InvalidArgument("outputs." + o.name +
                                     ": the Spark engine writes local Delta directories "
                                     "({path: DIR}) only for now" +
                                     native);
    }
  }
  return Status::Ok();
}

}  // namespace

int RunPrepOnSpark(const PrepSparkOptions& options) {
  auto spec = prep::LoadPipelineSpec(options.spec);
  if (!spec.ok()) return Fail(spec.status());
  if (Status s = CheckSupported(*spec); !s.ok()) {
    return Fail(Status::InvalidArgument(options.spec + ": " + s.message()));
  }
  const fs::path root = RepoRoot();
  const std::string script =
      EnvOr("TRAINYARD_PREP_SPARK", (root / "src/trainyard/prep/spark/prep_spark.py").string());
  std::error_code ec;
  if (!fs::is_regular_file(script, ec)) {
    return Fail(Status::NotFound("the Spark engine's program " + script +
                                 " does not exist; set TRAINYARD_PREP_SPARK to "
                                 "src/trainyard/prep/spark/prep_spark.py of a Trainyard checkout"));
  }
  std::string python = (root / ".venv/bin/python").string();
  if (!fs::exists(python, ec)) python = "python3";
  python = EnvOr("TRAINYARD_PYTHON", python);

  std::vector<std::string> args = {python, script, options.spec, "--master", options.master};
  if (!options.report.empty()) {
    args.push_back("--report");
    args.push_back(options.report);
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::cout.flush();
  pid_t pid = fork();
  if (pid < 0) return Fail(Status::Internal(std::string("fork: ") + std::strerror(errno)));
  if (pid == 0) {
    execvp(argv[0], argv.data());
    std::cerr << "error: cannot run " << python << " (" << std::strerror(errno)
              << "); set TRAINYARD_PYTHON to a Python with pyspark and delta-spark\n";
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return Fail(Status::Internal(std::string("waitpid: ") + strerror(errno)));
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  std::cerr << "error: the Spark engine was killed by signal " << WTERMSIG(status) << "\n";
  return 128 + WTERMSIG(status);
}

}  // namespace trainyard::cli
