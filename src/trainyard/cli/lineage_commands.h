// CLI commands for lineage: `trainyard lineage upstream|downstream|both OBJECT [--depth N]
// [--max-nodes N] [--json]`, a client of GET /api/trainyard/v1/lineage that prints the graph
// as a tree from the object (what it came from, or what was made from it); and `trainyard
// lineage TABLE@VERSION --columns [--column C]`, a client of GET .../lineage/columns that
// prints each column of a table version, what it was derived from and how.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "trainyard/common/json.h"

namespace CLI {
class App;
}  // namespace CLI

namespace trainyard::cli {

class Client;

// Adds the `lineage` subcommand to `app`. The returned function runs the parsed command and
// returns its exit status, or nullopt when no lineage command was parsed.
std::function<std::optional<int>(Client&)> AddLineageCommands(
    CLI::App& app, const std::function<void(CLI::App*)>& add_client_options);

// The tree text of a lineage graph (the API's JSON) walked from its root: upstream follows
// edges backwards, downstream forwards. A node reached twice is printed once in full and then
// as "(see above)"; redacted nodes show only their type. Pure.
std::string RenderLineageTree(const json::value& graph, bool upstream);

// The table of GET /api/trainyard/v1/lineage/columns: COLUMN | DERIVED FROM | TRANSFORM, the
// sources as table@version.column. Pure.
std::string RenderColumnLineage(const json::value& answer);

}  // namespace trainyard::cli
