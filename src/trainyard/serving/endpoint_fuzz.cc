// libFuzzer target for the endpoint decoder (endpoint.h): any body is decoded into a valid
// configuration or refused with InvalidArgument, never a crash; what is accepted passes
// ValidateEndpointConfig, round-trips through its JSON form, and its routes always pick an
// entity of the endpoint; accepted rate limits are within bounds and the limiter admits or
// refuses with a retry time under them.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "trainyard/serving/endpoint.h"
#include "trainyard/serving/rate_limiter.h"

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
  // Accepted rate limits are within their bounds, and the limiter takes any of them.
  serving::EndpointLimits limits;
  for (const auto& l : config.rate_limits) {
    if (l.queries_per_minute < 0 || l.queries_per_minute > limits.max_queries_per_minute ||
        l.tokens_per_minute < 0 || l.tokens_per_minute > limits.max_tokens_per_minute ||
        (l.queries_per_minute == 0 && l.tokens_per_minute == 0) ||
        (l.key == serving::RateLimitKey::kGroup && l.principal.empty())) {
      std::abort();
    }
  }
  if (!config.rate_limits.empty()) {
    FakeClock clock;
    serving::RateLimiter limiter(clock);
    std::vector<std::string> groups;
    for (const auto& l : config.rate_limits) groups.push_back(l.principal);
    std::sort(groups.begin(), groups.end());
    for (int i = 0; i < 3; ++i) {
      auto d = limiter.Admit("e", config.rate_limits, "u", groups);
      if (d.allowed) d.charge.ChargeTokens(1000);
      if (!d.allowed && d.retry_after_seconds < 1) std::abort();
    }
  }
  for (double draw : {0.0, 37.5, 99.999}) {
    size_t i = serving::PickRoute(config.routes, draw);
    if (i >= config.routes.size() || config.routes[i].percent == 0) std::abort();
  }
  return 0;
}
