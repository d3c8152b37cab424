// Predicate: a small filter expression over a table's columns, used for reads (row filter and
// file pruning), Delete and Update.
//
//   column op literal      op one of = != <> < <= > >=
//   column IS [NOT] NULL
//   column [NOT] IN (literal, ...)
//   p AND q, p OR q, NOT p, (p), TRUE, FALSE
//
// Two functions of the reader, for row filters (catalog tables' governance):
//   column op current_user()   (or current_user() op column): the reader's user name
//   is_member('group')         TRUE when the reader is in the group, directly or through others
// A predicate that uses them is evaluated only after BindReader() replaced them with the
// reader's values; Evaluate() refuses an unbound one, Validate() checks it, and MayMatch()
// treats them as unknown. current_user() compares only with a string column, and not in an IN
// list (write `c IN ('a') OR c = current_user()`).
//
// Literals: integers, decimals (1.5, 1e3), 'single-quoted strings' ('' escapes a quote),
// TRUE/FALSE, NULL. Identifiers are [A-Za-z_][A-Za-z0-9_.]* or "double-quoted". A date or
// timestamp column compares with a string literal ('2024-05-01', '2024-05-01T10:00:00Z').
//
// SQL semantics: a comparison with NULL is unknown, and rows where the predicate is not TRUE are
// filtered out (Delete removes only rows where it is TRUE).
//
// A Predicate is an immutable value; const methods may be called from several threads.
#pragma once

#include <arrow/api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "trainyard/common/status.h"
#include "trainyard/tables/predicate_reader.h"

namespace trainyard::tables {

// A literal value: NULL, a boolean, an integer, a floating point number or a string.
using Literal = std::variant<std::monostate, bool, int64_t, double, std::string>;
std::string LiteralToString(const Literal& v);  // SQL-ish: 'it''s', 12, 1.5, TRUE, NULL

// `value` as a scalar of `type` (what Update writes); InvalidArgument naming `column` when it
// does not convert ('abc' into a long column, 1.5 into an integer one).
Result<std::shared_ptr<arrow::Scalar>> LiteralAsScalar(const Literal& value,
                                                       const std::shared_ptr<arrow::DataType>& type,
                                                       const std::string& column);

enum class CompareOp { kEq, kNe, kLt, kLe, kGt, kGe };

// What a data file's statistics (or its partition values) say about one column. Absent
// bounds are unknown. A partition column is min == max == its value (or all nulls).
struct ColumnStats {
  std::optional<Literal> min;
  std::optional<Literal> max;
  std::optional<int64_t> null_count;
};
struct FileStats {
  std::optional<int64_t> num_records;
  std::map<std::string, ColumnStats> columns;
};

class Predicate {
 public:
  enum class Kind {
    kTrue,
    kFalse,
    kCompare,
    kIsNull,
    kIsNotNull,
    kIn,
    kAnd,
    kOr,
    kNot,
    kIsMember,  // is_member('group'): values[0] is the group's name
  };

  static Predicate True();
  static Predicate False();
  static Predicate Compare(std::string column, CompareOp op, Literal value);
  static Predicate IsNull(std::string column);
  static Predicate IsNotNull(std::string column);
  static Predicate In(std::string column, std::vector<Literal> values);
  static Predicate And(Predicate a, Predicate b);
  static Predicate Or(Predicate a, Predicate b);
  static Predicate Not(Predicate a);
  // column op current_user()
  static Predicate CompareCurrentUser(std::string column, CompareOp op);
  static Predicate IsMember(std::string group);

  // Parses the grammar above. InvalidArgument naming the offset on bad input:
  // "filter: at offset 7: expected a literal after '>' (got end of input)".
  static Result<Predicate> Parse(std::string_view text);

  Kind kind() const { return node_->kind; }
  // Parseable text of the predicate (Parse(ToString()) gives the same predicate).
  std::string ToString() const;
  // The columns it names, sorted and unique.
  std::vector<std::string> Columns() const;
  // Whether it uses current_user() or is_member().
  bool UsesReader() const;

  // The predicate for `reader`: current_user() becomes their name, is_member('g') TRUE or
  // FALSE, and AND/OR/NOT with a TRUE or FALSE operand are folded (so a reader whom a row
  // filter exempts gets TRUE). Pure; the result has no reader functions.
  Predicate BindReader(const PredicateReader& reader) const;

  // Ok when every column exists in `schema` and its literals are comparable with the columns'
  // types; InvalidArgument naming the column otherwise.
  Status Validate(const arrow::Schema& schema) const;

  // A boolean mask over `batch`'s rows: true where the predicate is TRUE (never null).
  Result<std::shared_ptr<arrow::BooleanArray>> Evaluate(const arrow::RecordBatch& batch) const;

  // Pruning: false only when no row of a file with these statistics can make the predicate
  // TRUE. Columns without statistics, or statistics of a type the literal does not compare
  // with, may match.
  bool MayMatch(const FileStats& stats) const;

  struct Node {
    Kind kind = Kind::kTrue;
    std::string column;
    CompareOp op = CompareOp::kEq;
    std::vector<Literal> values;  // one for kCompare and kIsMember, several for kIn
    bool current_user = false;    // kCompare against current_user() (values[0] unused)
    std::vector<Predicate> children;
  };

 private:
  explicit Predicate(std::shared_ptr<const Node> node) : node_(std::move(node)) {}
  friend class PredicateEvaluator;
  friend class PredicateParser;
  friend class PredicateStatsEvaluator;

  std::shared_ptr<const Node> node_;
};

}  // namespace trainyard::tables
