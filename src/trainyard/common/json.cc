#include "trainyard/common/json.h"

#include <boost/json/basic_parser_impl.hpp>
#include <charconv>
#include <cmath>
#include <limits>

#include "trainyard/common/strings.h"

namespace trainyard {

namespace {

// Builds a json::value like json::parse, except that doubles are converted from their
// source text with std::from_chars (correctly rounded): Boost 1.81's own conversion can
// be off by one unit in the last place, which would change logged metric values.
class ExactParseHandler {
 public:
  static constexpr std::size_t max_object_size = std::size_t(-1);
  static constexpr std::size_t max_array_size = std::size_t(-1);
  static constexpr std::size_t max_key_size = std::size_t(-1);
  static constexpr std::size_t max_string_size = std::size_t(-1);

  json::value_stack st;
  std::string number;

  bool on_document_begin(boost::system::error_code&) { return true; }
  bool on_document_end(boost::system::error_code&) { return true; }
  bool on_object_begin(boost::system::error_code&) { return true; }
  bool on_object_end(std::size_t n, boost::system::error_code&) {
    st.push_object(n);
    return true;
  }
  bool on_array_begin(boost::system::error_code&) { return true; }
  bool on_array_end(std::size_t n, boost::system::error_code&) {
    st.push_array(n);
    return true;
  }
  bool on_key_part(json::string_view s, std::size_t, boost::system::error_code&) {
    st.push_chars(s);
    return true;
  }
  bool on_key(json::string_view s, std::size_t, boost::system::error_code&) {
    st.push_key(s);
    return true;
  }
  bool on_string_part(json::string_view s, std::size_t, boost::system::error_code&) {
    st.push_chars(s);
    return true;
  }
  bool on_string(json::string_view s, std::size_t, boost::system::error_code&) {
    st.push_string(s);
    return true;
  }
  bool on_number_part(json::string_view s, boost::system::error_code&) {
    number.append(s.data(), s.size());
    return true;
  }
  bool on_int64(int64_t i, json::string_view, boost::system::error_code&) {
    number.clear();
    st.push_int64(i);
    return true;
  }
  bool on_uint64(uint64_t u, json::string_view, boost::system::error_code&) {
    number.clear();
    st.push_uint64(u);
    return true;
  }
  bool on_double(double d, json::string_view s, boost::system::error_code&) {
    number.append(s.data(), s.size());
    double exact = d;
    auto [ptr, ec] = std::from_chars(number.data(), number.data() + number.size(), exact);
    if (ec != std::errc() && ec != std::errc::result_out_of_range) exact = d;
    if (ec == std::errc::result_out_of_range) exact = d;  // Boost's ±inf / 0 for out of range
    number.clear();
    st.push_double(exact);
    return true;
  }
  bool on_bool(bool b, boost::system::error_code&) {
    st.push_bool(b);
    return true;
  }
  bool on_null(boost::system::error_code&) {
    st.push_null();
    return true;
  }
  bool on_comment_part(json::string_view, boost::system::error_code&) { return true; }
  bool on_comment(json::string_view, boost::system::error_code&) { return true; }
};

}  // namespace

Result<json::value> ParseJsonExact(std::string_view text) {
  json::basic_parser<ExactParseHandler> parser{json::parse_options{}};
  parser.handler().st.reset();
  boost::system::error_code ec;
  size_t n = parser.write_some(false, text.data(), text.size(), ec);
  if (!ec && n < text.size()) ec = json::error::extra_data;
  if (ec) return Status::InvalidArgument("request body is not valid JSON: " + ec.message());
  return parser.handler().st.release();
}

Result<json::object> ParseJsonObject(std::string_view text) {
  if (Trim(text).empty()) return json::object();
  auto parsed = ParseJsonExact(text);
  if (!parsed.ok()) return parsed.status();
  json::value v = std::move(parsed).value();
  if (!v.is_object()) {
    return Status::InvalidArgument("request body must be a JSON object (got " + DescribeJson(v) +
                                   ")");
  }
  return std::move(v.as_object());
}

std::string DescribeJson(const json::value& v) { return Abbreviate(json::serialize(v), 60); }

Result<std::string> AsString(const json::value& v, std::string_view what) {
  if (v.is_string()) return std::string(v.as_string());
  return Status::InvalidArgument(std::string(what) + " must be a string (got " + DescribeJson(v) +
                                 ")");
}

Result<int64_t> AsInt64(const json::value& v, std::string_view what) {
  if (v.is_int64()) return v.as_int64();
  if (v.is_uint64()) {
    if (v.as_uint64() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Status::InvalidArgument(std::string(what) + " is out of range (got " +
                                     DescribeJson(v) + ")");
    }
    return static_cast<int64_t>(v.as_uint64());
  }
  if (v.is_double()) {
    double d = v.as_double();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.2e18) {
      return static_cast<int64_t>(d);
    }
  }
  if (v.is_string()) {
    if (auto parsed = ParseInt64(v.as_string())) return *parsed;
  }
  return Status::InvalidArgument(std::string(what) + " must be an integer (got " + DescribeJson(v) +
                                 ")");
}

Result<double> AsDouble(const json::value& v, std::string_view what) {
  if (v.is_double()) return v.as_double();
  if (v.is_int64()) return static_cast<double>(v.as_int64());
  if (v.is_uint64()) return static_cast<double>(v.as_uint64());
  if (v.is_string()) {
    if (auto parsed = ParseDouble(v.as_string())) return *parsed;
  }
  return Status::InvalidArgument(std::string(what) + " must be a number (got " + DescribeJson(v) +
                                 ")");
}

Result<std::optional<std::string>> OptionalString(const json::object& o, std::string_view field) {
  auto it = o.find(field);
  if (it == o.end() || it->value().is_null()) return std::optional<std::string>();
  TY_ASSIGN_OR_RETURN(std::string s, AsString(it->value(), field));
  return std::optional<std::string>(std::move(s));
}

Result<std::string> RequiredString(const json::object& o, std::string_view field) {
  TY_ASSIGN_OR_RETURN(auto s, OptionalString(o, field));
  if (!s) return Status::InvalidArgument("missing required field '" + std::string(field) + "'");
  return std::move(*s);
}

Result<std::optional<int64_t>> OptionalInt64(const json::object& o, std::string_view field) {
  auto it = o.find(field);
  if (it == o.end() || it->value().is_null()) return std::optional<int64_t>();
  TY_ASSIGN_OR_RETURN(int64_t v, AsInt64(it->value(), field));
  return std::optional<int64_t>(v);
}

Result<int64_t> RequiredInt64(const json::object& o, std::string_view field) {
  TY_ASSIGN_OR_RETURN(auto v, OptionalInt64(o, field));
  if (!v) return Status::InvalidArgument("missing required field '" + std::string(field) + "'");
  return *v;
}

Result<std::optional<double>> OptionalDouble(const json::object& o, std::string_view field) {
  auto it = o.find(field);
  if (it == o.end() || it->value().is_null()) return std::optional<double>();
  TY_ASSIGN_OR_RETURN(double v, AsDouble(it->value(), field));
  return std::optional<double>(v);
}

Result<double> RequiredDouble(const json::object& o, std::string_view field) {
  TY_ASSIGN_OR_RETURN(auto v, OptionalDouble(o, field));
  if (!v) return Status::InvalidArgument("missing required field '" + std::string(field) + "'");
  return *v;
}

Result<std::optional<bool>> OptionalBool(const json::object& o, std::string_view field) {
  auto it = o.find(field);
  if (it == o.end() || it->value().is_null()) return std::optional<bool>();
  if (it->value().is_bool()) return std::optional<bool>(it->value().as_bool());
  if (it->value().is_string()) {
    std::string s = ToLower(it->value().as_string());
    if (s == "true") return std::optional<bool>(true);
    if (s == "false") return std::optional<bool>(false);
  }
  return Status::InvalidArgument(std::string(field) + " must be a boolean (got " +
                                 DescribeJson(it->value()) + ")");
}

Result<const json::array*> OptionalArray(const json::object& o, std::string_view field) {
  auto it = o.find(field);
  if (it == o.end() || it->value().is_null()) return static_cast<const json::array*>(nullptr);
  if (!it->value().is_array()) {
    return Status::InvalidArgument(std::string(field) + " must be an array (got " +
                                   DescribeJson(it->value()) + ")");
  }
  return &it->value().as_array();
}

Result<const json::object*> OptionalObject(const json::object& o, std::string_view field) {
  auto it = o.find(field);
  if (it == o.end() || it->value().is_null()) return static_cast<const json::object*>(nullptr);
  if (!it->value().is_object()) {
    return Status::InvalidArgument(std::string(field) + " must be an object (got " +
                                   DescribeJson(it->value()) + ")");
  }
  return &it->value().as_object();
}

json::value DoubleToJson(double v) {
  if (std::isnan(v)) return json::value("NaN");
  if (std::isinf(v)) return json::value(v > 0 ? "Infinity" : "-Infinity");
  return json::value(v);
}

}  // namespace trainyard
