// `trainyard prep SPEC.yaml [--threads N] [--report FILE] [--memory-limit BYTES] [--flush-rows N]`:
// runs a data preparation pipeline (prep/pipeline.h, docs/prep.md) with the native engine, locally
// or as a job. Catalog sources and outputs go through the server (--url/--token, TRAINYARD_URL and
// TRAINYARD_TOKEN); in a job (MLFLOW_RUN_ID) the report is logged to the run: metrics per step,
// the JSON report as the artifact prep/report.json, and the spec's version as a tag and param.
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace CLI {
class App;
}  // namespace CLI

namespace trainyard::prep {
struct PipelineReport;
}  // namespace trainyard::prep

namespace trainyard::cli {

class Client;

std::function<std::optional<int>(Client&)> AddPrepCommands(
    CLI::App& app, const std::function<void(CLI::App*)>& add_client_options);

// The report as the CLI prints it (the steps' table, the outputs' table, a summary line).
std::string FormatPrepReport(const prep::PipelineReport& report);

}  // namespace trainyard::cli
