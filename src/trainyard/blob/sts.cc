#include "trainyard/blob/sts.h"

#include <algorithm>
#include <boost/json.hpp>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <utility>
#include <vector>

#include "trainyard/blob/aws_http.h"
#include "trainyard/common/strings.h"

namespace trainyard::blob {
namespace {

namespace json = boost::json;
namespace ssl = boost::asio::ssl;

// STS issues access key ids of 16-128 characters and session tokens of a few hundred to a few
// thousand; anything far longer is not an STS answer.
constexpr size_t kMaxCredentialField = 16384;

bool Printable(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) {
    auto u = static_cast<unsigned char>(c);
    return u >= 0x20 && u < 0x7f;
  });
}

// Well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF): S3 keys are
// UTF-8, and a policy document must be.
bool ValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    size_t n;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;
    for (size_t k = 1; k <= n; ++k) {
      auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n + 1;
  }
  return true;
}

// IAM's wildcards and policy variables in a Resource or a StringLike value: '*', '?' and '$'
// become ${*}, ${?} and ${$}, which match the character itself.
std::string EscapeIamPattern(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '*' || c == '?' || c == '$') {
      out += "${";
      out.push_back(c);
      out += "}";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil).
int64_t DaysFromCivil(int64_t y, int64_t m, int64_t d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

// "2026-05-01T12:34:56Z" or "2026-05-01T12:34:56.789Z" as ms since the epoch.
std::optional<int64_t> ParseIsoUtc(std::string_view s) {
  auto digits = [&](size_t at, size_t n) -> std::optional<int64_t> {
    if (at + n > s.size()) return std::nullopt;
    int64_t v = 0;
    for (size_t i = at; i < at + n; ++i) {
      if (s[i] < '0' || s[i] > '9') return std::nullopt;
      v = v * 10 + (s[i] - '0');
    }
    return v;
  };
  if (s.size() < 20 || s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' || s[16] != ':') {
    return std::nullopt;
  }
  auto year = digits(0, 4), month = digits(5, 2), day = digits(8, 2);
  auto hour = digits(11, 2), minute = digits(14, 2), second = digits(17, 2);
  if (!year || !month || !day || !hour || !minute || !second) return std::nullopt;
  if (*month < 1 || *month > 12 || *day < 1 || *day > 31 || *hour > 23 || *minute > 59 ||
      *second > 60) {
    return std::nullopt;
  }
  int64_t millis = 0;
  size_t pos = 19;
  if (s[pos] == '.') {
    size_t start = ++pos;
    while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9') ++pos;
    if (pos == start || pos - start > 9) return std::nullopt;
    for (size_t i = start, scale = 100; i < start + 3 && i < pos; ++i, scale /= 10) {
      millis += (s[i] - '0') * static_cast<int64_t>(scale);
    }
  }
  if (pos + 1 != s.size() || s[pos] != 'Z') return std::nullopt;
  int64_t days = DaysFromCivil(*year, *month, *day);
  return ((days * 24 + *hour) * 60 + *minute) * 60000 + *second * 1000 + millis;
}

// application/x-www-form-urlencoded "name=value&..." (SigV4's encoding is a valid one).
std::string FormBody(const std::vector<std::pair<std::string, std::string>>& fields) {
  std::string out;
  for (const auto& [name, value] : fields) {
    if (!out.empty()) out.push_back('&');
    out += sigv4::UriEncode(name, false) + "=" + sigv4::UriEncode(value, false);
  }
  return out;
}

// The partition of an ARN ("aws", "aws-cn", "aws-us-gov").
std::string PartitionOf(std::string_view arn) {
  std::string_view rest = arn.substr(4);  // after "arn:"
  return std::string(rest.substr(0, rest.find(':')));
}

class StsCredentialIssuer : public S3CredentialIssuer {
 public:
  StsCredentialIssuer(StsConfig config, aws::Endpoint endpoint)
      : config_(std::move(config)),
        endpoint_(std::move(endpoint)),
        partition_(PartitionOf(config_.role_arn)),
        tls_ctx_(ssl::context::tls_client) {
    if (!config_.clock) config_.clock = &system_clock_;
    if (endpoint_.tls)
      tls_error_ = aws::ConfigureTls(tls_ctx_, config_.ca_file, config_.verify_tls);
  }

  Status Init() const { return tls_error_; }

  Result<TemporaryS3Credentials> Issue(const S3Location& location, S3Access access,
                                       std::string_view who) override {
    std::string policy = S3SessionPolicy(location, access, partition_);
    if (policy.size() > kMaxSessionPolicyBytes) {
      return Status::FailedPrecondition("the session policy for " + Abbreviate(location.Url()) +
                                        " has " + std::to_string(policy.size()) +
                                        " bytes, more than the " +
                                        std::to_string(kMaxSessionPolicyBytes) +
                                        " STS accepts: store the object under a shorter prefix");
    }
    std::vector<std::pair<std::string, std::string>> fields = {
        {"Action", "AssumeRole"},
        {"Version", "2011-06-15"},
        {"RoleArn", config_.role_arn},
        {"RoleSessionName", StsSessionName(who)},
        {"DurationSeconds", std::to_string(config_.duration_seconds)},
        {"Policy", policy}};
    if (!config_.external_id.empty()) fields.emplace_back("ExternalId", config_.external_id);
    TY_ASSIGN_OR_RETURN(aws::Response r, Call(FormBody(fields)));
    if (r.status < 200 || r.status >= 300) {
      std::string code = aws::XmlText(r.body, "Code"), message = aws::XmlText(r.body, "Message");
      return Status::FailedPrecondition(
          "STS refused AssumeRole of " + config_.role_arn + " at " + EndpointName() + ": HTTP " +
          std::to_string(r.status) + (code.empty() ? "" : " " + code) +
          (message.empty() ? "" : ": " + Abbreviate(message, 300)) +
          "; the server's AWS identity needs sts:AssumeRole on that role, and the role's trust "
          "policy must name it (docs/catalog.md)");
    }
    auto parsed = ParseStsCredentials(r.body);
    if (!parsed.ok()) {
      return Status::Internal("STS at " + EndpointName() + " answered AssumeRole with " +
                              parsed.status().message());
    }
    return parsed;
  }

  std::string Describe() const override {
    return "AssumeRole " + config_.role_arn + " at " + EndpointName() + " for " +
           std::to_string(config_.duration_seconds) + " s";
  }

 private:
  std::string EndpointName() const {
    return (endpoint_.tls ? "https://" : "http://") + endpoint_.host_header;
  }

  // One signed POST with retries on transport errors and 5xx.
  Result<aws::Response> Call(const std::string& body) {
    sigv4::Request sreq;
    sreq.method = "POST";
    sreq.canonical_uri = "/";
    sreq.payload_sha256 = Sha256Hex(body);
    Status last;
    const int attempts = std::max(config_.max_attempts, 1);
    for (int attempt = 0; attempt < attempts; ++attempt) {
      if (attempt > 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100 << std::min(attempt, 6)));
      }
      std::string amz_date = sigv4::AmzDate(config_.clock->NowMillis());
      sreq.headers = {{"host", endpoint_.host_header},
                      {"content-type", "application/x-www-form-urlencoded; charset=utf-8"},
                      {"x-amz-date", amz_date},
                      {"x-amz-content-sha256", sreq.payload_sha256}};
      if (!config_.credentials.session_token.empty()) {
        sreq.headers.emplace_back("x-amz-security-token", config_.credentials.session_token);
      }
      aws::Headers headers = sreq.headers;
      headers.emplace_back(
          "Authorization",
          sigv4::AuthorizationHeader(sreq, config_.credentials, amz_date, config_.region, "sts"));
      headers.emplace_back("User-Agent", "trainyard");
      aws::Connection conn(&tls_ctx_, std::chrono::seconds(config_.timeout_seconds));
      conn.set_verify(config_.verify_tls);
      Status opened = conn.Open(endpoint_, endpoint_.host);
      if (!opened.ok()) {
        last = opened;
        continue;
      }
      std::string answer;
      aws::BodySink sink;
      sink.str = &answer;
      Result<aws::Response> r = conn.Exchange("POST", "/", headers, body, sink);
      if (!r.ok()) {
        if (r.status().code() != StatusCode::kUnavailable) return r.status();
        last = r.status();
        continue;
      }
      if (r->status >= 200 && r->status < 300) r->body = std::move(answer);
      if ((r->status >= 500 || r->status == 429) && attempt + 1 < attempts) {
        last = Status::Unavailable("HTTP " + std::to_string(r->status) + " " +
                                   aws::XmlText(r->body, "Code"));
        continue;
      }
      return r;
    }
    return Status::Unavailable("STS at " + EndpointName() + " failed after " +
                               std::to_string(attempts) + " attempts: " + last.message() +
                               "; check that the endpoint (AWS_ENDPOINT_URL_STS) is reachable");
  }

  StsConfig config_;
  const aws::Endpoint endpoint_;
  const std::string partition_;
  ssl::context tls_ctx_;
  Status tls_error_;
  SystemClock system_clock_;
};

}  // namespace

std::string S3Location::Url() const {
  return prefix.empty() ? "s3://" + bucket : "s3://" + bucket + "/" + prefix;
}

Result<S3Location> ParseS3Location(std::string_view url) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("S3 location " + why + " (got '" + Abbreviate(url) + "')");
  };
  if (!StartsWith(url, "s3://")) return bad("must look like s3://bucket/prefix");
  if (std::any_of(url.begin(), url.end(), [](char c) {
        auto u = static_cast<unsigned char>(c);
        return u < 0x20 || u == 0x7f;
      })) {
    return bad("has a control character");
  }
  if (!ValidUtf8(url)) return bad("is not valid UTF-8");
  std::string_view rest = url.substr(5);
  S3Location out;
  out.bucket = std::string(rest.substr(0, rest.find('/')));
  if (out.bucket.size() < 3 || out.bucket.size() > 255 ||
      !std::all_of(out.bucket.begin(), out.bucket.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '.' || c == '-' || c == '_';
      })) {
    return bad("must name a bucket of 3-255 letters, digits, '.', '-' or '_'");
  }
  if (rest.size() > out.bucket.size()) {
    for (const auto& segment : SplitString(rest.substr(out.bucket.size() + 1), '/')) {
      if (segment.empty()) continue;
      if (segment == "." || segment == "..") return bad("must not have '.' or '..' segments");
      if (!out.prefix.empty()) out.prefix.push_back('/');
      out.prefix += segment;
    }
  }
  return out;
}

std::string S3SessionPolicy(const S3Location& location, S3Access access,
                            std::string_view partition) {
  const std::string bucket_arn =
      "arn:" + std::string(partition) + ":s3:::" + EscapeIamPattern(location.bucket);
  const std::string prefix = EscapeIamPattern(location.prefix);
  json::array object_actions = {"s3:GetObject"};
  if (access == S3Access::kReadWrite) {
    object_actions.emplace_back("s3:PutObject");
    object_actions.emplace_back("s3:DeleteObject");
    object_actions.emplace_back("s3:AbortMultipartUpload");
  }
  json::object objects{{"Sid", "Objects"},
                       {"Effect", "Allow"},
                       {"Action", std::move(object_actions)},
                       {"Resource", bucket_arn + "/" + (prefix.empty() ? "" : prefix + "/") + "*"}};
  json::object list{
      {"Sid", "List"}, {"Effect", "Allow"}, {"Action", "s3:ListBucket"}, {"Resource", bucket_arn}};
  if (!prefix.empty()) {
    list["Condition"] = json::object{
        {"StringLike", json::object{{"s3:prefix", json::array{prefix, prefix + "/*"}}}}};
  }
  json::object policy{{"Version", "2012-10-17"},
                      {"Statement", json::array{std::move(objects), std::move(list)}}};
  return json::serialize(policy);
}

Result<TemporaryS3Credentials> ParseStsCredentials(std::string_view xml) {
  auto blocks = aws::XmlElements(xml, "Credentials");
  if (blocks.size() != 1) {
    return Status::InvalidArgument(blocks.empty() ? "no <Credentials> element"
                                                  : "more than one <Credentials> element");
  }
  std::string_view block = blocks.front();
  auto field = [&](std::string_view tag) -> Result<std::string> {
    auto found = aws::XmlElements(block, tag);
    if (found.size() != 1) {
      return Status::InvalidArgument("<Credentials> must have one <" + std::string(tag) +
                                     "> (has " + std::to_string(found.size()) + ")");
    }
    if (found.front().size() > kMaxCredentialField) {
      return Status::InvalidArgument("<" + std::string(tag) + "> is too long");
    }
    std::string value = aws::XmlUnescape(found.front());
    // Surrounding whitespace is layout, not part of the value.
    while (!value.empty() && (value.back() == ' ' || value.back() == '\n' || value.back() == '\r' ||
                              value.back() == '\t')) {
      value.pop_back();
    }
    size_t start = value.find_first_not_of(" \n\r\t");
    value.erase(0, start == std::string::npos ? value.size() : start);
    if (value.empty()) return Status::InvalidArgument("<" + std::string(tag) + "> is empty");
    if (!Printable(value)) {
      return Status::InvalidArgument("<" + std::string(tag) +
                                     "> has a character outside printable ASCII");
    }
    return value;
  };
  TemporaryS3Credentials out;
  TY_ASSIGN_OR_RETURN(out.credentials.access_key_id, field("AccessKeyId"));
  TY_ASSIGN_OR_RETURN(out.credentials.secret_access_key, field("SecretAccessKey"));
  TY_ASSIGN_OR_RETURN(out.credentials.session_token, field("SessionToken"));
  TY_ASSIGN_OR_RETURN(std::string expiration, field("Expiration"));
  std::optional<int64_t> millis = ParseIsoUtc(expiration);
  if (!millis || *millis <= 0) {
    return Status::InvalidArgument("<Expiration> is not an ISO 8601 UTC time (got '" +
                                   Abbreviate(expiration) + "')");
  }
  out.expiration_millis = *millis;
  return out;
}

std::string StsSessionName(std::string_view who) {
  std::string out = "trainyard-";
  for (char c : who) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '+' || c == '=' || c == ',' || c == '.' || c == '@' || c == '_' || c == '-';
    out.push_back(ok ? c : '-');
    if (out.size() == 64) break;
  }
  return out;
}

Result<StsConfig> StsConfigFromEnv(
    std::string_view role_arn, int duration_seconds,
    const std::function<std::optional<std::string>(const char*)>& getenv) {
  auto env = [&](const char* name) -> std::string {
    if (getenv) return getenv(name).value_or("");
    const char* v = std::getenv(name);
    return v ? v : "";
  };
  // arn:<partition>:iam::<account>:role/<path/>name
  const size_t role = role_arn.find(":role/");
  if (!StartsWith(role_arn, "arn:") || role == std::string_view::npos ||
      role_arn.find(":iam::") == std::string_view::npos || role_arn.size() > 2048 ||
      role + 6 == role_arn.size() || !Printable(role_arn)) {
    return Status::InvalidArgument(
        "--s3-credentials-role-arn must be an IAM role's ARN, "
        "arn:aws:iam::ACCOUNT:role/NAME (got '" +
        Abbreviate(role_arn) + "')");
  }
  if (duration_seconds < kMinStsDurationSeconds || duration_seconds > kMaxStsDurationSeconds) {
    return Status::InvalidArgument(
        "--s3-credentials-duration must be between " + std::to_string(kMinStsDurationSeconds) +
        " and " + std::to_string(kMaxStsDurationSeconds) +
        " seconds, STS's limits for AssumeRole (got " + std::to_string(duration_seconds) + ")");
  }
  StsConfig c;
  c.role_arn = std::string(role_arn);
  c.duration_seconds = duration_seconds;
  c.credentials.access_key_id = env("AWS_ACCESS_KEY_ID");
  c.credentials.secret_access_key = env("AWS_SECRET_ACCESS_KEY");
  c.credentials.session_token = env("AWS_SESSION_TOKEN");
  if (c.credentials.access_key_id.empty() || c.credentials.secret_access_key.empty()) {
    return Status::InvalidArgument(
        "--s3-credentials-role-arn needs the server's own AWS credentials to call STS: set "
        "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary ones)");
  }
  c.region = env("AWS_REGION");
  if (c.region.empty()) c.region = env("AWS_DEFAULT_REGION");
  if (c.region.empty()) c.region = "us-east-1";
  c.endpoint = env("AWS_ENDPOINT_URL_STS");
  if (c.endpoint.empty()) c.endpoint = env("AWS_ENDPOINT_URL");
  c.ca_file = env("AWS_CA_BUNDLE");
  return c;
}

Result<std::unique_ptr<S3CredentialIssuer>> MakeStsCredentialIssuer(StsConfig config) {
  if (config.role_arn.empty()) return Status::InvalidArgument("the STS role ARN must be set");
  if (config.endpoint.empty()) config.endpoint = "https://sts." + config.region + ".amazonaws.com";
  TY_ASSIGN_OR_RETURN(aws::Endpoint ep, aws::ParseEndpoint(config.endpoint, "STS"));
  auto issuer = std::make_unique<StsCredentialIssuer>(std::move(config), std::move(ep));
  TY_RETURN_IF_ERROR(issuer->Init());
  return std::unique_ptr<S3CredentialIssuer>(std::move(issuer));
}

}  // namespace trainyard::blob
