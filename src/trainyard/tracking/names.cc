#include "trainyard/tracking/names.h"

#include <array>

namespace trainyard::tracking {

std::string GenerateRunName(Random& random) {
  static constexpr std::array<const char*, 24> kAdjectives = {
      "amber", "bold",   "brave",  "bright", "calm",   "clever", "crisp", "eager",
      "fast",  "gentle", "golden", "keen",   "lively", "lucid",  "merry", "nimble",
      "quiet", "rapid",  "silent", "sleek",  "steady", "sunny",  "swift", "vivid"};
  static constexpr std::array<const char*, 24> kNouns = {
      "badger", "bear", "crane", "deer",  "eagle", "falcon", "finch", "fox",
      "gull",   "hare", "heron", "ibis",  "koala", "lark",   "lynx",  "mole",
      "otter",  "owl",  "panda", "robin", "seal",  "swan",   "wolf",  "yak"};
  uint64_t r = random.Next64();
  std::string name = kAdjectives[r % kAdjectives.size()];
  name += "-";
  name += kNouns[(r >> 16) % kNouns.size()];
  name += "-";
  name += std::to_string((r >> 32) % 1000);
  return name;
}

}  // namespace trainyard::tracking
