// Helpers for the trainer's platform clients (platform.cc, table_source.cc); their calls to
// the server go through http/api_call.h (token, retries, error mapping).
#pragma once

#include <string>

namespace trainyard::train {

// `url` without trailing slashes.
std::string StripSlash(std::string url);

}  // namespace trainyard::train
