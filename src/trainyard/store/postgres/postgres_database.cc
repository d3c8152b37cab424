#include "trainyard/store/postgres/postgres_database.h"

#include <libpq-fe.h>

#include <charconv>
#include <chrono>
#include <cmath>
#include <limits>
#include <unordered_map>
#include <utility>

#include "trainyard/common/mutex.h"
#include "trainyard/common/strings.h"

namespace trainyard::store {
namespace {

constexpr Oid kUnknownOid = 0;  // the server infers the type from context
constexpr Oid kBoolOid = 16;
constexpr Oid kByteaOid = 17;
constexpr Oid kInt8Oid = 20;
constexpr Oid kFloat8Oid = 701;
constexpr size_t kMaxParams = 65535;  // the protocol counts parameters in 16 bits
constexpr size_t kMaxPreparedPerConnection = 256;
constexpr auto kPoolWaitTimeout = std::chrono::seconds(60);

// Every Write takes this transaction-scoped advisory lock ("trainyar" in ASCII),
// so writers are serialized across processes sharing the database as well.
// Writers run at READ COMMITTED: each statement's snapshot is taken after the
// lock is held, so it sees every earlier writer's commit.
constexpr const char* kBeginWrite = "BEGIN; SELECT pg_advisory_xact_lock(8390891584086827378)";
// Readers see one snapshot for the whole callback, as database.h promises; a
// read-only REPEATABLE READ transaction never fails to serialize.
constexpr const char* kBeginRead = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY";

struct PgResultDeleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
using PgResult = std::unique_ptr<PGresult, PgResultDeleter>;

// Rewrites `?` to $1..$n, leaving alone those inside '...' literals, "..."
// identifiers and comments. (E'...' escape strings are not portable SQL and
// are not recognized.)
std::string RewritePlaceholders(std::string_view sql, size_t* count) {
  std::string out;
  out.reserve(sql.size() + 16);
  size_t n = 0;
  size_t i = 0;
  while (i < sql.size()) {
    char c = sql[i];
    size_t end = i + 1;
    if (c == '\'' || c == '"') {
      // A doubled quote inside a literal closes and reopens it: same result.
      size_t close = sql.find(c, i + 1);
      end = close == std::string_view::npos ? sql.size() : close + 1;
    } else if (c == '-' && i + 1 < sql.size() && sql[i + 1] == '-') {
      size_t newline = sql.find('\n', i);
      end = newline == std::string_view::npos ? sql.size() : newline + 1;
    } else if (c == '/' && i + 1 < sql.size() && sql[i + 1] == '*') {
      int depth = 1;  // PostgreSQL block comments nest
      end = i + 2;
      while (end < sql.size() && depth > 0) {
        if (sql.compare(end, 2, "/*") == 0) {
          ++depth;
          end += 2;
        } else if (sql.compare(end, 2, "*/") == 0) {
          --depth;
          end += 2;
        } else {
          ++end;
        }
      }
    } else if (c == '?') {
      out += '$';
      out += std::to_string(++n);
      ++i;
      continue;
    }
    out.append(sql.substr(i, end - i));
    i = end;
  }
  *count = n;
  return out;
}

std::string FormatInt64(int64_t v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

// Shortest text that parses back to the same double; PostgreSQL's spellings of
// the non-finite values.
std::string FormatDouble(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

// Parameters in libpq's text format, but blobs in binary. `values` point into `params`
// and `numbers`; `lengths` and `formats` matter for blobs only.
struct BoundParams {
  std::vector<std::string> numbers;
  std::vector<const char*> values;
  std::vector<int> lengths;
  std::vector<int> formats;
  std::vector<Oid> types;
  std::string signature;  // one letter per parameter's type; part of the statement cache key
};

Status Bind(const std::vector<Value>& params, BoundParams* out) {
  if (params.size() > kMaxParams) {
    return Status::Internal("a PostgreSQL statement takes at most 65535 parameters, got " +
                            std::to_string(params.size()) + "; split it into smaller ones");
  }
  out->numbers.resize(params.size());
  out->values.resize(params.size());
  out->lengths.assign(params.size(), 0);
  out->formats.assign(params.size(), 0);
  out->types.resize(params.size());
  out->signature.resize(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const Value& v = params[i];
    if (auto p = std::get_if<int64_t>(&v)) {
      out->numbers[i] = FormatInt64(*p);
      out->values[i] = out->numbers[i].c_str();
      out->types[i] = kInt8Oid;
      out->signature[i] = 'i';
    } else if (auto pd = std::get_if<double>(&v)) {
      out->numbers[i] = FormatDouble(*pd);
      out->values[i] = out->numbers[i].c_str();
      out->types[i] = kFloat8Oid;
      out->signature[i] = 'd';
    } else if (auto ps = std::get_if<std::string>(&v)) {
      if (ps->find('\0') != std::string::npos) {
        return Status::InvalidArgument("parameter " + std::to_string(i + 1) +
                                       " contains a NUL byte, which PostgreSQL text cannot hold");
      }
      out->values[i] = ps->c_str();
      out->types[i] = kUnknownOid;
      out->signature[i] = 's';
    } else if (auto pb = std::get_if<Blob>(&v)) {
      if (pb->bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max())) {
        return Status::InvalidArgument("parameter " + std::to_string(i + 1) +
                                       " is a blob larger than 2 GiB");
      }
      out->values[i] = pb->bytes.data();
      out->lengths[i] = static_cast<int>(pb->bytes.size());
      out->formats[i] = 1;
      out->types[i] = kByteaOid;
      out->signature[i] = 'b';
    } else {
      out->values[i] = nullptr;
      out->types[i] = kUnknownOid;
      out->signature[i] = 'n';
    }
  }
  return Status::Ok();
}

// A BYTEA cell in text format: "\\x" and two hex digits per byte (bytea_output = hex,
// the default since PostgreSQL 9.0).
Result<std::string> DecodeByteaHex(std::string_view text) {
  if (text.size() < 2 || text[0] != '\\' || text[1] != 'x' || text.size() % 2 != 0) {
    return Status::Internal(
        "postgresql: a bytea value is not in hex format (set bytea_output "
        "to 'hex')");
  }
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out((text.size() - 2) / 2, '\0');
  for (size_t i = 0; i < out.size(); ++i) {
    int hi = nibble(text[2 + 2 * i]), lo = nibble(text[3 + 2 * i]);
    if (hi < 0 || lo < 0) return Status::Internal("postgresql: a bytea value has a bad hex digit");
    out[i] = static_cast<char>(hi << 4 | lo);
  }
  return out;
}

Status ErrorStatus(PGconn* conn, const PGresult* res, std::string_view sql) {
  std::string sqlstate;
  std::string message;
  if (res != nullptr) {
    if (const char* s = PQresultErrorField(res, PG_DIAG_SQLSTATE)) sqlstate = s;
    if (const char* m = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY)) message = m;
    if (const char* d = PQresultErrorField(res, PG_DIAG_MESSAGE_DETAIL)) {
      message += std::string(" (") + d + ")";
    }
  }
  if (message.empty()) message = Trim(PQerrorMessage(conn));
  if (message.empty()) message = "unknown error";
  std::string text = "postgresql: " + message;
  if (!sqlstate.empty()) text += " [SQLSTATE " + sqlstate + "]";
  text += " in: " + Abbreviate(sql, 120);

  if (PQstatus(conn) != CONNECTION_OK) return Status::Unavailable(text);
  if (sqlstate == "23505") return Status::AlreadyExists(text);
  if (sqlstate == "53100") return Status::ResourceExhausted("disk full: " + text);
  // Connection exceptions, shutdowns, too many connections, and serialization
  // failures/deadlocks (possible against other clients of the database) are
  // transient: the caller may retry.
  if (StartsWith(sqlstate, "08") || sqlstate == "57P01" || sqlstate == "57P02" ||
      sqlstate == "57P03" || sqlstate == "53300" || sqlstate == "40001" || sqlstate == "40P01") {
    return Status::Unavailable(text);
  }
  return Status::Internal(text);
}

// One libpq connection with its prepared-statement cache. Not thread-safe: the
// pool hands it to one transaction at a time.
class PgConnection : public Transaction {
 public:
  ~PgConnection() override { PQfinish(conn_); }

  static Result<std::unique_ptr<PgConnection>> Connect(const std::string& url) {
    // Later entries override earlier ones, including those in the URL: the URL
    // may set connect_timeout, but the client encoding is always UTF-8.
    const char* keys[] = {"connect_timeout", "fallback_application_name", "dbname",
                          "client_encoding", nullptr};
    const char* values[] = {"10", "trainyard", url.c_str(), "UTF8", nullptr};
    PGconn* raw = PQconnectdbParams(keys, values, /*expand_dbname=*/1);
    if (raw == nullptr) return Status::ResourceExhausted("postgresql: out of memory");
    auto conn = std::unique_ptr<PgConnection>(new PgConnection(raw));
    if (PQstatus(raw) != CONNECTION_OK) {
      return Status::Unavailable("cannot connect to PostgreSQL: " + Trim(PQerrorMessage(raw)));
    }
    // Notices ("relation already exists, skipping") would go to stderr.
    PQsetNoticeProcessor(
        raw, [](void*, const char*) {}, nullptr);
    // Shortest round-trip float output also on servers older than 12.
    TY_RETURN_IF_ERROR(conn->Run("SET extra_float_digits = 3"));
    return conn;
  }

  Result<Rows> Query(std::string_view sql, const std::vector<Value>& params) override {
    TY_ASSIGN_OR_RETURN(PgResult res, Execute(sql, params));
    const int nrows = PQntuples(res.get());
    const int ncols = PQnfields(res.get());
    std::vector<Oid> types(ncols);
    for (int c = 0; c < ncols; ++c) types[c] = PQftype(res.get(), c);
    Rows rows;
    rows.reserve(nrows);
    for (int r = 0; r < nrows; ++r) {
      std::vector<Value> values;
      values.reserve(ncols);
      for (int c = 0; c < ncols; ++c) {
        if (PQgetisnull(res.get(), r, c)) {
          values.emplace_back(std::monostate{});
        } else if (types[c] == kBoolOid) {
          // SQLite has no booleans: `a = b` is 0 or 1 there, so it is here too.
          values.emplace_back(int64_t{PQgetvalue(res.get(), r, c)[0] == 't' ? 1 : 0});
        } else if (types[c] == kByteaOid) {
          TY_ASSIGN_OR_RETURN(
              std::string bytes,
              DecodeByteaHex(std::string_view(PQgetvalue(res.get(), r, c),
                                              static_cast<size_t>(PQgetlength(res.get(), r, c)))));
          values.emplace_back(Blob{std::move(bytes)});
        } else {
          values.emplace_back(std::string(PQgetvalue(res.get(), r, c),
                                          static_cast<size_t>(PQgetlength(res.get(), r, c))));
        }
      }
      rows.emplace_back(std::move(values));
    }
    return rows;
  }

  Result<int64_t> Exec(std::string_view sql, const std::vector<Value>& params) override {
    TY_ASSIGN_OR_RETURN(PgResult res, Execute(sql, params));
    return ParseInt64(PQcmdTuples(res.get())).value_or(0);
  }

  // Runs parameterless statements (BEGIN, COMMIT, ...) in one round trip.
  Status Run(const char* sql) {
    PgResult res(PQexec(conn_, sql));
    return Check(res.get(), sql);
  }

  Status Begin(const char* begin_sql) {
    failed_ = false;
    first_error_ = Status::Ok();
    return Run(begin_sql);
  }

  // True when a statement of the current transaction failed, so the server
  // ignores everything up to ROLLBACK.
  bool InFailedTransaction() const { return PQtransactionStatus(conn_) == PQTRANS_INERROR; }
  const Status& first_error() const { return first_error_; }

  bool broken() const { return PQstatus(conn_) != CONNECTION_OK; }
  // Whether the pool may hand this connection out again.
  bool Reusable() const {
    return !discard_ && PQstatus(conn_) == CONNECTION_OK &&
           PQtransactionStatus(conn_) == PQTRANS_IDLE;
  }

 private:
  explicit PgConnection(PGconn* conn) : conn_(conn) {}

  Result<PgResult> Execute(std::string_view sql, const std::vector<Value>& params) {
    if (failed_) {
      return Status::Internal(
          "postgresql: statement after a failed one in the same transaction (PostgreSQL ignores "
          "it; return the first error from the callback): " +
          first_error_.message());
    }
    BoundParams bound;
    TY_RETURN_IF_ERROR(Bind(params, &bound));
    const int n = static_cast<int>(params.size());

    std::string key;
    if (n > 0) {  // statements without parameters are mostly one-off DDL: not worth preparing
      key.reserve(sql.size() + 1 + bound.signature.size());
      key.append(sql).push_back('\0');
      key.append(bound.signature);
      auto it = prepared_.find(key);
      if (it != prepared_.end()) {
        PgResult res(PQexecPrepared(conn_, it->second.c_str(), n, bound.values.data(),
                                    bound.lengths.data(), bound.formats.data(),
                                    /*resultFormat=*/0));
        TY_RETURN_IF_ERROR(Check(res.get(), sql));
        return res;
      }
    }

    size_t count = 0;
    std::string rewritten = RewritePlaceholders(sql, &count);
    // SQLite's clustered tables: PostgreSQL has no such clause (see database.h).
    constexpr std::string_view kWithoutRowid = " WITHOUT ROWID";
    if (EndsWith(rewritten, kWithoutRowid))
      rewritten.resize(rewritten.size() - kWithoutRowid.size());
    if (count != params.size()) {
      return Status::Internal("statement expects " + std::to_string(count) + " parameters, got " +
                              std::to_string(params.size()) + ": " + Abbreviate(sql, 120));
    }
    if (n > 0 && prepared_.size() < kMaxPreparedPerConnection) {
      std::string name = "ty" + std::to_string(prepared_.size());
      PgResult prep(PQprepare(conn_, name.c_str(), rewritten.c_str(), n, bound.types.data()));
      TY_RETURN_IF_ERROR(Check(prep.get(), sql));
      auto it = prepared_.emplace(std::move(key), std::move(name)).first;
      PgResult res(PQexecPrepared(conn_, it->second.c_str(), n, bound.values.data(),
                                  bound.lengths.data(), bound.formats.data(), /*resultFormat=*/0));
      TY_RETURN_IF_ERROR(Check(res.get(), sql));
      return res;
    }
    PgResult res(PQexecParams(conn_, rewritten.c_str(), n, bound.types.data(), bound.values.data(),
                              bound.lengths.data(), bound.formats.data(), /*resultFormat=*/0));
    TY_RETURN_IF_ERROR(Check(res.get(), sql));
    return res;
  }

  Status Check(const PGresult* res, std::string_view sql) {
    ExecStatusType st = res != nullptr ? PQresultStatus(res) : PGRES_FATAL_ERROR;
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) return Status::Ok();
    Status s = ErrorStatus(conn_, res, sql);
    // A schema change can invalidate a cached plan ("cached plan must not change
    // result type"); a fresh connection starts with an empty cache.
    if (res != nullptr) {
      const char* state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
      if (state != nullptr && std::string_view(state) == "0A000") discard_ = true;
    }
    if (!failed_) {
      failed_ = true;
      first_error_ = s;
    }
    return s;
  }

  PGconn* const conn_;
  std::unordered_map<std::string, std::string> prepared_;  // SQL + '\0' + signature -> name
  bool failed_ = false;
  Status first_error_;
  bool discard_ = false;
};

// Writers are serialized, by a mutex in this process and an advisory lock
// across processes, rather than run concurrently at SERIALIZABLE with retries:
// database.h promises serialized writers and services rely on it for
// read-modify-write (ApplyMigrations, counters), and a retry would run the
// callback again, which may have effects outside the database. The control
// plane's write throughput comes from batching (group commit, multi-row
// inserts), not from concurrent writers. Readers run concurrently.
class PostgresDatabase : public Database {
 public:
  PostgresDatabase(std::string url, int pool_size, std::unique_ptr<PgConnection> first)
      : url_(std::move(url)), pool_size_(pool_size) {
    MutexLock lock(mu_);
    idle_.push_back(std::move(first));
    open_ = 1;
  }

  std::string_view Backend() const override { return "postgresql"; }

  Status Write(const std::function<Status(Transaction&)>& fn) override {
    MutexLock lock(write_mu_);
    return RunTransaction(kBeginWrite, fn);
  }

  Status Read(const std::function<Status(Transaction&)>& fn) override {
    return RunTransaction(kBeginRead, fn);
  }

 private:
  // A connection taken from the pool; goes back (or is closed) when destroyed.
  class Lease {
   public:
    Lease(PostgresDatabase* db, std::unique_ptr<PgConnection> conn)
        : db_(db), conn_(std::move(conn)) {}
    Lease(Lease&& other) noexcept = default;
    Lease& operator=(Lease&&) = delete;
    ~Lease() {
      if (conn_) db_->Release(std::move(conn_));
    }
    PgConnection* operator->() const { return conn_.get(); }
    PgConnection& operator*() const { return *conn_; }

   private:
    PostgresDatabase* db_;
    std::unique_ptr<PgConnection> conn_;
  };

  Status RunTransaction(const char* begin_sql, const std::function<Status(Transaction&)>& fn) {
    TY_ASSIGN_OR_RETURN(Lease conn, Acquire());
    Status s = conn->Begin(begin_sql);
    if (!s.ok() && conn->broken()) {
      // An idle connection died (server restart, idle timeout, terminated
      // backend). Nothing ran yet, so retry once on a fresh connection; the
      // other idle ones likely died with it.
      DropIdle();
      { Lease dead = std::move(conn); }
      TY_ASSIGN_OR_RETURN(Lease fresh, Acquire());
      s = fresh->Begin(begin_sql);
      if (!s.ok()) return s;
      return Finish(*fresh, fn);
    }
    if (!s.ok()) return s;
    return Finish(*conn, fn);
  }

  Status Finish(PgConnection& conn, const std::function<Status(Transaction&)>& fn) {
    Status s = fn(conn);
    if (s.ok() && conn.InFailedTransaction()) {
      s = Status::Internal(
          "postgresql: transaction rolled back: a statement failed but the callback returned ok "
          "(PostgreSQL cannot go on after an error; return it, or use ON CONFLICT): " +
          conn.first_error().message());
    }
    if (!s.ok()) {
      (void)conn.Run("ROLLBACK");
      return s;
    }
    return conn.Run("COMMIT");
  }

  Result<Lease> Acquire() TY_EXCLUDES(mu_) {
    ReleasableMutexLock lock(mu_);
    const auto deadline = std::chrono::steady_clock::now() + kPoolWaitTimeout;
    while (idle_.empty() && open_ >= pool_size_) {
      if (!cv_.WaitUntil(mu_, deadline)) break;
    }
    if (idle_.empty() && open_ >= pool_size_) {
      return Status::Unavailable("all " + std::to_string(pool_size_) +
                                 " PostgreSQL connections stayed busy for 60 s; raise the pool "
                                 "size, or look for a transaction that never ends or that opens "
                                 "another one inside its callback");
    }
    if (!idle_.empty()) {
      std::unique_ptr<PgConnection> conn = std::move(idle_.back());
      idle_.pop_back();
      return Lease(this, std::move(conn));
    }
    ++open_;
    lock.Unlock();
    auto conn = PgConnection::Connect(url_);
    if (!conn.ok()) {
      lock.Lock();
      --open_;
      cv_.NotifyOne();
      return conn.status();
    }
    return Lease(this, std::move(conn).value());
  }

  void Release(std::unique_ptr<PgConnection> conn) TY_EXCLUDES(mu_) {
    if (!conn->Reusable()) conn.reset();  // closing it ends any transaction left open
    MutexLock lock(mu_);
    if (conn) {
      idle_.push_back(std::move(conn));
    } else {
      --open_;
    }
    cv_.NotifyOne();
  }

  void DropIdle() TY_EXCLUDES(mu_) {
    std::vector<std::unique_ptr<PgConnection>> dropped;
    {
      MutexLock lock(mu_);
      dropped.swap(idle_);
      open_ -= static_cast<int>(dropped.size());
      cv_.NotifyAll();
    }
  }

  const std::string url_;
  const int pool_size_;
  Mutex write_mu_;  // held for the whole of a Write
  Mutex mu_;
  CondVar cv_;  // a connection went idle, or one closed
  std::vector<std::unique_ptr<PgConnection>> idle_ TY_GUARDED_BY(mu_);
  int open_ TY_GUARDED_BY(mu_) = 0;  // idle plus leased connections
};

}  // namespace

Result<std::unique_ptr<Database>> OpenPostgresDatabase(const std::string& url, int pool_size) {
  if (pool_size < 1) {
    return Status::InvalidArgument("PostgreSQL pool size must be at least 1 (got " +
                                   std::to_string(pool_size) + ")");
  }
  char* error = nullptr;
  PQconninfoOption* options = PQconninfoParse(url.c_str(), &error);
  if (options == nullptr) {
    std::string message = error != nullptr ? Trim(error) : "out of memory";
    PQfreemem(error);
    return Status::InvalidArgument("--db: invalid PostgreSQL URL: " + message);
  }
  PQconninfoFree(options);
  TY_ASSIGN_OR_RETURN(auto first, PgConnection::Connect(url));
  return std::unique_ptr<Database>(new PostgresDatabase(url, pool_size, std::move(first)));
}

}  // namespace trainyard::store
