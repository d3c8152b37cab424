// libFuzzer target for the endpoint decoder (endpoint.h): any body is decoded into a valid
// configuration or refused with InvalidArgument, never a crash; what is accepted passes
// ValidateEndpointConfig, round-trips through its JSON form, and its routes always pick an
// entity of the endpoint.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "trainyard/serving/endpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace trainyard;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto body = ParseJsonObject(text);
  if (!body.ok()) return 0;
  serving::EndpointConfig config;
  Status s = serving::DecodeEndpointConfig(*body, config);
  if (!s.ok()) {
    if (s.code() != StatusCode::kInvalidArgument) std::abort();
    return 0;
  }
  if (!serving::ValidateEndpointConfig(config).ok()) std::abort();
  serving::EndpointConfig again;
  if (!serving::DecodeEndpointConfig(serving::EndpointConfigToJson(config), again).ok()) {
    std::abort();
  }
  if (json::serialize(serving::EndpointConfigToJson(again)) !=
      json::serialize(serving::EndpointConfigToJson(config))) {
    std::abort();
  }
  for (double draw : {0.0, 37.5, 99.999}) {
    size_t i = serving::PickRoute(config.routes, draw);
    if (i >= config.routes.size() || config.routes[i].percent == 0) std::abort();
  }
  return 0;
}
