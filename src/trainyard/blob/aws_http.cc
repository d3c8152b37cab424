#include "trainyard/blob/aws_http.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "trainyard/common/strings.h"

namespace trainyard::blob::aws {

namespace asio = boost::asio;
namespace ssl = boost::asio::ssl;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;

std::string XmlUnescape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '&') {
      out.push_back(s[i]);
      continue;
    }
    size_t semi = s.find(';', i);
    if (semi == std::string_view::npos) {
      out.push_back('&');
      continue;
    }
    std::string_view ent = s.substr(i + 1, semi - i - 1);
    if (ent == "amp") {
      out.push_back('&');
    } else if (ent == "lt") {
      out.push_back('<');
    } else if (ent == "gt") {
      out.push_back('>');
    } else if (ent == "quot") {
      out.push_back('"');
    } else if (ent == "apos") {
      out.push_back('\'');
    } else if (!ent.empty() && ent[0] == '#') {
      bool hex = ent.size() > 1 && (ent[1] == 'x' || ent[1] == 'X');
      unsigned long cp =
          std::strtoul(std::string(ent.substr(hex ? 2 : 1)).c_str(), nullptr, hex ? 16 : 10);
      // UTF-8 encode.
      if (cp < 0x80) {
        out.push_back(static_cast<char>(cp));
      } else if (cp < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
      } else if (cp < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
      } else {
        out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
      }
    } else {
      out.append(s.substr(i, semi - i + 1));
    }
    i = semi;
  }
  return out;
}

std::string XmlEscape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

// The raw inner text of every <tag>...</tag> (not nested in itself).
std::vector<std::string_view> XmlElements(std::string_view xml, std::string_view tag) {
  std::vector<std::string_view> out;
  std::string open = "<" + std::string(tag) + ">", close = "</" + std::string(tag) + ">";
  size_t pos = 0;
  while ((pos = xml.find(open, pos)) != std::string_view::npos) {
    size_t start = pos + open.size();
    size_t end = xml.find(close, start);
    if (end == std::string_view::npos) break;
    out.push_back(xml.substr(start, end - start));
    pos = end + close.size();
  }
  return out;
}

std::string XmlText(std::string_view xml, std::string_view tag) {
  auto all = XmlElements(xml, tag);
  return all.empty() ? std::string() : XmlUnescape(all.front());
}

Status ConfigureTls(boost::asio::ssl::context& ctx, const std::string& ca_file, bool verify) {
  boost::system::error_code ec;
  ctx.set_default_verify_paths(ec);
  Status status;
  if (!ca_file.empty()) {
    ctx.load_verify_file(ca_file, ec);
    if (ec) {
      status = Status::InvalidArgument("cannot load the CA certificates in " + ca_file +
                                       " (AWS_CA_BUNDLE): " + ec.message());
    }
  }
  ctx.set_verify_mode(verify ? boost::asio::ssl::verify_peer : boost::asio::ssl::verify_none, ec);
  return status;
}

Result<Endpoint> ParseEndpoint(std::string_view url, std::string_view service) {
  Endpoint ep;
  std::string_view rest;
  if (StartsWith(url, "http://")) {
    rest = url.substr(7);
    ep.port = "80";
  } else if (StartsWith(url, "https://")) {
    rest = url.substr(8);
    ep.tls = true;
    ep.port = "443";
  } else {
    return Status::InvalidArgument(std::string(service) +
                                   " endpoint must start with http:// or https:// (got '" +
                                   Abbreviate(url) + "')");
  }
  while (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  if (rest.empty() || rest.find('/') != std::string_view::npos) {
    return Status::InvalidArgument(std::string(service) +
                                   " endpoint must be scheme://host[:port] (got '" +
                                   Abbreviate(url) + "')");
  }
  ep.host_header = std::string(rest);
  size_t colon = rest.rfind(':');
  size_t bracket = rest.rfind(']');
  if (colon != std::string_view::npos && (bracket == std::string_view::npos || colon > bracket)) {
    ep.host = std::string(rest.substr(0, colon));
    ep.port = std::string(rest.substr(colon + 1));
    if (!ParseInt64(ep.port)) {
      return Status::InvalidArgument(std::string(service) + " endpoint has a bad port (got '" +
                                     Abbreviate(url) + "')");
    }
  } else {
    ep.host = std::string(rest);
  }
  if (!ep.host.empty() && ep.host.front() == '[') ep.host = ep.host.substr(1, ep.host.size() - 2);
  return ep;
}

void BodySink::Reset() {
  written = 0;
  if (kind == Kind::kString && str) str->clear();
  if (kind == Kind::kFile && fd >= 0) {
    (void)::ftruncate(fd, 0);
    ::lseek(fd, 0, SEEK_SET);
  }
}

Status Connection::Open(const Endpoint& ep, const std::string& host) {
  boost::system::error_code ec;
  asio::ip::tcp::resolver resolver(io_);
  auto results = resolver.resolve(host, ep.port, ec);
  if (ec) return Status::Unavailable("cannot resolve " + host + ": " + ec.message());
  if (ep.tls) {
    tls_.emplace(io_, *tls_ctx_);
    if (!SSL_set_tlsext_host_name(tls_->native_handle(), host.c_str())) {
      return Status::Unavailable("cannot set TLS server name " + host);
    }
    if (verify_) tls_->set_verify_callback(ssl::host_name_verification(host));
  } else {
    tcp_.emplace(io_);
  }
  ec = Run([&](auto handler) { Lowest().async_connect(results, handler); });
  if (ec) {
    return Status::Unavailable("cannot connect to " + host + ":" + ep.port + ": " + ec.message());
  }
  Lowest().socket().set_option(asio::ip::tcp::no_delay(true), ec);
  if (tls_) {
    ec = Run([&](auto handler) { tls_->async_handshake(ssl::stream_base::client, handler); });
    if (ec) return Status::Unavailable("TLS handshake with " + host + " failed: " + ec.message());
  }
  return Status::Ok();
}

Result<Response> Connection::Exchange(const std::string& method, const std::string& target,
                                      const Headers& headers, std::string_view body,
                                      BodySink& sink) {
  reusable_ = false;
  bhttp::request<bhttp::empty_body> req;
  req.method_string(method);
  req.target(target);
  req.version(11);
  for (const auto& [name, value] : headers) req.set(name, value);
  if (!body.empty() || method == "PUT" || method == "POST") req.content_length(body.size());
  bhttp::request_serializer<bhttp::empty_body> sr(req);
  boost::system::error_code ec = WithStream([&](auto& stream) {
    return Run([&](auto handler) { bhttp::async_write_header(stream, sr, handler); });
  });
  if (!ec && !body.empty()) {
    ec = WithStream([&](auto& stream) {
      return Run([&](auto handler) {
        asio::async_write(stream, asio::buffer(body.data(), body.size()), handler);
      });
    });
  }
  if (ec) return Status::Unavailable("sending the request failed: " + ec.message());

  bhttp::response_parser<bhttp::buffer_body> parser;
  parser.body_limit(boost::none);
  if (method == "HEAD") parser.skip(true);
  ec = WithStream([&](auto& stream) {
    return Run([&](auto handler) { bhttp::async_read_header(stream, buffer_, parser, handler); });
  });
  if (ec) return Status::Unavailable("reading the response failed: " + ec.message());
  Response out;
  out.status = static_cast<int>(parser.get().result_int());
  for (const auto& f : parser.get()) {
    out.headers[ToLower(std::string_view(f.name_string()))] = std::string(f.value());
  }
  bool to_sink = out.status >= 200 && out.status < 300;
  if (to_sink && sink.kind == BodySink::Kind::kBuffer && parser.content_length() &&
      *parser.content_length() > sink.cap) {
    return Status::FailedPrecondition("the object has " + std::to_string(*parser.content_length()) +
                                      " bytes, more than the " + std::to_string(sink.cap) +
                                      " expected");
  }
  // A string sink with a known length is read in place, like a buffer.
  bool in_place_string =
      to_sink && sink.kind == BodySink::Kind::kString && parser.content_length().has_value();
  if (in_place_string) sink.str->resize(static_cast<size_t>(*parser.content_length()));
  std::vector<char> chunk;
  while (!parser.is_done()) {
    char* dst;
    size_t avail;
    if (in_place_string) {
      dst = sink.str->data() + sink.written;
      avail = sink.str->size() - sink.written;
      if (avail == 0) return Status::Unavailable("the response body is longer than announced");
    } else if (to_sink && sink.kind == BodySink::Kind::kBuffer) {
      dst = sink.buf + sink.written;
      avail = sink.cap - sink.written;
      if (avail == 0) {
        return Status::FailedPrecondition("the object has more than the " +
                                          std::to_string(sink.cap) + " bytes expected");
      }
    } else {
      chunk.resize(256 << 10);
      dst = chunk.data();
      avail = chunk.size();
    }
    parser.get().body().data = dst;
    parser.get().body().size = avail;
    ec = WithStream([&](auto& stream) {
      return Run([&](auto handler) { bhttp::async_read(stream, buffer_, parser, handler); });
    });
    if (ec == bhttp::error::need_buffer) ec = {};
    if (ec) return Status::Unavailable("reading the response body failed: " + ec.message());
    size_t got = avail - parser.get().body().size;
    if (!to_sink) {
      out.body.append(dst, got);
    } else if (in_place_string || sink.kind == BodySink::Kind::kBuffer) {
      sink.written += got;
    } else if (sink.kind == BodySink::Kind::kString) {
      sink.str->append(dst, got);
      sink.written += got;
    } else {
      size_t off = 0;
      while (off < got) {
        ssize_t n = ::write(sink.fd, dst + off, got - off);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
          int e = errno;
          std::string msg = "cannot write " + sink.file_name + ": " + std::strerror(e);
          if (e == ENOSPC || e == EDQUOT) return Status::ResourceExhausted("disk full: " + msg);
          return Status::IOError(msg);
        }
        off += static_cast<size_t>(n);
      }
      sink.written += got;
    }
  }
  reusable_ = parser.get().keep_alive();
  return out;
}

}  // namespace trainyard::blob::aws
