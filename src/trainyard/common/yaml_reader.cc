#include "trainyard/common/yaml_reader.h"

#include <charconv>
#include <cmath>

namespace trainyard {
namespace {

constexpr size_t kMaxDocumentBytes = 1 << 20;

}  // namespace

Result<YAML::Node> LoadYamlDocument(std::string_view text, std::string_view filename,
                                    std::string_view what) {
  std::string prefix = filename.empty() ? "" : std::string(filename) + ": ";
  if (text.size() > kMaxDocumentBytes) {
    return Status::InvalidArgument(prefix + std::string(what) + " is larger than 1 MiB");
  }
  if (text.find('\0') != std::string_view::npos) {
    return Status::InvalidArgument(prefix + std::string(what) + " contains a NUL byte");
  }
  try {
    return YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    std::string where = filename.empty()
                            ? "line " + std::to_string(e.mark.line + 1) + ": "
                            : std::string(filename) + ":" + std::to_string(e.mark.line + 1) + ": ";
    return Status::InvalidArgument(where + "not valid YAML: " + e.msg);
  }
}

Status YamlReader::Error(const YAML::Node& at, const std::string& path,
                         const std::string& message) const {
  std::string prefix;
  if (!filename_.empty()) {
    prefix = filename_;
    if (at.IsDefined() && at.Mark().line >= 0) prefix += ":" + std::to_string(at.Mark().line + 1);
    prefix += ": ";
  }
  return Status::InvalidArgument(prefix + path + " " + message);
}

std::string YamlReader::Describe(const YAML::Node& n) {
  if (n.IsScalar()) {
    if (n.Tag() == "!") return "\"" + n.Scalar() + "\"";
    return n.Scalar();
  }
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a mapping";
  return "null";
}

Result<std::string> YamlReader::String(const YAML::Node& n, const std::string& path) const {
  if (!n.IsScalar()) return Error(n, path, "must be a string (got " + Describe(n) + ")");
  return n.Scalar();
}

Result<int64_t> YamlReader::Integer(const YAML::Node& n, const std::string& path, int64_t lo,
                                    int64_t hi, const std::string& what) const {
  auto bad = [&] { return Error(n, path, "must be " + what + " (got " + Describe(n) + ")"); };
  if (!IsPlainScalar(n)) return bad();
  const std::string& s = n.Scalar();
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return bad();
  if (v < lo || v > hi) return bad();
  return v;
}

Result<double> YamlReader::Number(const YAML::Node& n, const std::string& path, double lo,
                                  double hi, bool lo_open, bool hi_open,
                                  const std::string& what) const {
  auto bad = [&] { return Error(n, path, "must be " + what + " (got " + Describe(n) + ")"); };
  if (!IsPlainScalar(n)) return bad();
  const std::string& s = n.Scalar();
  // from_chars takes no leading '+', which YAML allows.
  const char* begin = s.data();
  if (!s.empty() && s[0] == '+') ++begin;
  double v = 0;
  auto [end, ec] = std::from_chars(begin, s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v)) return bad();
  if (v < lo || (lo_open && v == lo) || v > hi || (hi_open && v == hi)) return bad();
  return v;
}

Result<bool> YamlReader::Bool(const YAML::Node& n, const std::string& path) const {
  if (IsPlainScalar(n)) {
    if (n.Scalar() == "true") return true;
    if (n.Scalar() == "false") return false;
  }
  return Error(n, path, "must be true or false (got " + Describe(n) + ")");
}

Status YamlReader::OnlyKeys(const YAML::Node& map, const std::string& path,
                            const std::set<std::string>& known) const {
  for (const auto& kv : map) {
    const YAML::Node& key = kv.first;
    std::string k = key.IsScalar() ? key.Scalar() : "?";
    if (known.count(k)) continue;
    std::string list;
    for (const auto& name : known) list += (list.empty() ? "" : ", ") + name;
    std::string full = path.empty() ? k : path + "." + k;
    return Error(key, full,
                 "is not a known key (known keys" + std::string(path.empty() ? "" : " of " + path) +
                     ": " + list + ")");
  }
  return Status::Ok();
}

}  // namespace trainyard
