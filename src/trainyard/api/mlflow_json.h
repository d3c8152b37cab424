// MLflow wire encoding of tracking objects (proto3 JSON as the MLflow server
// writes it: int64 as numbers, NaN/Infinity as strings, absent optionals omitted).
#pragma once

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <utility>

#include "trainyard/common/json.h"
#include "trainyard/tracking/types.h"

namespace trainyard::api {

json::object ExperimentToJson(const tracking::Experiment& e);
json::object RunInfoToJson(const tracking::RunInfo& info);
json::object RunToJson(const tracking::Run& run);
json::object MetricToJson(const tracking::Metric& m);
json::object LoggedModelToJson(const tracking::LoggedModel& m);
json::array KeyValuesToJson(const std::vector<tracking::KeyValue>& kvs);

// Appends {"key":...,"value":...,"timestamp":...,"step":...} without building a
// JSON tree: the metric-history hot path.
void AppendMetricJson(std::string& out, const tracking::Metric& m, bool with_run_id);
// A growing text buffer written in place: uninitialized, grown by realloc, so that
// appending millions of small pieces costs neither zero-filling nor bookkeeping.
class JsonTextBuffer {
 public:
  JsonTextBuffer() = default;
  ~JsonTextBuffer() { std::free(data_); }
  JsonTextBuffer(const JsonTextBuffer&) = delete;
  JsonTextBuffer& operator=(const JsonTextBuffer&) = delete;
  JsonTextBuffer(JsonTextBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)),
        len_(std::exchange(o.len_, 0)),
        cap_(std::exchange(o.cap_, 0)) {}

  void Reserve(size_t n);
  // Room for `n` more bytes at the returned pointer; Advance() past what was written.
  char* Ensure(size_t n) {
    if (len_ + n > cap_) Reserve(std::max(len_ + n, cap_ * 2));
    return data_ + len_;
  }
  void Advance(char* p) { len_ = static_cast<size_t>(p - data_); }
  void Append(std::string_view s) {
    std::memcpy(Ensure(s.size()), s.data(), s.size());
    len_ += s.size();
  }
  std::string_view view() const { return {data_, len_}; }
  std::string Take();

 private:
  char* data_ = nullptr;
  size_t len_ = 0;
  size_t cap_ = 0;
};

// One point whose key is already JSON-encoded (`key_json`, with quotes).
void AppendMetricPointJson(JsonTextBuffer& out, std::string_view key_json, double value,
                           int64_t timestamp, int64_t step);

// Decoders for repeated {key, value} lists, naming the field in errors.
Result<std::vector<tracking::KeyValue>> KeyValuesFromJson(const json::object& o,
                                                          std::string_view field);

}  // namespace trainyard::api
