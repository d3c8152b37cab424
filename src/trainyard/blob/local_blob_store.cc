#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>

#include "trainyard/blob/blob_store.h"
#include "trainyard/common/paths.h"
#include "trainyard/common/strings.h"

namespace trainyard::blob {

namespace fs = std::filesystem;

Status ValidateKey(std::string_view key, bool allow_empty) {
  if (key.empty()) {
    return allow_empty ? Status::Ok() : Status::InvalidArgument("artifact path must not be empty");
  }
  TY_RETURN_IF_ERROR(ValidateRelativePath(key, "artifact path"));
  // Temporary files of writes in progress (or left by a crash) are not objects.
  for (const std::string& seg : SplitString(key, '/')) {
    if (StartsWith(seg, ".tmp-")) {
      return Status::InvalidArgument(
          "artifact path must not have a segment starting with '.tmp-' "
          "(reserved for writes in progress)");
    }
  }
  return Status::Ok();
}

Result<size_t> BlobStore::ReadInto(std::string_view key, char* dst, size_t capacity) {
  TY_ASSIGN_OR_RETURN(std::string bytes, GetBytes(key));
  if (bytes.size() > capacity) {
    return Status::FailedPrecondition("object '" + std::string(key) + "' has " +
                                      std::to_string(bytes.size()) + " bytes, more than the " +
                                      std::to_string(capacity) + " expected");
  }
  std::memcpy(dst, bytes.data(), bytes.size());
  return bytes.size();
}

Status BlobStore::PutIfAbsent(std::string_view key, std::string_view) {
  return Status::NotImplemented("this blob store cannot write '" + std::string(key) +
                                "' only if absent (atomic put-if-absent is not supported)");
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
    TY_ASSIGN_OR_RETURN(int fd, WriteTemp(tmp, data));
    return Commit(fd, tmp, target);
  }

  // The bytes go to a temporary file, fsynced, which link() then gives the final name: link()
  // fails with EEXIST when the name exists, atomically, so one racing caller wins. The
  // temporary name is removed either way and the directory synced, so the name is durable.
  Status PutIfAbsent(std::string_view key, std::string_view data) override {
    TY_RETURN_IF_ERROR(ValidateKey(key));
    TY_ASSIGN_OR_RETURN(fs::path target, Prepare(key));
    fs::path tmp = TempName(target);
    TY_ASSIGN_OR_RETURN(int fd, WriteTemp(tmp, data));
    int sync_rc = ::fsync(fd);
    Status s = sync_rc == 0 ? Status::Ok() : ErrnoStatus("cannot sync " + tmp.string());
    ::close(fd);
    if (s.ok()) s = LinkIfAbsent(key, tmp, target);
    ::unlink(tmp.c_str());
    TY_RETURN_IF_ERROR(s);
    return SyncDirectoryOf(target);
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

  // An open descriptor of the regular file at `key`, and its size. The caller closes it.
  struct OpenFile {
    int fd = -1;
    size_t size = 0;
    fs::path path;
  };
  Result<OpenFile> OpenRegular(std::string_view key) {
    TY_RETURN_IF_ERROR(ValidateKey(key));
    fs::path p = root_ / std::string(key);
    int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return OpenForReadError(key, p);
    struct stat st;
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      return Status::NotFound("artifact '" + std::string(key) + "' does not exist");
    }
    return OpenFile{fd, static_cast<size_t>(st.st_size), p};
  }

  Result<std::string> GetBytes(std::string_view key) override {
    TY_ASSIGN_OR_RETURN(OpenFile f, OpenRegular(key));
    int fd = f.fd;
    const fs::path& p = f.path;
    std::string out(f.size, '\0');
    Result<size_t> n = ReadAll(fd, out.data(), out.size(), p);
    ::close(fd);
    if (!n.ok()) return n.status();
    out.resize(*n);
    return out;
  }

  Result<size_t> ReadInto(std::string_view key, char* dst, size_t capacity) override {
    TY_ASSIGN_OR_RETURN(OpenFile f, OpenRegular(key));
    int fd = f.fd;
    const fs::path& p = f.path;
    if (f.size > capacity) {
      ::close(fd);
      return Status::FailedPrecondition("object '" + std::string(key) + "' has " +
                                        std::to_string(f.size) + " bytes, more than the " +
                                        std::to_string(capacity) + " expected");
    }
    size_t size = f.size, off = 0;
    if (UseDirectIo(dst, size) && ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_DIRECT) == 0) {
      // The aligned body straight from the disk into the caller's buffer (no cache copy).
      size_t body = size / kDirectAlign * kDirectAlign;
      while (off < body) {
        ssize_t r = ::read(fd, dst + off, body - off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;  // EINVAL etc.: the rest goes through the cache
        off += static_cast<size_t>(r);
      }
      off = off / kDirectAlign * kDirectAlign;
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_DIRECT);
      if (::lseek(fd, static_cast<off_t>(off), SEEK_SET) < 0) {
        ::close(fd);
        return ErrnoStatus("cannot seek in " + p.string());
      }
    }
    Result<size_t> n = ReadAll(fd, dst + off, size - off, p);
    ::close(fd);
    if (!n.ok()) return n.status();
    return off + *n;
  }

  Result<bool> Exists(std::string_view key) override {
    TY_RETURN_IF_ERROR(ValidateKey(key));
    struct stat st;
    fs::path p = root_ / std::string(key);
    if (::stat(p.c_str(), &st) != 0) {
      if (errno == ENOENT || errno == ENOTDIR) return false;
      return ErrnoStatus("cannot stat " + p.string());
    }
    return S_ISREG(st.st_mode);
  }

  Status SyncDirectory(std::string_view dir) override {
    std::string d = TrimSlashes(dir);
    TY_RETURN_IF_ERROR(ValidateKey(d, /*allow_empty=*/true));
    fs::path p = d.empty() ? root_ : root_ / d;
    int fd = ::open(p.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT) return Status::Ok();  // nothing was put there
      return ErrnoStatus("cannot open directory " + p.string());
    }
    Status s;
    if (::fsync(fd) != 0) s = ErrnoStatus("cannot sync directory " + p.string());
    ::close(fd);
    return s;
  }

  Result<std::vector<BlobEntry>> List(std::string_view prefix) override {
    std::string dir = TrimSlashes(prefix);
    TY_RETURN_IF_ERROR(ValidateKey(dir, /*allow_empty=*/true));
    fs::path p = dir.empty() ? root_ : root_ / dir;
    std::vector<BlobEntry> out;
    std::error_code ec;
    if (!fs::is_directory(p, ec)) return out;
    // Entries may vanish while we list (another writer deletes them): they are skipped.
    fs::directory_iterator it(p, ec);
    if (ec == std::errc::no_such_file_or_directory) return out;
    for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
      std::string name = it->path().filename().string();
      if (StartsWith(name, ".tmp-")) continue;
      std::error_code entry_ec;
      fs::file_status st = it->status(entry_ec);
      if (entry_ec || !fs::exists(st)) continue;
      BlobEntry e;
      e.name = name;
      e.is_dir = fs::is_directory(st);
      if (!e.is_dir) {
        struct stat file_stat {};
        if (::stat(it->path().c_str(), &file_stat) != 0) continue;
        e.size = static_cast<int64_t>(file_stat.st_size);
        e.modified_ms = static_cast<int64_t>(file_stat.st_mtim.tv_sec) * 1000 +
                        file_stat.st_mtim.tv_nsec / 1'000'000;
      }
      out.push_back(std::move(e));
    }
    if (ec && ec != std::errc::no_such_file_or_directory) {
      return Status::IOError("cannot list " + p.string() + ": " + ec.message());
    }
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
  static Status LinkIfAbsent(std::string_view key, const fs::path& tmp, const fs::path& target) {
    if (::link(tmp.c_str(), target.c_str()) == 0) return Status::Ok();
    int e = errno;
    if (e == EPERM || e == EOPNOTSUPP || e == ENOSYS) {
      // Filesystems without hard links: the same guarantee through renameat2's no-replace flag.
      if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, target.c_str(), RENAME_NOREPLACE) == 0) {
        return Status::Ok();
      }
      e = errno;
    }
    if (e == EEXIST) {
      return Status::AlreadyExists("artifact '" + std::string(key) + "' already exists");
    }
    errno = e;
    return ErrnoStatus("cannot link " + tmp.string() + " to " + target.string());
  }

  static Status SyncDirectoryOf(const fs::path& target) {
    fs::path dir = target.parent_path();
    int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus("cannot open directory " + dir.string());
    Status s;
    if (::fsync(fd) != 0) s = ErrnoStatus("cannot sync directory " + dir.string());
    ::close(fd);
    return s;
  }

  // Writes `data` to the new file `tmp` and returns its open descriptor (not yet synced); on an
  // error nothing is left behind.
  static Result<int> WriteTemp(const fs::path& tmp, std::string_view data) {
    // Large, aligned writes bypass the page cache (O_DIRECT): no copy into the cache, which
    // on a busy machine costs more CPU than the disk takes time. The unaligned tail, and
    // filesystems that refuse O_DIRECT, go through the cache.
    bool direct = UseDirectIo(data.data(), data.size());
    int fd = -1;
    if (direct) {
      fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_DIRECT, 0644);
      if (fd < 0) direct = false;
    }
    if (fd < 0) fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return ErrnoStatus("cannot create " + tmp.string());
    size_t off = 0;
    if (direct) {
      size_t body = data.size() / kDirectAlign * kDirectAlign;
      Result<size_t> n = WriteAll(fd, data.data(), body, tmp, /*direct=*/true);
      if (!n.ok()) {
        ::close(fd);
        ::unlink(tmp.c_str());
        return n.status();
      }
      off = *n;
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_DIRECT);
    }
    Result<size_t> n = WriteAll(fd, data.data() + off, data.size() - off, tmp, false);
    if (!n.ok()) {
      ::close(fd);
      ::unlink(tmp.c_str());
      return n.status();
    }
    return fd;
  }

  Result<fs::path> Prepare(std::string_view key) {
    fs::path target = root_ / std::string(key);
    std::error_code ec;
    fs::create_directories(target.parent_path(), ec);
    if (ec == std::errc::not_a_directory || ec == std::errc::file_exists) {
      return Status::InvalidArgument("artifact path '" + Abbreviate(key, 200) +
                                     "' is beneath an existing artifact file; choose another path");
    }
    if (ec) {
      return Status::IOError("cannot create directory " + target.parent_path().string() + ": " +
                             ec.message());
    }
    if (fs::is_directory(target, ec)) {
      return Status::InvalidArgument("artifact path '" + std::string(key) + "' is a directory");
    }
    return target;
  }

  static constexpr size_t kDirectAlign = 4096;
  static bool UseDirectIo(const void* p, size_t size) {
    return size >= (1u << 20) && reinterpret_cast<uintptr_t>(p) % kDirectAlign == 0;
  }

  static Result<size_t> WriteAll(int fd, const char* src, size_t len, const fs::path& p,
                                 bool direct) {
    size_t off = 0;
    while (off < len) {
      ssize_t n = ::write(fd, src + off, len - off);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (direct && errno == EINVAL) return off / kDirectAlign * kDirectAlign;
        return ErrnoStatus("cannot write " + p.string());
      }
      off += static_cast<size_t>(n);
    }
    return off;
  }

  static Status OpenForReadError(std::string_view key, const fs::path& p) {
    if (errno == ENOENT || errno == ENOTDIR || errno == EISDIR) {
      return Status::NotFound("artifact '" + std::string(key) + "' does not exist");
    }
    return ErrnoStatus("cannot open " + p.string());
  }

  static Result<size_t> ReadAll(int fd, char* dst, size_t len, const fs::path& p) {
    size_t off = 0;
    while (off < len) {
      ssize_t n = ::read(fd, dst + off, len - off);
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus("cannot read " + p.string());
      }
      if (n == 0) break;  // shrank while reading: report what is there
      off += static_cast<size_t>(n);
    }
    return off;
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

// Errors that reach a client must not show the server's data directory: this decorator writes
// paths in error messages relative to the store's root.
class RootHidingBlobStore : public BlobStore {
 public:
  RootHidingBlobStore(std::unique_ptr<BlobStore> inner, std::string root)
      : inner_(std::move(inner)), root_(std::move(root)) {
    while (root_.size() > 1 && root_.back() == '/') root_.pop_back();
  }

  Status PutBytes(std::string_view key, std::string_view data) override {
    return Hide(inner_->PutBytes(key, data));
  }
  Status PutFile(std::string_view key, const std::string& local_path) override {
    return Hide(inner_->PutFile(key, local_path));
  }
  Result<std::string> LocalPathForRead(std::string_view key) override {
    return Hide(inner_->LocalPathForRead(key));
  }
  Result<std::string> GetBytes(std::string_view key) override {
    return Hide(inner_->GetBytes(key));
  }
  Result<std::vector<BlobEntry>> List(std::string_view prefix) override {
    return Hide(inner_->List(prefix));
  }
  Status PutIfAbsent(std::string_view key, std::string_view data) override {
    return Hide(inner_->PutIfAbsent(key, data));
  }
  Status Delete(std::string_view key) override { return Hide(inner_->Delete(key)); }
  Result<bool> IsDirectory(std::string_view key) override { return Hide(inner_->IsDirectory(key)); }
  Result<bool> Exists(std::string_view key) override { return Hide(inner_->Exists(key)); }
  Result<size_t> ReadInto(std::string_view key, char* dst, size_t capacity) override {
    return Hide(inner_->ReadInto(key, dst, capacity));
  }
  Status SyncDirectory(std::string_view dir) override { return Hide(inner_->SyncDirectory(dir)); }

 private:
  Status Hide(Status s) const {
    if (s.ok() || root_.size() <= 1) return s;
    std::string m = s.message();
    for (size_t at = m.find(root_); at != std::string::npos; at = m.find(root_, at)) {
      size_t len = root_.size() + (at + root_.size() < m.size() && m[at + root_.size()] == '/');
      m.replace(at, len, "artifact store:");
      at += 15;
    }
    return Status(s.code(), std::move(m));
  }
  template <typename T>
  Result<T> Hide(Result<T> r) const {
    if (r.ok()) return r;
    return Hide(r.status());
  }

  std::unique_ptr<BlobStore> inner_;
  std::string root_;
};

}  // namespace

int64_t RemoveLocalTemporaryFiles(const std::string& root) {
  int64_t removed = 0;
  std::error_code ec;
  std::vector<fs::path> leftovers;
  fs::recursive_directory_iterator it(root, fs::directory_options::skip_permission_denied, ec);
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (StartsWith(it->path().filename().string(), ".tmp-") && it->is_regular_file(ec)) {
      leftovers.push_back(it->path());
    }
  }
  for (const auto& p : leftovers) {
    if (::unlink(p.c_str()) == 0) ++removed;
  }
  return removed;
}

Result<std::unique_ptr<BlobStore>> OpenLocalBlobStore(const std::string& root) {
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) return Status::IOError("cannot create artifact root " + root + ": " + ec.message());
  fs::path abs = fs::absolute(root);
  return std::unique_ptr<BlobStore>(
      new RootHidingBlobStore(std::unique_ptr<BlobStore>(new LocalBlobStore(abs)), abs.string()));
}

}  // namespace trainyard::blob
