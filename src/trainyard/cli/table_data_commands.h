// CLI commands for a catalog table's data, clients of the tables API (api/tables_api.h).
// They join the `trainyard tables` group the catalog commands create (list/get/create/delete):
//   trainyard tables import NAME FILE [--mode append|overwrite] [--format F] [--run-id R]
//   trainyard tables show NAME [--version V]
//   trainyard tables history NAME [-n N]
//   trainyard tables head NAME [-n N] [--version V]
//   trainyard tables export NAME FILE [--version V] [--format jsonl|csv|parquet|arrow]
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace CLI {
class App;
}  // namespace CLI

namespace trainyard::cli {

class Client;

// Adds the commands above to `app` (to its `tables` subcommand, created if absent). The
// returned function runs the parsed command, or returns nullopt when none of these was parsed.
std::function<std::optional<int>(Client&)> AddTableDataCommands(
    CLI::App& app, const std::function<void(CLI::App*)>& add_client_options);

// The rows of a JSON-lines body as cells under `header` (the keys of the first row).
void JsonLinesToCells(const std::string& body, std::vector<std::string>* header,
                      std::vector<std::vector<std::string>>* rows);

}  // namespace trainyard::cli
