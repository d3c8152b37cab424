// CLI commands for projects, secrets and user administration:
//   trainyard projects create|list|show|add-member|remove-member|set-ceiling
//   trainyard secrets create NAME [--project P] | list | delete NAME
//   trainyard users disable|enable|delete NAME
// A secret's value is read from stdin (or a prompt without echo), never from argv.
#pragma once

#include <functional>
#include <optional>

namespace CLI {
class App;
}  // namespace CLI

namespace trainyard::cli {

class Client;

// Adds `projects` and `secrets` to `app` and disable/enable/delete to `users`. The returned
// function runs the parsed command, or returns nullopt when none of these was parsed.
std::function<std::optional<int>(Client&)> AddSecurityCommands(
    CLI::App& app, CLI::App& users, const std::function<void(CLI::App*)>& add_client_options);

}  // namespace trainyard::cli
