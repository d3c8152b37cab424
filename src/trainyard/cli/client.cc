#include "trainyard/cli/client.h"

#include <cstdlib>
#include <fstream>
#include <iostream>

#include "trainyard/common/strings.h"

namespace trainyard::cli {

std::string DefaultDataDir() {
  if (const char* d = std::getenv("TRAINYARD_DATA_DIR"); d && *d) return d;
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.trainyard";
  return ".trainyard";
}

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

Client::Client(const ClientOptions& o) : options_(o) {
  token_ = o.token;
  if (token_.empty()) {
    std::ifstream in(o.data_dir + "/admin.token");
    std::getline(in, token_);
    token_ = Trim(token_);
  }
}

std::string Client::Url(const std::string& path, const json::object& query) const {
  std::string q;
  for (const auto& field : query) {
    const std::string key(field.key());
    const json::value& v = field.value();
    auto add = [&](const std::string& value) {
      q += (q.empty() ? "?" : "&") + key + "=" + UrlEncode(value);
    };
    if (v.is_array()) {
      for (const auto& item : v.as_array()) {
        add(item.is_string() ? std::string(item.as_string()) : json::serialize(item));
      }
    } else {
      add(v.is_string() ? std::string(v.as_string()) : json::serialize(v));
    }
  }
  return options_.url + path + q;
}

Result<http::ClientResponse> Client::Send(const std::string& method, const std::string& url,
                                          const std::string& payload) {
  std::map<std::string, std::string> headers;
  if (!token_.empty()) headers["Authorization"] = "Bearer " + token_;
  TY_ASSIGN_OR_RETURN(auto response, http::Fetch(method, url, headers, payload));
  if (response.status >= 400) {
    boost::system::error_code ec;
    json::value parsed = json::parse(response.body, ec);
    std::string message = response.body;
    if (!ec && parsed.is_object() && parsed.as_object().contains("message")) {
      message = std::string(parsed.as_object().at("message").as_string());
    }
    if (response.status == 401) {
      message +=
          "\n  (set TRAINYARD_TOKEN, or --data-dir to the server's data directory "
          "holding admin.token)";
    }
    return Status(response.status == 404 ? StatusCode::kNotFound : StatusCode::kInvalidArgument,
                  "server answered " + std::to_string(response.status) + ": " + message);
  }
  return response;
}

Result<json::value> Client::Call(const std::string& method, const std::string& path,
                                 const json::object& body) {
  bool is_get = method == "GET";
  TY_ASSIGN_OR_RETURN(auto response, Send(method, is_get ? Url(path, body) : options_.url + path,
                                          is_get ? std::string() : json::serialize(body)));
  boost::system::error_code ec;
  json::value parsed = json::parse(response.body, ec);
  if (ec) return Status::Internal("server sent invalid JSON: " + Abbreviate(response.body));
  return parsed;
}

Result<http::ClientResponse> Client::GetRaw(const std::string& path, const json::object& query) {
  return Send("GET", Url(path, query), "");
}

Result<http::ClientResponse> Client::PostRaw(const std::string& path, const json::object& query,
                                             const std::string& payload) {
  return Send("POST", Url(path, query), payload);
}

int Fail(const Status& s) {
  std::cerr << "error: " << s.message() << "\n";
  return 1;
}

std::string Str(const json::value& o, std::string_view key) {
  if (!o.is_object()) return "";
  auto it = o.as_object().find(key);
  if (it == o.as_object().end()) return "";
  const json::value& v = it->value();
  if (v.is_string()) return std::string(v.as_string());
  if (v.is_null()) return "";
  return json::serialize(v);
}

int64_t Int(const json::value& o, std::string_view key) {
  return ParseInt64(Str(o, key)).value_or(0);
}

double Num(const json::value& o, std::string_view key) {
  if (!o.is_object()) return 0;
  auto it = o.as_object().find(key);
  if (it == o.as_object().end() || !it->value().is_number()) return 0;
  return it->value().to_number<double>();
}

const json::array& Arr(const json::value& o, std::string_view key) {
  static const json::array kEmpty;
  if (!o.is_object()) return kEmpty;
  auto it = o.as_object().find(key);
  if (it == o.as_object().end() || !it->value().is_array()) return kEmpty;
  return it->value().as_array();
}

std::string FormatNumber(const json::value& v) {
  if (v.is_double()) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.6g", v.as_double());
    return buf;
  }
  return v.is_string() ? std::string(v.as_string()) : json::serialize(v);
}

}  // namespace trainyard::cli
