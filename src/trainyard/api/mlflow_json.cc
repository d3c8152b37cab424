#include "trainyard/api/mlflow_json.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "trainyard/common/mutex.h"

namespace trainyard::api {

json::array KeyValuesToJson(const std::vector<tracking::KeyValue>& kvs) {
  json::array a;
  a.reserve(kvs.size());
  for (const auto& kv : kvs) a.emplace_back(json::object{{"key", kv.key}, {"value", kv.value}});
  return a;
}

json::object ExperimentToJson(const tracking::Experiment& e) {
  json::object o;
  o["experiment_id"] = e.experiment_id;
  o["name"] = e.name;
  o["artifact_location"] = e.artifact_location;
  o["lifecycle_stage"] = e.lifecycle_stage;
  o["last_update_time"] = e.last_update_time;
  o["creation_time"] = e.creation_time;
  if (!e.tags.empty()) o["tags"] = KeyValuesToJson(e.tags);
  return o;
}

json::object RunInfoToJson(const tracking::RunInfo& info) {
  json::object o;
  o["run_id"] = info.run_id;
  o["run_uuid"] = info.run_id;
  o["run_name"] = info.run_name;
  o["experiment_id"] = info.experiment_id;
  o["user_id"] = info.user_id;
  o["status"] = info.status;
  if (info.start_time) o["start_time"] = *info.start_time;
  if (info.end_time) o["end_time"] = *info.end_time;
  o["artifact_uri"] = info.artifact_uri;
  o["lifecycle_stage"] = info.lifecycle_stage;
  return o;
}

json::object MetricToJson(const tracking::Metric& m) {
  json::object o;
  o["key"] = m.key;
  o["value"] = DoubleToJson(m.value);
  o["timestamp"] = m.timestamp;
  o["step"] = m.step;
  if (!m.model_id.empty()) o["model_id"] = m.model_id;
  if (!m.dataset_name.empty()) o["dataset_name"] = m.dataset_name;
  if (!m.dataset_digest.empty()) o["dataset_digest"] = m.dataset_digest;
  if (!m.run_id.empty()) o["run_id"] = m.run_id;
  return o;
}

json::object RunToJson(const tracking::Run& run) {
  json::object data;
  json::array metrics;
  for (const auto& m : run.metrics) metrics.emplace_back(MetricToJson(m));
  data["metrics"] = std::move(metrics);
  data["params"] = KeyValuesToJson(run.params);
  data["tags"] = KeyValuesToJson(run.tags);
  json::object inputs;
  json::array dataset_inputs;
  for (const auto& d : run.dataset_inputs) {
    json::object ds;
    ds["name"] = d.dataset.name;
    ds["digest"] = d.dataset.digest;
    ds["source_type"] = d.dataset.source_type;
    ds["source"] = d.dataset.source;
    if (!d.dataset.schema.empty()) ds["schema"] = d.dataset.schema;
    if (!d.dataset.profile.empty()) ds["profile"] = d.dataset.profile;
    dataset_inputs.emplace_back(json::object{{"tags", KeyValuesToJson(d.tags)}, {"dataset", ds}});
  }
  inputs["dataset_inputs"] = std::move(dataset_inputs);
  json::array model_inputs;
  for (const auto& id : run.model_inputs) model_inputs.emplace_back(json::object{{"model_id", id}});
  inputs["model_inputs"] = std::move(model_inputs);
  json::array model_outputs;
  for (const auto& m : run.model_outputs) {
    model_outputs.emplace_back(json::object{{"model_id", m.model_id}, {"step", m.step}});
  }
  json::object o;
  o["info"] = RunInfoToJson(run.info);
  o["data"] = std::move(data);
  o["inputs"] = std::move(inputs);
  o["outputs"] = json::object{{"model_outputs", std::move(model_outputs)}};
  return o;
}

json::object LoggedModelToJson(const tracking::LoggedModel& m) {
  json::object info;
  info["model_id"] = m.model_id;
  info["experiment_id"] = m.experiment_id;
  info["name"] = m.name;
  info["creation_timestamp_ms"] = m.creation_timestamp;
  info["last_updated_timestamp_ms"] = m.last_updated_timestamp;
  info["artifact_uri"] = m.artifact_uri;
  info["status"] = m.status;
  if (!m.model_type.empty()) info["model_type"] = m.model_type;
  if (!m.source_run_id.empty()) info["source_run_id"] = m.source_run_id;
  if (!m.status_message.empty()) info["status_message"] = m.status_message;
  info["tags"] = KeyValuesToJson(m.tags);
  json::object data;
  data["params"] = KeyValuesToJson(m.params);
  json::array metrics;
  for (const auto& metric : m.metrics) metrics.emplace_back(MetricToJson(metric));
  data["metrics"] = std::move(metrics);
  return json::object{{"info", std::move(info)}, {"data", std::move(data)}};
}

static void AppendEscaped(std::string& out, std::string_view s) {
  out += json::serialize(json::string(s));
}

static void AppendDouble(std::string& out, double v) {
  if (std::isnan(v)) {
    out += "\"NaN\"";
  } else if (std::isinf(v)) {
    out += v > 0 ? "\"Infinity\"" : "\"-Infinity\"";
  } else {
    char buf[32];
    auto [ptr, ec] = std::to_chars(buf, buf + sizeof(buf), v);
    out.append(buf, ptr);
    // JSON readers that see "1" read an integer; MLflow's proto parser accepts both.
  }
}

void AppendMetricJson(std::string& out, const tracking::Metric& m, bool with_run_id) {
  out += "{\"key\":";
  AppendEscaped(out, m.key);
  out += ",\"value\":";
  AppendDouble(out, m.value);
  out += ",\"timestamp\":";
  out += std::to_string(m.timestamp);
  out += ",\"step\":";
  out += std::to_string(m.step);
  if (with_run_id) {
    out += ",\"run_id\":";
    AppendEscaped(out, m.run_id);
  }
  out += '}';
}

namespace {

// Freed chunks of the standard sizes (64 KiB .. 8 MiB), kept for the next buffer: a
// fresh chunk costs a page fault per 4 KiB when first written (about 20,000 for a
// 1M-point history, the largest single cost after SQLite on a 2-core VM). Holds at
// most kMaxPooledBytes. Thread-safe.
class ChunkPool {
 public:
  static constexpr size_t kMinChunk = 64 << 10, kMaxChunk = 8 << 20;
  static constexpr size_t kMaxPooledBytes = size_t{128} << 20;

  static ChunkPool& Get() {
    static ChunkPool* pool = new ChunkPool();  // never destroyed: chunks may outlive main
    return *pool;
  }

  // A chunk of exactly `size` bytes, uninitialized.
  std::shared_ptr<char[]> Take(size_t size) {
    int cls = SizeClass(size);
    char* p = nullptr;
    if (cls >= 0) {
      MutexLock lock(mu_);
      auto& free = free_[static_cast<size_t>(cls)];
      if (!free.empty()) {
        p = free.back();
        free.pop_back();
        pooled_bytes_ -= size;
      }
    }
    if (!p) p = new char[size];  // uninitialized on purpose
    return std::shared_ptr<char[]>(p, [this, size](char* q) { Give(q, size); });
  }

 private:
  static int SizeClass(size_t size) {
    int cls = 0;
    for (size_t s = kMinChunk; s <= kMaxChunk; s <<= 1, ++cls) {
      if (s == size) return cls;
    }
    return -1;
  }

  void Give(char* p, size_t size) {
    int cls = SizeClass(size);
    if (cls >= 0) {
      MutexLock lock(mu_);
      if (pooled_bytes_ + size <= kMaxPooledBytes) {
        free_[static_cast<size_t>(cls)].push_back(p);
        pooled_bytes_ += size;
        return;
      }
    }
    delete[] p;
  }

  Mutex mu_;
  std::vector<char*> free_[8] TY_GUARDED_BY(mu_);  // by size class
  size_t pooled_bytes_ TY_GUARDED_BY(mu_) = 0;
};

}  // namespace

void JsonTextBuffer::NewChunk(size_t at_least) {
  if (chunk_ && len_ > 0) done_.push_back({chunk_, std::string_view(chunk_.get(), len_)});
  size_t size = std::max(
      at_least, std::min<size_t>(cap_ ? cap_ * 2 : ChunkPool::kMinChunk, ChunkPool::kMaxChunk));
  chunk_ = ChunkPool::Get().Take(size);
  cap_ = size;
  len_ = 0;
}

std::vector<http::Response::BodyPiece> JsonTextBuffer::TakePieces() {
  if (chunk_ && len_ > 0) done_.push_back({chunk_, std::string_view(chunk_.get(), len_)});
  chunk_.reset();
  len_ = cap_ = 0;
  return std::move(done_);
}

std::string JsonTextBuffer::Take() {
  std::string out;
  for (const auto& piece : TakePieces()) out.append(piece.data);
  return out;
}

namespace {

// The eight decimal digits of x < 10^8 (leading zeros included) as byte values 0..9, the
// most significant in the lowest byte, so that on a little-endian machine they lie in
// reading order: four digits per 32-bit lane, then two per 16-bit lane, then one per
// byte, each step a multiply-shift division of all lanes at once (x * 10486 >> 20 is
// x / 100 below 10^4, x * 103 >> 10 is x / 10 below 100).
inline uint64_t EightDigits(uint32_t x) {
  uint64_t merged = (x / 10000) | (static_cast<uint64_t>(x % 10000) << 32);
  const uint64_t hundreds = ((merged * 10486) >> 20) & 0x0000007F0000007FULL;
  merged = hundreds | ((merged - hundreds * 100) << 16);
  const uint64_t tens = ((merged * 103) >> 10) & 0x000F000F000F000FULL;
  return tens | ((merged - tens * 10) << 8);
}

inline void StoreDigits(char* p, uint64_t digits) {
  const uint64_t ascii = digits + 0x3030303030303030ULL;
  std::memcpy(p, &ascii, 8);
}

// 1 <= x < 10^8 without leading zeros; stores 8 bytes at p.
inline char* WriteUpTo8Digits(char* p, uint32_t x) {
  uint64_t digits = EightDigits(x);
  const int leading_zeros = std::countr_zero(digits) >> 3;  // digits != 0 as x != 0
  StoreDigits(p, digits >> (8 * leading_zeros));
  return p + 8 - leading_zeros;
}

// WriteUnsigned, inlined into the metric-history hot path.
[[gnu::always_inline]] inline char* WriteUnsignedInline(char* p, uint64_t v) {
  if constexpr (std::endian::native != std::endian::little) {
    return std::to_chars(p, p + 20, v).ptr;
  }
  constexpr uint64_t k1e8 = 100'000'000, k1e16 = k1e8 * k1e8;
  if (v < k1e8) {
    if (v == 0) {
      *p = '0';
      return p + 1;
    }
    return WriteUpTo8Digits(p, static_cast<uint32_t>(v));
  }
  if (v < k1e16) {
    p = WriteUpTo8Digits(p, static_cast<uint32_t>(v / k1e8));
    StoreDigits(p, EightDigits(static_cast<uint32_t>(v % k1e8)));
    return p + 8;
  }
  p = WriteUpTo8Digits(p, static_cast<uint32_t>(v / k1e16));
  const uint64_t rest = v % k1e16;
  StoreDigits(p, EightDigits(static_cast<uint32_t>(rest / k1e8)));
  StoreDigits(p + 8, EightDigits(static_cast<uint32_t>(rest % k1e8)));
  return p + 16;
}

[[gnu::always_inline]] inline char* WriteSignedInline(char* p, int64_t v) {
  if (v < 0) {
    *p++ = '-';
    return WriteUnsignedInline(p, uint64_t{0} - static_cast<uint64_t>(v));
  }
  return WriteUnsignedInline(p, static_cast<uint64_t>(v));
}

// The number of decimal digits of v >= 1: from its bit length (log10(2) ~ 1233 / 4096),
// one less if below the power of ten that length suggests.
inline int DecimalDigits(uint64_t v) {
  static constexpr uint64_t kPow10[20] = {1ULL,
                                          10ULL,
                                          100ULL,
                                          1'000ULL,
                                          10'000ULL,
                                          100'000ULL,
                                          1'000'000ULL,
                                          10'000'000ULL,
                                          100'000'000ULL,
                                          1'000'000'000ULL,
                                          10'000'000'000ULL,
                                          100'000'000'000ULL,
                                          1'000'000'000'000ULL,
                                          10'000'000'000'000ULL,
                                          100'000'000'000'000ULL,
                                          1'000'000'000'000'000ULL,
                                          10'000'000'000'000'000ULL,
                                          100'000'000'000'000'000ULL,
                                          1'000'000'000'000'000'000ULL,
                                          10'000'000'000'000'000'000ULL};
  const int t = ((64 - std::countl_zero(v)) * 1233) >> 12;
  return t + 1 - (v < kPow10[t] ? 1 : 0);
}

}  // namespace

char* WriteUnsigned(char* p, uint64_t v) { return WriteUnsignedInline(p, v); }

char* WriteSigned(char* p, int64_t v) { return WriteSignedInline(p, v); }

char* WriteShortestDouble(char* p, double v) {
  if (std::signbit(v)) *p++ = '-';
  if (v == 0) {
    *p++ = '0';
    return p;
  }
  // v = significand * 10^exponent, with the fewest digits that read back as v.
  auto dec = fmt::detail::dragonbox::to_decimal(std::fabs(v));
  uint64_t significand = dec.significand;
  int exponent = dec.exponent;
  while (significand % 10 == 0) {
    significand /= 10;
    ++exponent;
  }
  const int n = DecimalDigits(significand);  // at most 17
  const int sci_exponent = exponent + n - 1;
  const int abs_sci = std::abs(sci_exponent);
  const int sci_len = n + (n > 1 ? 1 : 0) + 2 + (abs_sci >= 100 ? 3 : 2);
  const int fixed_len = exponent >= 0 ? n + exponent : (n + exponent > 0 ? n + 1 : 2 - exponent);
  // The digits are written where they end up, or one byte further, from where the leading
  // ones move back one byte at a time (a byte read from a just-written 8-byte store is
  // forwarded from it; a longer read straddling several stores waits for them).
  if (fixed_len <= sci_len) {
    if (exponent >= 0) {
      // An integer: to_chars writes its exact value (123456789012345683968, not ...680000),
      // which has as many digits. Fixed is shorter only below 10^22, within 128 bits.
      const double magnitude = std::fabs(v);
      if (magnitude < 18446744073709551616.0) {  // 2^64
        return WriteUnsignedInline(p, static_cast<uint64_t>(magnitude));
      }
      return std::to_chars(p, p + 32, static_cast<unsigned __int128>(magnitude)).ptr;
    }
    const int int_digits = n + exponent;
    if (int_digits > 0) {  // ddd.ddd
      WriteUnsignedInline(p + 1, significand);
      if (int_digits < 8 && std::endian::native == std::endian::little) {
        // The first 8 digits, read back from the one store that wrote them, and put back
        // one byte earlier up to the point; the point; after it they stay where they are.
        uint64_t head;
        std::memcpy(&head, p + 1, 8);
        const uint64_t before = (uint64_t{1} << (8 * int_digits)) - 1;
        const uint64_t after = ~before << 8;
        const uint64_t text =
            (head & before) | (uint64_t{'.'} << (8 * int_digits)) | ((head << 8) & after);
        std::memcpy(p, &text, 8);
      } else {
        std::memmove(p, p + 1, static_cast<size_t>(int_digits));
        p[int_digits] = '.';
      }
      return p + n + 1;
    }
    // 0.000ddd: fixed is no longer than scientific only with at most 3 zeros after the point.
    std::memcpy(p, "0.000000", 8);
    return WriteUnsignedInline(p + 2 - int_digits, significand);
  }
  if (n == 1) {
    *p++ = static_cast<char>('0' + significand);
  } else {  // d.ddd
    WriteUnsignedInline(p + 1, significand);
    p[0] = p[1];
    p[1] = '.';
    p += n + 1;
  }
  *p++ = 'e';
  *p++ = sci_exponent < 0 ? '-' : '+';
  if (abs_sci >= 100) *p++ = static_cast<char>('0' + abs_sci / 100);
  *p++ = static_cast<char>('0' + abs_sci / 10 % 10);
  *p++ = static_cast<char>('0' + abs_sci % 10);
  return p;
}

MetricPointJsonWriter::MetricPointJsonWriter(std::string_view key_json) {
  prefix_ = ",{\"key\":";
  prefix_ += key_json;
  prefix_ += ",\"value\":";
  prefix_len_ = prefix_.size();
  // Copied 16 bytes at a time, the last copy reading (and writing) past the end.
  prefix_.resize((prefix_len_ + 15) / 16 * 16);
}

void MetricPointJsonWriter::Append(JsonTextBuffer& out, double value, int64_t timestamp,
                                   int64_t step, bool comma) const {
  // Written in place: the metric-history hot path formats millions of these.
  static constexpr std::string_view kTimestamp = ",\"timestamp\":", kStep = ",\"step\":";
  // The prefix (rounded up to 16 bytes), then at most 24 bytes of value with 40 of room,
  // 22 of names and 2 x 21 of integers: within 128.
  char* const start = out.Ensure(prefix_.size() + 128);
  const char* prefix = prefix_.data();
  for (size_t i = 0; i < prefix_len_; i += 16) std::memcpy(start + i, prefix + i, 16);
  char* p = start + prefix_len_;
  if (!comma) {  // the prefix without its leading comma
    std::memmove(start, start + 1, prefix_len_ - 1);
    --p;
  }
  if (std::isfinite(value)) {
    p = WriteShortestDouble(p, value);
  } else {
    const std::string_view text = std::isnan(value) ? "\"NaN\""
                                  : value > 0       ? "\"Infinity\""
                                                    : "\"-Infinity\"";
    std::memcpy(p, text.data(), text.size());
    p += text.size();
  }
  std::memcpy(p, kTimestamp.data(), kTimestamp.size());
  p = WriteSignedInline(p + kTimestamp.size(), timestamp);
  std::memcpy(p, kStep.data(), kStep.size());
  p = WriteSignedInline(p + kStep.size(), step);
  *p++ = '}';
  out.Advance(p);
}

Result<std::vector<tracking::KeyValue>> KeyValuesFromJson(const json::object& o,
                                                          std::string_view field) {
  std::vector<tracking::KeyValue> out;
  TY_ASSIGN_OR_RETURN(const json::array* arr, OptionalArray(o, field));
  if (!arr) return out;
  out.reserve(arr->size());
  for (size_t i = 0; i < arr->size(); ++i) {
    std::string where = std::string(field) + "[" + std::to_string(i) + "]";
    if (!(*arr)[i].is_object()) {
      return Status::InvalidArgument(where + " must be an object with key and value");
    }
    const auto& item = (*arr)[i].as_object();
    auto key = RequiredString(item, "key");
    if (!key.ok()) return key.status().WithContext(where);
    auto value = OptionalString(item, "value");
    if (!value.ok()) return value.status().WithContext(where);
    out.push_back({std::move(*key), value->value_or("")});
  }
  return out;
}

}  // namespace trainyard::api
