// libFuzzer target for the log-batch fast path: DecodeLogBatchFast must never crash, and
// whenever it takes a body, the general decoder (what the server answered before the fast
// path existed) must take it too and give the same request. A difference aborts.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "trainyard/api/log_batch_decoder.h"

namespace {

using trainyard::api::LogBatchRequest;

bool SameDouble(double a, double b) {
  return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, sizeof a) == 0;
}

bool Same(const LogBatchRequest& a, const LogBatchRequest& b) {
  if (a.run_id != b.run_id || a.metrics.size() != b.metrics.size() ||
      a.params.size() != b.params.size() || a.tags.size() != b.tags.size()) {
    return false;
  }
  for (size_t i = 0; i < a.metrics.size(); ++i) {
    const auto &x = a.metrics[i], &y = b.metrics[i];
    if (x.key != y.key || !SameDouble(x.value, y.value) || x.timestamp != y.timestamp ||
        x.step != y.step || x.model_id != y.model_id || x.dataset_name != y.dataset_name ||
        x.dataset_digest != y.dataset_digest) {
      return false;
    }
  }
  for (size_t i = 0; i < a.params.size(); ++i) {
    if (a.params[i].key != b.params[i].key || a.params[i].value != b.params[i].value) return false;
  }
  for (size_t i = 0; i < a.tags.size(); ++i) {
    if (a.tags[i].key != b.tags[i].key || a.tags[i].value != b.tags[i].value) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view body(reinterpret_cast<const char*>(data), size);
  auto fast = trainyard::api::DecodeLogBatchFast(body);
  if (!fast) return 0;
  auto object = trainyard::ParseJsonObject(body);
  if (!object.ok()) std::abort();  // the fast path took a body the server refuses
  auto general = trainyard::api::DecodeLogBatch(*object);
  if (!general.ok() || !Same(*fast, *general)) std::abort();
  return 0;
}
