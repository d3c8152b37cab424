#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "trainyard/blob/blob_store.h"
#include "trainyard/common/strings.h"

namespace trainyard::blob {

namespace fs = std::filesystem;

Status ValidateKey(std::string_view key, bool allow_empty) {
  if (key.empty()) {
    return allow_empty ? Status::Ok() : Status::InvalidArgument("artifact path must not be empty");
  }
  if (key.size() > 4096) return Status::InvalidArgument("artifact path is longer than 4096 bytes");
  if (key.front() == '/') {
    return Status::InvalidArgument("artifact path must be relative (got '" + Abbreviate(key) +
                                   "')");
  }
  if (key.find('\\') != std::string_view::npos || key.find('\0') != std::string_view::npos) {
    return Status::InvalidArgument("artifact path must not contain '\\' or NUL characters");
  }
  for (const std::string& seg : SplitString(key, '/')) {
    if (seg == ".." || seg == ".") {
      return Status::InvalidArgument("artifact path must not contain '.' or '..' segments (got '" +
                                     Abbreviate(key) + "')");
    }
  }
  return Status::Ok();
}

namespace {

std::atomic<uint64_t> g_tmp_counter{0};

Status ErrnoStatus(const std::string& what) {
  int e = errno;
  std::string msg = what + ": " + std::strerror(e);
  if (e == ENOSPC || e == EDQUOT) return Status::ResourceExhausted("disk full: " + msg);
  if (e == ENOENT) return Status::NotFound(msg);
  return Status::IOError(msg);
}

std::string TrimSlashes(std::string_view key) {
  while (!key.empty() && key.back() == '/') key.remove_suffix(1);
  return std::string(key);
}

class LocalBlobStore : public BlobStore {
 public:
  explicit LocalBlobStore(fs::path root) : root_(std::move(root)) {}

  Status PutBytes(std::string_view key, std::string_view data) override {
    TY_RETURN_IF_ERROR(ValidateKey(key));
    TY_ASSIGN_OR_RETURN(fs::path target, Prepare(key));
    fs::path tmp = TempName(target);
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return ErrnoStatus("cannot create " + tmp.string());
    size_t off = 0;
    while (off < data.size()) {
      ssize_t n = ::write(fd, data.data() + off, data.size() - off);
      if (n < 0) {
        if (errno == EINTR) continue;
        Status s = ErrnoStatus("cannot write " + tmp.string());
        ::close(fd);
        ::unlink(tmp.c_str());
        return s;
      }
      off += static_cast<size_t>(n);
    }
    return Commit(fd, tmp, target);
  }

  Status PutFile(std::string_view key, const std::string& local_path) override {
    TY_RETURN_IF_ERROR(ValidateKey(key));
    TY_ASSIGN_OR_RETURN(fs::path target, Prepare(key));
    fs::path tmp = TempName(target);
    std::error_code ec;
    fs::rename(local_path, tmp, ec);
    if (ec) {
      fs::copy_file(local_path, tmp, fs::copy_options::overwrite_existing, ec);
      if (ec) return Status::IOError("cannot copy " + local_path + ": " + ec.message());
    }
    int fd = ::open(tmp.c_str(), O_RDONLY);
    if (fd < 0) return ErrnoStatus("cannot open " + tmp.string());
    return Commit(fd, tmp, target);
  }

  Result<std::string> LocalPathForRead(std::string_view key) override {
    TY_RETURN_IF_ERROR(ValidateKey(key));
    fs::path p = root_ / std::string(key);
    std::error_code ec;
    if (!fs::is_regular_file(p, ec)) {
      return Status::NotFound("artifact '" + std::string(key) + "' does not exist");
    }
    return p.string();
  }

  Result<std::string> GetBytes(std::string_view key) override {
    TY_ASSIGN_OR_RETURN(std::string path, LocalPathForRead(key));
    std::ifstream in(path, std::ios::binary);
    if (!in) return Status::IOError("cannot read " + path);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }

  Result<std::vector<BlobEntry>> List(std::string_view prefix) override {
    std::string dir = TrimSlashes(prefix);
    TY_RETURN_IF_ERROR(ValidateKey(dir, /*allow_empty=*/true));
    fs::path p = dir.empty() ? root_ : root_ / dir;
    std::vector<BlobEntry> out;
    std::error_code ec;
    if (!fs::is_directory(p, ec)) return out;
    for (const auto& entry : fs::directory_iterator(p, ec)) {
      std::string name = entry.path().filename().string();
      if (StartsWith(name, ".tmp-")) continue;
      BlobEntry e;
      e.name = name;
      e.is_dir = entry.is_directory(ec);
      if (!e.is_dir) e.size = static_cast<int64_t>(entry.file_size(ec));
      out.push_back(std::move(e));
    }
    if (ec) return Status::IOError("cannot list " + p.string() + ": " + ec.message());
    std::sort(out.begin(), out.end(),
              [](const BlobEntry& a, const BlobEntry& b) { return a.name < b.name; });
    return out;
  }

  Status Delete(std::string_view key) override {
    std::string k = TrimSlashes(key);
    TY_RETURN_IF_ERROR(ValidateKey(k));
    fs::path p = root_ / k;
    std::error_code ec;
    if (!fs::exists(p, ec)) return Status::NotFound("artifact '" + k + "' does not exist");
    fs::remove_all(p, ec);
    if (ec) return Status::IOError("cannot delete " + p.string() + ": " + ec.message());
    return Status::Ok();
  }

  Result<bool> IsDirectory(std::string_view key) override {
    std::string k = TrimSlashes(key);
    TY_RETURN_IF_ERROR(ValidateKey(k, true));
    std::error_code ec;
    return fs::is_directory(k.empty() ? root_ : root_ / k, ec);
  }

 private:
  Result<fs::path> Prepare(std::string_view key) {
    fs::path target = root_ / std::string(key);
    std::error_code ec;
    fs::create_directories(target.parent_path(), ec);
    if (ec) {
      return Status::IOError("cannot create directory " + target.parent_path().string() + ": " +
                             ec.message());
    }
    if (fs::is_directory(target, ec)) {
      return Status::InvalidArgument("artifact path '" + std::string(key) + "' is a directory");
    }
    return target;
  }

  static fs::path TempName(const fs::path& target) {
    return target.parent_path() /
           (".tmp-" + target.filename().string() + "-" + std::to_string(::getpid()) + "-" +
            std::to_string(g_tmp_counter.fetch_add(1)));
  }

  static Status Commit(int fd, const fs::path& tmp, const fs::path& target) {
    if (::fsync(fd) != 0) {
      Status s = ErrnoStatus("cannot sync " + tmp.string());
      ::close(fd);
      ::unlink(tmp.c_str());
      return s;
    }
    ::close(fd);
    if (::rename(tmp.c_str(), target.c_str()) != 0) {
      Status s = ErrnoStatus("cannot rename into " + target.string());
      ::unlink(tmp.c_str());
      return s;
    }
    return Status::Ok();
  }

  const fs::path root_;
};

}  // namespace

Result<std::unique_ptr<BlobStore>> OpenLocalBlobStore(const std::string& root) {
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) return Status::IOError("cannot create artifact root " + root + ": " + ec.message());
  return std::unique_ptr<BlobStore>(new LocalBlobStore(fs::absolute(root)));
}

}  // namespace trainyard::blob
