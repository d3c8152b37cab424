#include "trainyard/model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/json/basic_parser_impl.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "trainyard/common/checked.h"
#include "trainyard/common/json.h"

namespace trainyard::model {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

// Counts the top-level keys of a JSON object as the parser sees them, so duplicate tensor
// names (which a DOM keeps only once) are caught.
struct TopLevelKeyCounter {
  static constexpr size_t max_object_size = size_t(-1);
  static constexpr size_t max_array_size = size_t(-1);
  static constexpr size_t max_key_size = size_t(-1);
  static constexpr size_t max_string_size = size_t(-1);
  int depth = 0;
  size_t keys = 0;
  using ec_t = boost::system::error_code;
  bool on_document_begin(ec_t&) { return true; }
  bool on_document_end(ec_t&) { return true; }
  bool on_object_begin(ec_t&) { return ++depth, true; }
  bool on_object_end(size_t, ec_t&) { return --depth, true; }
  bool on_array_begin(ec_t&) { return ++depth, true; }
  bool on_array_end(size_t, ec_t&) { return --depth, true; }
  bool on_key_part(std::string_view, size_t, ec_t&) { return true; }
  bool on_key(std::string_view, size_t, ec_t&) {
    if (depth == 1) ++keys;
    return true;
  }
  bool on_string_part(std::string_view, size_t, ec_t&) { return true; }
  bool on_string(std::string_view, size_t, ec_t&) { return true; }
  bool on_number_part(std::string_view, ec_t&) { return true; }
  bool on_int64(int64_t, std::string_view, ec_t&) { return true; }
  bool on_uint64(uint64_t, std::string_view, ec_t&) { return true; }
  bool on_double(double, std::string_view, ec_t&) { return true; }
  bool on_bool(bool, ec_t&) { return true; }
  bool on_null(ec_t&) { return true; }
  bool on_comment_part(std::string_view, ec_t&) { return true; }
  bool on_comment(std::string_view, ec_t&) { return true; }
};

size_t CountTopLevelKeys(std::string_view text) {
  json::basic_parser<TopLevelKeyCounter> p{json::parse_options{}};
  boost::system::error_code ec;
  p.write_some(false, text.data(), text.size(), ec);
  return ec ? 0 : p.handler().keys;
}

Status Bad(const std::string& what) {
  return Status::InvalidArgument("safetensors header: " + what +
                                 "; the file is corrupt or not a safetensors file");
}

Result<uint64_t> NonNegative(const json::value& v, const std::string& what) {
  if (v.is_uint64()) return v.as_uint64();
  if (v.is_int64() && v.as_int64() >= 0) return static_cast<uint64_t>(v.as_int64());
  return Bad(what + " must be a non-negative integer (got " + DescribeJson(v) + ")");
}

Result<SafetensorsEntry> ParseEntry(const std::string& name, const json::value& v) {
  if (!v.is_object()) return Bad("tensor " + name + " must be an object");
  const json::object& o = v.as_object();
  SafetensorsEntry e;
  e.name = name;
  const json::value* dtype = o.if_contains("dtype");
  if (!dtype || !dtype->is_string()) return Bad("tensor " + name + " has no dtype string");
  e.dtype = std::string(dtype->as_string());
  size_t elem = SafetensorsDtypeSize(e.dtype);
  if (elem == 0) return Bad("tensor " + name + " has unknown dtype \"" + e.dtype + "\"");
  const json::value* shape = o.if_contains("shape");
  if (!shape || !shape->is_array()) return Bad("tensor " + name + " has no shape array");
  if (shape->as_array().size() > 64) return Bad("tensor " + name + " has more than 64 dims");
  // Saturates above 2^64 (no file is that large); a zero dim still makes it 0.
  const unsigned __int128 cap = (static_cast<unsigned __int128>(1) << 64) + 1;
  unsigned __int128 bytes = elem;
  for (const json::value& d : shape->as_array()) {
    TY_ASSIGN_OR_RETURN(uint64_t dim, NonNegative(d, "tensor " + name + " shape entry"));
    if (dim > static_cast<uint64_t>(INT64_MAX)) return Bad("tensor " + name + " dim too large");
    e.shape.push_back(static_cast<int64_t>(dim));
    bytes = std::min(bytes * dim, cap);
  }
  const json::value* offs = o.if_contains("data_offsets");
  if (!offs || !offs->is_array() || offs->as_array().size() != 2) {
    return Bad("tensor " + name + " needs data_offsets [begin, end]");
  }
  TY_ASSIGN_OR_RETURN(e.begin, NonNegative(offs->as_array()[0], "tensor " + name + " begin"));
  TY_ASSIGN_OR_RETURN(e.end, NonNegative(offs->as_array()[1], "tensor " + name + " end"));
  if (e.end < e.begin) return Bad("tensor " + name + " ends before it begins");
  if (static_cast<unsigned __int128>(e.end - e.begin) != bytes) {
    return Bad("tensor " + name + " spans " + std::to_string(e.end - e.begin) +
               " bytes but its dtype and shape need a different size");
  }
  for (const auto& [key, unused] : o) {
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      return Bad("tensor " + name + " has unknown field \"" + std::string(key) + "\"");
    }
  }
  return e;
}

// The JSON header's text: checks the 8-byte little-endian length that precedes it.
Result<std::string_view> HeaderText(std::span<const std::byte> file_bytes) {
  if (file_bytes.size() < 8) return Bad("file is shorter than the 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(file_bytes[i]);
  if (n > kMaxHeaderBytes) return Bad("header length " + std::to_string(n) + " exceeds 100 MB");
  if (n > file_bytes.size() - 8) return Bad("header length runs past the end of the file");
  return std::string_view(reinterpret_cast<const char*>(file_bytes.data()) + 8, n);
}

// Parses the header text as a JSON object whose tensor names are all distinct.
Result<json::value> ParseHeaderJson(std::string_view text) {
  if (text.empty() || text.front() != '{') return Bad("header does not start with '{'");
  boost::system::error_code ec;
  json::value root = json::parse(text, ec);
  if (ec || !root.is_object()) return Bad("header is not a JSON object");
  if (CountTopLevelKeys(text) != root.as_object().size()) {
    return Bad("header names a tensor twice");
  }
  return root;
}

// Reads __metadata__ and every tensor entry of the header, each within `data_size` bytes.
Status ReadEntries(const json::object& o, uint64_t data_size, SafetensorsHeader* h) {
  for (const auto& [key, value] : o) {
    std::string name(key);
    if (name == "__metadata__") {
      if (!value.is_object()) return Bad("__metadata__ must be an object");
      for (const auto& [mk, mv] : value.as_object()) {
        if (!mv.is_string()) return Bad("__metadata__." + std::string(mk) + " must be a string");
        h->metadata[std::string(mk)] = std::string(mv.as_string());
      }
      continue;
    }
    TY_ASSIGN_OR_RETURN(SafetensorsEntry e, ParseEntry(name, value));
    if (e.end > data_size) return Bad("tensor " + name + " runs past the end of the file");
    h->tensors.push_back(std::move(e));
  }
  return Status::Ok();
}

// Sorts the tensors by offset and checks that they index the data section exactly: no
// overlaps and no holes, as the format requires.
Status CheckTensorsTileData(uint64_t data_size, std::vector<SafetensorsEntry>* tensors) {
  std::sort(tensors->begin(), tensors->end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t expected = 0;
  for (const SafetensorsEntry& e : *tensors) {
    if (e.begin != expected) {
      return Bad(e.begin < expected ? "tensor " + e.name + " overlaps another tensor"
                                    : "bytes before tensor " + e.name + " belong to no tensor");
    }
    expected = e.end;
  }
  if (expected != data_size) return Bad("the data section has bytes that belong to no tensor");
  return Status::Ok();
}

Status WriteAll(int fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return Status::IOError("cannot write " + path + ": " + std::strerror(errno));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

}  // namespace

size_t SafetensorsDtypeSize(std::string_view dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "I8" || dtype == "U8" || dtype == "BOOL" || dtype == "F8_E4M3" ||
      dtype == "F8_E5M2") {
    return 1;
  }
  return 0;
}

Result<SafetensorsHeader> ParseSafetensors(std::span<const std::byte> file_bytes) {
  TY_ASSIGN_OR_RETURN(std::string_view text, HeaderText(file_bytes));
  TY_ASSIGN_OR_RETURN(json::value root, ParseHeaderJson(text));
  SafetensorsHeader h;
  h.data_offset = 8 + text.size();
  uint64_t data_size = file_bytes.size() - h.data_offset;
  TY_RETURN_IF_ERROR(ReadEntries(root.as_object(), data_size, &h));
  TY_RETURN_IF_ERROR(CheckTensorsTileData(data_size, &h.tensors));
  return h;
}

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Status::NotFound(path + " does not exist");
    return Status::IOError("cannot open " + path + ": " + std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return Status::IOError("cannot stat " + path + ": " + std::strerror(err));
  }
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  f->size_ = static_cast<size_t>(st.st_size);
  if (f->size_ > 0) {
    void* m = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      return Status::IOError("cannot map " + path + ": " + std::strerror(err));
    }
    f->map_ = static_cast<const std::byte*>(m);
  }
  ::close(fd);
  auto header = ParseSafetensors({f->map_, f->size_});
  if (!header.ok()) return header.status().WithContext(path);
  f->header_ = std::move(header).value();
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(const_cast<std::byte*>(map_), size_);
}

std::span<const std::byte> SafetensorsFile::Data(const SafetensorsEntry& e) const {
  return {map_ + header_.data_offset + e.begin, static_cast<size_t>(e.end - e.begin)};
}

Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  std::vector<const TensorToWrite*> sorted;
  for (const TensorToWrite& t : tensors) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(),
            [](const auto* a, const auto* b) { return a->name < b->name; });
  json::object header;
  if (!metadata.empty()) {
    json::object m;
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = std::move(m);
  }
  uint64_t offset = 0;
  for (size_t i = 0; i < sorted.size(); ++i) {
    const TensorToWrite& t = *sorted[i];
    if (t.name == "__metadata__" || t.name.empty()) {
      return Status::InvalidArgument("tensor name \"" + t.name + "\" is reserved or empty");
    }
    if (i > 0 && sorted[i - 1]->name == t.name) {
      return Status::InvalidArgument("tensor " + t.name + " is given twice");
    }
    size_t elem = SafetensorsDtypeSize(t.dtype);
    if (elem == 0)
      return Status::InvalidArgument("tensor " + t.name + ": unknown dtype " + t.dtype);
    TY_ASSIGN_OR_RETURN(uint64_t bytes, ShapeBytes(elem, t.shape, "shape of tensor " + t.name));
    json::array shape;
    for (int64_t d : t.shape) shape.push_back(d);
    if (bytes != t.data.size()) {
      return Status::InvalidArgument("tensor " + t.name + " has " + std::to_string(t.data.size()) +
                                     " bytes but its dtype and shape need " +
                                     std::to_string(bytes));
    }
    json::object e;
    e["dtype"] = t.dtype;
    e["shape"] = std::move(shape);
    e["data_offsets"] = json::array{offset, offset + bytes};
    header[t.name] = std::move(e);
    offset += bytes;
  }
  std::string text = json::serialize(header);
  text.append((8 - text.size() % 8) % 8, ' ');  // aligns the data section, as safetensors does
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(uint64_t(text.size()) >> (8 * i));

  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::IOError("cannot create " + tmp + ": " + std::strerror(errno));
  Status s = WriteAll(fd, len, 8, tmp);
  if (s.ok()) s = WriteAll(fd, text.data(), text.size(), tmp);
  for (size_t i = 0; s.ok() && i < sorted.size(); ++i) {
    s = WriteAll(fd, sorted[i]->data.data(), sorted[i]->data.size(), tmp);
  }
  if (s.ok() && ::fsync(fd) != 0) {
    s = Status::IOError("cannot sync " + tmp + ": " + std::strerror(errno));
  }
  ::close(fd);
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    s = Status::IOError("cannot rename " + tmp + " to " + path + ": " + std::strerror(errno));
  }
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
  std::string dir = std::filesystem::path(path).parent_path().string();
  int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return Status::Ok();
}

Result<std::map<std::string, std::string>> ResolveSafetensorsWeightMap(const std::string& dir) {
  namespace fs = std::filesystem;
  std::map<std::string, std::string> out;
  fs::path index = fs::path(dir) / "model.safetensors.index.json";
  std::error_code fec;
  if (fs::exists(index, fec)) {
    std::ifstream in(index, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    boost::system::error_code ec;
    json::value root = json::parse(text.str(), ec);
    const json::object* wm = nullptr;
    if (!ec && root.is_object()) {
      if (const json::value* v = root.as_object().if_contains("weight_map")) {
        wm = v->if_object();
      }
    }
    if (!wm) {
      return Status::InvalidArgument(index.string() +
                                     " must be a JSON object with a weight_map object");
    }
    std::set<std::string> files;
    for (const auto& [name, file] : *wm) {
      if (!file.is_string()) {
        return Status::InvalidArgument(index.string() + ": weight_map." + std::string(name) +
                                       " must be a file name");
      }
      std::string f(file.as_string());
      if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..") {
        return Status::InvalidArgument(index.string() + ": weight_map." + std::string(name) +
                                       " must name a file in the same directory (got \"" + f +
                                       "\")");
      }
      std::string full = (fs::path(dir) / f).string();
      files.insert(full);
      out[std::string(name)] = full;
    }
    for (const std::string& f : files) {
      if (!fs::exists(f, fec)) {
        return Status::NotFound(f + " is named by " + index.string() + " but does not exist");
      }
    }
    return out;
  }
  fs::path single = fs::path(dir) / "model.safetensors";
  if (!fs::exists(single, fec)) {
    return Status::NotFound(dir +
                            " has neither model.safetensors nor model.safetensors.index.json; "
                            "save the model with safe_serialization=True");
  }
  TY_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(single.string()));
  for (const SafetensorsEntry& e : file->header().tensors) out[e.name] = single.string();
  return out;
}

}  // namespace trainyard::model
