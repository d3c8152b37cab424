#include "trainyard/prep/pipeline_spec.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include "trainyard/common/strings.h"
#include "trainyard/common/yaml_reader.h"

namespace trainyard::prep {
namespace {

constexpr size_t kMaxNameBytes = 128;
constexpr size_t kMaxListItems = 256;
const std::set<std::string> kPiiKinds = {"email", "phone", "card", "iban", "ip"};

bool IsNameChar(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == '-';
}

bool IsPipelineName(std::string_view v) {
  if (v.empty() || v.size() > kMaxNameBytes) return false;
  return std::all_of(v.begin(), v.end(), IsNameChar);
}

// catalog.schema.table, each part 1-255 of [A-Za-z0-9_-].
bool IsTableName(std::string_view v) {
  int parts = 0;
  size_t start = 0;
  while (true) {
    size_t dot = v.find('.', start);
    std::string_view part = v.substr(start, dot == std::string_view::npos ? v.npos : dot - start);
    if (part.empty() || part.size() > 255) return false;
    for (char c : part) {
      if (!IsNameChar(c) || c == '.') return false;
    }
    ++parts;
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  return parts == 3;
}

// A column name: 1-255 bytes, no control characters.
bool IsColumnName(std::string_view v) {
  if (v.empty() || v.size() > 255) return false;
  return std::none_of(v.begin(), v.end(),
                      [](char c) { return static_cast<unsigned char>(c) < 32; });
}

// [a-z0-9_]+
bool IsSplitName(std::string_view v) {
  if (v.empty() || v.size() > 64) return false;
  return std::all_of(v.begin(), v.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

class SpecReader : public YamlReader {
 public:
  using YamlReader::YamlReader;

  Result<std::string> Column(const YAML::Node& n, const std::string& path) const {
    TY_ASSIGN_OR_RETURN(std::string v, String(n, path));
    if (!IsColumnName(v)) {
      return Error(n, path,
                   "must be a column name (1-255 bytes, no control characters; got \"" +
                       Abbreviate(v, 60) + "\")");
    }
    return v;
  }

  Result<std::string> NonEmpty(const YAML::Node& n, const std::string& path) const {
    TY_ASSIGN_OR_RETURN(std::string v, String(n, path));
    if (v.empty()) return Error(n, path, "must not be empty");
    if (v.size() > 4096) return Error(n, path, "must be at most 4096 bytes");
    return v;
  }

  Result<std::vector<std::string>> StringList(const YAML::Node& n, const std::string& path,
                                              bool columns) const {
    if (!n.IsSequence()) return Error(n, path, "must be a list");
    if (n.size() == 0) return Error(n, path, "must not be empty");
    if (n.size() > kMaxListItems) {
      return Error(n, path, "must have at most " + std::to_string(kMaxListItems) + " items");
    }
    std::vector<std::string> out;
    for (size_t i = 0; i < n.size(); ++i) {
      std::string item = path + "[" + std::to_string(i) + "]";
      TY_ASSIGN_OR_RETURN(std::string v, columns ? Column(n[i], item) : NonEmpty(n[i], item));
      out.push_back(std::move(v));
    }
    return out;
  }

  Result<std::shared_ptr<const BoundedRegex>> Regex(const YAML::Node& n,
                                                    const std::string& path) const {
    TY_ASSIGN_OR_RETURN(std::string pattern, String(n, path));
    if (pattern.empty()) return Error(n, path, "must not be empty");
    auto compiled = BoundedRegex::Compile(pattern, path);
    if (!compiled.ok()) {
      // The message starts with the field already; Error adds the file and line.
      std::string why = compiled.status().message();
      if (why.compare(0, path.size(), path) == 0) why = why.substr(path.size());
      while (!why.empty() && (why[0] == ':' || why[0] == ' ')) why.erase(0, 1);
      return Error(n, path, why);
    }
    return *compiled;
  }

  Result<uint64_t> Seed(const YAML::Node& n, const std::string& path) const {
    TY_ASSIGN_OR_RETURN(int64_t v, Integer(n, path, 0, std::numeric_limits<int64_t>::max(),
                                           "a non-negative integer"));
    return static_cast<uint64_t>(v);
  }
};

Status ReadSource(const SpecReader& r, const YAML::Node& n, SourceSpec& out) {
  if (!n.IsMap()) return r.Error(n, "source", "must be a mapping with table or files");
  TY_RETURN_IF_ERROR(r.OnlyKeys(n, "source", {"table", "files", "version", "id_column"}));
  if (n["table"] && n["files"]) {
    return r.Error(n, "source", "must have one of table and files, not both");
  }
  if (auto v = n["table"]; v) {
    TY_ASSIGN_OR_RETURN(out.table, r.String(v, "source.table"));
    if (!IsTableName(out.table)) {
      return r.Error(v, "source.table",
                     "must be a catalog table's full name catalog.schema.table (got \"" +
                         Abbreviate(out.table, 80) + "\")");
    }
  } else if (auto f = n["files"]; f) {
    if (f.IsScalar()) {
      TY_ASSIGN_OR_RETURN(std::string one, r.NonEmpty(f, "source.files"));
      out.files.push_back(std::move(one));
    } else {
      if (!f.IsSequence()) return r.Error(f, "source.files", "must be a list of files");
      if (f.size() == 0) return r.Error(f, "source.files", "must not be empty");
      if (f.size() > kMaxSourceFiles) {
        return r.Error(f, "source.files",
                       "must have at most " + std::to_string(kMaxSourceFiles) + " files");
      }
      for (size_t i = 0; i < f.size(); ++i) {
        std::string path = "source.files[" + std::to_string(i) + "]";
        TY_ASSIGN_OR_RETURN(std::string file, r.NonEmpty(f[i], path));
        out.files.push_back(std::move(file));
      }
    }
    for (size_t i = 0; i < out.files.size(); ++i) {
      std::string lower = out.files[i];
      std::transform(lower.begin(), lower.end(), lower.begin(),
                     [](unsigned char c) { return std::tolower(c); });
      auto ends = [&](std::string_view s) {
        return lower.size() >= s.size() && lower.compare(lower.size() - s.size(), s.size(), s) == 0;
      };
      if (!ends(".jsonl") && !ends(".ndjson") && !ends(".json") && !ends(".csv") &&
          !ends(".parquet")) {
        const YAML::Node at = f.IsSequence() ? f[i] : f;
        return r.Error(at,
                       f.IsSequence() ? "source.files[" + std::to_string(i) + "]" : "source.files",
                       "must be a .jsonl, .csv or .parquet file (got \"" +
                           Abbreviate(out.files[i], 80) + "\")");
      }
    }
  } else {
    return r.Error(n, "source", "must have table (a catalog table) or files (local files)");
  }
  if (auto v = n["version"]; v) {
    if (out.table.empty()) {
      return r.Error(v, "source.version", "applies to a table source only; remove it");
    }
    TY_ASSIGN_OR_RETURN(out.version,
                        r.Integer(v, "source.version", 0, std::numeric_limits<int64_t>::max(),
                                  "a table version (an integer >= 0)"));
  }
  if (auto v = n["id_column"]; v) {
    TY_ASSIGN_OR_RETURN(out.id_column, r.Column(v, "source.id_column"));
  }
  return Status::Ok();
}

Status ReadFilter(const SpecReader& r, const YAML::Node& n, const std::string& path,
                  FilterStep& f) {
  TY_RETURN_IF_ERROR(r.OnlyKeys(
      n, path,
      {"column", "min_chars", "max_chars", "min_tokens", "max_tokens", "tokenizer", "drop_regex",
       "keep_regex", "required", "max_repetition", "language", "min_score"}));
  if (n.size() == 0 || (n.size() == 1 && n["column"])) {
    return r.Error(n, path,
                   "must name a criterion: min_chars, max_chars, min_tokens, max_tokens, "
                   "drop_regex, keep_regex, required, max_repetition or language");
  }
  constexpr int64_t kMaxLength = int64_t{1} << 40;
  auto length = [&](const char* key, std::optional<int64_t>& out) -> Status {
    if (auto v = n[key]; v) {
      TY_ASSIGN_OR_RETURN(out,
                          r.Integer(v, path + "." + key, 0, kMaxLength, "a non-negative integer"));
    }
    return Status::Ok();
  };
  TY_RETURN_IF_ERROR(length("min_chars", f.min_chars));
  TY_RETURN_IF_ERROR(length("max_chars", f.max_chars));
  TY_RETURN_IF_ERROR(length("min_tokens", f.min_tokens));
  TY_RETURN_IF_ERROR(length("max_tokens", f.max_tokens));
  if (f.min_chars && f.max_chars && *f.min_chars > *f.max_chars) {
    return r.Error(n["max_chars"], path + ".max_chars", "must be at least min_chars");
  }
  if (f.min_tokens && f.max_tokens && *f.min_tokens > *f.max_tokens) {
    return r.Error(n["max_tokens"], path + ".max_tokens", "must be at least min_tokens");
  }
  if (auto v = n["tokenizer"]; v) {
    TY_ASSIGN_OR_RETURN(f.tokenizer, r.NonEmpty(v, path + ".tokenizer"));
    if (!f.min_tokens && !f.max_tokens) {
      return r.Error(v, path + ".tokenizer", "applies to min_tokens/max_tokens; add one");
    }
  } else if (f.min_tokens || f.max_tokens) {
    return r.Error(n, path + ".tokenizer",
                   "is required with min_tokens/max_tokens (a tokenizer.json file)");
  }
  if (auto v = n["drop_regex"]; v) {
    TY_ASSIGN_OR_RETURN(f.drop_regex, r.Regex(v, path + ".drop_regex"));
  }
  if (auto v = n["keep_regex"]; v) {
    TY_ASSIGN_OR_RETURN(f.keep_regex, r.Regex(v, path + ".keep_regex"));
  }
  if (auto v = n["required"]; v) {
    TY_ASSIGN_OR_RETURN(f.required, r.StringList(v, path + ".required", true));
  }
  if (auto v = n["max_repetition"]; v) {
    TY_ASSIGN_OR_RETURN(f.max_repetition, r.Number(v, path + ".max_repetition", 0, 1, false, false,
                                                   "a fraction from 0 to 1"));
  }
  if (auto v = n["language"]; v) {
    TY_ASSIGN_OR_RETURN(f.language, r.String(v, path + ".language"));
    if (f.language != "en") {
      return r.Error(v, path + ".language",
                     "must be en (the only language with a heuristic; got \"" +
                         Abbreviate(f.language, 20) + "\")");
    }
    if (!n["min_score"]) {
      return r.Error(n, path + ".min_score", "is required with language (a fraction, e.g. 0.1)");
    }
    TY_ASSIGN_OR_RETURN(f.min_score, r.Number(n["min_score"], path + ".min_score", 0, 1, false,
                                              false, "a fraction from 0 to 1"));
  } else if (auto ms = n["min_score"]; ms) {
    return r.Error(ms, path + ".min_score", "applies with language; add language: en");
  }
  return Status::Ok();
}

Status ReadDedupNear(const SpecReader& r, const YAML::Node& n, const std::string& path,
                     DedupNearStep& d) {
  TY_RETURN_IF_ERROR(r.OnlyKeys(
      n, path, {"column", "shingle_words", "bands", "rows", "threshold", "seed", "keep"}));
  if (auto v = n["shingle_words"]; v) {
    TY_ASSIGN_OR_RETURN(int64_t x,
                        r.Integer(v, path + ".shingle_words", 1, 32, "an integer from 1 to 32"));
    d.shingle_words = static_cast<int>(x);
  }
  if (auto v = n["bands"]; v) {
    TY_ASSIGN_OR_RETURN(int64_t x, r.Integer(v, path + ".bands", 1, 1024, "1..1024"));
    d.bands = static_cast<int>(x);
  }
  if (auto v = n["rows"]; v) {
    TY_ASSIGN_OR_RETURN(int64_t x, r.Integer(v, path + ".rows", 1, 1024, "1..1024"));
    d.rows = static_cast<int>(x);
  }
  if (d.bands * d.rows > 1024) {
    const YAML::Node at = n["rows"] ? n["rows"] : (n["bands"] ? n["bands"] : n);
    return r.Error(at, path + ".rows",
                   "bands * rows must be at most 1024 permutations (got " +
                       std::to_string(d.bands) + " * " + std::to_string(d.rows) + ")");
  }
  if (auto v = n["threshold"]; v) {
    TY_ASSIGN_OR_RETURN(d.threshold,
                        r.Number(v, path + ".threshold", 0, 1, false, false, "from 0 to 1"));
  }
  if (auto v = n["seed"]; v) {
    TY_ASSIGN_OR_RETURN(d.seed, r.Seed(v, path + ".seed"));
  }
  if (auto v = n["keep"]; v) {
    TY_ASSIGN_OR_RETURN(std::string keep, r.String(v, path + ".keep"));
    if (keep == "first") {
      d.keep = KeepRule::kFirst;
    } else if (keep == "longest") {
      d.keep = KeepRule::kLongest;
    } else {
      return r.Error(v, path + ".keep",
                     "must be first or longest (got \"" + Abbreviate(keep, 40) + "\")");
    }
  }
  return Status::Ok();
}

Status ReadRedact(const SpecReader& r, const YAML::Node& n, const std::string& path,
                  RedactPiiStep& p) {
  TY_RETURN_IF_ERROR(r.OnlyKeys(n, path, {"column", "kinds", "patterns", "replacement"}));
  if (auto v = n["kinds"]; v) {
    TY_ASSIGN_OR_RETURN(p.kinds, r.StringList(v, path + ".kinds", false));
    std::set<std::string> seen;
    for (size_t i = 0; i < p.kinds.size(); ++i) {
      std::string item = path + ".kinds[" + std::to_string(i) + "]";
      if (!kPiiKinds.count(p.kinds[i])) {
        return r.Error(v[i], item,
                       "unknown PII kind \"" + Abbreviate(p.kinds[i], 40) +
                           "\"; known: email, phone, card, iban, ip (or add a named pattern "
                           "under patterns)");
      }
      if (!seen.insert(p.kinds[i]).second) return r.Error(v[i], item, "is listed twice");
    }
  }
  if (auto v = n["patterns"]; v) {
    if (!v.IsMap()) {
      return r.Error(v, path + ".patterns",
                     "must be a mapping of names to regular expressions, e.g. {order_id: "
                     "\"ORD-[0-9]{6}\"}");
    }
    if (v.size() > kMaxListItems) return r.Error(v, path + ".patterns", "has too many patterns");
    for (const auto& kv : v) {
      std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "";
      if (!IsSplitName(key) || kPiiKinds.count(key)) {
        return r.Error(kv.first, path + ".patterns",
                       "keys must be names of [a-z0-9_] other than the built-in kinds (got \"" +
                           Abbreviate(key, 40) + "\")");
      }
      std::string item = path + ".patterns." + key;
      TY_ASSIGN_OR_RETURN(auto compiled, r.Regex(kv.second, item));
      p.patterns.emplace_back(key, compiled->pattern());
    }
  }
  if (p.kinds.empty() && p.patterns.empty()) {
    return r.Error(n, path + ".kinds",
                   "name at least one PII kind (email, phone, card, iban, ip) or a pattern");
  }
  if (auto v = n["replacement"]; v) {
    TY_ASSIGN_OR_RETURN(p.replacement, r.String(v, path + ".replacement"));
    if (p.replacement.size() > 256) {
      return r.Error(v, path + ".replacement", "must be at most 256 bytes");
    }
  }
  return Status::Ok();
}

Status ReadTemplate(const SpecReader& r, const YAML::Node& n, const std::string& path,
                    TemplateStep& t) {
  TY_RETURN_IF_ERROR(r.OnlyKeys(
      n, path, {"format", "prompt_column", "response_column", "system", "output_column"}));
  if (!n["format"]) return r.Error(n, path + ".format", "is required (chatml, mistral or alpaca)");
  TY_ASSIGN_OR_RETURN(t.format, r.String(n["format"], path + ".format"));
  if (t.format != "chatml" && t.format != "mistral" && t.format != "alpaca") {
    return r.Error(n["format"], path + ".format",
                   "must be chatml, mistral or alpaca (got \"" + Abbreviate(t.format, 40) + "\")");
  }
  if (!n["prompt_column"]) return r.Error(n, path + ".prompt_column", "is required");
  TY_ASSIGN_OR_RETURN(t.prompt_column, r.Column(n["prompt_column"], path + ".prompt_column"));
  if (auto v = n["response_column"]; v) {
    TY_ASSIGN_OR_RETURN(t.response_column, r.Column(v, path + ".response_column"));
  }
  if (auto v = n["system"]; v) {
    TY_ASSIGN_OR_RETURN(t.system, r.String(v, path + ".system"));
    if (t.system.size() > 65536) return r.Error(v, path + ".system", "must be at most 64 KiB");
  }
  if (auto v = n["output_column"]; v) {
    TY_ASSIGN_OR_RETURN(t.output_column, r.Column(v, path + ".output_column"));
  }
  return Status::Ok();
}

Status ReadTokenize(const SpecReader& r, const YAML::Node& n, const std::string& path,
                    TokenizeStep& t) {
  TY_RETURN_IF_ERROR(
      r.OnlyKeys(n, path, {"column", "tokenizer", "output_column", "add_special_tokens"}));
  if (!n["tokenizer"]) return r.Error(n, path + ".tokenizer", "is required (a tokenizer.json)");
  TY_ASSIGN_OR_RETURN(t.tokenizer, r.NonEmpty(n["tokenizer"], path + ".tokenizer"));
  if (auto v = n["output_column"]; v) {
    TY_ASSIGN_OR_RETURN(t.output_column, r.Column(v, path + ".output_column"));
  }
  if (auto v = n["add_special_tokens"]; v) {
    TY_ASSIGN_OR_RETURN(t.add_special_tokens, r.Bool(v, path + ".add_special_tokens"));
  }
  return Status::Ok();
}

Status ReadSplit(const SpecReader& r, const YAML::Node& n, const std::string& path, SplitStep& s) {
  TY_RETURN_IF_ERROR(r.OnlyKeys(n, path, {"ratios", "seed", "group_by"}));
  const YAML::Node ratios = n["ratios"];
  if (!ratios) return r.Error(n, path + ".ratios", "is required, e.g. {train: 0.9, val: 0.1}");
  if (!ratios.IsMap() || ratios.size() == 0) {
    return r.Error(ratios, path + ".ratios",
                   "must be a mapping of split names to fractions, e.g. {train: 0.9, val: 0.1}");
  }
  if (ratios.size() > kMaxOutputs - 1) {
    return r.Error(ratios, path + ".ratios", "has too many splits");
  }
  double sum = 0;
  for (const auto& kv : ratios) {
    std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "";
    if (!IsSplitName(key) || key == "dropped" || key == "rows") {
      return r.Error(kv.first, path + ".ratios",
                     "split names must be 1-64 of [a-z0-9_], not dropped or rows (got \"" +
                         Abbreviate(key, 40) + "\")");
    }
    for (const auto& [other, ratio] : s.ratios) {
      if (other == key) return r.Error(kv.first, path + ".ratios." + key, "is given twice");
    }
    TY_ASSIGN_OR_RETURN(double x, r.Number(kv.second, path + ".ratios." + key, 0, 1, true, false,
                                           "a fraction in (0, 1]"));
    sum += x;
    s.ratios.emplace_back(key, x);
  }
  if (std::fabs(sum - 1.0) > 1e-9) {
    std::ostringstream got;
    got << sum;
    return r.Error(ratios, path + ".ratios", "must sum to 1 (got " + got.str() + ")");
  }
  if (auto v = n["seed"]; v) {
    TY_ASSIGN_OR_RETURN(s.seed, r.Seed(v, path + ".seed"));
  }
  if (auto v = n["group_by"]; v) {
    TY_ASSIGN_OR_RETURN(s.group_by, r.Column(v, path + ".group_by"));
  }
  return Status::Ok();
}

Status ReadStep(const SpecReader& r, const YAML::Node& item, size_t index, Step& step) {
  std::string path = "steps[" + std::to_string(index) + "]";
  if (!item.IsMap() || item.size() != 1) {
    return r.Error(item, path,
                   "must be a mapping with one key: filter, dedup_exact, dedup_near, redact_pii, "
                   "template, tokenize or split");
  }
  auto kv = *item.begin();
  std::string kind = kv.first.IsScalar() ? kv.first.Scalar() : "";
  static const std::pair<const char*, StepKind> kKinds[] = {
      {"filter", StepKind::kFilter},        {"dedup_exact", StepKind::kDedupExact},
      {"dedup_near", StepKind::kDedupNear}, {"redact_pii", StepKind::kRedactPii},
      {"template", StepKind::kTemplate},    {"tokenize", StepKind::kTokenize},
      {"split", StepKind::kSplit}};
  bool found = false;
  for (const auto& [name, k] : kKinds) {
    if (kind == name) {
      step.kind = k;
      found = true;
    }
  }
  if (!found) {
    return r.Error(kv.first, path,
                   "unknown step \"" + Abbreviate(kind, 40) +
                       "\"; steps are filter, dedup_exact, dedup_near, redact_pii, template, "
                       "tokenize and split");
  }
  path += "." + kind;
  const YAML::Node body = kv.second;
  // `dedup_exact:` with nothing after it is an empty mapping.
  if (body.IsNull() && step.kind == StepKind::kDedupExact) {
    step.line = item.Mark().line >= 0 ? item.Mark().line + 1 : 0;
    step.label = std::to_string(index) + "_" + kind;
    return Status::Ok();
  }
  if (!body.IsMap()) return r.Error(body.IsDefined() ? body : item, path, "must be a mapping");
  step.line = item.Mark().line >= 0 ? item.Mark().line + 1 : 0;
  step.label = std::to_string(index) + "_" + kind;
  if (auto v = body["column"]; v) {
    TY_ASSIGN_OR_RETURN(step.column, r.Column(v, path + ".column"));
  }
  switch (step.kind) {
    case StepKind::kFilter:
      return ReadFilter(r, body, path, step.filter);
    case StepKind::kDedupExact:
      return r.OnlyKeys(body, path, {"column"});
    case StepKind::kDedupNear:
      return ReadDedupNear(r, body, path, step.dedup_near);
    case StepKind::kRedactPii:
      return ReadRedact(r, body, path, step.redact_pii);
    case StepKind::kTemplate:
      return ReadTemplate(r, body, path, step.template_);
    case StepKind::kTokenize:
      return ReadTokenize(r, body, path, step.tokenize);
    case StepKind::kSplit:
      return ReadSplit(r, body, path, step.split);
  }
  return Status::Ok();
}

Status ReadOutputs(const SpecReader& r, const YAML::Node& n, PipelineSpec& spec) {
  if (!n.IsMap() || n.size() == 0) {
    return r.Error(n, "outputs",
                   "must be a mapping of outputs to catalog tables or {path: DIR}, e.g. "
                   "{train: main.s.train, dropped: {path: out/dropped}}");
  }
  if (n.size() > kMaxOutputs) return r.Error(n, "outputs", "has too many outputs");
  const Step* split = spec.SplitStepOrNull();
  std::set<std::string> expected = {"dropped"};
  if (split) {
    for (const auto& [name, ratio] : split->split.ratios) expected.insert(name);
  } else {
    expected.insert("rows");
  }
  std::set<std::string> tables, paths;
  for (const auto& kv : n) {
    std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "";
    std::string path = "outputs." + key;
    if (!expected.count(key)) {
      std::string names;
      for (const auto& e : expected) names += (names.empty() ? "" : ", ") + e;
      return r.Error(kv.first, "outputs",
                     "unknown output \"" + Abbreviate(key, 40) + "\"; this pipeline writes " +
                         names +
                         (split ? " (the split's names and dropped)"
                                : " (rows, and dropped; a split step names its own outputs)"));
    }
    OutputSpec out;
    out.name = key;
    const YAML::Node v = kv.second;
    if (v.IsMap()) {
      TY_RETURN_IF_ERROR(r.OnlyKeys(v, path, {"path"}));
      if (!v["path"]) return r.Error(v, path + ".path", "is required (a local directory)");
      TY_ASSIGN_OR_RETURN(out.path, r.NonEmpty(v["path"], path + ".path"));
      if (!paths.insert(out.path).second) {
        return r.Error(v["path"], path + ".path", "is the path of another output too");
      }
    } else {
      TY_ASSIGN_OR_RETURN(out.table, r.String(v, path));
      if (!IsTableName(out.table)) {
        return r.Error(v, path,
                       "must be a catalog table catalog.schema.table or {path: DIR} (got \"" +
                           Abbreviate(out.table, 80) + "\")");
      }
      if (out.table == spec.source.table) {
        return r.Error(v, path, "is the source table; write to another table");
      }
      if (!tables.insert(out.table).second) {
        return r.Error(v, path, "is the table of another output too");
      }
    }
    spec.outputs.push_back(std::move(out));
  }
  for (const auto& e : expected) {
    if (e == "dropped") continue;
    if (!spec.Output(e)) {
      return r.Error(n, "outputs." + e,
                     "is required: every row kept goes to an output (add " + e +
                         ": catalog.schema.table or {path: DIR})");
    }
  }
  std::sort(spec.outputs.begin(), spec.outputs.end(),
            [](const OutputSpec& a, const OutputSpec& b) { return a.name < b.name; });
  return Status::Ok();
}

Result<PipelineSpec> ParseRoot(const SpecReader& r, const YAML::Node& root) {
  if (!root.IsMap()) {
    return r.Error(root, "",
                   "the pipeline spec must be a mapping with name, source, steps and outputs");
  }
  TY_RETURN_IF_ERROR(r.OnlyKeys(root, "", {"name", "source", "text_column", "steps", "outputs"}));
  PipelineSpec spec;
  if (!root["name"]) return r.Error(root, "name", "is required");
  TY_ASSIGN_OR_RETURN(spec.name, r.String(root["name"], "name"));
  if (!IsPipelineName(spec.name)) {
    return r.Error(root["name"], "name",
                   "must be 1-128 letters, digits, '.', '_' or '-' (got \"" +
                       Abbreviate(spec.name, 60) + "\")");
  }
  if (!root["source"]) return r.Error(root, "source", "is required (table: or files:)");
  TY_RETURN_IF_ERROR(ReadSource(r, root["source"], spec.source));
  if (auto v = root["text_column"]; v) {
    TY_ASSIGN_OR_RETURN(spec.text_column, r.Column(v, "text_column"));
  }
  if (auto steps = root["steps"]; steps) {
    if (!steps.IsSequence()) return r.Error(steps, "steps", "must be a list");
    if (steps.size() > kMaxSteps) {
      return r.Error(steps, "steps", "must have at most " + std::to_string(kMaxSteps) + " steps");
    }
    for (size_t i = 0; i < steps.size(); ++i) {
      Step step;
      TY_RETURN_IF_ERROR(ReadStep(r, steps[i], i, step));
      if (step.kind == StepKind::kSplit && i + 1 != steps.size()) {
        return r.Error(steps[i], "steps[" + std::to_string(i) + "].split",
                       "must be the last step (it assigns the rows that remain to outputs)");
      }
      if (step.column.empty()) step.column = spec.text_column;
      spec.steps.push_back(std::move(step));
    }
  }
  if (!root["outputs"]) return r.Error(root, "outputs", "is required");
  TY_RETURN_IF_ERROR(ReadOutputs(r, root["outputs"], spec));
  return spec;
}

}  // namespace

std::string_view StepKindName(StepKind kind) {
  switch (kind) {
    case StepKind::kFilter:
      return "filter";
    case StepKind::kDedupExact:
      return "dedup_exact";
    case StepKind::kDedupNear:
      return "dedup_near";
    case StepKind::kRedactPii:
      return "redact_pii";
    case StepKind::kTemplate:
      return "template";
    case StepKind::kTokenize:
      return "tokenize";
    case StepKind::kSplit:
      return "split";
  }
  return "?";
}

const OutputSpec* PipelineSpec::Output(std::string_view output_name) const {
  for (const auto& o : outputs) {
    if (o.name == output_name) return &o;
  }
  return nullptr;
}

const Step* PipelineSpec::SplitStepOrNull() const {
  for (const auto& s : steps) {
    if (s.kind == StepKind::kSplit) return &s;
  }
  return nullptr;
}

Result<PipelineSpec> ParsePipelineSpec(std::string_view text, std::string_view filename) {
  SpecReader reader(filename);
  std::string prefix = filename.empty() ? "" : std::string(filename) + ": ";
  TY_ASSIGN_OR_RETURN(YAML::Node root, LoadYamlDocument(text, filename, "the pipeline spec"));
  try {
    TY_ASSIGN_OR_RETURN(PipelineSpec spec, ParseRoot(reader, root));
    spec.version = Sha256Hex(text);
    return spec;
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(prefix + "invalid pipeline spec: " + e.msg);
  }
}

Result<PipelineSpec> LoadPipelineSpec(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return Status::NotFound("cannot read the pipeline spec " + path +
                            ": no such file or not readable");
  }
  std::ostringstream text;
  text << in.rdbuf();
  std::string name = path;
  size_t slash = path.find_last_of('/');
  TY_ASSIGN_OR_RETURN(PipelineSpec spec, ParsePipelineSpec(text.str(), name));
  spec.base_dir = slash == std::string::npos ? "" : path.substr(0, slash);
  return spec;
}

}  // namespace trainyard::prep
