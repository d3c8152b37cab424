#include "trainyard/common/paths.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "trainyard/common/strings.h"

namespace trainyard {
namespace {

std::string Quoted(std::string_view path) {
  std::string out;
  for (char c : Abbreviate(path, 100)) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  return "'" + out + "'";
}

// An fd that closes itself.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      if (fd_ >= 0) ::close(fd_);
      fd_ = o.fd_;
      o.fd_ = -1;
    }
    return *this;
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

Status Errno(const std::string& what) {
  int e = errno;
  std::string msg = what + ": " + std::strerror(e);
  if (e == ENOSPC || e == EDQUOT) return Status::ResourceExhausted("disk full: " + msg);
  return Status::IOError(msg);
}

// Opens the directory `dir_rel` (a safe relative path, or "") beneath `root`, creating missing
// directories, refusing links.
Result<Fd> OpenDirBeneath(const std::string& root, std::string_view dir_rel) {
  Fd dir(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir.get() < 0) return Errno("cannot open directory " + root);
  if (dir_rel.empty()) return dir;
  for (const std::string& seg : SplitString(dir_rel, '/')) {
    int fd = ::openat(dir.get(), seg.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) {
      if (::mkdirat(dir.get(), seg.c_str(), 0755) != 0 && errno != EEXIST) {
        return Errno("cannot create directory " + Quoted(seg) + " under " + root);
      }
      fd = ::openat(dir.get(), seg.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    }
    if (fd < 0) {
      if (errno == ELOOP || errno == ENOTDIR) {
        return Status::InvalidArgument(Quoted(dir_rel) + " under " + root +
                                       " passes through a symbolic link or a file (" + Quoted(seg) +
                                       "); refusing to follow it");
      }
      return Errno("cannot open directory " + Quoted(seg) + " under " + root);
    }
    dir = Fd(fd);
  }
  return dir;
}

std::pair<std::string_view, std::string_view> SplitLast(std::string_view rel) {
  size_t slash = rel.rfind('/');
  if (slash == std::string_view::npos) return {std::string_view(), rel};
  return {rel.substr(0, slash), rel.substr(slash + 1)};
}

std::atomic<uint64_t> g_counter{0};

// Deeper trees are refused: each level holds a descriptor while the levels below it go.
constexpr int kMaxRemoveDepth = 128;

// Removes `name` under the directory `parent` (see RemoveTreeSafely); `shown` names it in errors.
Result<int64_t> RemoveEntryAt(int parent, const std::string& name, const std::string& shown,
                              int depth) {
  // Whatever is not a directory (a link included) goes with unlinkat; a directory gives EISDIR.
  if (::unlinkat(parent, name.c_str(), 0) == 0) return 1;
  if (errno == ENOENT) return 0;
  if (errno != EISDIR && errno != EPERM) return Errno("cannot remove " + shown);
  if (depth >= kMaxRemoveDepth) {
    return Status::FailedPrecondition("cannot remove " + shown + ": nested more than " +
                                      std::to_string(kMaxRemoveDepth) + " directories deep");
  }
  int64_t removed = 0;
  // A directory that keeps getting entries (a process still writes into it) is tried a few
  // times, then reported.
  for (int pass = 0; pass < 3; ++pass) {
    Fd dir(::openat(parent, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (dir.get() < 0) {
      if (errno == ENOENT) return removed;
      // Swapped for a link or a file since the unlinkat above: remove that instead.
      if (errno == ELOOP || errno == ENOTDIR) {
        if (::unlinkat(parent, name.c_str(), 0) == 0) return removed + 1;
        if (errno == ENOENT) return removed;
      }
      return Errno("cannot open " + shown);
    }
    std::vector<std::string> children;
    {
      int listed = ::dup(dir.get());
      DIR* d = listed < 0 ? nullptr : ::fdopendir(listed);
      if (d == nullptr) {
        if (listed >= 0) ::close(listed);
        return Errno("cannot list " + shown);
      }
      while (dirent* e = ::readdir(d)) {
        std::string child = e->d_name;
        if (child != "." && child != "..") children.push_back(std::move(child));
      }
      ::closedir(d);
    }
    for (const std::string& child : children) {
      TY_ASSIGN_OR_RETURN(int64_t n,
                          RemoveEntryAt(dir.get(), child, shown + "/" + child, depth + 1));
      removed += n;
    }
    if (::unlinkat(parent, name.c_str(), AT_REMOVEDIR) == 0) return removed + 1;
    if (errno == ENOENT) return removed;
    if (errno != ENOTEMPTY && errno != EEXIST) return Errno("cannot remove " + shown);
  }
  return Status::Unavailable("cannot remove " + shown +
                             ": entries keep appearing in it (a process still writes there)");
}

}  // namespace

Status ValidateRelativePath(std::string_view path, std::string_view field, size_t max_bytes) {
  std::string f(field);
  if (path.empty()) return Status::InvalidArgument(f + " must not be empty");
  if (path.size() > max_bytes) {
    return Status::InvalidArgument(f + " must be at most " + std::to_string(max_bytes) +
                                   " bytes (got " + std::to_string(path.size()) + ")");
  }
  if (path.front() == '/') {
    return Status::InvalidArgument(f + " must be a relative path (got " + Quoted(path) + ")");
  }
  for (char c : path) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f || c == '\\') {
      return Status::InvalidArgument(f + " must not contain '\\', NUL or control characters (got " +
                                     Quoted(path) + ")");
    }
  }
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    std::string_view seg = path.substr(start, end - start);
    if (seg.empty() || seg == "." || seg == "..") {
      return Status::InvalidArgument(f +
                                     " must be a normalized relative path, without empty, '.' "
                                     "or '..' segments (got " +
                                     Quoted(path) + ")");
    }
    if (seg.size() > kMaxPathSegmentBytes) {
      return Status::InvalidArgument(f + " has a segment longer than " +
                                     std::to_string(kMaxPathSegmentBytes) + " bytes");
    }
    start = end + 1;
  }
  return Status::Ok();
}

Status WriteFileBeneath(const std::string& root, std::string_view rel, std::string_view data) {
  TY_RETURN_IF_ERROR(ValidateRelativePath(rel, "file name"));
  auto [dir_rel, name] = SplitLast(rel);
  TY_ASSIGN_OR_RETURN(Fd dir, OpenDirBeneath(root, dir_rel));
  std::string tmp = ".tmp-" + std::to_string(::getpid()) + "-" +
                    std::to_string(g_counter.fetch_add(1)) + "-" + std::string(name.substr(0, 100));
  Fd fd(
      ::openat(dir.get(), tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (fd.get() < 0) return Errno("cannot create " + Quoted(rel) + " under " + root);
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::write(fd.get(), data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      Status s = Errno("cannot write " + Quoted(rel) + " under " + root);
      ::unlinkat(dir.get(), tmp.c_str(), 0);
      return s;
    }
    off += static_cast<size_t>(n);
  }
  if (::renameat(dir.get(), tmp.c_str(), dir.get(), std::string(name).c_str()) != 0) {
    Status s = Errno("cannot write " + Quoted(rel) + " under " + root);
    ::unlinkat(dir.get(), tmp.c_str(), 0);
    return s;
  }
  return Status::Ok();
}

Status RenameBeneath(const std::string& from_root, std::string_view from_rel,
                     const std::string& to_root, std::string_view to_rel) {
  TY_RETURN_IF_ERROR(ValidateRelativePath(from_rel, "file name"));
  TY_RETURN_IF_ERROR(ValidateRelativePath(to_rel, "file name"));
  auto [from_dir_rel, from_name] = SplitLast(from_rel);
  auto [to_dir_rel, to_name] = SplitLast(to_rel);
  TY_ASSIGN_OR_RETURN(Fd from_dir, OpenDirBeneath(from_root, from_dir_rel));
  TY_ASSIGN_OR_RETURN(Fd to_dir, OpenDirBeneath(to_root, to_dir_rel));
  // rename(2) replaces a link at the destination name; it never writes through it.
  if (::renameat(from_dir.get(), std::string(from_name).c_str(), to_dir.get(),
                 std::string(to_name).c_str()) != 0) {
    if (errno == EISDIR || errno == ENOTEMPTY || errno == EEXIST) {
      return Status::InvalidArgument(Quoted(to_rel) + " under " + to_root +
                                     " is a directory; move it away first");
    }
    return Errno("cannot move " + Quoted(to_rel) + " into " + to_root);
  }
  return Status::Ok();
}

Result<int64_t> RemoveTreeSafely(const std::string& path) {
  std::string trimmed = path;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  size_t slash = trimmed.rfind('/');
  std::string parent = slash == std::string::npos ? "." : trimmed.substr(0, slash);
  if (parent.empty()) parent = "/";
  std::string name = slash == std::string::npos ? trimmed : trimmed.substr(slash + 1);
  if (name.empty() || name == "." || name == "..") {
    return Status::InvalidArgument("cannot remove " + Quoted(path) + ": not a removable name");
  }
  Fd dir(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir.get() < 0) {
    if (errno == ENOENT) return int64_t{0};
    return Errno("cannot open directory " + parent);
  }
  return RemoveEntryAt(dir.get(), name, trimmed, 0);
}

std::string ReadFileTailSafely(const std::string& path, size_t max_bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return "";
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0) {
    ::close(fd);
    return "";
  }
  auto size = static_cast<uint64_t>(st.st_size);
  uint64_t start = size > max_bytes ? size - max_bytes : 0;
  std::string out(static_cast<size_t>(size - start), '\0');
  size_t got = 0;
  while (got < out.size()) {
    ssize_t n = ::pread(fd, out.data() + got, out.size() - got, static_cast<off_t>(start + got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  out.resize(got);
  return out;
}

Result<FileRange> ReadFileRangeSafely(const std::string& path, int64_t offset, size_t max_bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT) return Status::NotFound("no file " + path);
    if (err == ELOOP) return Status::FailedPrecondition(path + " is a link; it is not read");
    return Status::IOError("cannot open " + path + ": " + std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::FailedPrecondition(path + " is not a regular file; it is not read");
  }
  FileRange out;
  out.file_size = static_cast<int64_t>(st.st_size);
  out.offset = std::clamp<int64_t>(offset, 0, out.file_size);
  out.data.resize(static_cast<size_t>(
      std::min<uint64_t>(max_bytes, static_cast<uint64_t>(out.file_size - out.offset))));
  size_t got = 0;
  while (got < out.data.size()) {
    ssize_t n = ::pread(fd, out.data.data() + got, out.data.size() - got,
                        static_cast<off_t>(out.offset + static_cast<int64_t>(got)));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  out.data.resize(got);
  return out;
}

}  // namespace trainyard
