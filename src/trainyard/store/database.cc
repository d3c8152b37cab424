#include "trainyard/store/database.h"

#include <charconv>
#include <cmath>
#include <set>

#include "trainyard/common/strings.h"
#include "trainyard/store/postgres/postgres_database.h"
#include "trainyard/store/sqlite/sqlite_database.h"

namespace trainyard::store {

int64_t Row::Int(size_t i) const {
  const Value& v = values_[i];
  if (auto p = std::get_if<int64_t>(&v)) return *p;
  if (auto p = std::get_if<double>(&v)) return static_cast<int64_t>(*p);
  if (auto p = std::get_if<std::string>(&v)) {
    if (auto n = ParseInt64(*p)) return *n;
    // PostgreSQL returns numeric aggregates (AVG, SUM of doubles) as decimal text.
    if (auto d = ParseDouble(*p); d && std::isfinite(*d)) return static_cast<int64_t>(*d);
  }
  return 0;
}

double Row::Double(size_t i) const {
  const Value& v = values_[i];
  if (auto p = std::get_if<double>(&v)) return *p;
  if (auto p = std::get_if<int64_t>(&v)) return static_cast<double>(*p);
  if (auto p = std::get_if<std::string>(&v)) return ParseDouble(*p).value_or(std::nan(""));
  return std::nan("");
}

std::string Row::Text(size_t i) const {
  const Value& v = values_[i];
  if (auto p = std::get_if<std::string>(&v)) return *p;
  if (auto p = std::get_if<int64_t>(&v)) return std::to_string(*p);
  if (auto p = std::get_if<double>(&v)) {
    char buf[32];
    auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), *p);  // shortest round-trip form
    return std::string(buf, end);
  }
  return "";
}

std::string_view Row::Bytes(size_t i) const {
  const Value& v = values_[i];
  if (auto p = std::get_if<Blob>(&v)) return p->bytes;
  if (auto p = std::get_if<std::string>(&v)) return *p;
  return {};
}

namespace {

class RowAdapter : public RowView {
 public:
  explicit RowAdapter(const Row& row) : row_(row) {}
  bool IsNull(size_t i) const override { return row_.IsNull(i); }
  int64_t Int(size_t i) const override { return row_.Int(i); }
  double Double(size_t i) const override { return row_.Double(i); }
  std::string_view Text(size_t i) const override {
    if (auto p = std::get_if<std::string>(&row_.raw(i))) return *p;
    text_ = row_.Text(i);
    return text_;
  }
  std::string_view Bytes(size_t i) const override { return row_.Bytes(i); }

 private:
  const Row& row_;
  mutable std::string text_;
};

}  // namespace

Status Transaction::QueryEach(std::string_view sql, const std::vector<Value>& params,
                              const std::function<Status(const RowView&)>& fn) {
  TY_ASSIGN_OR_RETURN(Rows rows, Query(sql, params));
  for (const Row& row : rows) TY_RETURN_IF_ERROR(fn(RowAdapter(row)));
  return Status::Ok();
}

Result<std::unique_ptr<Database>> OpenDatabase(const DatabaseOptions& options) {
  const std::string& url = options.url;
  if (StartsWith(url, "postgresql://") || StartsWith(url, "postgres://")) {
    return OpenPostgresDatabase(url, options.pool_size);
  }
  std::string path = url;
  if (StartsWith(path, "sqlite:")) path = path.substr(7);
  if (StartsWith(path, "//")) path = path.substr(2);
  if (path.empty()) return Status::InvalidArgument("--db: empty SQLite path");
  return OpenSqliteDatabase(path, options.sqlite_sync_full);
}

Status ApplyMigrations(Database& db, const std::vector<Migration>& migrations) {
  TY_RETURN_IF_ERROR(db.Write([](Transaction& tx) -> Status {
    auto r = tx.Exec(
        "CREATE TABLE IF NOT EXISTS schema_migrations (component TEXT NOT NULL, version INTEGER "
        "NOT NULL, PRIMARY KEY (component, version))");
    return r.ok() ? Status::Ok() : r.status();
  }));
  for (const Migration& m : migrations) {
    Status s = db.Write([&](Transaction& tx) -> Status {
      TY_ASSIGN_OR_RETURN(Rows rows,
                          tx.Query("SELECT 1 FROM schema_migrations WHERE component = ? AND "
                                   "version = ?",
                                   {m.component, static_cast<int64_t>(m.version)}));
      if (!rows.empty()) return Status::Ok();
      for (const std::string& sql : m.statements) {
        auto r = tx.Exec(sql);
        if (!r.ok()) {
          return r.status().WithContext("migration " + m.component + "/" +
                                        std::to_string(m.version));
        }
      }
      if (m.code) {
        TY_RETURN_IF_ERROR(
            m.code(tx).WithContext("migration " + m.component + "/" + std::to_string(m.version)));
      }
      auto r = tx.Exec("INSERT INTO schema_migrations (component, version) VALUES (?, ?)",
                       {m.component, static_cast<int64_t>(m.version)});
      return r.ok() ? Status::Ok() : r.status();
    });
    TY_RETURN_IF_ERROR(s);
  }
  return Status::Ok();
}

}  // namespace trainyard::store
