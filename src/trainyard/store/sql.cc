#include "trainyard/store/sql.h"

namespace trainyard::store {

std::string InList(size_t n) {
  std::string out = "(";
  out.reserve(2 + 3 * n);
  for (size_t i = 0; i < n; ++i) out += i ? ", ?" : "?";
  return out + ")";
}

Value NullIfEmpty(std::string_view s) { return s.empty() ? Value() : Value(std::string(s)); }

std::optional<int64_t> OptionalInt(const Row& row, size_t i) {
  if (row.IsNull(i)) return std::nullopt;
  return row.Int(i);
}

Status Run(Transaction& tx, std::string_view sql, const std::vector<Value>& params) {
  auto r = tx.Exec(sql, params);
  return r.ok() ? Status::Ok() : r.status();
}

}  // namespace trainyard::store
