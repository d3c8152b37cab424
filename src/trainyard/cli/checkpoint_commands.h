// CLI commands for checkpoints: `trainyard checkpoints list JOB | show JOB STEP |
// verify JOB STEP | restore JOB STEP --to DIR | gc [--project P] | retention JOB [...]`.
// They are clients of /api/trainyard/v1/checkpoints like any other.
#pragma once

#include <functional>
#include <optional>

namespace CLI {
class App;
}  // namespace CLI

namespace trainyard::cli {

class Client;

// Adds the `checkpoints` subcommand to `app`. The returned function runs the parsed command
// and returns its exit status, or nullopt when no checkpoints command was parsed.
std::function<std::optional<int>(Client&)> AddCheckpointCommands(
    CLI::App& app, const std::function<void(CLI::App*)>& add_client_options);

}  // namespace trainyard::cli
