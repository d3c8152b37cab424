#include "trainyard/store/sqlite/sqlite_database.h"

#include <sqlite3.h>

#include <chrono>
#include <deque>
#include <thread>
#include <unordered_map>

#include "trainyard/common/mutex.h"

namespace trainyard::store {
namespace {

// The WAL checkpointer wakes up this often, and after this many commits.
constexpr std::chrono::milliseconds kCheckpointInterval{200};
constexpr int kCommitsPerCheckpoint = 64;
// Past this many WAL frames (256 MiB of 4 KiB pages) a checkpoint waits for readers.
constexpr int kRestartCheckpointFrames = 65536;
// Idle read connections kept for reuse.
constexpr size_t kMaxIdleReaders = 32;

Status SqliteError(sqlite3* db, std::string_view what) {
  int code = sqlite3_extended_errcode(db);
  std::string msg = std::string(what) + ": " + sqlite3_errmsg(db);
  int primary = code & 0xff;
  if (code == SQLITE_CONSTRAINT_UNIQUE || code == SQLITE_CONSTRAINT_PRIMARYKEY) {
    return Status::AlreadyExists(msg);
  }
  if (primary == SQLITE_CONSTRAINT) return Status::InvalidArgument(msg);
  if (primary == SQLITE_FULL) return Status::ResourceExhausted("disk full: " + msg);
  if (primary == SQLITE_BUSY || primary == SQLITE_LOCKED) return Status::Unavailable(msg);
  if (primary == SQLITE_IOERR || primary == SQLITE_CANTOPEN || primary == SQLITE_READONLY) {
    return Status::IOError(msg);
  }
  return Status::Internal(msg);
}

// The current row of a statement being stepped.
class StatementRow : public RowView {
 public:
  explicit StatementRow(sqlite3_stmt* stmt) : stmt_(stmt) {}
  bool IsNull(size_t i) const override {
    return sqlite3_column_type(stmt_, static_cast<int>(i)) == SQLITE_NULL;
  }
  int64_t Int(size_t i) const override { return sqlite3_column_int64(stmt_, static_cast<int>(i)); }
  double Double(size_t i) const override {
    return sqlite3_column_double(stmt_, static_cast<int>(i));
  }
  std::string_view Text(size_t i) const override {
    const unsigned char* t = sqlite3_column_text(stmt_, static_cast<int>(i));
    int n = sqlite3_column_bytes(stmt_, static_cast<int>(i));
    return t ? std::string_view(reinterpret_cast<const char*>(t), static_cast<size_t>(n))
             : std::string_view();
  }
  std::string_view Bytes(size_t i) const override {
    const void* b = sqlite3_column_blob(stmt_, static_cast<int>(i));  // before _bytes
    int n = sqlite3_column_bytes(stmt_, static_cast<int>(i));
    return b ? std::string_view(static_cast<const char*>(b), static_cast<size_t>(n))
             : std::string_view();
  }

 private:
  sqlite3_stmt* stmt_;
};

// One sqlite3 connection with its statement cache. Not thread-safe.
class Connection : public Transaction {
 public:
  ~Connection() override {
    for (auto& [sql, stmt] : cache_) sqlite3_finalize(stmt);
    if (db_) sqlite3_close_v2(db_);
  }

  static Result<std::unique_ptr<Connection>> Open(const std::string& path, bool sync_full,
                                                  bool read_only) {
    auto conn = std::unique_ptr<Connection>(new Connection());
    int flags = SQLITE_OPEN_NOMUTEX |
                (read_only ? SQLITE_OPEN_READONLY : (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE));
    if (sqlite3_open_v2(path.c_str(), &conn->db_, flags, nullptr) != SQLITE_OK) {
      Status s = conn->db_ ? SqliteError(conn->db_, "open " + path)
                           : Status::IOError("cannot open " + path);
      return s;
    }
    sqlite3_busy_timeout(conn->db_, 10000);
    std::string pragmas = "PRAGMA foreign_keys=ON; PRAGMA case_sensitive_like=ON;";
    if (!read_only) {
      pragmas += "PRAGMA journal_mode=WAL;";
      pragmas += sync_full ? "PRAGMA synchronous=FULL;" : "PRAGMA synchronous=NORMAL;";
      // Checkpoints run on a background thread (SqliteDatabase), not in a writer's commit.
      if (path != ":memory:") pragmas += "PRAGMA wal_autocheckpoint=0;";
    }
    pragmas += "PRAGMA cache_size=-65536; PRAGMA temp_store=MEMORY; PRAGMA mmap_size=268435456;";
    char* err = nullptr;
    if (sqlite3_exec(conn->db_, pragmas.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
      std::string msg = err ? err : "unknown";
      sqlite3_free(err);
      return Status::IOError("configure " + path + ": " + msg);
    }
    return conn;
  }

  Result<Rows> Query(std::string_view sql, const std::vector<Value>& params) override {
    TY_ASSIGN_OR_RETURN(sqlite3_stmt * stmt, Prepare(sql, params));
    Rows rows;
    int ncols = sqlite3_column_count(stmt);
    while (true) {
      int rc = sqlite3_step(stmt);
      if (rc == SQLITE_DONE) break;
      if (rc != SQLITE_ROW) {
        Status s = SqliteError(db_, "query");
        sqlite3_reset(stmt);
        return s;
      }
      std::vector<Value> values;
      values.reserve(ncols);
      for (int c = 0; c < ncols; ++c) {
        switch (sqlite3_column_type(stmt, c)) {
          case SQLITE_INTEGER:
            values.emplace_back(int64_t{sqlite3_column_int64(stmt, c)});
            break;
          case SQLITE_FLOAT:
            values.emplace_back(sqlite3_column_double(stmt, c));
            break;
          case SQLITE_NULL:
            values.emplace_back(std::monostate{});
            break;
          case SQLITE_BLOB: {
            const void* b = sqlite3_column_blob(stmt, c);
            int n = sqlite3_column_bytes(stmt, c);
            values.emplace_back(Blob{std::string(static_cast<const char*>(b), n)});
            break;
          }
          default: {
            const unsigned char* text = sqlite3_column_text(stmt, c);
            int n = sqlite3_column_bytes(stmt, c);
            values.emplace_back(std::string(reinterpret_cast<const char*>(text), n));
          }
        }
      }
      rows.emplace_back(std::move(values));
    }
    sqlite3_reset(stmt);
    return rows;
  }

  Status QueryEach(std::string_view sql, const std::vector<Value>& params,
                   const std::function<Status(const RowView&)>& fn) override {
    TY_ASSIGN_OR_RETURN(sqlite3_stmt * stmt, Prepare(sql, params));
    StatementRow row(stmt);
    while (true) {
      int rc = sqlite3_step(stmt);
      if (rc == SQLITE_DONE) break;
      if (rc != SQLITE_ROW) {
        Status s = SqliteError(db_, "query");
        sqlite3_reset(stmt);
        return s;
      }
      Status s = fn(row);
      if (!s.ok()) {
        sqlite3_reset(stmt);
        return s;
      }
    }
    sqlite3_reset(stmt);
    return Status::Ok();
  }

  Result<int64_t> Exec(std::string_view sql, const std::vector<Value>& params) override {
    TY_ASSIGN_OR_RETURN(sqlite3_stmt * stmt, Prepare(sql, params));
    // sqlite3_changes() keeps the last DML's count across DDL; the total's delta does not.
    int64_t before = sqlite3_total_changes64(db_);
    int rc;
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
    }
    if (rc != SQLITE_DONE) {
      Status s = SqliteError(db_, "exec");
      sqlite3_reset(stmt);
      return s;
    }
    sqlite3_reset(stmt);
    return sqlite3_total_changes64(db_) - before;
  }

  Status Run(const char* sql) {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
      std::string msg = err ? err : "unknown";
      sqlite3_free(err);
      Status s = SqliteError(db_, sql);
      return Status(s.code(), std::string(sql) + ": " + msg);
    }
    return Status::Ok();
  }

 private:
  Connection() = default;

  Result<sqlite3_stmt*> Prepare(std::string_view sql, const std::vector<Value>& params) {
    sqlite3_stmt* stmt = nullptr;
    auto it = cache_.find(sql);
    if (it != cache_.end()) {
      // Every parameter is bound again below (their number must match), so the old
      // bindings need no clearing: a multi-row INSERT has a thousand of them.
      stmt = it->second;
    } else {
      if (sqlite3_prepare_v3(db_, sql.data(), static_cast<int>(sql.size()),
                             SQLITE_PREPARE_PERSISTENT, &stmt, nullptr) != SQLITE_OK) {
        return SqliteError(db_, "prepare");
      }
      if (cache_.size() > 512) {
        for (auto& [s, st] : cache_) sqlite3_finalize(st);
        cache_.clear();
      }
      cache_.emplace(std::string(sql), stmt);
    }
    int expected = sqlite3_bind_parameter_count(stmt);
    if (expected != static_cast<int>(params.size())) {
      return Status::Internal("statement expects " + std::to_string(expected) +
                              " parameters, got " + std::to_string(params.size()));
    }
    for (size_t i = 0; i < params.size(); ++i) {
      int idx = static_cast<int>(i + 1);
      const Value& v = params[i];
      int rc;
      if (auto p = std::get_if<int64_t>(&v)) {
        rc = sqlite3_bind_int64(stmt, idx, *p);
      } else if (auto pd = std::get_if<double>(&v)) {
        rc = sqlite3_bind_double(stmt, idx, *pd);
      } else if (auto ps = std::get_if<std::string>(&v)) {
        rc = sqlite3_bind_text(stmt, idx, ps->data(), static_cast<int>(ps->size()), SQLITE_STATIC);
      } else if (auto pb = std::get_if<Blob>(&v)) {
        // Not NULL for empty bytes: a zero-length blob is not SQL NULL.
        rc = sqlite3_bind_blob(stmt, idx, pb->bytes.data() ? pb->bytes.data() : "",
                               static_cast<int>(pb->bytes.size()), SQLITE_STATIC);
      } else {
        rc = sqlite3_bind_null(stmt, idx);
      }
      if (rc != SQLITE_OK) return SqliteError(db_, "bind");
    }
    return stmt;
  }

  sqlite3* db_ = nullptr;
  // Looked up by string_view: no copy of the SQL text per statement run.
  struct SqlHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
  };
  std::unordered_map<std::string, sqlite3_stmt*, SqlHash, std::equal_to<>> cache_;

 public:
  sqlite3* handle() { return db_; }
};

class SqliteDatabase : public Database {
 public:
  SqliteDatabase(std::string path, bool sync_full, std::unique_ptr<Connection> writer)
      : path_(std::move(path)), sync_full_(sync_full), writer_(std::move(writer)) {
    if (path_ != ":memory:") checkpointer_ = std::thread([this] { CheckpointLoop(); });
  }

  ~SqliteDatabase() override {
    {
      MutexLock lock(checkpoint_mu_);
      stop_ = true;
    }
    checkpoint_cv_.NotifyAll();
    if (checkpointer_.joinable()) checkpointer_.join();
  }

  std::string_view Backend() const override { return "sqlite"; }

  // Group commit: a writer queues its callback; the one at the head of the queue (the
  // leader) runs every queued callback in one transaction, each in its own savepoint (so a
  // failing one rolls back alone), commits once, and only then tells each its outcome. A
  // callback's Write returns after the commit that made its changes durable, as before;
  // concurrent writers share the cost of BEGIN/COMMIT and of writing the WAL frames.
  Status Write(const std::function<Status(Transaction&)>& fn) override {
    PendingWrite self{&fn};
    ReleasableMutexLock lock(queue_mu_);
    queue_.push_back(&self);
    while (!self.done && queue_.front() != &self) self.cv.Wait(queue_mu_);
    if (self.done) return std::move(self.status);
    size_t n = std::min(queue_.size(), kMaxGroup);
    std::vector<PendingWrite*> group(queue_.begin(), queue_.begin() + static_cast<ptrdiff_t>(n));
    lock.Unlock();
    RunGroup(group);
    lock.Lock();
    queue_.erase(queue_.begin(), queue_.begin() + static_cast<ptrdiff_t>(n));
    // Notified under the lock: a waiter cannot return (destroying its cv) before we let go.
    for (PendingWrite* w : group) {
      w->done = true;
      if (w != &self) w->cv.NotifyOne();
    }
    if (!queue_.empty()) queue_.front()->cv.NotifyOne();
    return std::move(self.status);
  }

  Status Read(const std::function<Status(Transaction&)>& fn) override {
    if (path_ == ":memory:") {
      MutexLock lock(write_mu_);
      return fn(*writer_);
    }
    std::unique_ptr<Connection> conn = TakeReader();
    if (!conn) {
      auto opened = Connection::Open(path_, sync_full_, /*read_only=*/true);
      if (!opened.ok()) return opened.status();
      conn = std::move(opened).value();
    }
    Status s = conn->Run("BEGIN");
    if (s.ok()) {
      s = fn(*conn);
      Status e = conn->Run("COMMIT");
      if (s.ok()) s = e;
    }
    ReturnReader(std::move(conn));
    return s;
  }

 private:
  // Copies committed WAL frames into the database file on its own connection, so that
  // writers never pay for it. PASSIVE never blocks writers or readers; when the WAL has
  // grown large (readers kept it from being reset) a RESTART checkpoint waits for readers.
  void CheckpointLoop() TY_EXCLUDES(checkpoint_mu_) {
    auto conn = Connection::Open(path_, sync_full_, /*read_only=*/false);
    if (!conn.ok()) return;
    ReleasableMutexLock lock(checkpoint_mu_);
    while (!stop_) {
      checkpoint_cv_.WaitFor(checkpoint_mu_, kCheckpointInterval);
      if (stop_) break;
      lock.Unlock();
      int wal_frames = 0, checkpointed = 0;
      sqlite3_wal_checkpoint_v2((*conn)->handle(), nullptr, SQLITE_CHECKPOINT_PASSIVE, &wal_frames,
                                &checkpointed);
      if (wal_frames > kRestartCheckpointFrames) {
        sqlite3_wal_checkpoint_v2((*conn)->handle(), nullptr, SQLITE_CHECKPOINT_RESTART, nullptr,
                                  nullptr);
      }
      lock.Lock();
    }
    lock.Unlock();
    sqlite3_wal_checkpoint_v2((*conn)->handle(), nullptr, SQLITE_CHECKPOINT_PASSIVE, nullptr,
                              nullptr);
  }

  struct PendingWrite {
    explicit PendingWrite(const std::function<Status(Transaction&)>* f) : fn(f) {}
    const std::function<Status(Transaction&)>* fn;
    // Written by the group's leader, read by the writer once `done`.
    Status status;
    // Read and written under the database's queue_mu_ (the analysis cannot name the mutex of
    // the enclosing object from this struct).
    bool done = false;
    CondVar cv;  // `done`, or this write became the head of the queue
  };
  static constexpr size_t kMaxGroup = 64;

  static Status RunCallback(const PendingWrite& w, Transaction& tx) {
    try {
      return (*w.fn)(tx);
    } catch (const std::exception& e) {
      return Status::Internal(std::string("write transaction failed: ") + e.what());
    }
  }

  // Runs `group` in as few transactions as possible and sets each one's status.
  void RunGroup(const std::vector<PendingWrite*>& group) TY_EXCLUDES(write_mu_) {
    MutexLock lock(write_mu_);
    if (group.size() == 1) {  // no savepoint needed: exactly one transaction of its own
      PendingWrite& w = *group[0];
      w.status = writer_->Run("BEGIN IMMEDIATE");
      if (!w.status.ok()) return;
      w.status = RunCallback(w, *writer_);
      if (!w.status.ok()) {
        (void)writer_->Run("ROLLBACK");
        return;
      }
      w.status = Commit();
      return;
    }
    size_t next = 0;
    while (next < group.size()) {
      Status begun = writer_->Run("BEGIN IMMEDIATE");
      if (!begun.ok()) {
        for (; next < group.size(); ++next) group[next]->status = begun;
        return;
      }
      std::vector<PendingWrite*> in_tx;  // callbacks whose changes this transaction holds
      bool lost = false;                 // SQLite rolled the whole transaction back
      for (; next < group.size() && !lost; ++next) {
        PendingWrite& w = *group[next];
        w.status = writer_->Run("SAVEPOINT ty_group_write");
        if (w.status.ok()) w.status = RunCallback(w, *writer_);
        if (w.status.ok()) w.status = writer_->Run("RELEASE ty_group_write");
        if (w.status.ok()) {
          in_tx.push_back(&w);
          continue;
        }
        // Some errors (disk full, I/O) end the transaction: what the others in it did is gone.
        if (sqlite3_get_autocommit(writer_->handle())) {
          for (PendingWrite* done : in_tx) done->status = w.status;
          in_tx.clear();
          lost = true;
          continue;
        }
        (void)writer_->Run("ROLLBACK TO ty_group_write");
        (void)writer_->Run("RELEASE ty_group_write");
      }
      if (lost) continue;
      Status c = Commit();
      if (!c.ok()) {
        for (PendingWrite* w : in_tx) w->status = c;
      }
    }
  }

  // COMMIT, or ROLLBACK when it fails.
  Status Commit() TY_REQUIRES(write_mu_) {
    Status c = writer_->Run("COMMIT");
    if (!c.ok()) (void)writer_->Run("ROLLBACK");
    if (c.ok() && ++commits_since_checkpoint_ >= kCommitsPerCheckpoint) {
      commits_since_checkpoint_ = 0;
      checkpoint_cv_.NotifyOne();
    }
    return c;
  }

  std::unique_ptr<Connection> TakeReader() TY_EXCLUDES(readers_mu_) {
    MutexLock lock(readers_mu_);
    if (readers_.empty()) return nullptr;
    auto c = std::move(readers_.back());
    readers_.pop_back();
    return c;
  }

  void ReturnReader(std::unique_ptr<Connection> c) TY_EXCLUDES(readers_mu_) {
    MutexLock lock(readers_mu_);
    if (readers_.size() < kMaxIdleReaders) readers_.push_back(std::move(c));
  }

  const std::string path_;
  const bool sync_full_;
  Mutex queue_mu_;
  std::deque<PendingWrite*> queue_ TY_GUARDED_BY(queue_mu_);  // the head is the leader
  Mutex write_mu_;
  std::unique_ptr<Connection> writer_ TY_GUARDED_BY(write_mu_);
  Mutex readers_mu_;
  std::vector<std::unique_ptr<Connection>> readers_ TY_GUARDED_BY(readers_mu_);
  int commits_since_checkpoint_ TY_GUARDED_BY(write_mu_) = 0;
  Mutex checkpoint_mu_;
  CondVar checkpoint_cv_;  // time to checkpoint, or stop_
  bool stop_ TY_GUARDED_BY(checkpoint_mu_) = false;
  std::thread checkpointer_;
};

}  // namespace

Result<std::unique_ptr<Database>> OpenSqliteDatabase(const std::string& path, bool sync_full) {
  TY_ASSIGN_OR_RETURN(auto writer, Connection::Open(path, sync_full, /*read_only=*/false));
  return std::unique_ptr<Database>(new SqliteDatabase(path, sync_full, std::move(writer)));
}

}  // namespace trainyard::store
