// CLI commands for serving endpoints: `trainyard endpoints create|list|show|update|delete|
// grant|revoke`. Clients of /api/trainyard/v1/endpoints like any other.
#pragma once

#include <functional>
#include <optional>

namespace CLI {
class App;
}  // namespace CLI

namespace trainyard::cli {

class Client;

// Adds the `endpoints` subcommand to `app`. The returned function runs the parsed command
// and returns its exit status, or nullopt when no endpoints command was parsed.
std::function<std::optional<int>(Client&)> AddEndpointCommands(
    CLI::App& app, const std::function<void(CLI::App*)>& add_client_options);

}  // namespace trainyard::cli
