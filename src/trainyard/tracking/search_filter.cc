#include "trainyard/tracking/search_filter.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <optional>
#include <set>
#include <span>
#include <utility>

#include "trainyard/common/strings.h"

namespace trainyard::tracking {

std::string_view EntityTypeName(EntityType type) {
  switch (type) {
    case EntityType::kAttribute:
      return "attributes";
    case EntityType::kMetric:
      return "metrics";
    case EntityType::kParam:
      return "params";
    case EntityType::kTag:
      return "tags";
    case EntityType::kDataset:
      return "datasets";
  }
  return "?";
}

std::string_view CompareOpName(CompareOp op) {
  switch (op) {
    case CompareOp::kEq:
      return "=";
    case CompareOp::kNe:
      return "!=";
    case CompareOp::kLt:
      return "<";
    case CompareOp::kLe:
      return "<=";
    case CompareOp::kGt:
      return ">";
    case CompareOp::kGe:
      return ">=";
    case CompareOp::kLike:
      return "LIKE";
    case CompareOp::kILike:
      return "ILIKE";
    case CompareOp::kIn:
      return "IN";
    case CompareOp::kNotIn:
      return "NOT IN";
    case CompareOp::kIsNull:
      return "IS NULL";
    case CompareOp::kIsNotNull:
      return "IS NOT NULL";
  }
  return "?";
}

namespace {

constexpr std::string_view kAllOps =
    "=, !=, <, <=, >, >=, LIKE, ILIKE, IN, NOT IN, IS NULL, IS NOT NULL";

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool IsAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsWordChar(char c) { return IsAlpha(c) || IsDigit(c) || c == '_'; }
// Characters of an unquoted key: MLflow's valid names ([/\w.\- :] less the space) and UTF-8.
bool IsKeyChar(char c) {
  return IsWordChar(c) || c == '.' || c == '-' || c == '/' || c == ':' ||
         static_cast<unsigned char>(c) >= 0x80;
}

// `s` with control bytes escaped, for error messages.
std::string Printable(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 0xf];
    } else {
      out += c;
    }
  }
  return out;
}

// 'text', or "text" when text holds a single quote.
std::string Quoted(std::string_view text) {
  std::string p = Printable(Abbreviate(text, 60));
  char q = p.find('\'') == std::string::npos ? '\'' : '"';
  return q + p + q;
}

bool IsNumericCompare(CompareOp op) {
  switch (op) {
    case CompareOp::kEq:
    case CompareOp::kNe:
    case CompareOp::kLt:
    case CompareOp::kLe:
    case CompareOp::kGt:
    case CompareOp::kGe:
      return true;
    default:
      return false;
  }
}
bool IsListOp(CompareOp op) { return op == CompareOp::kIn || op == CompareOp::kNotIn; }
bool IsNullOp(CompareOp op) { return op == CompareOp::kIsNull || op == CompareOp::kIsNotNull; }
bool IsStringOp(CompareOp op, bool allow_list, bool allow_null) {
  switch (op) {
    case CompareOp::kEq:
    case CompareOp::kNe:
    case CompareOp::kLike:
    case CompareOp::kILike:
      return true;
    case CompareOp::kIn:
    case CompareOp::kNotIn:
      return allow_list;
    case CompareOp::kIsNull:
    case CompareOp::kIsNotNull:
      return allow_null;
    default:
      return false;
  }
}

std::optional<EntityType> EntityTypeFromName(std::string_view name) {
  std::string n = ToLower(name);
  if (n == "metric" || n == "metrics") return EntityType::kMetric;
  if (n == "param" || n == "params" || n == "parameter" || n == "parameters") {
    return EntityType::kParam;
  }
  if (n == "tag" || n == "tags") return EntityType::kTag;
  if (n == "attribute" || n == "attributes" || n == "attr" || n == "run") {
    return EntityType::kAttribute;
  }
  if (n == "dataset" || n == "datasets") return EntityType::kDataset;
  return std::nullopt;
}

// How a comparison or order_by key reads in messages: "metrics.acc", "run_name".
std::string KeyDisplay(EntityType type, std::string_view key) {
  if (type == EntityType::kAttribute) return std::string(key);
  return std::string(EntityTypeName(type)) + "." + std::string(key);
}

struct Identifier {
  EntityType type = EntityType::kAttribute;
  std::string key;
  size_t position = 0;
};

// A cursor over one filter or order_by clause. Every Read* either consumes input or returns an
// error, so the loops that call them terminate.
class Parser {
 public:
  Parser(std::string_view input, std::string_view what) : input_(input), what_(what) {}

  Status Error(size_t pos, std::string_view message) const {
    return Status::InvalidArgument(
        "invalid " + std::string(what_) + " '" + Printable(Abbreviate(input_, 200)) +
        "': " + std::string(message) + " at position " + std::to_string(pos));
  }

  void SkipSpace() {
    while (pos_ < input_.size() && IsSpace(input_[pos_])) ++pos_;
  }
  bool AtEnd() const { return pos_ >= input_.size(); }
  size_t pos() const { return pos_; }
  char Peek() const { return pos_ < input_.size() ? input_[pos_] : '\0'; }

  // What is at `pos`, for "got ..." in messages.
  std::string Describe(size_t pos) const {
    if (pos >= input_.size()) return "end of " + std::string(what_);
    size_t end = pos;
    if (IsWordChar(input_[pos])) {
      while (end < input_.size() && IsKeyChar(input_[end])) ++end;
    } else if (std::string_view("<>=!").find(input_[pos]) != std::string_view::npos) {
      while (end < input_.size() &&
             std::string_view("<>=!").find(input_[end]) != std::string_view::npos) {
        ++end;
      }
    } else {
      end = pos + 1;
    }
    return Quoted(input_.substr(pos, end - pos));
  }

  // The word ([A-Za-z0-9_]*) at the cursor, without consuming it.
  std::string_view PeekWord() const {
    size_t end = pos_;
    while (end < input_.size() && IsWordChar(input_[end])) ++end;
    return input_.substr(pos_, end - pos_);
  }
  std::string ReadWordUpper() {
    std::string word = ToUpper(PeekWord());
    pos_ += word.size();
    return word;
  }

  // A string quoted with ', " or ` (the cursor is on the quote). The quote is escaped inside by
  // doubling it or with a backslash; "\\" is one backslash; other backslashes are kept.
  Result<std::string> ReadQuoted() {
    size_t start = pos_;
    char q = input_[pos_++];
    std::string out;
    while (pos_ < input_.size()) {
      char c = input_[pos_];
      if (c == '\\' && pos_ + 1 < input_.size() &&
          (input_[pos_ + 1] == q || input_[pos_ + 1] == '\\')) {
        out += input_[pos_ + 1];
        pos_ += 2;
      } else if (c == q) {
        if (pos_ + 1 < input_.size() && input_[pos_ + 1] == q) {
          out += q;
          pos_ += 2;
        } else {
          ++pos_;
          return out;
        }
      } else {
        out += c;
        ++pos_;
      }
    }
    return Error(start, std::string("unterminated string: no closing ") + q + " for the quote");
  }

  Result<Identifier> ReadIdentifier() {
    SkipSpace();
    Identifier id;
    id.position = pos_;
    char c = Peek();
    std::string head;
    bool head_quoted = false;
    if (c == '"' || c == '`') {
      TY_ASSIGN_OR_RETURN(head, ReadQuoted());
      head_quoted = true;
    } else if (IsAlpha(c) || c == '_') {
      std::string word = ToUpper(PeekWord());
      if (word == "AND" || word == "OR" || word == "NOT") {
        return Error(id.position, "expected a key such as metrics.<name>, got " + Quoted(word));
      }
      while (!AtEnd() && IsWordChar(Peek())) head += input_[pos_++];
    } else {
      return Error(id.position,
                   "expected a key such as metrics.<name>, params.<name>, tags.<name> or an "
                   "attribute such as run_name, got " +
                       Describe(id.position));
    }
    if (Peek() != '.') {
      // A bare attribute. An unquoted one continues over key characters ("run-name"), so that
      // an unknown attribute is named whole in the error.
      if (!head_quoted) {
        while (!AtEnd() && IsKeyChar(Peek())) head += input_[pos_++];
      }
      if (head.empty()) return Error(id.position, "empty attribute name");
      id.type = EntityType::kAttribute;
      id.key = std::move(head);
      return id;
    }
    ++pos_;  // the '.'
    std::optional<EntityType> type = EntityTypeFromName(head);
    if (!type) {
      return Error(id.position, "unknown entity type " + Quoted(head) +
                                    "; expected metrics, params, tags, attributes or datasets");
    }
    id.type = *type;
    size_t key_pos = pos_;
    if (Peek() == '"' || Peek() == '`') {
      TY_ASSIGN_OR_RETURN(id.key, ReadQuoted());
      if (id.key.empty()) return Error(key_pos, "empty key");
    } else {
      while (!AtEnd() && IsKeyChar(Peek())) id.key += input_[pos_++];
      if (id.key.empty()) {
        return Error(key_pos, "missing key after '" + Printable(head) + ".' (quote keys with " +
                                  "spaces: " + Printable(head) + ".`my key`), got " +
                                  Describe(key_pos));
      }
    }
    return id;
  }

  // `key` is the identifier before the operator, as messages show it.
  Result<CompareOp> ReadOperator(std::string_view key) {
    SkipSpace();
    size_t start = pos_;
    auto expected = [&] {
      return "expected an operator after " + Quoted(key) + " (one of " + std::string(kAllOps) +
             "), got " + Describe(start);
    };
    if (AtEnd()) return Error(start, expected());
    char c = Peek();
    if (std::string_view("<>=!").find(c) != std::string_view::npos) {
      size_t end = pos_;
      while (end < input_.size() &&
             std::string_view("<>=!").find(input_[end]) != std::string_view::npos) {
        ++end;
      }
      std::string_view sym = input_.substr(pos_, end - pos_);
      static constexpr std::pair<std::string_view, CompareOp> kSymbols[] = {
          {"=", CompareOp::kEq}, {"!=", CompareOp::kNe}, {"<>", CompareOp::kNe},
          {"<", CompareOp::kLt}, {"<=", CompareOp::kLe}, {">", CompareOp::kGt},
          {">=", CompareOp::kGe}};
      for (const auto& [text, op] : kSymbols) {
        if (sym == text) {
          pos_ = end;
          return op;
        }
      }
      return Error(start,
                   "unknown operator " + Quoted(sym) + "; expected one of " + std::string(kAllOps));
    }
    if (!IsAlpha(c)) return Error(start, expected());
    std::string word = ReadWordUpper();
    if (word == "LIKE") return CompareOp::kLike;
    if (word == "ILIKE") return CompareOp::kILike;
    if (word == "IN") return CompareOp::kIn;
    if (word == "NOT") {
      SkipSpace();
      size_t next = pos_;
      if (ReadWordUpper() == "IN") return CompareOp::kNotIn;
      return Error(next,
                   "expected IN after NOT (NOT LIKE is not supported), got " + Describe(next));
    }
    if (word == "IS") {
      SkipSpace();
      size_t next = pos_;
      std::string w = ReadWordUpper();
      bool negated = w == "NOT";
      if (negated) {
        SkipSpace();
        next = pos_;
        w = ReadWordUpper();
      }
      if (w == "NULL") return negated ? CompareOp::kIsNotNull : CompareOp::kIsNull;
      return Error(next, "expected NULL or NOT NULL after IS, got " + Describe(next));
    }
    pos_ = start;
    return Error(
        start, "unknown operator " + Describe(start) + "; expected one of " + std::string(kAllOps));
  }

  // A quoted string or a number.
  Result<FilterValue> ReadValue() {
    SkipSpace();
    size_t start = pos_;
    char c = Peek();
    if (c == '\'' || c == '"' || c == '`') {
      TY_ASSIGN_OR_RETURN(std::string s, ReadQuoted());
      return FilterValue{ValueKind::kString, std::move(s)};
    }
    if (IsDigit(c) || c == '.' || c == '+' || c == '-') return ReadNumber();
    if (AtEnd()) return Error(start, "expected a value, got end of " + std::string(what_));
    if (c == '(') return Error(start, "a list of values needs IN or NOT IN");
    std::string_view word = PeekWord();
    if (ToUpper(word) == "NULL") {
      return Error(start, "NULL is not a value; use IS NULL or IS NOT NULL");
    }
    if (!word.empty()) {
      return Error(start, "expected a quoted string or a number, got " + Quoted(word) +
                              " (quote strings: '" + Printable(Abbreviate(word, 60)) + "')");
    }
    return Error(start, "expected a quoted string or a number, got " + Describe(start));
  }

  // [+-] (digits [. digits] | . digits) [(e|E) [+-] digits]
  Result<FilterValue> ReadNumber() {
    size_t start = pos_;
    size_t p = pos_;
    auto digits = [&] {
      size_t n = 0;
      while (p < input_.size() && IsDigit(input_[p])) ++p, ++n;
      return n;
    };
    if (input_[p] == '+' || input_[p] == '-') ++p;
    size_t mantissa = digits();
    if (p < input_.size() && input_[p] == '.') {
      ++p;
      mantissa += digits();
    }
    bool ok = mantissa > 0;
    if (ok && p < input_.size() && (input_[p] == 'e' || input_[p] == 'E')) {
      ++p;
      if (p < input_.size() && (input_[p] == '+' || input_[p] == '-')) ++p;
      ok = digits() > 0;
    }
    if (ok && p < input_.size() && (IsWordChar(input_[p]) || input_[p] == '.')) ok = false;
    if (!ok) {
      size_t end = p;
      while (end < input_.size() && (IsKeyChar(input_[end]) || input_[end] == '+')) ++end;
      return Error(start, "invalid number " +
                              Quoted(input_.substr(start, std::max(end, start + 1) - start)));
    }
    pos_ = p;
    return FilterValue{ValueKind::kNumber, std::string(input_.substr(start, p - start))};
  }

  // '(' value (',' value)* [','] ')'; `positions` gets where each value starts.
  Status ReadList(std::vector<FilterValue>& values, std::vector<size_t>& positions,
                  size_t& total_values) {
    SkipSpace();
    size_t start = pos_;
    if (Peek() != '(') {
      return Error(start, "expected a parenthesized list such as ('a', 'b') after IN, got " +
                              Describe(start));
    }
    ++pos_;
    while (true) {
      SkipSpace();
      if (Peek() == ')' && !values.empty()) {  // after a trailing comma
        ++pos_;
        return Status::Ok();
      }
      if (Peek() == ')') return Error(start, "empty list: IN needs at least one value");
      if (++total_values > kMaxFilterValues) {
        return Error(pos_, "too many values (at most " + std::to_string(kMaxFilterValues) + ")");
      }
      positions.push_back(pos_);
      TY_ASSIGN_OR_RETURN(FilterValue v, ReadValue());
      values.push_back(std::move(v));
      SkipSpace();
      if (Peek() == ',') {
        ++pos_;
      } else if (Peek() == ')') {
        ++pos_;
        return Status::Ok();
      } else if (AtEnd()) {
        return Error(start, "unterminated list: no closing ')' for the '('");
      } else {
        return Error(pos_, "expected ',' or ')' in the list, got " + Describe(pos_));
      }
    }
  }

  static std::string ToUpper(std::string_view s) {
    std::string out(s);
    for (char& c : out) {
      if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
    }
    return out;
  }

 private:
  std::string_view input_;
  std::string_view what_;
  size_t pos_ = 0;
};

// The checks on a comparison that do not depend on the search.
Status CheckEntityRules(const Parser& p, const Comparison& c, size_t op_pos,
                        const std::vector<size_t>& value_positions) {
  auto op_error = [&](std::string_view allowed) {
    return p.Error(op_pos, std::string(EntityTypeName(c.type)) + " compare with " +
                               std::string(allowed) + " (got " + std::string(CompareOpName(c.op)) +
                               ")");
  };
  auto all_strings = [&](std::string_view noun) -> Status {
    for (size_t i = 0; i < c.values.size(); ++i) {
      if (c.values[i].kind != ValueKind::kString) {
        return p.Error(value_positions[i],
                       std::string(noun) + " value must be a quoted string (got " +
                           c.values[i].text + "; write '" + c.values[i].text + "')");
      }
    }
    return Status::Ok();
  };
  switch (c.type) {
    case EntityType::kMetric:
      if (!IsNumericCompare(c.op)) return op_error("=, !=, <, <=, >, >=");
      if (c.values[0].kind != ValueKind::kNumber) {
        return p.Error(value_positions[0],
                       "metric value must be a number (got " + Quoted(c.values[0].text) + ")");
      }
      return Status::Ok();
    case EntityType::kParam:
    case EntityType::kTag:
      if (!IsStringOp(c.op, true, true)) {
        return op_error("=, !=, LIKE, ILIKE, IN, NOT IN, IS NULL, IS NOT NULL");
      }
      return all_strings(c.type == EntityType::kParam ? "param" : "tag");
    case EntityType::kDataset:
      if (c.key != "name" && c.key != "digest" && c.key != "context") {
        return p.Error(c.position, "unknown dataset field " + Quoted(c.key) +
                                       "; expected datasets.name, datasets.digest or "
                                       "datasets.context");
      }
      if (!IsStringOp(c.op, true, false)) return op_error("=, !=, LIKE, ILIKE, IN, NOT IN");
      return all_strings("dataset");
    case EntityType::kAttribute:
      return Status::Ok();  // per search, in the compilers
  }
  return Status::Ok();
}

}  // namespace

Result<std::vector<Comparison>> ParseSearchFilter(std::string_view filter) {
  Parser p(filter, "filter");
  if (filter.size() > kMaxFilterLength) {
    return Status::InvalidArgument("invalid filter: " + std::to_string(filter.size()) +
                                   " bytes long; at most " + std::to_string(kMaxFilterLength) +
                                   " are allowed");
  }
  std::vector<Comparison> out;
  size_t total_values = 0;
  p.SkipSpace();
  if (p.AtEnd()) return out;
  while (true) {
    if (out.size() == kMaxComparisons) {
      return p.Error(p.pos(),
                     "too many comparisons (at most " + std::to_string(kMaxComparisons) + ")");
    }
    TY_ASSIGN_OR_RETURN(Identifier id, p.ReadIdentifier());
    Comparison c;
    c.type = id.type;
    c.key = std::move(id.key);
    c.position = id.position;
    p.SkipSpace();
    size_t op_pos = p.pos();
    TY_ASSIGN_OR_RETURN(c.op, p.ReadOperator(KeyDisplay(c.type, c.key)));
    std::vector<size_t> value_positions;
    if (IsListOp(c.op)) {
      TY_RETURN_IF_ERROR(p.ReadList(c.values, value_positions, total_values));
    } else if (!IsNullOp(c.op)) {
      if (++total_values > kMaxFilterValues) {
        return p.Error(p.pos(),
                       "too many values (at most " + std::to_string(kMaxFilterValues) + ")");
      }
      p.SkipSpace();
      value_positions.push_back(p.pos());
      TY_ASSIGN_OR_RETURN(FilterValue v, p.ReadValue());
      c.values.push_back(std::move(v));
    }
    TY_RETURN_IF_ERROR(CheckEntityRules(p, c, op_pos, value_positions));
    out.push_back(std::move(c));

    p.SkipSpace();
    if (p.AtEnd()) return out;
    size_t next = p.pos();
    std::string word = Parser::ToUpper(p.PeekWord());
    if (word == "AND") {
      p.ReadWordUpper();
      continue;
    }
    if (word == "OR") {
      return p.Error(next, "OR is not supported; MLflow filters combine comparisons with AND");
    }
    return p.Error(next, "expected AND or the end of the filter, got " + p.Describe(next));
  }
}

Result<OrderBy> ParseOrderBy(std::string_view clause) {
  Parser p(clause, "order_by");
  if (clause.size() > kMaxFilterLength) {
    return Status::InvalidArgument("invalid order_by: " + std::to_string(clause.size()) +
                                   " bytes long; at most " + std::to_string(kMaxFilterLength) +
                                   " are allowed");
  }
  p.SkipSpace();
  if (p.AtEnd()) {
    return p.Error(0,
                   "empty clause; expected a key such as metrics.acc, optionally followed by "
                   "ASC or DESC");
  }
  TY_ASSIGN_OR_RETURN(Identifier id, p.ReadIdentifier());
  OrderBy out{id.type, std::move(id.key), true};
  p.SkipSpace();
  if (p.AtEnd()) return out;
  size_t next = p.pos();
  std::string word = p.ReadWordUpper();
  if (word == "ASC" || word == "DESC") {
    out.ascending = word == "ASC";
  } else {
    return p.Error(next, "expected ASC or DESC after " + Quoted(KeyDisplay(out.type, out.key)) +
                             ", got " + p.Describe(next) +
                             " (quote keys with spaces: " + "metrics.`my metric`)");
  }
  p.SkipSpace();
  if (!p.AtEnd()) {
    return p.Error(p.pos(), "unexpected " + p.Describe(p.pos()) + " after " + word);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Compilers
// ---------------------------------------------------------------------------------------------

namespace {

enum class AttributeType {
  kString,     // text column; string values
  kNumber,     // numeric column; number values
  kIntegerId,  // BIGINT id that MLflow shows as a string: '12' or 12; = != IN NOT IN
};

struct AttributeSpec {
  std::string_view name;
  std::string_view column;  // qualified, e.g. "runs.run_uuid"
  AttributeType type;
  bool filterable;
  bool allows_list;  // IN / NOT IN, for string attributes
  bool nullable;     // the column may be NULL: sorting adds a NULLs-last key
};

struct AliasSpec {
  std::string_view alias;
  std::string_view name;
};

enum class MetricSource { kNone, kRunLatest, kLoggedModelLatest };

struct SearchSpec {
  std::string_view noun;  // "run": "unknown run attribute ..."
  std::span<const AttributeSpec> attributes;
  std::span<const AliasSpec> aliases;
  // "<table> kv WHERE <correlation>" for params and tags; empty where the search has none.
  std::string_view params_source;
  std::string_view tags_source;
  MetricSource metrics = MetricSource::kNone;
  bool datasets = false;
  bool order_by_params_and_tags = false;
  std::span<const OrderBy> default_order;                           // used when order_by is empty
  std::span<const std::pair<std::string_view, bool>> tie_breakers;  // attribute, ascending
};

// --- runs ---
constexpr AttributeSpec kRunAttributes[] = {
    {"run_id", "runs.run_uuid", AttributeType::kString, true, true, false},
    {"run_name", "runs.name", AttributeType::kString, true, false, false},
    {"status", "runs.status", AttributeType::kString, true, false, false},
    {"user_id", "runs.user_id", AttributeType::kString, true, false, false},
    {"artifact_uri", "runs.artifact_uri", AttributeType::kString, true, false, false},
    {"lifecycle_stage", "runs.lifecycle_stage", AttributeType::kString, true, false, false},
    {"start_time", "runs.start_time", AttributeType::kNumber, true, false, true},
    {"end_time", "runs.end_time", AttributeType::kNumber, true, false, true},
    {"experiment_id", "runs.experiment_id", AttributeType::kIntegerId, false, false, false},
};
constexpr AliasSpec kRunAliases[] = {{"created", "start_time"},
                                     {"Created", "start_time"},
                                     {"run name", "run_name"},
                                     {"Run name", "run_name"},
                                     {"Run Name", "run_name"}};
constexpr std::pair<std::string_view, bool> kRunTieBreakers[] = {{"start_time", false},
                                                                 {"run_id", true}};

// --- experiments ---
constexpr AttributeSpec kExperimentAttributes[] = {
    {"name", "experiments.name", AttributeType::kString, true, false, false},
    {"creation_time", "experiments.creation_time", AttributeType::kNumber, true, false, false},
    {"last_update_time", "experiments.last_update_time", AttributeType::kNumber, true, false,
     false},
    {"experiment_id", "experiments.experiment_id", AttributeType::kIntegerId, true, true, false},
};
constexpr std::pair<std::string_view, bool> kExperimentTieBreakers[] = {{"experiment_id", false}};

// --- logged models ---
constexpr AttributeSpec kLoggedModelAttributes[] = {
    {"name", "logged_models.name", AttributeType::kString, true, true, false},
    {"model_id", "logged_models.model_id", AttributeType::kString, true, true, false},
    {"model_type", "logged_models.model_type", AttributeType::kString, true, true, true},
    {"status", "logged_models.status", AttributeType::kString, true, true, false},
    {"source_run_id", "logged_models.source_run_id", AttributeType::kString, true, true, true},
    {"creation_timestamp", "logged_models.creation_timestamp", AttributeType::kNumber, true, false,
     false},
    {"last_updated_timestamp", "logged_models.last_updated_timestamp", AttributeType::kNumber, true,
     false, false},
};
constexpr AliasSpec kLoggedModelAliases[] = {{"creation_time", "creation_timestamp"},
                                             {"last_updated_time", "last_updated_timestamp"}};
constexpr std::pair<std::string_view, bool> kLoggedModelTieBreakers[] = {
    {"creation_timestamp", false}, {"model_id", true}};

// --- registered models (assumed tables) ---
constexpr AttributeSpec kRegisteredModelAttributes[] = {
    {"name", "registered_models.name", AttributeType::kString, true, false, false},
    {"creation_timestamp", "registered_models.creation_timestamp", AttributeType::kNumber, false,
     false, false},
    {"last_updated_timestamp", "registered_models.last_updated_timestamp", AttributeType::kNumber,
     false, false, false},
};
constexpr std::pair<std::string_view, bool> kRegisteredModelTieBreakers[] = {{"name", true}};

// --- model versions (assumed tables) ---
constexpr AttributeSpec kModelVersionAttributes[] = {
    {"name", "model_versions.name", AttributeType::kString, true, false, false},
    {"run_id", "model_versions.run_id", AttributeType::kString, true, true, true},
    {"source_path", "model_versions.source", AttributeType::kString, true, false, true},
    {"version_number", "model_versions.version", AttributeType::kNumber, true, false, false},
    {"creation_timestamp", "model_versions.creation_timestamp", AttributeType::kNumber, false,
     false, false},
    {"last_updated_timestamp", "model_versions.last_updated_timestamp", AttributeType::kNumber,
     false, false, false},
};
constexpr std::pair<std::string_view, bool> kModelVersionTieBreakers[] = {
    {"name", true}, {"version_number", false}};

const SearchSpec& RunSpec() {
  static const SearchSpec* spec = new SearchSpec{
      .noun = "run",
      .attributes = kRunAttributes,
      .aliases = kRunAliases,
      .params_source = "params kv WHERE kv.run_uuid = runs.run_uuid",
      .tags_source = "tags kv WHERE kv.run_uuid = runs.run_uuid",
      .metrics = MetricSource::kRunLatest,
      .datasets = true,
      .order_by_params_and_tags = true,
      .default_order = {},
      .tie_breakers = kRunTieBreakers,
  };
  return *spec;
}

const SearchSpec& ExperimentSpec() {
  static const OrderBy* default_order =
      new OrderBy[2]{{EntityType::kAttribute, "creation_time", false},
                     {EntityType::kAttribute, "experiment_id", true}};
  static const SearchSpec* spec = new SearchSpec{
      .noun = "experiment",
      .attributes = kExperimentAttributes,
      .aliases = {},
      .params_source = {},
      .tags_source = "experiment_tags kv WHERE kv.experiment_id = experiments.experiment_id",
      .metrics = MetricSource::kNone,
      .datasets = false,
      .order_by_params_and_tags = false,
      .default_order = std::span<const OrderBy>(default_order, 2),
      .tie_breakers = kExperimentTieBreakers,
  };
  return *spec;
}

const SearchSpec& LoggedModelSpec() {
  static const SearchSpec* spec = new SearchSpec{
      .noun = "logged model",
      .attributes = kLoggedModelAttributes,
      .aliases = kLoggedModelAliases,
      .params_source = "logged_model_params kv WHERE kv.model_id = logged_models.model_id",
      .tags_source = "logged_model_tags kv WHERE kv.model_id = logged_models.model_id",
      .metrics = MetricSource::kLoggedModelLatest,
      .datasets = false,
      .order_by_params_and_tags = false,
      .default_order = {},
      .tie_breakers = kLoggedModelTieBreakers,
  };
  return *spec;
}

const SearchSpec& RegisteredModelSpec() {
  static const SearchSpec* spec = new SearchSpec{
      .noun = "registered model",
      .attributes = kRegisteredModelAttributes,
      .aliases = {},
      .params_source = {},
      .tags_source = "registered_model_tags kv WHERE kv.name = registered_models.name",
      .metrics = MetricSource::kNone,
      .datasets = false,
      .order_by_params_and_tags = false,
      .default_order = {},
      .tie_breakers = kRegisteredModelTieBreakers,
  };
  return *spec;
}

const SearchSpec& ModelVersionSpec() {
  static const SearchSpec* spec = new SearchSpec{
      .noun = "model version",
      .attributes = kModelVersionAttributes,
      .aliases = {},
      .params_source = {},
      .tags_source =
          "model_version_tags kv WHERE kv.name = model_versions.name AND "
          "kv.version = model_versions.version",
      .metrics = MetricSource::kNone,
      .datasets = false,
      .order_by_params_and_tags = false,
      .default_order = {},
      .tie_breakers = kModelVersionTieBreakers,
  };
  return *spec;
}

// "a, b, c" over the attributes that are filterable (or orderable: all of them).
std::string AttributeList(const SearchSpec& spec, bool for_filter) {
  std::string out;
  for (const AttributeSpec& a : spec.attributes) {
    if (for_filter && !a.filterable) continue;
    if (!out.empty()) out += ", ";
    out += a.name;
  }
  return out;
}

// What a filter of this search may name, for "unsupported entity" errors.
std::string FilterKeysList(const SearchSpec& spec) {
  std::string out = "attributes (" + AttributeList(spec, true) + ")";
  if (spec.metrics != MetricSource::kNone) out += ", metrics.<key>";
  if (!spec.params_source.empty()) out += ", params.<key>";
  if (!spec.tags_source.empty()) out += ", tags.<key>";
  if (spec.datasets) out += ", datasets.name, datasets.digest, datasets.context";
  return out;
}

std::string AtPosition(size_t position) { return " at position " + std::to_string(position); }

Status FilterError(const Comparison& c, std::string_view message) {
  return Status::InvalidArgument("invalid filter: " + std::string(message) +
                                 AtPosition(c.position));
}

const AttributeSpec* FindAttribute(const SearchSpec& spec, std::string_view key) {
  for (const AliasSpec& a : spec.aliases) {
    if (a.alias == key) {
      key = a.name;
      break;
    }
  }
  for (const AttributeSpec& a : spec.attributes) {
    if (a.name == key) return &a;
  }
  return nullptr;
}

// A number literal as a bound value: an exact int64 where it is an integer in range (unless
// `as_double`), else a finite double.
std::optional<store::Value> NumberParam(std::string_view text, bool as_double) {
  if (!text.empty() && text[0] == '+') text.remove_prefix(1);
  if (!as_double && text.find_first_of(".eE") == std::string_view::npos) {
    if (std::optional<int64_t> i = ParseInt64(text)) return store::Value(*i);
  }
  double d = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), d);
  if (ec != std::errc() || ptr != text.data() + text.size() || !std::isfinite(d)) {
    return std::nullopt;
  }
  return store::Value(d);
}

// LIKE patterns use ESCAPE '\': a trailing lone backslash is an error on PostgreSQL, so reject it.
bool LikePatternOk(std::string_view pattern) {
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '\\') {
      if (i + 1 == pattern.size()) return false;
      ++i;
    }
  }
  return true;
}

// Checks that `c` carries as many values as its operator needs (callers may build comparisons
// by hand).
Status CheckArity(const Comparison& c) {
  bool ok = IsListOp(c.op) ? !c.values.empty()
                           : (IsNullOp(c.op) ? c.values.empty() : c.values.size() == 1);
  if (ok) return Status::Ok();
  return FilterError(c, std::string(CompareOpName(c.op)) + " on " +
                            Quoted(KeyDisplay(c.type, c.key)) + " got " +
                            std::to_string(c.values.size()) + " values");
}

// Binds string values, checking LIKE patterns.
Status BindStrings(const Comparison& c, std::string_view noun, std::vector<store::Value>& params) {
  for (const FilterValue& v : c.values) {
    if (v.kind != ValueKind::kString) {
      return FilterError(c, std::string(noun) + " value must be a quoted string (got " + v.text +
                                "; write '" + v.text + "')");
    }
    if ((c.op == CompareOp::kLike || c.op == CompareOp::kILike) && !LikePatternOk(v.text)) {
      return FilterError(c, "LIKE pattern " + Quoted(v.text) +
                                " ends with a lone backslash (escape character); write \\\\ for a "
                                "literal backslash");
    }
    params.emplace_back(v.text);
  }
  return Status::Ok();
}

// `expr <op> ?`, `expr IN (?, ?)`, `expr IS NULL`, ...: the value placeholders come last.
std::string Predicate(std::string_view expr, CompareOp op, size_t value_count) {
  std::string e(expr);
  switch (op) {
    case CompareOp::kEq:
      return e + " = ?";
    case CompareOp::kNe:
      return e + " <> ?";
    case CompareOp::kLt:
      return e + " < ?";
    case CompareOp::kLe:
      return e + " <= ?";
    case CompareOp::kGt:
      return e + " > ?";
    case CompareOp::kGe:
      return e + " >= ?";
    case CompareOp::kLike:
      return e + " LIKE ? ESCAPE '\\'";
    case CompareOp::kILike:
      return "LOWER(" + e + ") LIKE LOWER(?) ESCAPE '\\'";
    case CompareOp::kIn:
    case CompareOp::kNotIn: {
      std::string out = e + (op == CompareOp::kIn ? " IN (" : " NOT IN (");
      for (size_t i = 0; i < value_count; ++i) out += i == 0 ? "?" : ", ?";
      return out + ")";
    }
    case CompareOp::kIsNull:
      return e + " IS NULL";
    case CompareOp::kIsNotNull:
      return e + " IS NOT NULL";
  }
  return e;
}

Result<std::string> CompileAttribute(const SearchSpec& spec, const Comparison& c,
                                     std::vector<store::Value>& params) {
  const AttributeSpec* a = FindAttribute(spec, c.key);
  if (a == nullptr || !a->filterable) {
    return FilterError(c, "unknown " + std::string(spec.noun) + " attribute " + Quoted(c.key) +
                              "; valid attributes: " + AttributeList(spec, true) +
                              " (params, tags and metrics need a prefix, e.g. tags." +
                              Printable(Abbreviate(c.key, 60)) + ")");
  }
  auto op_error = [&](std::string_view allowed) {
    return FilterError(c, "attribute " + Quoted(a->name) + " compares with " +
                              std::string(allowed) + " (got " + std::string(CompareOpName(c.op)) +
                              ")");
  };
  switch (a->type) {
    case AttributeType::kString:
      if (IsListOp(c.op) && !a->allows_list) {
        std::string with_lists;
        for (const AttributeSpec& other : spec.attributes) {
          if (!other.allows_list) continue;
          if (!with_lists.empty()) with_lists += ", ";
          with_lists += other.name;
        }
        return FilterError(c, "attribute " + Quoted(a->name) +
                                  " cannot be compared with a list (IN / NOT IN); only " +
                                  with_lists + " can");
      }
      if (!IsStringOp(c.op, a->allows_list, true)) {
        return op_error(a->allows_list ? "=, !=, LIKE, ILIKE, IN, NOT IN, IS NULL, IS NOT NULL"
                                       : "=, !=, LIKE, ILIKE, IS NULL, IS NOT NULL");
      }
      TY_RETURN_IF_ERROR(BindStrings(c, "attribute " + Quoted(a->name), params));
      break;
    case AttributeType::kNumber:
      if (!IsNumericCompare(c.op) && !IsNullOp(c.op)) {
        return op_error("=, !=, <, <=, >, >=, IS NULL, IS NOT NULL");
      }
      for (const FilterValue& v : c.values) {
        std::optional<store::Value> n;
        if (v.kind == ValueKind::kNumber) n = NumberParam(v.text, false);
        if (!n) {
          return FilterError(
              c, "attribute " + Quoted(a->name) + " takes a number (got " + Quoted(v.text) + ")");
        }
        params.push_back(std::move(*n));
      }
      break;
    case AttributeType::kIntegerId:
      if (c.op != CompareOp::kEq && c.op != CompareOp::kNe && !IsListOp(c.op) && !IsNullOp(c.op)) {
        return op_error("=, !=, IN, NOT IN, IS NULL, IS NOT NULL");
      }
      for (const FilterValue& v : c.values) {
        std::optional<int64_t> id = ParseInt64(v.text);
        if (!id) {
          return FilterError(c, "attribute " + Quoted(a->name) + " takes an integer id (got " +
                                    Quoted(v.text) + ")");
        }
        params.emplace_back(*id);
      }
      break;
  }
  return Predicate(a->column, c.op, c.values.size());
}

// EXISTS over a key-value table (params, tags): the key must be present and its value match.
std::string KeyValueCondition(std::string_view source, CompareOp op, size_t value_count) {
  std::string from = "(SELECT 1 FROM " + std::string(source) + " AND kv.key = ?";
  if (op == CompareOp::kIsNull) return "NOT EXISTS " + from + ")";
  if (op == CompareOp::kIsNotNull) return "EXISTS " + from + ")";
  return "EXISTS " + from + " AND " + Predicate("kv.value", op, value_count) + ")";
}

// The latest metric row of a logged model: highest timestamp, then step; a non-NaN value wins a
// tie. `select` is the column expression; the key is the one `?`.
std::string LoggedModelLatestMetric(std::string_view select) {
  return "(SELECT " + std::string(select) +
         " FROM logged_model_metrics m WHERE m.model_id = logged_models.model_id AND m.key = ? "
         "ORDER BY m.timestamp DESC, m.step DESC, m.is_nan ASC, m.value DESC LIMIT 1)";
}

Status CheckFilterSize(const std::vector<Comparison>& filter) {
  if (filter.size() > kMaxComparisons) {
    return Status::InvalidArgument("invalid filter: " + std::to_string(filter.size()) +
                                   " comparisons; at most " + std::to_string(kMaxComparisons) +
                                   " are allowed");
  }
  size_t total_values = 0;
  for (const Comparison& c : filter) total_values += c.values.size();
  if (total_values > kMaxFilterValues) {
    return Status::InvalidArgument("invalid filter: " + std::to_string(total_values) +
                                   " values; at most " + std::to_string(kMaxFilterValues) +
                                   " are allowed");
  }
  return Status::Ok();
}

// A comparison on a kind of key (params, metrics, ...) that `spec`'s searches lack.
Status UnsupportedKey(const SearchSpec& spec, const Comparison& c) {
  return FilterError(c, std::string(spec.noun) + " filters cannot use " +
                            Quoted(KeyDisplay(c.type, c.key)) + "; they support " +
                            FilterKeysList(spec));
}

// params.x / tags.x <op> value(s).
Result<std::string> CompileKeyValueComparison(const SearchSpec& spec, const Comparison& c,
                                              std::vector<store::Value>& params) {
  std::string_view source = c.type == EntityType::kParam ? spec.params_source : spec.tags_source;
  if (source.empty()) return UnsupportedKey(spec, c);
  if (!IsStringOp(c.op, true, true)) {
    return FilterError(c, std::string(EntityTypeName(c.type)) +
                              " compare with =, !=, LIKE, ILIKE, IN, NOT IN, IS NULL, "
                              "IS NOT NULL (got " +
                              std::string(CompareOpName(c.op)) + ")");
  }
  params.emplace_back(c.key);
  TY_RETURN_IF_ERROR(BindStrings(c, c.type == EntityType::kParam ? "param" : "tag", params));
  return KeyValueCondition(source, c.op, c.values.size());
}

// metrics.x <op> number: on a run's or a logged model's latest value of x.
Result<std::string> CompileMetricComparison(const SearchSpec& spec, const Comparison& c,
                                            std::vector<store::Value>& params) {
  if (spec.metrics == MetricSource::kNone) return UnsupportedKey(spec, c);
  if (!IsNumericCompare(c.op)) {
    return FilterError(c, "metrics compare with =, !=, <, <=, >, >= (got " +
                              std::string(CompareOpName(c.op)) + ")");
  }
  std::optional<store::Value> v;
  if (c.values[0].kind == ValueKind::kNumber) v = NumberParam(c.values[0].text, true);
  if (!v) {
    return FilterError(
        c, "metric value must be a finite number (got " + Quoted(c.values[0].text) + ")");
  }
  params.emplace_back(c.key);
  params.push_back(std::move(*v));
  if (spec.metrics == MetricSource::kRunLatest) {
    return "EXISTS (SELECT 1 FROM latest_metrics m WHERE m.run_uuid = runs.run_uuid AND "
           "m.key = ? AND m.is_nan = 0 AND " +
           Predicate("m.value", c.op, 1) + ")";
  }
  return Predicate(LoggedModelLatestMetric("CASE WHEN m.is_nan = 0 THEN m.value END"), c.op, 1);
}

// datasets.name / digest / context <op> value(s): any of a run's dataset inputs.
Result<std::string> CompileDatasetComparison(const SearchSpec& spec, const Comparison& c,
                                             std::vector<store::Value>& params) {
  if (!spec.datasets) return UnsupportedKey(spec, c);
  std::string_view column;
  if (c.key == "name") column = "d.name";
  if (c.key == "digest") column = "d.digest";
  if (c.key == "context") column = "ri.context";
  if (column.empty()) {
    return FilterError(c, "unknown dataset field " + Quoted(c.key) +
                              "; expected datasets.name, datasets.digest or "
                              "datasets.context");
  }
  if (!IsStringOp(c.op, true, false)) {
    return FilterError(c, "datasets compare with =, !=, LIKE, ILIKE, IN, NOT IN (got " +
                              std::string(CompareOpName(c.op)) + ")");
  }
  TY_RETURN_IF_ERROR(BindStrings(c, "dataset", params));
  return "EXISTS (SELECT 1 FROM run_inputs ri JOIN datasets d ON d.dataset_uuid = "
         "ri.dataset_uuid WHERE ri.run_uuid = runs.run_uuid AND " +
         Predicate(column, c.op, c.values.size()) + ")";
}

Result<std::string> CompileComparison(const SearchSpec& spec, const Comparison& c,
                                      std::vector<store::Value>& params) {
  switch (c.type) {
    case EntityType::kAttribute:
      return CompileAttribute(spec, c, params);
    case EntityType::kParam:
    case EntityType::kTag:
      return CompileKeyValueComparison(spec, c, params);
    case EntityType::kMetric:
      return CompileMetricComparison(spec, c, params);
    case EntityType::kDataset:
      return CompileDatasetComparison(spec, c, params);
  }
  return UnsupportedKey(spec, c);
}

Result<SqlFragment> CompileFilter(const SearchSpec& spec, const std::vector<Comparison>& filter) {
  TY_RETURN_IF_ERROR(CheckFilterSize(filter));
  SqlFragment out;
  for (const Comparison& c : filter) {
    TY_RETURN_IF_ERROR(CheckArity(c));
    TY_ASSIGN_OR_RETURN(std::string cond, CompileComparison(spec, c, out.params));
    if (!out.sql.empty()) out.sql += " AND ";
    out.sql += cond;
  }
  if (out.sql.empty()) out.sql = "1=1";
  return out;
}

Status OrderByError(const OrderBy& o, std::string_view message) {
  return Status::InvalidArgument("invalid order_by " + Quoted(KeyDisplay(o.type, o.key)) + ": " +
                                 std::string(message));
}

// An ORDER BY list being built: its terms (each an expression, its direction and the
// parameters it binds), joined into SQL by Fragment().
struct OrderSql {
  std::vector<OrderTerm> terms;
  std::vector<bool> explicit_direction;  // whether the SQL spells the term's ASC
  // With join_metrics, a run's latest metric is read through a LEFT JOIN added here.
  bool join_metrics = false;
  SqlFragment joins;
  int join_count = 0;

  // `key`, if given, is the one `?` in `expr`.
  void Add(std::string expr, std::optional<bool> ascending, const std::string* key = nullptr) {
    OrderTerm t{std::move(expr), {}, ascending.value_or(true)};
    if (key != nullptr) t.params.emplace_back(*key);
    terms.push_back(std::move(t));
    explicit_direction.push_back(ascending.has_value());
  }
  // Missing values sort last in both directions: "CASE WHEN x IS NULL THEN 1 ELSE 0 END, x DIR".
  void AddAttribute(const AttributeSpec& a, bool ascending) {
    std::string column(a.column);
    if (a.nullable) Add("CASE WHEN " + column + " IS NULL THEN 1 ELSE 0 END", std::nullopt);
    Add(column, ascending);
  }
  SqlFragment Fragment() const {
    SqlFragment out;
    for (size_t i = 0; i < terms.size(); ++i) {
      if (i) out.sql += ", ";
      out.sql += terms[i].sql;
      if (explicit_direction[i]) out.sql += terms[i].ascending ? " ASC" : " DESC";
      out.params.insert(out.params.end(), terms[i].params.begin(), terms[i].params.end());
    }
    return out;
  }
};

// params.x / tags.x: runs without the key last.
Status AddKeyValueOrder(const SearchSpec& spec, const OrderBy& o, OrderSql& order) {
  std::string_view source = o.type == EntityType::kParam ? spec.params_source : spec.tags_source;
  if (source.empty() || !spec.order_by_params_and_tags) {
    return OrderByError(o, std::string(spec.noun) + " searches cannot be ordered by " +
                               std::string(EntityTypeName(o.type)));
  }
  std::string value = "(SELECT kv.value FROM " + std::string(source) + " AND kv.key = ?)";
  order.Add("CASE WHEN " + value + " IS NULL THEN 1 ELSE 0 END", std::nullopt, &o.key);
  order.Add(value, o.ascending, &o.key);
  return Status::Ok();
}

// metrics.x: values first, then NaN, then runs without the metric (as MLflow does).
Status AddMetricOrder(const SearchSpec& spec, const OrderBy& o, OrderSql& order) {
  if (spec.metrics == MetricSource::kRunLatest && order.join_metrics) {
    std::string m = "om" + std::to_string(order.join_count++);
    order.joins.sql += " LEFT JOIN latest_metrics " + m + " ON " + m +
                       ".run_uuid = runs.run_uuid AND " + m + ".key = ?";
    order.joins.params.emplace_back(o.key);
    order.Add(
        "CASE WHEN " + m + ".run_uuid IS NULL THEN 2 WHEN " + m + ".is_nan = 0 THEN 0 ELSE 1 END",
        std::nullopt);
    order.Add("CASE WHEN " + m + ".is_nan = 0 THEN " + m + ".value END", o.ascending);
  } else if (spec.metrics == MetricSource::kRunLatest) {
    std::string from = " FROM latest_metrics m WHERE m.run_uuid = runs.run_uuid AND m.key = ?)";
    order.Add("COALESCE((SELECT CASE WHEN m.is_nan = 0 THEN 0 ELSE 1 END" + from + ", 2)",
              std::nullopt, &o.key);
    order.Add("(SELECT CASE WHEN m.is_nan = 0 THEN m.value END" + from, o.ascending, &o.key);
  } else if (spec.metrics == MetricSource::kLoggedModelLatest) {
    order.Add(
        "COALESCE(" + LoggedModelLatestMetric("CASE WHEN m.is_nan = 0 THEN 0 ELSE 1 END") + ", 2)",
        std::nullopt, &o.key);
    order.Add(LoggedModelLatestMetric("CASE WHEN m.is_nan = 0 THEN m.value END"), o.ascending,
              &o.key);
  } else {
    return OrderByError(o, std::string(spec.noun) + " searches have no metrics");
  }
  return Status::Ok();
}

// Adds one clause; returns the key it orders by, canonical (an attribute's own name).
Result<std::string> AddOrderClause(const SearchSpec& spec, const OrderBy& o, OrderSql& order,
                                   std::set<std::string_view>& ordered_attributes) {
  switch (o.type) {
    case EntityType::kAttribute: {
      const AttributeSpec* a = FindAttribute(spec, o.key);
      if (a == nullptr) {
        return OrderByError(o,
                            "unknown " + std::string(spec.noun) +
                                " attribute; orderable attributes: " + AttributeList(spec, false));
      }
      ordered_attributes.insert(a->name);
      order.AddAttribute(*a, o.ascending);
      return std::string(a->name);
    }
    case EntityType::kParam:
    case EntityType::kTag:
      TY_RETURN_IF_ERROR(AddKeyValueOrder(spec, o, order));
      return o.key;
    case EntityType::kMetric:
      TY_RETURN_IF_ERROR(AddMetricOrder(spec, o, order));
      return o.key;
    case EntityType::kDataset:
      break;
  }
  return OrderByError(o, "searches cannot be ordered by datasets");
}

Result<OrderSql> CompileOrderSql(const SearchSpec& spec, const std::vector<OrderBy>& order_by,
                                 bool join_metrics = false) {
  if (order_by.size() > kMaxOrderByClauses) {
    return Status::InvalidArgument("invalid order_by: " + std::to_string(order_by.size()) +
                                   " clauses; at most " + std::to_string(kMaxOrderByClauses) +
                                   " are allowed");
  }
  std::span<const OrderBy> clauses = order_by;
  if (clauses.empty()) clauses = spec.default_order;
  OrderSql order;
  order.join_metrics = join_metrics;
  std::set<std::pair<EntityType, std::string>> seen;
  std::set<std::string_view> ordered_attributes;
  for (const OrderBy& o : clauses) {
    TY_ASSIGN_OR_RETURN(std::string canonical_key,
                        AddOrderClause(spec, o, order, ordered_attributes));
    if (!seen.emplace(o.type, canonical_key).second) {
      return OrderByError(o, "the key appears more than once in order_by");
    }
  }
  for (const auto& [name, ascending] : spec.tie_breakers) {
    if (ordered_attributes.count(name)) continue;
    const AttributeSpec* a = FindAttribute(spec, name);
    if (a != nullptr) order.AddAttribute(*a, ascending);
  }
  return order;
}

Result<SqlFragment> CompileOrder(const SearchSpec& spec, const std::vector<OrderBy>& order_by) {
  TY_ASSIGN_OR_RETURN(OrderSql order, CompileOrderSql(spec, order_by));
  return order.Fragment();
}

}  // namespace

Result<SqlFragment> CompileRunFilter(const std::vector<Comparison>& filter) {
  return CompileFilter(RunSpec(), filter);
}
Result<SqlFragment> CompileRunOrderBy(const std::vector<OrderBy>& order_by) {
  return CompileOrder(RunSpec(), order_by);
}
Result<RunOrderTerms> CompileRunOrderTerms(const std::vector<OrderBy>& order_by) {
  TY_ASSIGN_OR_RETURN(OrderSql order, CompileOrderSql(RunSpec(), order_by, true));
  return RunOrderTerms{std::move(order.terms), std::move(order.joins)};
}
Result<SqlFragment> CompileExperimentFilter(const std::vector<Comparison>& filter) {
  return CompileFilter(ExperimentSpec(), filter);
}
Result<SqlFragment> CompileExperimentOrderBy(const std::vector<OrderBy>& order_by) {
  return CompileOrder(ExperimentSpec(), order_by);
}
Result<SqlFragment> CompileLoggedModelFilter(const std::vector<Comparison>& filter) {
  return CompileFilter(LoggedModelSpec(), filter);
}
Result<SqlFragment> CompileLoggedModelOrderBy(const std::vector<OrderBy>& order_by) {
  return CompileOrder(LoggedModelSpec(), order_by);
}
Result<SqlFragment> CompileRegisteredModelFilter(const std::vector<Comparison>& filter) {
  return CompileFilter(RegisteredModelSpec(), filter);
}
Result<SqlFragment> CompileRegisteredModelOrderBy(const std::vector<OrderBy>& order_by) {
  return CompileOrder(RegisteredModelSpec(), order_by);
}
Result<SqlFragment> CompileModelVersionFilter(const std::vector<Comparison>& filter) {
  return CompileFilter(ModelVersionSpec(), filter);
}
Result<SqlFragment> CompileModelVersionOrderBy(const std::vector<OrderBy>& order_by) {
  return CompileOrder(ModelVersionSpec(), order_by);
}

}  // namespace trainyard::tracking
