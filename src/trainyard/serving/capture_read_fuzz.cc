// libFuzzer target for the capture reader (capture.h, ReadRecentCaptures): any file content,
// with any record count and byte budget, gives at most that many JSON objects, never a crash.
// The first two bytes pick the count and the byte budget; the rest is the file.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include "trainyard/serving/capture.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace trainyard;
  if (size < 2) return 0;
  size_t n = data[0] % 16;
  size_t max_bytes = static_cast<size_t>(data[1]) * 8 + 1;
  static const std::string path = "/tmp/capture_read_fuzz." + std::to_string(::getpid());
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data + 2), static_cast<std::streamsize>(size - 2));
  }
  auto records = serving::ReadRecentCaptures(path, n, max_bytes);
  if (!records.ok()) std::abort();  // a readable file is never an error
  if (records->size() > n) std::abort();
  return 0;
}
