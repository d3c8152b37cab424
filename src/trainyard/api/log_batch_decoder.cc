#include "trainyard/api/log_batch_decoder.h"

#include <boost/json/basic_parser_impl.hpp>
#include <charconv>
#include <cmath>
#include <limits>

#include "trainyard/api/mlflow_json.h"
#include "trainyard/common/strings.h"

namespace trainyard::api {
namespace {

// A scalar as the SAX parser reports it.
struct Scalar {
  enum class Kind { kNull, kBool, kInt64, kUint64, kDouble, kString };
  explicit Scalar(Kind k) : kind(k) {}
  Kind kind;
  int64_t i = 0;
  uint64_t u = 0;
  double d = 0;
  std::string_view s;
};

// The conversions of AsDouble / AsInt64 (common/json.h) for the values they accept;
// nullopt where those would give an error.
std::optional<double> ScalarDouble(const Scalar& v) {
  switch (v.kind) {
    case Scalar::Kind::kDouble:
      return v.d;
    case Scalar::Kind::kInt64:
      return static_cast<double>(v.i);
    case Scalar::Kind::kUint64:
      return static_cast<double>(v.u);
    case Scalar::Kind::kString:
      return ParseDouble(v.s);
    default:
      return std::nullopt;
  }
}

std::optional<int64_t> ScalarInt64(const Scalar& v) {
  switch (v.kind) {
    case Scalar::Kind::kInt64:
      return v.i;
    case Scalar::Kind::kUint64:
      if (v.u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
      return static_cast<int64_t>(v.u);
    case Scalar::Kind::kDouble:
      if (std::isfinite(v.d) && v.d == std::floor(v.d) && std::fabs(v.d) < 9.2e18) {
        return static_cast<int64_t>(v.d);
      }
      return std::nullopt;
    case Scalar::Kind::kString:
      return ParseInt64(v.s);
    default:
      return std::nullopt;
  }
}

// Builds a LogBatchRequest from parser events. Any event it does not expect sets
// `bail` and stops the parser: the DOM path then decides (and words the error).
// Unknown fields are skipped, as the DOM path ignores them.
class FastHandler {
 public:
  static constexpr std::size_t max_object_size = std::size_t(-1);
  static constexpr std::size_t max_array_size = std::size_t(-1);
  static constexpr std::size_t max_key_size = std::size_t(-1);
  static constexpr std::size_t max_string_size = std::size_t(-1);

  LogBatchRequest request;
  std::string run_id, run_uuid;
  bool bail = false;

  bool on_document_begin(boost::system::error_code&) { return true; }
  bool on_document_end(boost::system::error_code&) { return true; }
  bool on_comment_part(json::string_view, boost::system::error_code&) { return true; }
  bool on_comment(json::string_view, boost::system::error_code&) { return true; }

  bool on_object_begin(boost::system::error_code&) {
    if (skip_ > 0) return ++skip_, true;
    switch (depth_) {
      case 0:  // the body
        depth_ = 1;
        return true;
      case 2:  // an element of metrics/params/tags
        depth_ = 3;
        item_seen_ = 0;
        metric_ = tracking::Metric();
        kv_ = tracking::KeyValue();
        return true;
      default:  // an object as the value of a field
        return SkipOrBail();
    }
  }

  bool on_object_end(std::size_t, boost::system::error_code&) {
    if (skip_ > 0) return --skip_, true;
    if (depth_ == 3) {
      depth_ = 2;
      return FinishItem();
    }
    depth_ = 0;
    return true;
  }

  bool on_array_begin(boost::system::error_code&) {
    if (skip_ > 0) return ++skip_, true;
    if (depth_ == 1 && (top_ == Top::kMetrics || top_ == Top::kParams || top_ == Top::kTags)) {
      depth_ = 2;
      return true;
    }
    return SkipOrBail();
  }

  bool on_array_end(std::size_t, boost::system::error_code&) {
    if (skip_ > 0) return --skip_, true;
    depth_ = 1;
    return true;
  }

  bool on_key_part(json::string_view s, std::size_t, boost::system::error_code&) {
    if (skip_ == 0) text_.append(s.data(), s.size());
    return true;
  }

  bool on_key(json::string_view s, std::size_t, boost::system::error_code&) {
    if (skip_ > 0) return true;
    std::string_view key = Text(s);
    bool ok = depth_ == 1 ? TopKey(key) : ItemKey(key);
    text_.clear();
    return ok;
  }

  bool on_string_part(json::string_view s, std::size_t, boost::system::error_code&) {
    if (skip_ == 0) text_.append(s.data(), s.size());
    return true;
  }

  bool on_string(json::string_view s, std::size_t, boost::system::error_code&) {
    if (skip_ > 0) return true;
    Scalar v{Scalar::Kind::kString};
    v.s = Text(s);
    bool ok = OnScalar(v);
    text_.clear();
    return ok;
  }

  bool on_number_part(json::string_view s, boost::system::error_code&) {
    if (skip_ == 0) text_.append(s.data(), s.size());
    return true;
  }

  bool on_int64(int64_t i, json::string_view, boost::system::error_code&) {
    text_.clear();
    Scalar v{Scalar::Kind::kInt64};
    v.i = i;
    return skip_ > 0 || OnScalar(v);
  }

  bool on_uint64(uint64_t u, json::string_view, boost::system::error_code&) {
    text_.clear();
    Scalar v{Scalar::Kind::kUint64};
    v.u = u;
    return skip_ > 0 || OnScalar(v);
  }

  bool on_double(double d, json::string_view s, boost::system::error_code&) {
    if (skip_ > 0) return text_.clear(), true;
    // As ParseJsonExact: correctly rounded from the text (Boost's own can be off by one ulp).
    text_.append(s.data(), s.size());
    double exact = d;
    auto [ptr, ec] = std::from_chars(text_.data(), text_.data() + text_.size(), exact);
    if (ec != std::errc()) exact = d;
    text_.clear();
    Scalar v{Scalar::Kind::kDouble};
    v.d = exact;
    return OnScalar(v);
  }

  bool on_bool(bool, boost::system::error_code&) {
    return skip_ > 0 || OnScalar(Scalar{Scalar::Kind::kBool});
  }

  bool on_null(boost::system::error_code&) {
    return skip_ > 0 || OnScalar(Scalar{Scalar::Kind::kNull});
  }

 private:
  enum class Top { kRunId, kRunUuid, kMetrics, kParams, kTags, kUnknown };
  enum class Field {
    kKey,
    kValue,
    kTimestamp,
    kStep,
    kModelId,
    kDatasetName,
    kDatasetDigest,
    kUnknown
  };

  bool Bail() {
    bail = true;
    return false;
  }

  // A container where a scalar or an array of items was expected: skipped under an
  // unknown field, else not ours to decide.
  bool SkipOrBail() {
    bool unknown =
        (depth_ == 1 && top_ == Top::kUnknown) || (depth_ == 3 && field_ == Field::kUnknown);
    if (!unknown) return Bail();
    skip_ = 1;
    return true;
  }

  std::string_view Text(json::string_view last) {
    if (text_.empty()) return std::string_view(last.data(), last.size());
    text_.append(last.data(), last.size());
    return text_;
  }

  bool TopKey(std::string_view key) {
    static constexpr std::pair<std::string_view, Top> kTop[] = {{"run_id", Top::kRunId},
                                                                {"run_uuid", Top::kRunUuid},
                                                                {"metrics", Top::kMetrics},
                                                                {"params", Top::kParams},
                                                                {"tags", Top::kTags}};
    top_ = Top::kUnknown;
    for (const auto& [name, top] : kTop) {
      if (key == name) top_ = top;
    }
    if (top_ == Top::kUnknown) return true;
    unsigned bit = 1u << static_cast<unsigned>(top_);
    if (top_seen_ & bit) return Bail();  // a duplicate key: the DOM path decides
    top_seen_ |= bit;
    return true;
  }

  bool ItemKey(std::string_view key) {
    static constexpr std::pair<std::string_view, Field> kMetricFields[] = {
        {"key", Field::kKey},
        {"value", Field::kValue},
        {"timestamp", Field::kTimestamp},
        {"step", Field::kStep},
        {"model_id", Field::kModelId},
        {"dataset_name", Field::kDatasetName},
        {"dataset_digest", Field::kDatasetDigest}};
    field_ = Field::kUnknown;
    // params and tags items have only key and value.
    size_t known = top_ == Top::kMetrics ? std::size(kMetricFields) : 2;
    for (size_t i = 0; i < known; ++i) {
      if (key == kMetricFields[i].first) field_ = kMetricFields[i].second;
    }
    if (field_ == Field::kUnknown) return true;
    unsigned bit = 1u << static_cast<unsigned>(field_);
    if (item_seen_ & bit) return Bail();
    item_seen_ |= bit;
    return true;
  }

  bool OnScalar(const Scalar& v) {
    bool is_null = v.kind == Scalar::Kind::kNull;
    bool is_string = v.kind == Scalar::Kind::kString;
    if (depth_ == 1) {
      switch (top_) {
        case Top::kRunId:
        case Top::kRunUuid:
          if (is_null) return true;
          if (!is_string) return Bail();
          (top_ == Top::kRunId ? run_id : run_uuid) = std::string(v.s);
          return true;
        case Top::kUnknown:
          return true;
        default:  // metrics/params/tags: null is absent, another scalar an error
          return is_null || Bail();
      }
    }
    if (depth_ != 3) return Bail();  // the body, or an element of an array, is not an object
    if (field_ == Field::kUnknown) return true;
    if (top_ != Top::kMetrics) {
      if (field_ == Field::kKey) {
        if (!is_string) return Bail();
        kv_.key = std::string(v.s);
      } else if (is_string) {
        kv_.value = std::string(v.s);
      } else if (!is_null) {
        return Bail();
      }
      return true;
    }
    switch (field_) {
      case Field::kKey:
        if (!is_string) return Bail();
        metric_.key = std::string(v.s);
        return true;
      case Field::kValue: {
        std::optional<double> d = ScalarDouble(v);
        if (!d) return Bail();
        metric_.value = *d;
        return true;
      }
      case Field::kTimestamp:
      case Field::kStep: {
        if (is_null && field_ == Field::kStep) return true;  // an absent step is 0
        std::optional<int64_t> i = ScalarInt64(v);
        if (!i) return Bail();
        (field_ == Field::kTimestamp ? metric_.timestamp : metric_.step) = *i;
        return true;
      }
      case Field::kModelId:
      case Field::kDatasetName:
      case Field::kDatasetDigest: {
        if (is_null) return true;
        if (!is_string) return Bail();
        std::string& target = field_ == Field::kModelId       ? metric_.model_id
                              : field_ == Field::kDatasetName ? metric_.dataset_name
                                                              : metric_.dataset_digest;
        target = std::string(v.s);
        return true;
      }
      default:
        return true;
    }
  }

  bool FinishItem() {
    auto has = [&](Field f) { return (item_seen_ >> static_cast<unsigned>(f)) & 1u; };
    if (!has(Field::kKey)) return Bail();
    if (top_ == Top::kMetrics) {
      if (!has(Field::kValue) || !has(Field::kTimestamp)) return Bail();
      request.metrics.push_back(std::move(metric_));
    } else {
      (top_ == Top::kParams ? request.params : request.tags).push_back(std::move(kv_));
    }
    return true;
  }

  int depth_ = 0;  // 1: in the body, 2: in an array of items, 3: in an item
  int skip_ = 0;   // nesting inside a skipped value of an unknown field
  Top top_ = Top::kUnknown;
  Field field_ = Field::kUnknown;
  unsigned top_seen_ = 0;
  unsigned item_seen_ = 0;
  std::string text_;  // parts of the current key, string or number
  tracking::Metric metric_;
  tracking::KeyValue kv_;
};

}  // namespace

Result<std::string> RunIdField(const json::object& o) {
  TY_ASSIGN_OR_RETURN(auto id, OptionalString(o, "run_id"));
  if (!id || id->empty()) {
    TY_ASSIGN_OR_RETURN(id, OptionalString(o, "run_uuid"));
  }
  if (!id || id->empty()) return Status::InvalidArgument("missing required field 'run_id'");
  return std::move(*id);
}

Result<tracking::Metric> MetricFromJson(const json::object& o, std::string_view where) {
  tracking::Metric m;
  auto key = RequiredString(o, "key");
  if (!key.ok()) return key.status().WithContext(where);
  m.key = std::move(*key);
  auto value = RequiredDouble(o, "value");
  if (!value.ok()) return value.status().WithContext(where);
  m.value = *value;
  auto ts = RequiredInt64(o, "timestamp");
  if (!ts.ok()) return ts.status().WithContext(where);
  m.timestamp = *ts;
  auto step = OptionalInt64(o, "step");
  if (!step.ok()) return step.status().WithContext(where);
  m.step = step->value_or(0);
  for (auto [field, target] :
       {std::pair{"model_id", &m.model_id}, std::pair{"dataset_name", &m.dataset_name},
        std::pair{"dataset_digest", &m.dataset_digest}}) {
    auto s = OptionalString(o, field);
    if (!s.ok()) return s.status().WithContext(where);
    *target = s->value_or("");
  }
  return m;
}

Result<LogBatchRequest> DecodeLogBatch(const json::object& body) {
  LogBatchRequest r;
  TY_ASSIGN_OR_RETURN(r.run_id, RunIdField(body));
  TY_ASSIGN_OR_RETURN(const json::array* arr, OptionalArray(body, "metrics"));
  if (arr) {
    r.metrics.reserve(arr->size());
    for (size_t i = 0; i < arr->size(); ++i) {
      std::string where = "metrics[" + std::to_string(i) + "]";
      if (!(*arr)[i].is_object()) {
        return Status::InvalidArgument(where + " must be an object");
      }
      TY_ASSIGN_OR_RETURN(auto m, MetricFromJson((*arr)[i].as_object(), where));
      r.metrics.push_back(std::move(m));
    }
  }
  TY_ASSIGN_OR_RETURN(r.params, KeyValuesFromJson(body, "params"));
  TY_ASSIGN_OR_RETURN(r.tags, KeyValuesFromJson(body, "tags"));
  return r;
}

std::optional<LogBatchRequest> DecodeLogBatchFast(std::string_view body) {
  json::basic_parser<FastHandler> parser{json::parse_options{}};
  FastHandler& h = parser.handler();
  // A batch has at most 1000 metrics; a body a little over that is still one allocation.
  h.request.metrics.reserve(std::min<size_t>(body.size() / 40 + 1, 1024));
  boost::system::error_code ec;
  size_t n = parser.write_some(false, body.data(), body.size(), ec);
  if (h.bail || ec || n != body.size() || !parser.done()) return std::nullopt;
  h.request.run_id = !h.run_id.empty() ? std::move(h.run_id) : std::move(h.run_uuid);
  if (h.request.run_id.empty()) return std::nullopt;
  return std::move(h.request);
}

}  // namespace trainyard::api
