// CLI commands for serving endpoints: `trainyard endpoints create|list|show|update|delete|
// grant|revoke` and the `trainyard serve MODEL@ALIAS` shortcut. Clients of
// /api/trainyard/v1/endpoints like any other.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "trainyard/common/json.h"
#include "trainyard/common/status.h"

namespace CLI {
class App;
}  // namespace CLI

namespace trainyard::cli {

class Client;

// `--rate-limit` values ("user:100/min", "group:team:5000tokens/min", "endpoint:10/min") as
// the endpoint's `rate_limits` (one entry per key and principal; "none" alone: an empty list).
// InvalidArgument saying the form otherwise; the server checks the numbers and principals.
Result<json::array> ParseRateLimitFlags(const std::vector<std::string>& flags);

// Adds the `endpoints` and `serve` subcommands to `app`. The returned function runs the parsed
// command and returns its exit status, or nullopt when no endpoints command was parsed.
std::function<std::optional<int>(Client&)> AddEndpointCommands(
    CLI::App& app, const std::function<void(CLI::App*)>& add_client_options);

}  // namespace trainyard::cli
