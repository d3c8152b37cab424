// Fuzzes the config.json parser: any input must give a ModelConfig or an InvalidArgument
// status, never a crash, and a parsed config must round-trip through ToJson.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "trainyard/model/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto config = trainyard::model::ModelConfig::FromJson(text, "fuzz.json");
  if (config.ok()) {
    auto again = trainyard::model::ModelConfig::FromJson(config->ToJson(), "again.json");
    if (!again.ok() || again->family != config->family ||
        again->hidden_size != config->hidden_size || again->head_dim != config->head_dim ||
        again->num_key_value_heads != config->num_key_value_heads ||
        again->intermediate_size != config->intermediate_size ||
        again->tie_word_embeddings != config->tie_word_embeddings ||
        again->rope_scaling.type != config->rope_scaling.type) {
      std::abort();
    }
  } else if (!config.status().IsInvalidArgument()) {
    std::abort();
  }
  return 0;
}
