#include "trainyard/train/server_api.h"

namespace trainyard::train {

std::string StripSlash(std::string url) {
  while (!url.empty() && url.back() == '/') url.pop_back();
  return url;
}

}  // namespace trainyard::train
