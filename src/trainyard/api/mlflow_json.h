// MLflow wire encoding of tracking objects (proto3 JSON as the MLflow server
// writes it: int64 as numbers, NaN/Infinity as strings, absent optionals omitted).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <utility>

#include "trainyard/common/json.h"
#include "trainyard/http/message.h"
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
// Text written in place into uninitialized chunks (64 KiB doubling to 8 MiB): no
// zero-filling, no reallocation, and the chunks can go to the socket as they are.
// Chunks come from a process-wide pool (at most 128 MiB kept) that takes them back when
// the last piece referring to one is released, so they are not faulted in anew each time.
class JsonTextBuffer {
 public:
  // Room for `n` more bytes at the returned pointer; Advance() past what was written.
  char* Ensure(size_t n) {
    if (!chunk_ || len_ + n > cap_) NewChunk(n);
    return chunk_.get() + len_;
  }
  void Advance(char* p) { len_ = static_cast<size_t>(p - chunk_.get()); }
  void Append(std::string_view s) {
    std::memcpy(Ensure(s.size()), s.data(), s.size());
    len_ += s.size();
  }
  // The text as body pieces (zero-copy), or as one string.
  std::vector<http::Response::BodyPiece> TakePieces();
  std::string Take();

 private:
  void NewChunk(size_t at_least);

  std::vector<http::Response::BodyPiece> done_;
  std::shared_ptr<char[]> chunk_;
  size_t len_ = 0;
  size_t cap_ = 0;
};

// Writes finite `v` as std::to_chars(p, end, v) would (the shortest text that reads back as
// v: fixed or scientific, whichever is shorter, fixed on a tie), about twice as fast: the
// digits come from Dragonbox. Needs room for 40 bytes at `p` (it may write past the text
// it returns); returns the end.
char* WriteShortestDouble(char* p, double v);
// Write `v` in decimal as std::to_chars(p, end, v) would, eight digits at a time. Need room
// for 21 bytes at `p` (they may write past the text they return); return the end.
char* WriteUnsigned(char* p, uint64_t v);
char* WriteSigned(char* p, int64_t v);

// Writes the points of one metric as {"key":...,"value":...,"timestamp":...,"step":...},
// each with a leading comma unless told otherwise: the text before the value is the same
// for every point and is built once. Immutable after construction.
class MetricPointJsonWriter {
 public:
  // `key_json`: the key already JSON-encoded (with quotes).
  explicit MetricPointJsonWriter(std::string_view key_json);
  void Append(JsonTextBuffer& out, double value, int64_t timestamp, int64_t step,
              bool comma = true) const;

 private:
  std::string prefix_;  // ,{"key":K,"value":  padded to a multiple of 16 bytes
  size_t prefix_len_ = 0;
};

// Decoders for repeated {key, value} lists, naming the field in errors.
Result<std::vector<tracking::KeyValue>> KeyValuesFromJson(const json::object& o,
                                                          std::string_view field);

}  // namespace trainyard::api
