#include "trainyard/cli/cli.h"

int main(int argc, char** argv) { return trainyard::cli::Main(argc, argv); }
