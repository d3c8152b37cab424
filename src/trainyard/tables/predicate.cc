#include "trainyard/tables/predicate.h"

#include <arrow/compute/api.h>
#include <arrow/compute/expression.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <set>

#include "trainyard/tables/arrow_util.h"

namespace trainyard::tables {

namespace cp = arrow::compute;

std::string LiteralToString(const Literal& v) {
  if (std::holds_alternative<std::monostate>(v)) return "NULL";
  if (const bool* b = std::get_if<bool>(&v)) return *b ? "TRUE" : "FALSE";
  if (const int64_t* i = std::get_if<int64_t>(&v)) return std::to_string(*i);
  if (const double* d = std::get_if<double>(&v)) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", *d);
    std::string s = buf;
    if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
    return s;
  }
  std::string out = "'";
  for (char c : std::get<std::string>(v)) {
    if (c == '\'') out += '\'';
    out += c;
  }
  return out + "'";
}

namespace {

std::string QuoteIdentifier(const std::string& name) {
  bool plain =
      !name.empty() && (std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_');
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.') plain = false;
  }
  std::string upper;
  for (char c : name) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  static const std::set<std::string> kKeywords = {"AND",  "OR", "NOT",  "IS",
                                                  "NULL", "IN", "TRUE", "FALSE"};
  if (plain && !kKeywords.count(upper)) return name;
  std::string out = "\"";
  for (char c : name) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

const char* OpText(CompareOp op) {
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
  }
  return "=";
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Construction and printing.

namespace {
std::shared_ptr<Predicate::Node> MakeNode(Predicate::Kind kind, std::string column = "",
                                          CompareOp op = CompareOp::kEq,
                                          std::vector<Literal> values = {}) {
  auto n = std::make_shared<Predicate::Node>();
  n->kind = kind;
  n->column = std::move(column);
  n->op = op;
  n->values = std::move(values);
  return n;
}
}  // namespace

Predicate Predicate::True() { return Predicate(MakeNode(Kind::kTrue)); }
Predicate Predicate::False() { return Predicate(MakeNode(Kind::kFalse)); }
Predicate Predicate::Compare(std::string column, CompareOp op, Literal value) {
  return Predicate(MakeNode(Kind::kCompare, std::move(column), op, {std::move(value)}));
}
Predicate Predicate::IsNull(std::string column) {
  return Predicate(MakeNode(Kind::kIsNull, std::move(column)));
}
Predicate Predicate::IsNotNull(std::string column) {
  return Predicate(MakeNode(Kind::kIsNotNull, std::move(column)));
}
Predicate Predicate::In(std::string column, std::vector<Literal> values) {
  return Predicate(MakeNode(Kind::kIn, std::move(column), CompareOp::kEq, std::move(values)));
}
Predicate Predicate::And(Predicate a, Predicate b) {
  auto n = MakeNode(Kind::kAnd);
  n->children = {std::move(a), std::move(b)};
  return Predicate(std::move(n));
}
Predicate Predicate::Or(Predicate a, Predicate b) {
  auto n = MakeNode(Kind::kOr);
  n->children = {std::move(a), std::move(b)};
  return Predicate(std::move(n));
}
Predicate Predicate::Not(Predicate a) {
  auto n = MakeNode(Kind::kNot);
  n->children = {std::move(a)};
  return Predicate(std::move(n));
}
Predicate Predicate::CompareCurrentUser(std::string column, CompareOp op) {
  auto n = MakeNode(Kind::kCompare, std::move(column), op, {Literal(std::monostate{})});
  n->current_user = true;
  return Predicate(std::move(n));
}
Predicate Predicate::IsMember(std::string group) {
  return Predicate(MakeNode(Kind::kIsMember, "", CompareOp::kEq, {Literal(std::move(group))}));
}

std::string Predicate::ToString() const {
  const Node& n = *node_;
  switch (n.kind) {
    case Kind::kTrue:
      return "TRUE";
    case Kind::kFalse:
      return "FALSE";
    case Kind::kCompare:
      return QuoteIdentifier(n.column) + " " + OpText(n.op) + " " +
             (n.current_user ? "current_user()" : LiteralToString(n.values[0]));
    case Kind::kIsMember:
      return "is_member(" + LiteralToString(n.values[0]) + ")";
    case Kind::kIsNull:
      return QuoteIdentifier(n.column) + " IS NULL";
    case Kind::kIsNotNull:
      return QuoteIdentifier(n.column) + " IS NOT NULL";
    case Kind::kIn: {
      std::string s = QuoteIdentifier(n.column) + " IN (";
      for (size_t i = 0; i < n.values.size(); ++i) {
        s += (i ? ", " : "") + LiteralToString(n.values[i]);
      }
      return s + ")";
    }
    case Kind::kAnd:
      return "(" + n.children[0].ToString() + " AND " + n.children[1].ToString() + ")";
    case Kind::kOr:
      return "(" + n.children[0].ToString() + " OR " + n.children[1].ToString() + ")";
    case Kind::kNot:
      return "NOT (" + n.children[0].ToString() + ")";
  }
  return "TRUE";
}

std::vector<std::string> Predicate::Columns() const {
  std::set<std::string> out;
  std::vector<const Predicate*> stack = {this};
  while (!stack.empty()) {
    const Predicate* p = stack.back();
    stack.pop_back();
    if (!p->node_->column.empty()) out.insert(p->node_->column);
    for (const auto& c : p->node_->children) stack.push_back(&c);
  }
  return {out.begin(), out.end()};
}

bool Predicate::UsesReader() const {
  const Node& n = *node_;
  if (n.kind == Kind::kIsMember || n.current_user) return true;
  return std::any_of(n.children.begin(), n.children.end(),
                     [](const Predicate& c) { return c.UsesReader(); });
}

Predicate Predicate::BindReader(const PredicateReader& reader) const {
  const Node& n = *node_;
  switch (n.kind) {
    case Kind::kIsMember: {
      const std::string& group = std::get<std::string>(n.values[0]);
      return std::binary_search(reader.groups.begin(), reader.groups.end(), group) ? True()
                                                                                   : False();
    }
    case Kind::kCompare:
      return n.current_user ? Compare(n.column, n.op, reader.user) : *this;
    case Kind::kAnd:
    case Kind::kOr: {
      Predicate a = n.children[0].BindReader(reader);
      Predicate b = n.children[1].BindReader(reader);
      // The absorbing value (FALSE for AND, TRUE for OR) decides; the neutral one drops out.
      Kind absorbing = n.kind == Kind::kAnd ? Kind::kFalse : Kind::kTrue;
      Kind neutral = n.kind == Kind::kAnd ? Kind::kTrue : Kind::kFalse;
      if (a.kind() == absorbing || b.kind() == absorbing) return a.kind() == absorbing ? a : b;
      if (a.kind() == neutral) return b;
      if (b.kind() == neutral) return a;
      return n.kind == Kind::kAnd ? And(std::move(a), std::move(b))
                                  : Or(std::move(a), std::move(b));
    }
    case Kind::kNot: {
      Predicate a = n.children[0].BindReader(reader);
      if (a.kind() == Kind::kTrue) return False();
      if (a.kind() == Kind::kFalse) return True();
      return Not(std::move(a));
    }
    default:
      return *this;
  }
}

// ---------------------------------------------------------------------------------------------
// Parsing: recursive descent over a token stream. Precedence: OR < AND < NOT < comparison.

class PredicateParser {
 public:
  explicit PredicateParser(std::string_view text) : text_(text) {}

  Result<Predicate> ParseAll() {
    TY_ASSIGN_OR_RETURN(Predicate p, ParseOr(0));
    SkipSpace();
    if (pos_ != text_.size()) return Error("unexpected " + Describe());
    return p;
  }

 private:
  static constexpr int kMaxDepth = 200;

  Status Error(const std::string& what) const {
    return Status::InvalidArgument("filter: at offset " + std::to_string(pos_) + ": " + what);
  }
  std::string Describe() const {
    if (pos_ >= text_.size()) return "end of input";
    return "'" + std::string(text_.substr(pos_, std::min<size_t>(12, text_.size() - pos_))) + "'";
  }
  void SkipSpace() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  // Consumes keyword `kw` (case-insensitive, not followed by an identifier character).
  bool Keyword(std::string_view kw) {
    SkipSpace();
    if (text_.size() - pos_ < kw.size()) return false;
    for (size_t i = 0; i < kw.size(); ++i) {
      if (std::toupper(static_cast<unsigned char>(text_[pos_ + i])) != kw[i]) return false;
    }
    size_t end = pos_ + kw.size();
    if (end < text_.size() &&
        (std::isalnum(static_cast<unsigned char>(text_[end])) || text_[end] == '_')) {
      return false;
    }
    pos_ = end;
    return true;
  }
  bool Symbol(std::string_view s) {
    SkipSpace();
    if (text_.substr(pos_, s.size()) != s) return false;
    pos_ += s.size();
    return true;
  }
  // Consumes `name(` (a function call's start); a column of that name is left alone.
  bool Function(std::string_view name) {
    size_t save = pos_;
    if (Keyword(name) && Symbol("(")) return true;
    pos_ = save;
    return false;
  }
  Status ExpectCallEnd(std::string_view name) {
    if (Symbol(")")) return Status::Ok();
    return Error("expected ')' after " + std::string(name) + "(... (got " + Describe() + ")");
  }

  Result<Predicate> ParseOr(int depth) {
    TY_ASSIGN_OR_RETURN(Predicate left, ParseAnd(depth));
    while (Keyword("OR")) {
      TY_ASSIGN_OR_RETURN(Predicate right, ParseAnd(depth));
      left = Predicate::Or(std::move(left), std::move(right));
    }
    return left;
  }
  Result<Predicate> ParseAnd(int depth) {
    TY_ASSIGN_OR_RETURN(Predicate left, ParseNot(depth));
    while (Keyword("AND")) {
      TY_ASSIGN_OR_RETURN(Predicate right, ParseNot(depth));
      left = Predicate::And(std::move(left), std::move(right));
    }
    return left;
  }
  Result<Predicate> ParseNot(int depth) {
    if (depth > kMaxDepth) return Error("expression nested too deeply");
    if (Keyword("NOT")) {
      TY_ASSIGN_OR_RETURN(Predicate inner, ParseNot(depth + 1));
      return Predicate::Not(std::move(inner));
    }
    return ParsePrimary(depth);
  }
  Result<Predicate> ParsePrimary(int depth) {
    if (Symbol("(")) {
      TY_ASSIGN_OR_RETURN(Predicate inner, ParseOr(depth + 1));
      if (!Symbol(")")) return Error("expected ')' (got " + Describe() + ")");
      return inner;
    }
    if (Keyword("TRUE")) return Predicate::True();
    if (Keyword("FALSE")) return Predicate::False();
    if (Function("IS_MEMBER")) {
      SkipSpace();
      if (pos_ >= text_.size() || text_[pos_] != '\'') {
        return Error("is_member: expected a group name in single quotes (got " + Describe() + ")");
      }
      TY_ASSIGN_OR_RETURN(std::string group, ParseQuoted('\''));
      if (group.empty()) return Error("is_member: the group name is empty");
      TY_RETURN_IF_ERROR(ExpectCallEnd("is_member"));
      return Predicate::IsMember(std::move(group));
    }
    if (Function("CURRENT_USER")) {  // current_user() op column: the column on the left
      TY_RETURN_IF_ERROR(ExpectCallEnd("current_user"));
      TY_ASSIGN_OR_RETURN(CompareOp op, ParseOperator("current_user()"));
      TY_ASSIGN_OR_RETURN(std::string column, ParseIdentifier());
      return Predicate::CompareCurrentUser(std::move(column), Flipped(op));
    }
    TY_ASSIGN_OR_RETURN(std::string column, ParseIdentifier());
    return ParseCondition(std::move(column));
  }
  static CompareOp Flipped(CompareOp op) {
    switch (op) {
      case CompareOp::kLt:
        return CompareOp::kGt;
      case CompareOp::kLe:
        return CompareOp::kGe;
      case CompareOp::kGt:
        return CompareOp::kLt;
      case CompareOp::kGe:
        return CompareOp::kLe;
      default:
        return op;
    }
  }
  Result<CompareOp> ParseOperator(const std::string& after) {
    static const std::pair<std::string_view, CompareOp> kOps[] = {
        {"<=", CompareOp::kLe}, {">=", CompareOp::kGe}, {"!=", CompareOp::kNe},
        {"<>", CompareOp::kNe}, {"==", CompareOp::kEq}, {"=", CompareOp::kEq},
        {"<", CompareOp::kLt},  {">", CompareOp::kGt}};
    for (const auto& [text, op] : kOps) {
      if (Symbol(text)) return op;
    }
    return Error("expected an operator after " + after + " (got " + Describe() + ")");
  }
  Result<Predicate> ParseCondition(std::string column) {
    if (Keyword("IS")) {
      bool negated = Keyword("NOT");
      if (!Keyword("NULL")) return Error("expected NULL after IS (got " + Describe() + ")");
      return negated ? Predicate::IsNotNull(std::move(column))
                     : Predicate::IsNull(std::move(column));
    }
    bool negated = Keyword("NOT");
    if (Keyword("IN")) {
      if (!Symbol("(")) return Error("expected '(' after IN (got " + Describe() + ")");
      std::vector<Literal> values;
      do {
        if (Function("CURRENT_USER")) {
          return Error("current_user() is not allowed in an IN list (write \"" + column +
                       " = current_user() OR " + column + " IN (...)\")");
        }
        TY_ASSIGN_OR_RETURN(Literal v, ParseLiteral("IN"));
        values.push_back(std::move(v));
      } while (Symbol(","));
      if (!Symbol(")")) return Error("expected ',' or ')' in IN list (got " + Describe() + ")");
      Predicate in = Predicate::In(std::move(column), std::move(values));
      return negated ? Predicate::Not(std::move(in)) : in;
    }
    if (negated) return Error("expected IN after NOT (got " + Describe() + ")");
    SkipSpace();
    size_t op_start = pos_;
    TY_ASSIGN_OR_RETURN(CompareOp op, ParseOperator("column \"" + column + "\""));
    if (Function("CURRENT_USER")) {
      TY_RETURN_IF_ERROR(ExpectCallEnd("current_user"));
      return Predicate::CompareCurrentUser(std::move(column), op);
    }
    std::string op_text(text_.substr(op_start, pos_ - op_start));
    TY_ASSIGN_OR_RETURN(Literal v, ParseLiteral(op_text));
    return Predicate::Compare(std::move(column), op, std::move(v));
  }
  Result<std::string> ParseIdentifier() {
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == '"') {
      TY_ASSIGN_OR_RETURN(std::string name, ParseQuoted('"'));
      if (name.empty()) return Error("empty column name");
      return name;
    }
    size_t start = pos_;
    if (pos_ < text_.size() &&
        (std::isalpha(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_')) {
      while (pos_ < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[pos_])) ||
                                     text_[pos_] == '_' || text_[pos_] == '.')) {
        ++pos_;
      }
    }
    if (pos_ == start) return Error("expected a column name (got " + Describe() + ")");
    return std::string(text_.substr(start, pos_ - start));
  }
  Result<std::string> ParseQuoted(char quote) {
    size_t start = pos_++;
    std::string out;
    while (pos_ < text_.size()) {
      char c = text_[pos_++];
      if (c == quote) {
        if (pos_ < text_.size() && text_[pos_] == quote) {
          out += quote;
          ++pos_;
          continue;
        }
        return out;
      }
      out += c;
    }
    pos_ = start;
    return Error("unterminated quoted text");
  }
  Result<Literal> ParseLiteral(std::string_view after) {
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == '\'') {
      TY_ASSIGN_OR_RETURN(std::string s, ParseQuoted('\''));
      return Literal(std::move(s));
    }
    if (Keyword("NULL")) return Literal(std::monostate{});
    if (Keyword("TRUE")) return Literal(true);
    if (Keyword("FALSE")) return Literal(false);
    return ParseNumber(after);
  }
  Result<Literal> ParseNumber(std::string_view after) {
    size_t start = pos_;
    if (pos_ < text_.size() && (text_[pos_] == '-' || text_[pos_] == '+')) ++pos_;
    bool digits = false, fractional = false;
    while (pos_ < text_.size()) {
      char c = text_[pos_];
      if (std::isdigit(static_cast<unsigned char>(c))) {
        digits = true;
      } else if (c == '.' || c == 'e' || c == 'E') {
        fractional = true;
        if ((c == 'e' || c == 'E') && pos_ + 1 < text_.size() &&
            (text_[pos_ + 1] == '-' || text_[pos_ + 1] == '+')) {
          ++pos_;
        }
      } else {
        break;
      }
      ++pos_;
    }
    std::string token(text_.substr(start, pos_ - start));
    if (!digits) {
      pos_ = start;
      return Error("expected a literal after '" + std::string(after) + "' (got " + Describe() +
                   ")");
    }
    char* end = nullptr;
    errno = 0;
    if (!fractional) {
      long long v = std::strtoll(token.c_str(), &end, 10);
      if (errno == 0 && end && *end == '\0') return Literal(static_cast<int64_t>(v));
    }
    errno = 0;
    double d = std::strtod(token.c_str(), &end);
    if (errno != 0 || end == nullptr || *end != '\0' || !std::isfinite(d)) {
      pos_ = start;
      return Error("bad number '" + token + "'");
    }
    return Literal(d);
  }

  std::string_view text_;
  size_t pos_ = 0;
};

Result<Predicate> Predicate::Parse(std::string_view text) {
  if (text.size() > 1 << 20) return Status::InvalidArgument("filter: longer than 1 MiB");
  return PredicateParser(text).ParseAll();
}

// ---------------------------------------------------------------------------------------------
// Evaluation through Arrow's compute expressions.

namespace {

void InitializeCompute() { InitializeArrowCompute(); }

std::shared_ptr<arrow::Scalar> LiteralScalar(const Literal& v) {
  if (const bool* b = std::get_if<bool>(&v)) return arrow::MakeScalar(*b);
  if (const int64_t* i = std::get_if<int64_t>(&v)) return arrow::MakeScalar(*i);
  if (const double* d = std::get_if<double>(&v)) return arrow::MakeScalar(*d);
  if (const std::string* s = std::get_if<std::string>(&v)) return arrow::MakeScalar(*s);
  return arrow::MakeNullScalar(arrow::null());
}

bool IsNumeric(const arrow::DataType& t) {
  return arrow::is_integer(t.id()) || arrow::is_floating(t.id()) || arrow::is_decimal(t.id());
}
bool IsStringLike(const arrow::DataType& t) {
  return t.id() == arrow::Type::STRING || t.id() == arrow::Type::LARGE_STRING ||
         t.id() == arrow::Type::STRING_VIEW;
}

// The literal as a scalar comparable with a column of `type`: strings become dates, timestamps
// or decimals by parsing them; numbers stay numbers (Arrow promotes both sides).
Result<std::shared_ptr<arrow::Scalar>> ScalarFor(const Literal& v, const arrow::DataType& type,
                                                 const std::string& column) {
  auto scalar = LiteralScalar(v);
  if (std::holds_alternative<std::monostate>(v)) return arrow::MakeNullScalar(type.GetSharedPtr());
  auto mismatch = [&] {
    return Status::InvalidArgument("filter: column \"" + column + "\" of type " + type.ToString() +
                                   " cannot be compared with " + LiteralToString(v));
  };
  bool is_string = std::holds_alternative<std::string>(v);
  bool is_bool = std::holds_alternative<bool>(v);
  if (IsStringLike(type) || type.id() == arrow::Type::BINARY) {
    if (!is_string) return mismatch();
    return scalar;
  }
  if (type.id() == arrow::Type::BOOL) {
    if (!is_bool) return mismatch();
    return scalar;
  }
  if (IsNumeric(type) && !arrow::is_decimal(type.id())) {
    if (is_string || is_bool) return mismatch();
    return scalar;
  }
  if (type.id() == arrow::Type::DATE32 || type.id() == arrow::Type::TIMESTAMP ||
      arrow::is_decimal(type.id())) {
    if (is_bool || (!is_string && !arrow::is_decimal(type.id()))) return mismatch();
    auto cast = scalar->CastTo(type.GetSharedPtr());
    if (!cast.ok()) {
      return Status::InvalidArgument("filter: " + LiteralToString(v) + " is not a valid " +
                                     type.ToString() + " for column \"" + column + "\"");
    }
    return *cast;
  }
  return Status::InvalidArgument("filter: column \"" + column + "\" of type " + type.ToString() +
                                 " cannot be filtered on");
}

}  // namespace

Result<std::shared_ptr<arrow::Scalar>> LiteralAsScalar(const Literal& value,
                                                       const std::shared_ptr<arrow::DataType>& type,
                                                       const std::string& column) {
  if (std::holds_alternative<std::monostate>(value)) return arrow::MakeNullScalar(type);
  TY_ASSIGN_OR_RETURN(auto scalar, ScalarFor(value, *type, column));
  if (scalar->type->Equals(*type)) return scalar;
  auto cast = scalar->CastTo(type);
  if (!cast.ok()) {
    return Status::InvalidArgument("column \"" + column + "\": " + LiteralToString(value) +
                                   " is not a valid " + type->ToString());
  }
  return *cast;
}

class PredicateEvaluator {
 public:
  // `check_only`: Validate's use; the reader's functions stand for a value of the right type.
  PredicateEvaluator(const arrow::Schema& schema, bool check_only = false)
      : schema_(schema), check_only_(check_only) {}

  Result<cp::Expression> Build(const Predicate& p) {
    const Predicate::Node& n = *p.node_;
    switch (n.kind) {
      case Predicate::Kind::kTrue:
        return cp::literal(true);
      case Predicate::Kind::kFalse:
        return cp::literal(false);
      case Predicate::Kind::kCompare:
        return BuildCompare(n);
      case Predicate::Kind::kIsNull:
      case Predicate::Kind::kIsNotNull: {
        TY_ASSIGN_OR_RETURN(auto field, Field(n.column));
        (void)field;
        return cp::call(n.kind == Predicate::Kind::kIsNull ? "is_null" : "is_valid",
                        {cp::field_ref(n.column)});
      }
      case Predicate::Kind::kIn:
        return BuildIn(n);
      case Predicate::Kind::kAnd:
      case Predicate::Kind::kOr: {
        TY_ASSIGN_OR_RETURN(auto a, Build(n.children[0]));
        TY_ASSIGN_OR_RETURN(auto b, Build(n.children[1]));
        return cp::call(n.kind == Predicate::Kind::kAnd ? "and_kleene" : "or_kleene", {a, b});
      }
      case Predicate::Kind::kNot: {
        TY_ASSIGN_OR_RETURN(auto a, Build(n.children[0]));
        return cp::call("invert", {a});
      }
      case Predicate::Kind::kIsMember:
        if (!check_only_) return Unbound();
        return cp::literal(true);
    }
    return cp::literal(true);
  }

 private:
  Result<std::shared_ptr<arrow::Field>> Field(const std::string& column) {
    auto field = schema_.GetFieldByName(column);
    if (field == nullptr) {
      return Status::InvalidArgument("filter: no column \"" + column + "\" in the table");
    }
    return field;
  }

  static Status Unbound() {
    return Status::InvalidArgument(
        "filter: current_user() and is_member() have no reader here (bind the predicate to its "
        "reader first)");
  }

  Result<cp::Expression> BuildCompare(const Predicate::Node& n) {
    TY_ASSIGN_OR_RETURN(auto field, Field(n.column));
    if (n.current_user) {
      if (!check_only_) return Unbound();
      if (!IsStringLike(*field->type())) {
        return Status::InvalidArgument("filter: column \"" + n.column + "\" of type " +
                                       field->type()->ToString() +
                                       " cannot be compared with current_user() (a string)");
      }
      return cp::literal(true);
    }
    TY_ASSIGN_OR_RETURN(auto scalar, ScalarFor(n.values[0], *field->type(), n.column));
    static const char* kNames[] = {"equal",      "not_equal", "less",
                                   "less_equal", "greater",   "greater_equal"};
    return cp::call(kNames[static_cast<int>(n.op)],
                    {cp::field_ref(n.column), cp::literal(std::move(scalar))});
  }

  Result<cp::Expression> BuildIn(const Predicate::Node& n) {
    TY_ASSIGN_OR_RETURN(auto field, Field(n.column));
    cp::Expression result = cp::literal(false);
    bool first = true;
    for (const Literal& v : n.values) {
      TY_ASSIGN_OR_RETURN(auto scalar, ScalarFor(v, *field->type(), n.column));
      auto eq = cp::call("equal", {cp::field_ref(n.column), cp::literal(std::move(scalar))});
      result = first ? eq : cp::call("or_kleene", {result, eq});
      first = false;
    }
    return result;
  }

  const arrow::Schema& schema_;
  const bool check_only_;
};

Status Predicate::Validate(const arrow::Schema& schema) const {
  InitializeCompute();
  PredicateEvaluator evaluator(schema, /*check_only=*/true);
  TY_ASSIGN_OR_RETURN(cp::Expression e, evaluator.Build(*this));
  auto bound = e.Bind(schema);
  if (!bound.ok()) return FromArrow(bound.status(), "filter " + ToString());
  return Status::Ok();
}

Result<std::shared_ptr<arrow::BooleanArray>> Predicate::Evaluate(
    const arrow::RecordBatch& batch) const {
  InitializeCompute();
  PredicateEvaluator evaluator(*batch.schema());
  TY_ASSIGN_OR_RETURN(cp::Expression e, evaluator.Build(*this));
  auto expr = cp::call("coalesce", {e, cp::literal(false)});
  TY_ASSIGN_OR_RETURN(auto bound, FromArrow(expr.Bind(*batch.schema()), "filter"));
  TY_ASSIGN_OR_RETURN(
      auto datum, FromArrow(cp::ExecuteScalarExpression(bound, cp::ExecBatch(batch)), "filter"));
  if (datum.is_scalar()) {
    bool value = datum.scalar()->is_valid &&
                 std::static_pointer_cast<arrow::BooleanScalar>(datum.scalar())->value;
    TY_ASSIGN_OR_RETURN(auto array, FromArrow(arrow::MakeArrayFromScalar(
                                                  arrow::BooleanScalar(value), batch.num_rows()),
                                              "filter"));
    return std::static_pointer_cast<arrow::BooleanArray>(array);
  }
  return std::static_pointer_cast<arrow::BooleanArray>(datum.make_array());
}

// ---------------------------------------------------------------------------------------------
// Pruning with statistics. Three-valued: each node answers "may it be TRUE for some row" and
// "may it be FALSE-or-unknown for some row", so that NOT stays sound.

namespace {

// -1, 0, 1, or nullopt when the two values are not comparable.
std::optional<int> CompareLiterals(const Literal& a, const Literal& b) {
  auto num = [](const Literal& v) -> std::optional<double> {
    if (const int64_t* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
    if (const double* d = std::get_if<double>(&v)) return *d;
    return std::nullopt;
  };
  if (std::holds_alternative<int64_t>(a) && std::holds_alternative<int64_t>(b)) {
    int64_t x = std::get<int64_t>(a), y = std::get<int64_t>(b);
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  auto x = num(a), y = num(b);
  if (x && y) {
    if (std::isnan(*x) || std::isnan(*y)) return std::nullopt;
    return *x < *y ? -1 : (*x > *y ? 1 : 0);
  }
  if (std::holds_alternative<std::string>(a) && std::holds_alternative<std::string>(b)) {
    int c = std::get<std::string>(a).compare(std::get<std::string>(b));
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (std::holds_alternative<bool>(a) && std::holds_alternative<bool>(b)) {
    return static_cast<int>(std::get<bool>(a)) - static_cast<int>(std::get<bool>(b));
  }
  return std::nullopt;
}

struct Possible {
  bool may_true = true;
  bool may_not_true = true;
};

bool AllNull(const ColumnStats& s, const FileStats& f) {
  return s.null_count && f.num_records && *s.null_count >= *f.num_records;
}

Possible CompareRange(const ColumnStats& s, const FileStats& f, CompareOp op, const Literal& v) {
  if (std::holds_alternative<std::monostate>(v)) return {false, true};
  if (AllNull(s, f)) return {false, true};
  if (!s.min || !s.max) return {};
  auto lo = CompareLiterals(*s.min, v);  // min vs v
  auto hi = CompareLiterals(*s.max, v);  // max vs v
  if (!lo || !hi) return {};
  Possible p;
  switch (op) {
    case CompareOp::kEq:
      p.may_true = *lo <= 0 && *hi >= 0;
      break;
    case CompareOp::kNe:
      p.may_true = !(*lo == 0 && *hi == 0);
      break;
    case CompareOp::kLt:
      p.may_true = *lo < 0;
      break;
    case CompareOp::kLe:
      p.may_true = *lo <= 0;
      break;
    case CompareOp::kGt:
      p.may_true = *hi > 0;
      break;
    case CompareOp::kGe:
      p.may_true = *hi >= 0;
      break;
  }
  // Whether some row may fail it: only decided for the exact, all-non-null, one-value case.
  bool no_nulls = s.null_count && *s.null_count == 0;
  if (no_nulls && *lo == 0 && *hi == 0) {
    p.may_not_true = !(op == CompareOp::kEq || op == CompareOp::kLe || op == CompareOp::kGe);
  }
  return p;
}

Possible Possibilities(const Predicate& p, const FileStats& f);

}  // namespace

class PredicateStatsEvaluator {
 public:
  static Possible Run(const Predicate& p, const FileStats& f) {
    const Predicate::Node& n = *p.node_;
    auto stats = [&]() -> const ColumnStats* {
      auto it = f.columns.find(n.column);
      return it == f.columns.end() ? nullptr : &it->second;
    };
    switch (n.kind) {
      case Predicate::Kind::kTrue:
        return {true, false};
      case Predicate::Kind::kFalse:
        return {false, true};
      case Predicate::Kind::kCompare: {
        const ColumnStats* s = stats();
        return s && !n.current_user ? CompareRange(*s, f, n.op, n.values[0]) : Possible{};
      }
      case Predicate::Kind::kIsMember:
        return {};
      case Predicate::Kind::kIsNull:
      case Predicate::Kind::kIsNotNull: {
        const ColumnStats* s = stats();
        if (s == nullptr || !s->null_count) return {};
        bool any_null = *s->null_count > 0;
        bool all_null = AllNull(*s, f);
        Possible is_null{any_null, !all_null || !f.num_records};
        if (n.kind == Predicate::Kind::kIsNull) return is_null;
        return {is_null.may_not_true, is_null.may_true};
      }
      case Predicate::Kind::kIn: {
        const ColumnStats* s = stats();
        if (s == nullptr) return {};
        Possible any{false, true};
        for (const Literal& v : n.values) {
          Possible one = CompareRange(*s, f, CompareOp::kEq, v);
          any.may_true = any.may_true || one.may_true;
        }
        return any;
      }
      case Predicate::Kind::kAnd: {
        Possible a = Possibilities(n.children[0], f), b = Possibilities(n.children[1], f);
        return {a.may_true && b.may_true, a.may_not_true || b.may_not_true};
      }
      case Predicate::Kind::kOr: {
        Possible a = Possibilities(n.children[0], f), b = Possibilities(n.children[1], f);
        return {a.may_true || b.may_true, a.may_not_true && b.may_not_true};
      }
      case Predicate::Kind::kNot: {
        // NOT x is TRUE exactly where x is FALSE (not unknown), a subset of "x not TRUE".
        Possible a = Possibilities(n.children[0], f);
        return {a.may_not_true, true};
      }
    }
    return {};
  }
};

namespace {
Possible Possibilities(const Predicate& p, const FileStats& f) {
  return PredicateStatsEvaluator::Run(p, f);
}
}  // namespace

bool Predicate::MayMatch(const FileStats& stats) const {
  return Possibilities(*this, stats).may_true;
}

}  // namespace trainyard::tables
