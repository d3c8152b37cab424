// The `json` namespace alias (Boost.JSON) and declarations of its types, for headers that only
// name json::value, json::object or json::array in declarations (parameters and results by
// reference or inside Result<>). Users that build, read or copy JSON values include
// common/json.h, which brings all of <boost/json.hpp> (about 80,000 preprocessed lines, against
// about 3,000 here).
#pragma once

#include <boost/json/fwd.hpp>

namespace trainyard {

namespace json = boost::json;

}  // namespace trainyard
