// YamlReader: typed reads of a parsed YAML document's fields for config files (job specs,
// training configs), with errors that say where and what: `file:line: key.path message`.
// Plain (unquoted) scalars are number/bool candidates; a quoted scalar is always a string.
//
// LoadYamlDocument parses untrusted text without throwing: larger than 1 MiB, a NUL byte or
// bad YAML is an InvalidArgument naming the file and line.
//
// A YamlReader holds only the file name; it is immutable and may be shared across threads.
// yaml-cpp may throw while a document is being walked (e.g. on a pathological node); callers
// that walk untrusted documents catch YAML::Exception around the walk.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <set>
#include <string>
#include <string_view>

#include "trainyard/common/status.h"

namespace trainyard {

// Parses `text`; `filename` prefixes errors ("" for none), `what` names the document in
// messages about its size ("the job spec").
Result<YAML::Node> LoadYamlDocument(std::string_view text, std::string_view filename,
                                    std::string_view what);

class YamlReader {
 public:
  explicit YamlReader(std::string_view filename) : filename_(filename) {}

  const std::string& filename() const { return filename_; }

  // InvalidArgument "file:line: path message" (the line of `at` when it has one).
  Status Error(const YAML::Node& at, const std::string& path, const std::string& message) const;

  // The scalar's text for messages: quoted when it was a string.
  static std::string Describe(const YAML::Node& n);
  static bool IsPlainScalar(const YAML::Node& n) { return n.IsScalar() && n.Tag() != "!"; }

  Result<std::string> String(const YAML::Node& n, const std::string& path) const;
  // An integer in [lo, hi]; `what` completes "must be ..." in the error.
  Result<int64_t> Integer(const YAML::Node& n, const std::string& path, int64_t lo, int64_t hi,
                          const std::string& what) const;
  // A finite number in [lo, hi], or (lo, hi] / [lo, hi) / (lo, hi) when an end is open.
  Result<double> Number(const YAML::Node& n, const std::string& path, double lo, double hi,
                        bool lo_open, bool hi_open, const std::string& what) const;
  Result<bool> Bool(const YAML::Node& n, const std::string& path) const;

  // Checks that every key of `map` is one of `known`; `path` is "" at the root.
  Status OnlyKeys(const YAML::Node& map, const std::string& path,
                  const std::set<std::string>& known) const;

 private:
  std::string filename_;
};

}  // namespace trainyard
