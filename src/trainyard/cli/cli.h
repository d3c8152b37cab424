// The `trainyard` command line: `trainyard server` runs the control plane; every
// other command is a client of its REST API.
#pragma once

namespace trainyard::cli {

int Main(int argc, char** argv);

}  // namespace trainyard::cli
