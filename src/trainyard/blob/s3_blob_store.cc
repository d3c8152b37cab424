#include "trainyard/blob/s3_blob_store.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "trainyard/blob/aws_http.h"
#include "trainyard/common/mutex.h"
#include "trainyard/common/strings.h"

namespace trainyard::blob {
namespace {

namespace asio = boost::asio;
namespace ssl = boost::asio::ssl;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace fs = std::filesystem;

using aws::BodySink;
using aws::Connection;
using aws::Endpoint;
using aws::Headers;
using aws::Response;
using aws::XmlElements;
using aws::XmlEscape;
using aws::XmlText;

std::string Base64Md5(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), md, &len, EVP_md5(), nullptr);
  unsigned char out[64];
  int n = EVP_EncodeBlock(out, md, static_cast<int>(len));
  return std::string(reinterpret_cast<char*>(out), static_cast<size_t>(n));
}

std::string TrimSlashes(std::string_view s) {
  while (!s.empty() && s.back() == '/') s.remove_suffix(1);
  while (!s.empty() && s.front() == '/') s.remove_prefix(1);
  return std::string(s);
}

// ---------------------------------------------------------------------------------------------
// The store.

bool RetryableAnswer(int status, std::string_view code) {
  return status >= 500 || status == 429 || code == "SlowDown" || code == "RequestTimeout" ||
         code == "InternalError" || code == "ServiceUnavailable";
}

struct ListedObject {
  std::string key;  // the full key
  int64_t size = 0;
  int64_t modified_ms = 0;  // LastModified
};

struct ListPage {
  std::vector<ListedObject> objects;
  std::vector<std::string> prefixes;  // full prefixes, ending in '/'
  std::string next_token;
};

std::atomic<uint64_t> g_tmp_counter{0};

// ListObjectsV2's LastModified ("2026-11-25T04:32:19.000Z", fraction optional) as ms since the
// epoch; 0 when it does not parse.
int64_t ParseLastModified(std::string_view text) {
  std::tm tm{};
  int millis = 0;
  char frac[16] = {0};
  int n = std::sscanf(std::string(text).c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%15[.0-9]", &tm.tm_year,
                      &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &tm.tm_sec, frac);
  if (n < 6) return 0;
  if (n == 7 && frac[0] == '.') {
    for (int i = 1, scale = 100; i < 4 && frac[i] >= '0' && frac[i] <= '9'; ++i, scale /= 10) {
      millis += (frac[i] - '0') * scale;
    }
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return static_cast<int64_t>(timegm(&tm)) * 1000 + millis;
}

// S3's limit on one PUT.
constexpr size_t kMaxSinglePutBytes = size_t{5} << 30;
// Idle connections kept per host for reuse.
constexpr size_t kMaxIdleConnectionsPerHost = 32;
// Cached downloads younger than this are never pruned (a response may be about to stream one).
constexpr auto kCacheFileMinAge = std::chrono::minutes(1);

class S3BlobStore : public BlobStore {
 public:
  S3BlobStore(S3Config config, Endpoint endpoint)
      : config_(std::move(config)),
        endpoint_(std::move(endpoint)),
        tls_ctx_(ssl::context::tls_client),
        jitter_(std::random_device{}()) {
    if (!config_.clock) config_.clock = &system_clock_;
    if (config_.cache_dir.empty()) {
      config_.cache_dir =
          (fs::temp_directory_path() / ("trainyard-s3-cache-" + std::to_string(::getuid())))
              .string();
    }
    if (endpoint_.tls)
      tls_error_ = aws::ConfigureTls(tls_ctx_, config_.ca_file, config_.verify_tls);
  }

  Status Init() {
    TY_RETURN_IF_ERROR(tls_error_);
    std::error_code ec;
    fs::create_directories(config_.cache_dir, ec);
    if (ec) {
      return Status::IOError("cannot create the S3 download cache " + config_.cache_dir + ": " +
                             ec.message());
    }
    // A one-key listing: it needs the permission an artifact store needs anyway, and (unlike
    // HEAD) a refusal comes with S3's error code.
    Result<ListPage> page = List(DirPrefix(""), /*delimited=*/true, "", 1);
    if (!page.ok()) {
      return page.status().WithContext("cannot open s3://" + config_.bucket + "/" + config_.prefix);
    }
    return Status::Ok();
  }

  Status PutBytes(std::string_view key, std::string_view data) override {
    TY_RETURN_IF_ERROR(ValidateKey(key));
    std::string full = FullKey(key);
    if (data.size() > config_.part_size) {
      return Multipart(full, data.size(), [&](size_t off, size_t len, std::string&) {
        return Result<std::string_view>(data.substr(off, len));
      });
    }
    return PutObject(full, data);
  }

  Status PutIfAbsent(std::string_view key, std::string_view data) override {
    TY_RETURN_IF_ERROR(ValidateKey(key));
    if (data.size() > kMaxSinglePutBytes) {
      return Status::InvalidArgument("object '" + std::string(key) + "' has " +
                                     std::to_string(data.size()) +
                                     " bytes; a put-if-absent on S3 takes at most 5 GiB");
    }
    std::string full = FullKey(key);
    bool maybe_applied = false;
    for (int round = 1;; ++round) {
      std::string body;
      BodySink sink;
      sink.str = &body;
      Result<Response> r =
          Call("PUT", full, {}, {{"If-None-Match", "*"}}, data, sink, &maybe_applied);
      if (!r.ok()) {
        if (!maybe_applied || r.status().code() != StatusCode::kUnavailable) return r.status();
        return ResolveUnknownPut(key, full, data, r.status());
      }
      if (r->status >= 200 && r->status < 300) return Status::Ok();
      std::string code = XmlText(r->body, "Code");
      if (r->status == 412 || code == "PreconditionFailed") {
        if (maybe_applied) return ResolveUnknownPut(key, full, data, Status::Ok());
        return AlreadyExistsStatus(key, full);
      }
      // A concurrent conditional write to the same key is in progress: try again.
      if ((r->status == 409 || code == "ConditionalRequestConflict") &&
          round < std::max(config_.max_attempts, 1)) {
        Backoff(round);
        continue;
      }
      return ErrorStatus("PUT (If-None-Match: *)", ObjectName(full), *r);
    }
  }

  Status PutFile(std::string_view key, const std::string& local_path) override {
    TY_RETURN_IF_ERROR(ValidateKey(key));
    std::string full = FullKey(key);
    int fd = ::open(local_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Status::IOError("cannot open " + local_path + ": " + std::strerror(errno));
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      ::close(fd);
      return Status::IOError("cannot stat " + local_path + ": " + std::strerror(errno));
    }
    auto size = static_cast<size_t>(st.st_size);
    auto read_part = [&](size_t off, size_t len, std::string& buf) -> Result<std::string_view> {
      buf.resize(len);
      size_t got = 0;
      while (got < len) {
        ssize_t n = ::pread(fd, buf.data() + got, len - got, static_cast<off_t>(off + got));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0)
          return Status::IOError("cannot read " + local_path + ": " + std::strerror(errno));
        if (n == 0) return Status::IOError(local_path + " shrank while it was being uploaded");
        got += static_cast<size_t>(n);
      }
      return std::string_view(buf);
    };
    Status s;
    if (size > config_.part_size) {
      s = Multipart(full, size, read_part);
    } else {
      std::string buf;
      Result<std::string_view> data = read_part(0, size, buf);
      s = data.ok() ? PutObject(full, *data) : data.status();
    }
    ::close(fd);
    // The store takes the file, as the local backend (which moves it) does.
    if (s.ok()) ::unlink(local_path.c_str());
    return s;
  }

  Result<std::string> LocalPathForRead(std::string_view key) override {
    TY_RETURN_IF_ERROR(ValidateKey(key));
    std::string full = FullKey(key);
    std::string name = Sha256Hex(config_.bucket + "/" + full);
    std::string path = config_.cache_dir + "/" + name;
    std::string tmp = config_.cache_dir + "/.tmp-" + name + "-" + std::to_string(::getpid()) + "-" +
                      std::to_string(g_tmp_counter.fetch_add(1));
    BodySink sink;
    sink.kind = BodySink::Kind::kFile;
    sink.file_name = tmp;
    sink.fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (sink.fd < 0) return Status::IOError("cannot create " + tmp + ": " + std::strerror(errno));
    Status s = GetObject(key, full, sink);
    ::close(sink.fd);
    if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
      s = Status::IOError("cannot rename into " + path + ": " + std::strerror(errno));
    }
    if (!s.ok()) {
      ::unlink(tmp.c_str());
      return s;
    }
    if (cache_bytes_since_prune_.fetch_add(sink.written) + sink.written >
        config_.cache_max_bytes / 4) {
      cache_bytes_since_prune_ = 0;
      PruneCache(path);
    }
    return path;
  }

  Result<std::string> GetBytes(std::string_view key) override {
    TY_RETURN_IF_ERROR(ValidateKey(key));
    std::string out;
    BodySink sink;
    sink.str = &out;
    TY_RETURN_IF_ERROR(GetObject(key, FullKey(key), sink));
    return out;
  }

  Result<size_t> ReadInto(std::string_view key, char* dst, size_t capacity) override {
    TY_RETURN_IF_ERROR(ValidateKey(key));
    BodySink sink;
    sink.kind = BodySink::Kind::kBuffer;
    sink.buf = dst;
    sink.cap = capacity;
    Status s = GetObject(key, FullKey(key), sink);
    if (s.code() == StatusCode::kFailedPrecondition) {
      return Status::FailedPrecondition("object '" + std::string(key) + "' (" +
                                        ObjectName(FullKey(key)) + "): " + s.message());
    }
    TY_RETURN_IF_ERROR(s);
    return sink.written;
  }

  Result<bool> Exists(std::string_view key) override {
    TY_RETURN_IF_ERROR(ValidateKey(key));
    std::string full = FullKey(key);
    std::string ignored;
    BodySink sink;
    sink.str = &ignored;
    TY_ASSIGN_OR_RETURN(Response r, Call("HEAD", full, {}, {}, "", sink));
    if (r.status == 404) return false;
    if (r.status < 200 || r.status >= 300) return ErrorStatus("HEAD", ObjectName(full), r);
    return true;
  }

  Result<std::vector<BlobEntry>> List(std::string_view prefix) override {
    std::string dir = TrimSlashes(prefix);
    TY_RETURN_IF_ERROR(ValidateKey(dir, /*allow_empty=*/true));
    std::string p = DirPrefix(dir);
    std::vector<BlobEntry> out;
    std::string token;
    do {
      TY_ASSIGN_OR_RETURN(ListPage page,
                          List(p, /*delimited=*/true, token, config_.list_page_size));
      for (auto& object : page.objects) {
        std::string name = object.key.substr(p.size());
        if (name.empty()) continue;  // a "directory marker" object
        out.push_back(BlobEntry{std::move(name), false, object.size, object.modified_ms});
      }
      for (auto& sub : page.prefixes) {
        std::string name = sub.substr(p.size());
        while (!name.empty() && name.back() == '/') name.pop_back();
        if (name.empty()) continue;
        out.push_back(BlobEntry{std::move(name), true, 0});
      }
      token = std::move(page.next_token);
    } while (!token.empty());
    std::sort(out.begin(), out.end(), [](const BlobEntry& a, const BlobEntry& b) {
      return a.name != b.name ? a.name < b.name : a.is_dir < b.is_dir;
    });
    return out;
  }

  Status Delete(std::string_view key) override {
    std::string k = TrimSlashes(key);
    TY_RETURN_IF_ERROR(ValidateKey(k));
    std::string full = FullKey(k);
    TY_ASSIGN_OR_RETURN(bool object, Exists(k));
    // Everything under the directory `k`, in batches of up to 1000 keys (DeleteObjects' limit).
    std::string p = full + "/";
    bool any = object;
    std::string token;
    do {
      TY_ASSIGN_OR_RETURN(ListPage page, List(p, /*delimited=*/false, token, 1000));
      std::vector<std::string> keys;
      for (auto& listed : page.objects) keys.push_back(std::move(listed.key));
      if (!keys.empty()) {
        any = true;
        TY_RETURN_IF_ERROR(DeleteObjects(keys));
      }
      token = std::move(page.next_token);
    } while (!token.empty());
    if (object) {
      BodySink sink;
      std::string ignored;
      sink.str = &ignored;
      TY_ASSIGN_OR_RETURN(Response r, Call("DELETE", full, {}, {}, "", sink));
      if ((r.status < 200 || r.status >= 300) && r.status != 404) {
        return ErrorStatus("DELETE", ObjectName(full), r);
      }
    }
    if (!any) return Status::NotFound("artifact '" + k + "' does not exist");
    return Status::Ok();
  }

  Result<bool> IsDirectory(std::string_view key) override {
    std::string k = TrimSlashes(key);
    TY_RETURN_IF_ERROR(ValidateKey(k, true));
    if (k.empty()) return true;  // the root, as the local backend's
    TY_ASSIGN_OR_RETURN(ListPage page, List(DirPrefix(k), /*delimited=*/true, "", 1));
    return !page.objects.empty() || !page.prefixes.empty();
  }

 private:
  std::string FullKey(std::string_view key) const {
    return config_.prefix.empty() ? std::string(key) : config_.prefix + "/" + std::string(key);
  }
  // The listing prefix of directory `dir` ("" is the root).
  std::string DirPrefix(const std::string& dir) const {
    if (dir.empty()) return config_.prefix.empty() ? "" : config_.prefix + "/";
    return FullKey(dir) + "/";
  }
  std::string ObjectName(const std::string& full) const {
    return "s3://" + config_.bucket + "/" + full;
  }
  std::string EndpointName() const {
    return (endpoint_.tls ? "https://" : "http://") + endpoint_.host_header;
  }

  Status AlreadyExistsStatus(std::string_view key, const std::string& full) const {
    return Status::AlreadyExists("artifact '" + std::string(key) + "' already exists (" +
                                 ObjectName(full) + ")");
  }

  // A conditional PUT of ours may have been applied although its answer was lost. The object's
  // bytes decide: ours mean it was (callers make their bytes unique, e.g. a commit id), others
  // mean another writer won. With no object the write may still land: the outcome is unknown.
  Status ResolveUnknownPut(std::string_view key, const std::string& full, std::string_view data,
                           const Status& failure) {
    std::string existing;
    BodySink sink;
    sink.str = &existing;
    Status read = GetObject(key, full, sink);
    if (read.ok()) return existing == data ? Status::Ok() : AlreadyExistsStatus(key, full);
    std::string why = failure.ok() ? "S3 answered 412 to a retry" : failure.message();
    return Status::Unavailable("the outcome of the conditional PUT of " + ObjectName(full) +
                               " is unknown (" + why + "; reading it back: " + read.message() +
                               "); read '" + std::string(key) + "' later and compare its bytes");
  }

  Status PutObject(const std::string& full, std::string_view data) {
    std::string ignored;
    BodySink sink;
    sink.str = &ignored;
    TY_ASSIGN_OR_RETURN(Response r, Call("PUT", full, {}, {}, data, sink));
    if (r.status < 200 || r.status >= 300) return ErrorStatus("PUT", ObjectName(full), r);
    return Status::Ok();
  }

  Status GetObject(std::string_view key, const std::string& full, BodySink& sink) {
    TY_ASSIGN_OR_RETURN(Response r, Call("GET", full, {}, {}, "", sink));
    if (r.status == 404 && XmlText(r.body, "Code") != "NoSuchBucket") {
      std::string code = XmlText(r.body, "Code");
      return Status::NotFound("artifact '" + std::string(key) + "' does not exist (" +
                              ObjectName(full) + ": HTTP 404" + (code.empty() ? "" : " " + code) +
                              ")");
    }
    if (r.status < 200 || r.status >= 300) return ErrorStatus("GET", ObjectName(full), r);
    return Status::Ok();
  }

  // Reads part [off, off+len) of the source; may use `buf` for storage.
  using PartReader =
      std::function<Result<std::string_view>(size_t off, size_t len, std::string& buf)>;

  Status Multipart(const std::string& full, size_t size, const PartReader& read_part) {
    std::string name = ObjectName(full);
    // S3 allows 10,000 parts: grow the part size for very large objects.
    size_t part_size = std::max(config_.part_size, (size + 9999) / 10000);
    size_t parts = (size + part_size - 1) / part_size;
    std::string body;
    BodySink sink;
    sink.str = &body;
    TY_ASSIGN_OR_RETURN(Response created, Call("POST", full, {{"uploads", ""}}, {}, "", sink));
    if (created.status < 200 || created.status >= 300) {
      return ErrorStatus("CreateMultipartUpload", name, created);
    }
    std::string upload_id = XmlText(body, "UploadId");
    if (upload_id.empty()) {
      return Status::Internal("S3 CreateMultipartUpload " + name + " answered without an UploadId");
    }

    std::vector<std::string> etags(parts);
    std::atomic<size_t> next{0};
    std::atomic<bool> failed{false};
    Mutex error_mu;
    Status first_error;  // under error_mu
    auto worker = [&]() {
      std::string buf;
      while (!failed) {
        size_t i = next.fetch_add(1);
        if (i >= parts) break;
        size_t off = i * part_size, len = std::min(part_size, size - off);
        Status s;
        Result<std::string_view> data = read_part(off, len, buf);
        if (!data.ok()) {
          s = data.status();
        } else {
          std::string ignored;
          BodySink part_sink;
          part_sink.str = &ignored;
          Result<Response> r =
              Call("PUT", full, {{"partNumber", std::to_string(i + 1)}, {"uploadId", upload_id}},
                   {}, *data, part_sink);
          if (!r.ok()) {
            s = r.status();
          } else if (r->status < 200 || r->status >= 300) {
            s = ErrorStatus("UploadPart", name, *r);
          } else {
            etags[i] = r->headers["etag"];
          }
        }
        if (!s.ok()) {
          MutexLock lock(error_mu);
          if (first_error.ok()) {
            first_error =
                s.WithContext("part " + std::to_string(i + 1) + " of " + std::to_string(parts));
          }
          failed = true;
        }
      }
    };
    size_t threads = std::min<size_t>(std::max(config_.upload_threads, 1), parts);
    std::vector<std::thread> pool;
    for (size_t t = 1; t < threads; ++t) pool.emplace_back(worker);
    worker();
    for (auto& t : pool) t.join();

    Status result = first_error;
    if (result.ok()) {
      std::string xml = "<CompleteMultipartUpload>";
      for (size_t i = 0; i < parts; ++i) {
        xml += "<Part><PartNumber>" + std::to_string(i + 1) + "</PartNumber><ETag>" +
               XmlEscape(etags[i]) + "</ETag></Part>";
      }
      xml += "</CompleteMultipartUpload>";
      body.clear();
      Result<Response> r = Call("POST", full, {{"uploadId", upload_id}},
                                {{"Content-Type", "application/xml"}}, xml, sink);
      if (!r.ok()) {
        result = r.status();
      } else if (r->status < 200 || r->status >= 300) {
        result = ErrorStatus("CompleteMultipartUpload", name, *r);
      } else if (body.find("<Error>") != std::string::npos) {
        // S3 may answer 200 and report the failure in the body.
        Response err = *r;
        err.body = body;
        result = ErrorStatus("CompleteMultipartUpload", name, err);
      }
    }
    if (!result.ok()) {
      std::string ignored;
      BodySink abort_sink;
      abort_sink.str = &ignored;
      Result<Response> r = Call("DELETE", full, {{"uploadId", upload_id}}, {}, "", abort_sink);
      if (!r.ok() || r->status < 200 || r->status >= 300) {
        spdlog::warn(
            "could not abort the multipart upload {} of {}; a lifecycle rule should "
            "remove its parts",
            upload_id, name);
      }
      return result.WithContext("multipart upload of " + name + " (aborted)");
    }
    return Status::Ok();
  }

  Status DeleteObjects(const std::vector<std::string>& keys) {
    std::string xml = "<Delete><Quiet>true</Quiet>";
    for (const auto& k : keys) xml += "<Object><Key>" + XmlEscape(k) + "</Key></Object>";
    xml += "</Delete>";
    std::string body;
    BodySink sink;
    sink.str = &body;
    TY_ASSIGN_OR_RETURN(
        Response r,
        Call("POST", "", {{"delete", ""}},
             {{"Content-MD5", Base64Md5(xml)}, {"Content-Type", "application/xml"}}, xml, sink));
    if (r.status < 200 || r.status >= 300) {
      return ErrorStatus("DeleteObjects", "s3://" + config_.bucket, r);
    }
    auto errors = XmlElements(body, "Error");
    if (!errors.empty()) {
      Response err = r;
      err.body = "<Error>" + std::string(errors.front()) + "</Error>";
      return ErrorStatus("DeleteObjects",
                         "s3://" + config_.bucket + "/" + XmlText(errors.front(), "Key"), err);
    }
    return Status::Ok();
  }

  Result<ListPage> List(const std::string& prefix, bool delimited, const std::string& token,
                        int max_keys) {
    std::vector<std::pair<std::string, std::string>> query = {
        {"list-type", "2"}, {"prefix", prefix}, {"max-keys", std::to_string(max_keys)}};
    if (delimited) query.emplace_back("delimiter", "/");
    if (!token.empty()) query.emplace_back("continuation-token", token);
    std::string body;
    BodySink sink;
    sink.str = &body;
    TY_ASSIGN_OR_RETURN(Response r, Call("GET", "", query, {}, "", sink));
    if (r.status < 200 || r.status >= 300) {
      return ErrorStatus("ListObjectsV2", "s3://" + config_.bucket + "/" + prefix, r);
    }
    ListPage page;
    for (std::string_view c : XmlElements(body, "Contents")) {
      auto size = ParseInt64(XmlText(c, "Size"));
      page.objects.push_back(ListedObject{XmlText(c, "Key"), size.value_or(0),
                                          ParseLastModified(XmlText(c, "LastModified"))});
    }
    for (std::string_view c : XmlElements(body, "CommonPrefixes")) {
      page.prefixes.push_back(XmlText(c, "Prefix"));
    }
    if (XmlText(body, "IsTruncated") == "true") {
      page.next_token = XmlText(body, "NextContinuationToken");
      if (page.next_token.empty()) {
        return Status::Internal("S3 ListObjectsV2 of s3://" + config_.bucket + "/" + prefix +
                                " was truncated without a continuation token");
      }
    }
    return page;
  }

  Status ErrorStatus(std::string_view op, const std::string& what, const Response& r) const {
    std::string code = XmlText(r.body, "Code"), message = XmlText(r.body, "Message");
    std::string detail = "HTTP " + std::to_string(r.status) + (code.empty() ? "" : " " + code) +
                         (message.empty() ? "" : ": " + message);
    std::string where = std::string(op) + " " + what + " at " + EndpointName();
    if (code == "NoSuchBucket") {
      return Status::NotFound("S3 bucket '" + config_.bucket + "' does not exist (" + where + ": " +
                              detail + "); create it or fix the s3:// location");
    }
    if (r.status == 404 || code == "NoSuchKey") {
      return Status::NotFound(what + " does not exist (" + detail + ")");
    }
    if (r.status == 403 || r.status == 401) {
      return Status::PermissionDenied(
          "S3 refused " + where + ": " + detail +
          "; check AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN), the "
          "region and the bucket's policy");
    }
    if (RetryableAnswer(r.status, code)) {
      return Status::Unavailable("S3 " + where + " failed after " +
                                 std::to_string(config_.max_attempts) + " attempts: " + detail);
    }
    return Status::Internal("S3 " + where + " failed: " + detail);
  }

  // One signed request with retries. `key` is the full object key ("" for the bucket). The
  // answer is returned whatever its status (unless retries ran out on a transport error);
  // 2xx bodies go to `sink`.
  // `maybe_applied`, when given, is set when an attempt may have reached the server without its
  // answer reaching us (a lost connection, a 5xx): a retry then cannot tell what the first did.
  Result<Response> Call(const std::string& method, const std::string& key,
                        const std::vector<std::pair<std::string, std::string>>& query,
                        const Headers& extra_headers, std::string_view body, BodySink& sink,
                        bool* maybe_applied = nullptr) {
    sigv4::Request sreq;
    sreq.method = method;
    std::string path = config_.path_style ? "/" + config_.bucket : "";
    if (!key.empty() || !config_.path_style) path += "/" + sigv4::UriEncode(key, true);
    sreq.canonical_uri = path;
    sreq.query = query;
    std::string qs = sigv4::CanonicalQueryString(sreq);
    std::string target = qs.empty() ? path : path + "?" + qs;
    std::string connect_host =
        config_.path_style ? endpoint_.host : config_.bucket + "." + endpoint_.host;
    std::string host_header =
        config_.path_style ? endpoint_.host_header : config_.bucket + "." + endpoint_.host_header;
    sreq.payload_sha256 = Sha256Hex(body);

    Status last;
    bool stale_retried = false, skip_backoff = false;
    for (int attempt = 0; attempt < std::max(config_.max_attempts, 1); ++attempt) {
      bool skip = std::exchange(skip_backoff, false);
      if (attempt > 0 && !skip) Backoff(attempt);
      sink.Reset();
      bool drop_answer = false;
      if (config_.inject_failure_for_test) {
        auto injected = config_.inject_failure_for_test(method, target);
        if (injected && injected->after_sending) {
          drop_answer = true;
        } else if (injected) {
          Response r;
          r.status = injected->http_status;
          r.body = "<Error><Code>" + injected->code + "</Code><Message>injected</Message></Error>";
          if (r.status == 0) {
            last = Status::Unavailable("injected connection failure");
            continue;
          }
          if (r.status >= 500 && maybe_applied) *maybe_applied = true;
          if (RetryableAnswer(r.status, injected->code) && attempt + 1 < config_.max_attempts) {
            last = Status::Unavailable("HTTP " + std::to_string(r.status) + " " + injected->code);
            continue;
          }
          return r;
        }
      }
      std::string amz_date = sigv4::AmzDate(config_.clock->NowMillis());
      sreq.headers = {{"host", host_header},
                      {"x-amz-date", amz_date},
                      {"x-amz-content-sha256", sreq.payload_sha256}};
      if (!config_.credentials.session_token.empty()) {
        sreq.headers.emplace_back("x-amz-security-token", config_.credentials.session_token);
      }
      for (const auto& h : extra_headers) sreq.headers.push_back(h);
      Headers headers = sreq.headers;
      headers.emplace_back(
          "Authorization",
          sigv4::AuthorizationHeader(sreq, config_.credentials, amz_date, config_.region, "s3"));
      headers.emplace_back("User-Agent", "trainyard");

      std::unique_ptr<Connection> conn = TakeConnection(connect_host);
      bool reused = conn != nullptr;
      if (!conn) {
        conn =
            std::make_unique<Connection>(&tls_ctx_, std::chrono::seconds(config_.timeout_seconds));
        conn->set_verify(config_.verify_tls);
        Status s = conn->Open(endpoint_, connect_host);
        if (!s.ok()) {
          last = s;
          continue;
        }
      }
      Result<Response> r = conn->Exchange(method, target, headers, body, sink);
      if (drop_answer && r.ok()) r = Status::Unavailable("injected loss of the answer");
      if (!r.ok()) {
        if (r.status().code() != StatusCode::kUnavailable) return r.status();
        if (maybe_applied) *maybe_applied = true;
        last = r.status();
        if (reused && !stale_retried) {
          // The server may have closed an idle kept-alive connection: once per request, try
          // again at once on a new one, without counting an attempt.
          stale_retried = skip_backoff = true;
          --attempt;
          DropIdleConnections(connect_host);
        }
        continue;
      }
      if (conn->reusable()) ReturnConnection(connect_host, std::move(conn));
      if (r->status >= 500 && maybe_applied) *maybe_applied = true;
      if (RetryableAnswer(r->status, XmlText(r->body, "Code")) &&
          attempt + 1 < config_.max_attempts) {
        last = Status::Unavailable("HTTP " + std::to_string(r->status) + " " +
                                   XmlText(r->body, "Code"));
        continue;
      }
      return r;
    }
    std::string what = key.empty() ? "s3://" + config_.bucket : ObjectName(key);
    return Status::Unavailable("S3 " + method + " " + what + " at " + EndpointName() +
                               " failed after " + std::to_string(config_.max_attempts) +
                               " attempts: " + last.message() +
                               "; check that the endpoint (AWS_ENDPOINT_URL) is reachable");
  }

  void Backoff(int retry) {
    int64_t cap = std::min<int64_t>(config_.retry_max_millis,
                                    int64_t{config_.retry_base_millis} << std::min(retry - 1, 20));
    int64_t delay;
    {
      MutexLock lock(jitter_mu_);
      // "Equal jitter": half the backoff, plus a random part of the other half.
      delay = cap / 2 + static_cast<int64_t>(jitter_() % static_cast<uint64_t>(cap / 2 + 1));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(delay));
  }

  std::unique_ptr<Connection> TakeConnection(const std::string& host) TY_EXCLUDES(pool_mu_) {
    MutexLock lock(pool_mu_);
    auto& idle = idle_[host];
    if (idle.empty()) return nullptr;
    auto c = std::move(idle.back());
    idle.pop_back();
    return c;
  }

  void DropIdleConnections(const std::string& host) TY_EXCLUDES(pool_mu_) {
    MutexLock lock(pool_mu_);
    idle_[host].clear();
  }

  void ReturnConnection(const std::string& host, std::unique_ptr<Connection> c)
      TY_EXCLUDES(pool_mu_) {
    MutexLock lock(pool_mu_);
    auto& idle = idle_[host];
    if (idle.size() < kMaxIdleConnectionsPerHost) idle.push_back(std::move(c));
  }

  // Removes the oldest downloads until the cache fits, sparing `keep` and files younger than a
  // minute (a response may be about to stream them).
  void PruneCache(const std::string& keep) {
    std::vector<std::pair<fs::file_time_type, fs::path>> files;
    uint64_t total = 0;
    std::error_code ec;
    for (fs::directory_iterator it(config_.cache_dir, ec), end; !ec && it != end;
         it.increment(ec)) {
      std::error_code fec;
      if (!it->is_regular_file(fec)) continue;
      total += it->file_size(fec);
      files.emplace_back(it->last_write_time(fec), it->path());
    }
    if (total <= config_.cache_max_bytes) return;
    std::sort(files.begin(), files.end());
    auto young = fs::file_time_type::clock::now() - kCacheFileMinAge;
    for (const auto& [mtime, path] : files) {
      if (total <= config_.cache_max_bytes || mtime > young) break;
      if (path == keep) continue;
      std::error_code fec;
      uint64_t size = fs::file_size(path, fec);
      if (fs::remove(path, fec)) total -= size;
    }
  }

  S3Config config_;
  const Endpoint endpoint_;
  ssl::context tls_ctx_;
  Status tls_error_;
  SystemClock system_clock_;
  Mutex jitter_mu_;
  std::mt19937_64 jitter_ TY_GUARDED_BY(jitter_mu_);
  Mutex pool_mu_;
  std::map<std::string, std::vector<std::unique_ptr<Connection>>> idle_ TY_GUARDED_BY(pool_mu_);
  std::atomic<uint64_t> cache_bytes_since_prune_{0};
};

}  // namespace

Result<S3Config> S3ConfigFromUrl(
    std::string_view url, const std::function<std::optional<std::string>(const char*)>& getenv) {
  auto env = [&](const char* name) -> std::string {
    if (getenv) return getenv(name).value_or("");
    const char* v = std::getenv(name);
    return v ? v : "";
  };
  if (!StartsWith(url, "s3://")) {
    return Status::InvalidArgument("an S3 location must look like s3://bucket/prefix (got '" +
                                   Abbreviate(url) + "')");
  }
  std::string_view rest = url.substr(5);
  size_t slash = rest.find('/');
  S3Config c;
  c.bucket = std::string(rest.substr(0, slash));
  if (slash != std::string_view::npos) c.prefix = TrimSlashes(rest.substr(slash + 1));
  if (c.bucket.empty()) {
    return Status::InvalidArgument("the S3 location '" + Abbreviate(url) +
                                   "' names no bucket; use s3://bucket/prefix");
  }
  if (!c.prefix.empty()) {
    Status s = ValidateKey(c.prefix);
    if (!s.ok())
      return Status::InvalidArgument("bad prefix in '" + Abbreviate(url) + "': " + s.message());
  }
  c.credentials.access_key_id = env("AWS_ACCESS_KEY_ID");
  c.credentials.secret_access_key = env("AWS_SECRET_ACCESS_KEY");
  c.credentials.session_token = env("AWS_SESSION_TOKEN");
  if (c.credentials.access_key_id.empty() || c.credentials.secret_access_key.empty()) {
    return Status::InvalidArgument("S3 location '" + Abbreviate(url) +
                                   "' needs credentials: set AWS_ACCESS_KEY_ID and "
                                   "AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary "
                                   "ones)");
  }
  c.region = env("AWS_REGION");
  if (c.region.empty()) c.region = env("AWS_DEFAULT_REGION");
  if (c.region.empty()) c.region = "us-east-1";
  c.endpoint = env("AWS_ENDPOINT_URL_S3");
  if (c.endpoint.empty()) c.endpoint = env("AWS_ENDPOINT_URL");
  if (c.endpoint.empty()) {
    c.endpoint = "https://s3." + c.region + ".amazonaws.com";
    // Bucket names with dots do not match AWS's wildcard certificate as host names.
    c.path_style = c.bucket.find('.') != std::string::npos;
  } else {
    c.path_style = true;
  }
  c.ca_file = env("AWS_CA_BUNDLE");
  return c;
}

Result<std::unique_ptr<BlobStore>> OpenS3BlobStore(S3Config config) {
  if (config.bucket.empty()) return Status::InvalidArgument("S3 bucket must not be empty");
  if (config.endpoint.empty()) config.endpoint = "https://s3." + config.region + ".amazonaws.com";
  if (config.part_size < (size_t{5} << 20)) {
    return Status::InvalidArgument("S3 part size must be at least 5 MiB (S3's minimum)");
  }
  config.prefix = TrimSlashes(config.prefix);
  TY_ASSIGN_OR_RETURN(Endpoint ep, aws::ParseEndpoint(config.endpoint));
  auto store = std::make_unique<S3BlobStore>(std::move(config), std::move(ep));
  TY_RETURN_IF_ERROR(store->Init());
  return std::unique_ptr<BlobStore>(std::move(store));
}

Result<std::unique_ptr<BlobStore>> OpenBlobStore(const std::string& location,
                                                 const std::string& cache_dir) {
  if (StartsWith(location, "s3://")) {
    TY_ASSIGN_OR_RETURN(S3Config config, S3ConfigFromUrl(location));
    if (!cache_dir.empty()) config.cache_dir = cache_dir;
    return OpenS3BlobStore(std::move(config));
  }
  if (StartsWith(location, "file://")) return OpenLocalBlobStore(location.substr(7));
  if (location.find("://") != std::string::npos) {
    return Status::InvalidArgument("unsupported artifact location '" + Abbreviate(location) +
                                   "': use a directory or s3://bucket/prefix");
  }
  return OpenLocalBlobStore(location);
}

}  // namespace trainyard::blob
