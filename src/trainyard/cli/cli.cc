#include "trainyard/cli/cli.h"

#include <iostream>

namespace trainyard::cli {

int Main(int argc, char** argv) {
  std::cerr << "trainyard: no command yet\n";
  return 2;
}

}  // namespace trainyard::cli
