// trainyard-train: the native trainer's program (`trainyard train config.yaml` runs it).
#include <cstdio>

int main(int argc, char** argv) {
  std::fprintf(stderr, "trainyard-train: not built yet\n");
  return 2;
}
