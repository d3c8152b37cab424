// JSON helpers over Boost.JSON for request decoding: typed field access that
// produces errors naming the field ("run_id must be a string (got 12)").
#pragma once

#include <boost/json.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "trainyard/common/status.h"

namespace trainyard {

namespace json = boost::json;

// Parses JSON like json::parse, with doubles correctly rounded from their text.
Result<json::value> ParseJsonExact(std::string_view text);

// Parses `text` into an object; a clear InvalidArgument error when it is not JSON
// or not an object. An empty body is an empty object.
Result<json::object> ParseJsonObject(std::string_view text);

// Field readers. `Optional*` return nullopt when the field is absent or null, and an
// InvalidArgument error when it has the wrong type. `Required*` also reject absence.
// Numbers may be given as JSON strings ("12"), as proto3 JSON encodes 64-bit ints.
Result<std::optional<std::string>> OptionalString(const json::object& o, std::string_view field);
Result<std::string> RequiredString(const json::object& o, std::string_view field);
Result<std::optional<int64_t>> OptionalInt64(const json::object& o, std::string_view field);
Result<int64_t> RequiredInt64(const json::object& o, std::string_view field);
Result<std::optional<double>> OptionalDouble(const json::object& o, std::string_view field);
Result<double> RequiredDouble(const json::object& o, std::string_view field);
Result<std::optional<bool>> OptionalBool(const json::object& o, std::string_view field);
// nullptr when absent; an error when present but not an array/object.
Result<const json::array*> OptionalArray(const json::object& o, std::string_view field);
Result<const json::object*> OptionalObject(const json::object& o, std::string_view field);

// A JSON value's text for error messages, shortened.
std::string DescribeJson(const json::value& v);

// Conversions of a JSON value already extracted (e.g. an array element).
Result<std::string> AsString(const json::value& v, std::string_view what);
Result<int64_t> AsInt64(const json::value& v, std::string_view what);
Result<double> AsDouble(const json::value& v, std::string_view what);

// Doubles that JSON cannot carry (NaN, ±Infinity) are written the way MLflow does: as
// the strings "NaN", "Infinity", "-Infinity".
json::value DoubleToJson(double v);

}  // namespace trainyard
