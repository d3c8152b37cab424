// CLI commands for the catalog and its governance, clients of the Unity Catalog API
// (/api/2.1/unity-catalog/...) and of Trainyard's identity API:
//   trainyard grant <privileges> ON <type> <name> TO <principal>
//   trainyard revoke <privileges> ON <type> <name> FROM <principal>
//   trainyard show grants [<principal>] ON <type> <name>   (inherited grants included)
//   trainyard catalogs list|get|create|delete, schemas ..., tables ... (list/get/create/delete)
//   trainyard groups create|list|add-member|remove-member
//   trainyard service-principals create|list
//   trainyard audit [--user U] [--securable S] [--outcome allow|deny]
// The statements are parsed by ParseGrantStatement (grant_statement.h).
#pragma once

#include <functional>
#include <optional>

namespace CLI {
class App;
}  // namespace CLI

namespace trainyard::cli {

class Client;

// Adds the commands above to `app`. The returned function runs the parsed command, or returns
// nullopt when none of these was parsed.
std::function<std::optional<int>(Client&)> AddCatalogCommands(
    CLI::App& app, const std::function<void(CLI::App*)>& add_client_options);

}  // namespace trainyard::cli
