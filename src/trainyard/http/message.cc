#include "trainyard/http/message.h"

#include "trainyard/common/strings.h"

namespace trainyard::http {

std::string_view MethodName(Method m) {
  switch (m) {
    case Method::kGet:
      return "GET";
    case Method::kPost:
      return "POST";
    case Method::kPut:
      return "PUT";
    case Method::kPatch:
      return "PATCH";
    case Method::kDelete:
      return "DELETE";
    case Method::kHead:
      return "HEAD";
    case Method::kOptions:
      return "OPTIONS";
    case Method::kOther:
      return "OTHER";
  }
  return "OTHER";
}

Method ParseMethod(std::string_view name) {
  if (name == "GET") return Method::kGet;
  if (name == "POST") return Method::kPost;
  if (name == "PUT") return Method::kPut;
  if (name == "PATCH") return Method::kPatch;
  if (name == "DELETE") return Method::kDelete;
  if (name == "HEAD") return Method::kHead;
  if (name == "OPTIONS") return Method::kOptions;
  return Method::kOther;
}

std::optional<std::string> Request::Query(std::string_view name) const {
  auto it = query.find(std::string(name));
  if (it == query.end() || it->second.empty()) return std::nullopt;
  return it->second.front();
}

std::string Request::Header(std::string_view lower_name) const {
  auto it = headers.find(std::string(lower_name));
  return it == headers.end() ? std::string() : it->second;
}

Response Response::Json(int status, std::string body) {
  Response r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

Response Response::Text(int status, std::string body) {
  Response r;
  r.status = status;
  r.content_type = "text/plain; charset=utf-8";
  r.body = std::move(body);
  return r;
}

std::unordered_map<std::string, std::vector<std::string>> ParseQueryString(std::string_view q) {
  std::unordered_map<std::string, std::vector<std::string>> out;
  if (q.empty()) return out;
  for (const std::string& part : SplitString(q, '&')) {
    if (part.empty()) continue;
    size_t eq = part.find('=');
    std::string_view raw_name = std::string_view(part).substr(0, eq);
    std::string_view raw_value =
        eq == std::string::npos ? std::string_view() : std::string_view(part).substr(eq + 1);
    std::string name = UrlDecode(raw_name, true).value_or(std::string(raw_name));
    std::string value = UrlDecode(raw_value, true).value_or(std::string(raw_value));
    out[name].push_back(std::move(value));
  }
  return out;
}

}  // namespace trainyard::http
