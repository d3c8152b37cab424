#include "trainyard/tables/table.h"

#include <arrow/compute/api.h>
#include <sys/stat.h>

#include <algorithm>
#include <set>

#include "trainyard/common/json.h"
#include "trainyard/common/mutex.h"
#include "trainyard/common/strings.h"
#include "trainyard/tables/arrow_util.h"
#include "trainyard/tables/data_files.h"
#include "trainyard/tables/delta_log.h"
#include "trainyard/tables/delta_schema.h"
#include "trainyard/tables/delta_snapshot.h"

namespace trainyard::tables {

namespace cp = arrow::compute;

namespace {

constexpr char kEngineInfo[] = "Trainyard/0.1.0";
constexpr int64_t kDefaultRetentionMs = 7 * 86'400'000LL;

// The next log entry, created only if absent (decision 0011). When the store cannot tell
// whether the write landed (Unavailable), the key is read back: our bytes there mean it did.
Status PutLogEntry(blob::BlobStore& store, const std::string& key, const std::string& body) {
  Status put = store.PutIfAbsent(key, body);
  if (put.code() != StatusCode::kUnavailable) return put;
  Result<std::string> landed = store.GetBytes(key);
  if (landed.ok()) {
    return *landed == body ? Status::Ok() : Status::AlreadyExists(key + " already exists");
  }
  return put;
}

std::string JsonText(const json::value& v) {
  return v.is_string() ? std::string(v.as_string()) : json::serialize(v);
}

json::array StringArray(const std::vector<std::string>& v) {
  json::array a;
  for (const auto& s : v) a.emplace_back(s);
  return a;
}

bool SamePartitionType(const arrow::DataType& t) {
  return t.id() == arrow::Type::STRING || arrow::is_integer(t.id()) ||
         t.id() == arrow::Type::BOOL || t.id() == arrow::Type::DATE32;
}

Status ValidateProperties(const std::map<std::string, std::string>& properties) {
  for (const auto& [key, value] : properties) {
    if (key == "delta.checkpointInterval") {
      auto n = ParseInt64(value);
      if (!n || *n < 1) {
        return Status::InvalidArgument(
            "properties.delta.checkpointInterval must be a positive "
            "integer (got '" +
            value + "')");
      }
    } else if (key == "delta.appendOnly") {
      if (value != "true" && value != "false") {
        return Status::InvalidArgument("properties.delta.appendOnly must be true or false");
      }
    } else if (key == "delta.columnMapping.mode" && value != "none") {
      return Status::InvalidArgument(
          "properties.delta.columnMapping.mode: only 'none' is "
          "supported");
    } else if (key == "delta.enableDeletionVectors" && value == "true") {
      return Status::InvalidArgument(
          "properties.delta.enableDeletionVectors: deletion vectors "
          "are not supported");
    } else if (key == "delta.deletedFileRetentionDuration" || key == "delta.logRetentionDuration") {
      Snapshot probe;
      probe.metadata.configuration[key] = value;
      Result<std::optional<int64_t>> ms = IntervalProperty(probe, key);
      if (!ms.ok()) return ms.status().WithContext("properties");
    }
  }
  return Status::Ok();
}

Status ValidateSchema(const arrow::Schema& schema, const std::string& field) {
  if (schema.num_fields() == 0) return Status::InvalidArgument(field + " must have columns");
  std::set<std::string> seen;
  for (const auto& f : schema.fields()) {
    if (f->name().empty()) return Status::InvalidArgument(field + ": a column has no name");
    if (!seen.insert(ToLower(f->name())).second) {
      return Status::InvalidArgument(field + ": column '" + f->name() +
                                     "' appears twice (names are case-insensitive)");
    }
  }
  Result<std::string> json_schema = SchemaToDeltaJson(schema);
  if (!json_schema.ok()) return json_schema.status().WithContext(field);
  return Status::Ok();
}

ProtocolAction ProtocolFor(const arrow::Schema& schema) {
  ProtocolAction p;
  for (const auto& f : schema.fields()) {
    if (UsesTimestampNtz(*f->type())) {
      p.min_reader_version = 3;
      p.min_writer_version = 7;
      p.reader_features = std::vector<std::string>{"timestampNtz"};
      p.writer_features = std::vector<std::string>{"timestampNtz"};
    }
  }
  return p;
}

bool AppendOnly(const Snapshot& s) {
  auto it = s.metadata.configuration.find("delta.appendOnly");
  return it != s.metadata.configuration.end() && it->second == "true";
}

// numRecords when the stats start with it, as every writer we know puts it (Spark, delta-rs,
// ours): Describe reads it for every file, and parsing 10,000 stats objects dominated it.
std::optional<int64_t> LeadingNumRecords(std::string_view stats) {
  constexpr std::string_view kKey = "{\"numRecords\":";
  if (!StartsWith(stats, kKey)) return std::nullopt;
  size_t end = kKey.size();
  while (end < stats.size() && stats[end] >= '0' && stats[end] <= '9') ++end;
  if (end == kKey.size() || end >= stats.size() || (stats[end] != ',' && stats[end] != '}')) {
    return std::nullopt;
  }
  return ParseInt64(stats.substr(kKey.size(), end - kKey.size()));
}

int64_t NumRecords(const AddAction& add) {
  if (!add.stats) return -1;
  if (auto n = LeadingNumRecords(*add.stats)) return *n;
  Result<json::object> o = ParseJsonObject(*add.stats);
  if (!o.ok()) return -1;
  Result<std::optional<int64_t>> n = OptionalInt64(*o, "numRecords");
  return n.ok() && *n ? **n : -1;
}

RemoveAction RemoveOf(const AddAction& add, int64_t now) {
  RemoveAction r;
  r.path = add.path;
  r.deletion_timestamp = now;
  r.data_change = true;
  r.extended_file_metadata = true;
  r.partition_values = add.partition_values;
  r.size = add.size;
  return r;
}

}  // namespace

// One write: what it read, the actions it commits, and how its commit is described.
struct Transaction {
  std::shared_ptr<const Snapshot> read;
  bool blind_append = true;  // conflicts only with metadata/protocol changes
  bool reads_all = false;    // an added file anywhere conflicts
  std::optional<Predicate> read_filter;
  std::set<std::string> removed;
  std::vector<Action> actions;
  std::string operation;
  json::object parameters;
  json::object metrics;
  CommitResult result;
};

// Whether a commit's commitInfo carries `txn_id` (then it is the entry that transaction wrote).
bool CarriesTxnId(const std::vector<Action>& actions, const std::string& txn_id) {
  for (const Action& a : actions) {
    if (!a.commit_info) continue;
    const json::value* id = a.commit_info->fields.if_contains("txnId");
    if (id && id->is_string() && id->as_string() == txn_id) return true;
  }
  return false;
}

class DeltaTable::Impl {
 public:
  Impl(blob::BlobStore& store, std::string root, Clock& clock, TableOptions options)
      : store_(store),
        log_(std::make_shared<DeltaLog>(store, std::move(root), options.name)),
        clock_(clock),
        options_(options) {
    InitializeArrowCompute();
    if (options_.random == nullptr) {
      owned_random_ = std::make_unique<SecureRandom>();
      options_.random = owned_random_.get();
    }
  }

  blob::BlobStore& store_;
  std::shared_ptr<const DeltaLog> log_;
  Clock& clock_;
  TableOptions options_;
  std::unique_ptr<Random> owned_random_;
  Mutex mu_;
  std::shared_ptr<const Snapshot> latest_ TY_GUARDED_BY(mu_);

  Result<std::shared_ptr<const Snapshot>> Latest() {
    std::shared_ptr<const Snapshot> cached;
    {
      MutexLock lock(mu_);
      cached = latest_;
    }
    std::shared_ptr<const Snapshot> fresh;
    if (cached) {
      TY_ASSIGN_OR_RETURN(fresh, log_->Advance(cached));
    } else {
      TY_ASSIGN_OR_RETURN(fresh, log_->LoadLatest());
    }
    MutexLock lock(mu_);
    if (!latest_ || latest_->version < fresh->version) latest_ = fresh;
    return fresh;
  }

  Result<std::shared_ptr<const Snapshot>> At(const VersionSpec& at) {
    if (at.version && at.timestamp_ms) {
      return Status::InvalidArgument("give a version or a timestamp, not both");
    }
    if (at.version) {
      // Only the log up to the version is read, so a damaged later entry does not matter.
      {
        MutexLock lock(mu_);
        if (latest_ && latest_->version == *at.version) return latest_;
      }
      return log_->LoadVersion(*at.version);
    }
    TY_ASSIGN_OR_RETURN(auto latest, Latest());
    if (!at.timestamp_ms) return latest;
    auto ict = latest->metadata.configuration.find("delta.enableInCommitTimestamps");
    bool in_commit_timestamps =
        ict != latest->metadata.configuration.end() && ToLower(ict->second) == "true";
    TY_ASSIGN_OR_RETURN(int64_t version, log_->VersionAtTimestamp(*at.timestamp_ms, latest->version,
                                                                  in_commit_timestamps));
    if (version == latest->version) return latest;
    return log_->LoadVersion(version);
  }

  Result<std::shared_ptr<const Snapshot>> Writable() {
    TY_ASSIGN_OR_RETURN(auto snapshot, Latest());
    Status s = CheckWritable(*snapshot);
    if (!s.ok()) return s.WithContext("table '" + log_->root() + "'");
    return snapshot;
  }

  Status CheckConflict(const Transaction& txn, const std::vector<Action>& winner, int64_t version) {
    auto conflict = [&](const std::string& why) {
      return Status::FailedPrecondition("concurrent commit at version " + std::to_string(version) +
                                        ": " + why + "; retry");
    };
    for (const Action& a : winner) {
      if (a.metadata || a.protocol) {
        return conflict("it changed the table's metadata or protocol");
      }
      if (txn.blind_append) continue;
      if (a.remove && txn.removed.count(a.remove->path)) {
        return conflict("it removed the file " + a.remove->path + ", which this write replaces");
      }
      if (a.add && a.add->data_change &&
          (txn.reads_all || (txn.read_filter &&
                             txn.read_filter->MayMatch(StatsOfFile(*a.add, *txn.read->schema))))) {
        return conflict("it added rows that this " + txn.operation + " would have read");
      }
    }
    return Status::Ok();
  }

  std::string CommitBody(const Transaction& txn, int64_t timestamp, int64_t read_version,
                         const std::string& txn_id) {
    json::object info{{"timestamp", timestamp},
                      {"operation", txn.operation},
                      {"operationParameters", txn.parameters}};
    if (read_version >= 0) info["readVersion"] = read_version;
    if (!options_.user_id.empty()) info["userId"] = options_.user_id;
    if (!options_.user_name.empty()) info["userName"] = options_.user_name;
    info["isolationLevel"] = "Serializable";
    bool changes_metadata = std::any_of(
        txn.actions.begin(), txn.actions.end(),
        [](const Action& a) { return a.metadata.has_value() || a.protocol.has_value(); });
    info["isBlindAppend"] = txn.blind_append && txn.removed.empty() && !changes_metadata;
    info["operationMetrics"] = txn.metrics;
    info["engineInfo"] = kEngineInfo;
    info["txnId"] = txn_id;
    if (!options_.commit_user_metadata.empty()) {
      info["userMetadata"] = options_.commit_user_metadata;
    }
    Action commit_info;
    commit_info.commit_info = CommitInfoAction{std::move(info)};
    std::string body = ActionLine(commit_info) + "\n";
    for (const Action& a : txn.actions) body += ActionLine(a) + "\n";
    return body;
  }

  void DiscardFiles(const Transaction& txn) {
    for (const Action& a : txn.actions) {
      if (!a.add) continue;
      Result<std::string> path = DecodePathUri(a.add->path);
      if (path.ok()) (void)store_.Delete(log_->Key(*path));  // best effort: Vacuum also would
    }
  }

  Result<CommitResult> Commit(Transaction& txn) {
    int64_t version = txn.read ? txn.read->version + 1 : 0;
    int64_t last_ts = txn.read ? txn.read->timestamp_ms : 0;
    // One id for every attempt of this transaction: an entry that carries it is this one's.
    const std::string txn_id = NewUuid(*options_.random);
    for (int attempt = 1; attempt <= options_.max_commit_attempts; ++attempt) {
      int64_t ts = std::max(clock_.NowMillis(), last_ts + 1);
      std::string body = CommitBody(txn, ts, version - 1, txn_id);
      Status put = PutLogEntry(store_, log_->LogKey(CommitFileName(version)), body);
      if (put.ok()) {
        txn.result.version = version;
        txn.result.timestamp_ms = ts;
        txn.result.attempts = attempt;
        MaybeCheckpoint(version);
        return txn.result;
      }
      if (!put.IsAlreadyExists() || version == 0) {
        if (version == 0 && put.IsAlreadyExists()) {
          return Status::AlreadyExists("a Delta table already exists at '" + log_->root() + "'");
        }
        DiscardFiles(txn);
        return put.WithContext("table '" + log_->root() + "': committing version " +
                               std::to_string(version));
      }
      TY_ASSIGN_OR_RETURN(auto winner, log_->ReadCommit(version));
      if (!winner) return Status::Internal("commit " + std::to_string(version) + " vanished");
      if (CarriesTxnId(*winner, txn_id)) {  // ours: the put's answer was lost, then retried
        txn.result.version = version;
        txn.result.timestamp_ms = ts;
        txn.result.attempts = attempt;
        MaybeCheckpoint(version);
        return txn.result;
      }
      Status conflict = CheckConflict(txn, *winner, version);
      if (!conflict.ok()) {
        DiscardFiles(txn);
        return conflict;
      }
      for (const Action& a : *winner) {
        if (a.commit_info && a.commit_info->Timestamp()) last_ts = *a.commit_info->Timestamp();
      }
      ++version;
    }
    DiscardFiles(txn);
    return Status::FailedPrecondition("table '" + log_->root() + "': gave up after " +
                                      std::to_string(options_.max_commit_attempts) +
                                      " attempts, other writers kept committing first; retry");
  }

  void MaybeCheckpoint(int64_t version) {
    Result<std::shared_ptr<const Snapshot>> latest = Latest();
    if (!latest.ok() || (*latest)->version != version || version == 0) return;
    int64_t interval = options_.default_checkpoint_interval;
    auto it = (*latest)->metadata.configuration.find("delta.checkpointInterval");
    if (it != (*latest)->metadata.configuration.end()) {
      interval = ParseInt64(it->second).value_or(interval);
    }
    if (interval <= 0 || version % interval != 0) return;
    // A failed checkpoint leaves the commit valid; readers replay the JSON entries instead.
    (void)WriteCheckpoint(**latest);
  }

  Status WriteCheckpoint(const Snapshot& snapshot) {
    Result<std::optional<int64_t>> retention =
        IntervalProperty(snapshot, "delta.deletedFileRetentionDuration");
    int64_t keep = retention.ok() && *retention ? **retention : kDefaultRetentionMs;
    return log_->WriteCheckpoint(snapshot, clock_.NowMillis() - keep);
  }

  DataFileWriter NewWriter(const Snapshot& snapshot) {
    return DataFileWriter(store_, *log_, snapshot.schema, snapshot.metadata.partition_columns,
                          options_, clock_, *options_.random);
  }

  // Writes `rows` into new files; with `must_match`, every row must satisfy it.
  Result<std::vector<AddAction>> WriteRows(const Snapshot& snapshot, arrow::RecordBatchReader& rows,
                                           const std::optional<Predicate>& must_match,
                                           int64_t* row_count) {
    DataFileWriter writer = NewWriter(snapshot);
    Status written = WriteAll(snapshot, rows, must_match, writer);
    Result<std::vector<AddAction>> adds =
        written.ok() ? writer.Finish() : Result<std::vector<AddAction>>(written);
    if (!adds.ok()) {
      writer.Abandon();
      return adds.status();
    }
    *row_count = writer.rows();
    return adds;
  }

  Status WriteAll(const Snapshot& snapshot, arrow::RecordBatchReader& rows,
                  const std::optional<Predicate>& must_match, DataFileWriter& writer) {
    int64_t row = 0;
    while (true) {
      std::shared_ptr<arrow::RecordBatch> batch;
      TY_RETURN_IF_ERROR(FromArrow(rows.ReadNext(&batch), "reading the rows to write"));
      if (batch == nullptr) return Status::Ok();
      Result<std::shared_ptr<arrow::RecordBatch>> conformed =
          ConformBatch(*batch, *snapshot.schema);
      if (!conformed.ok()) {
        return conformed.status().WithContext("rows " + std::to_string(row) + ".." +
                                              std::to_string(row + batch->num_rows() - 1));
      }
      if (must_match) {
        TY_ASSIGN_OR_RETURN(auto mask, must_match->Evaluate(**conformed));
        if (mask->true_count() != (*conformed)->num_rows()) {
          return Status::InvalidArgument("replace_where: the new rows must all match '" +
                                         must_match->ToString() + "'");
        }
      }
      TY_RETURN_IF_ERROR(writer.Write(**conformed));
      row += batch->num_rows();
    }
  }

  // Copy-on-write: the files where `where` may match are read; rows where it is TRUE are
  // dropped (`set` empty) or updated; files with such rows are removed and rewritten.
  Status Rewrite(Transaction& txn, const Predicate& where,
                 const std::map<std::string, std::shared_ptr<arrow::Scalar>>& set) {
    const Snapshot& snapshot = *txn.read;
    DataFileWriter writer = NewWriter(snapshot);
    int64_t now = clock_.NowMillis();
    for (const auto& [path, add] : snapshot.files) {
      if (!where.MayMatch(StatsOfFile(add, *snapshot.schema))) continue;
      TY_ASSIGN_OR_RETURN(int64_t matches, CountMatches(txn.read, add, where));
      if (matches == 0) continue;
      txn.result.rows_affected += matches;
      txn.removed.insert(add.path);
      Action remove;
      remove.remove = RemoveOf(add, now);
      txn.actions.push_back(std::move(remove));
      ++txn.result.files_removed;
      if (set.empty() && matches == NumRecords(add)) continue;  // every row deleted
      TY_ASSIGN_OR_RETURN(auto reader, ScanFiles(store_, log_, txn.read, {add}, snapshot.schema,
                                                 std::nullopt, 64 * 1024));
      while (true) {
        std::shared_ptr<arrow::RecordBatch> batch;
        TY_RETURN_IF_ERROR(FromArrow(reader->ReadNext(&batch), "rewriting " + add.path));
        if (batch == nullptr) break;
        TY_ASSIGN_OR_RETURN(auto mask, where.Evaluate(*batch));
        TY_ASSIGN_OR_RETURN(auto out, Transform(batch, mask, set));
        if (out->num_rows() > 0) TY_RETURN_IF_ERROR(writer.Write(*out));
      }
    }
    TY_ASSIGN_OR_RETURN(auto adds, writer.Finish());
    AddFiles(txn, std::move(adds));
    return Status::Ok();
  }

  Result<int64_t> CountMatches(const std::shared_ptr<const Snapshot>& read, const AddAction& add,
                               const Predicate& where) {
    const Snapshot& snapshot = *read;
    std::vector<std::string> columns = where.Columns();
    arrow::FieldVector fields;
    for (const auto& c : columns) fields.push_back(snapshot.schema->GetFieldByName(c));
    if (fields.empty()) fields.push_back(snapshot.schema->field(0));
    TY_ASSIGN_OR_RETURN(
        auto reader, ScanFiles(store_, log_, read, {add}, arrow::schema(fields), where, 64 * 1024));
    int64_t n = 0;
    while (true) {
      std::shared_ptr<arrow::RecordBatch> batch;
      TY_RETURN_IF_ERROR(FromArrow(reader->ReadNext(&batch), "reading " + add.path));
      if (batch == nullptr) return n;
      n += batch->num_rows();
    }
  }

  Result<std::shared_ptr<arrow::RecordBatch>> Transform(
      const std::shared_ptr<arrow::RecordBatch>& batch,
      const std::shared_ptr<arrow::BooleanArray>& mask,
      const std::map<std::string, std::shared_ptr<arrow::Scalar>>& set) {
    if (set.empty()) {
      TY_ASSIGN_OR_RETURN(auto keep, FromArrow(cp::Invert(mask), "delete"));
      TY_ASSIGN_OR_RETURN(auto kept, FromArrow(cp::Filter(batch, keep), "delete"));
      return kept.record_batch();
    }
    arrow::ArrayVector columns = batch->columns();
    for (int c = 0; c < batch->num_columns(); ++c) {
      auto it = set.find(batch->schema()->field(c)->name());
      if (it == set.end()) continue;
      TY_ASSIGN_OR_RETURN(auto updated,
                          FromArrow(cp::IfElse(mask, it->second, columns[c]), "update"));
      columns[c] = updated.make_array();
    }
    return arrow::RecordBatch::Make(batch->schema(), batch->num_rows(), columns);
  }

  static void AddFiles(Transaction& txn, std::vector<AddAction> adds) {
    for (auto& add : adds) {
      int64_t n = NumRecords(add);
      if (n > 0) txn.result.rows_written += n;
      Action a;
      a.add = std::move(add);
      txn.actions.push_back(std::move(a));
      ++txn.result.files_added;
    }
  }

  static void SetWriteMetrics(Transaction& txn) {
    int64_t bytes = 0;
    for (const Action& a : txn.actions) {
      if (a.add) bytes += a.add->size;
    }
    txn.metrics["numFiles"] = std::to_string(txn.result.files_added);
    txn.metrics["numOutputRows"] = std::to_string(txn.result.rows_written);
    txn.metrics["numOutputBytes"] = std::to_string(bytes);
    if (txn.result.files_removed > 0) {
      txn.metrics["numRemovedFiles"] = std::to_string(txn.result.files_removed);
    }
  }

  Result<CommitResult> Write(arrow::RecordBatchReader& rows, bool overwrite,
                             const std::optional<Predicate>& replace_where) {
    TY_ASSIGN_OR_RETURN(auto snapshot, Writable());
    if (overwrite && AppendOnly(*snapshot)) {
      return Status::FailedPrecondition("table '" + log_->root() +
                                        "' is append-only (delta.appendOnly=true)");
    }
    if (replace_where) TY_RETURN_IF_ERROR(replace_where->Validate(*snapshot->schema));
    Transaction txn;
    txn.read = snapshot;
    txn.operation = "WRITE";
    txn.parameters["mode"] = overwrite ? "Overwrite" : "Append";
    txn.parameters["partitionBy"] =
        json::serialize(StringArray(snapshot->metadata.partition_columns));
    int64_t rows_in = 0;
    TY_ASSIGN_OR_RETURN(auto adds, WriteRows(*snapshot, rows, replace_where, &rows_in));
    if (overwrite) {
      txn.blind_append = false;
      if (replace_where) {
        txn.parameters["predicate"] = replace_where->ToString();
        txn.read_filter = replace_where;
        Status s = Rewrite(txn, *replace_where, {});
        if (!s.ok()) {
          Transaction discard;
          AddFiles(discard, std::move(adds));
          DiscardFiles(discard);
          return s;
        }
      } else {
        txn.reads_all = true;
        int64_t now = clock_.NowMillis();
        for (const auto& [path, add] : snapshot->files) {
          Action remove;
          remove.remove = RemoveOf(add, now);
          txn.removed.insert(path);
          txn.actions.push_back(std::move(remove));
          ++txn.result.files_removed;
        }
      }
    }
    AddFiles(txn, std::move(adds));
    txn.result.rows_written = rows_in;
    SetWriteMetrics(txn);
    return Commit(txn);
  }

  Result<CommitResult> Modify(const Predicate& where, const std::map<std::string, Literal>& set) {
    TY_ASSIGN_OR_RETURN(auto snapshot, Writable());
    if (AppendOnly(*snapshot)) {
      return Status::FailedPrecondition("table '" + log_->root() +
                                        "' is append-only (delta.appendOnly=true)");
    }
    TY_RETURN_IF_ERROR(where.Validate(*snapshot->schema));
    std::map<std::string, std::shared_ptr<arrow::Scalar>> scalars;
    json::object assignments;
    for (const auto& [column, value] : set) {
      auto field = snapshot->schema->GetFieldByName(column);
      if (field == nullptr) {
        return Status::InvalidArgument("set: no column '" + column + "' in the table");
      }
      if (std::holds_alternative<std::monostate>(value) && !field->nullable()) {
        return Status::InvalidArgument("set: column '" + column + "' is not nullable");
      }
      TY_ASSIGN_OR_RETURN(scalars[column], LiteralAsScalar(value, field->type(), column));
      assignments[column] = LiteralToString(value);
    }
    Transaction txn;
    txn.read = snapshot;
    txn.blind_append = false;
    txn.read_filter = where;
    bool update = !set.empty();
    txn.operation = update ? "UPDATE" : "DELETE";
    txn.parameters["predicate"] = json::serialize(json::array{json::value(where.ToString())});
    TY_RETURN_IF_ERROR(Rewrite(txn, where, scalars));
    SetWriteMetrics(txn);
    txn.metrics[update ? "numUpdatedRows" : "numDeletedRows"] =
        std::to_string(txn.result.rows_affected);
    return Commit(txn);
  }
};

// -------------------------------------------------------------------------------------------
// DeltaTable

DeltaTable::DeltaTable(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DeltaTable::~DeltaTable() = default;

const std::string& DeltaTable::root() const { return impl_->log_->root(); }

Result<std::unique_ptr<DeltaTable>> DeltaTable::Create(blob::BlobStore& store, std::string root,
                                                       Clock& clock,
                                                       const CreateTableRequest& request,
                                                       TableOptions options) {
  if (!root.empty()) TY_RETURN_IF_ERROR(blob::ValidateKey(root).WithContext("table root"));
  if (request.schema == nullptr) return Status::InvalidArgument("schema is required");
  TY_RETURN_IF_ERROR(ValidateSchema(*request.schema, "schema"));
  TY_RETURN_IF_ERROR(ValidateProperties(request.properties));
  std::set<std::string> partitions;
  for (const auto& name : request.partition_columns) {
    auto field = request.schema->GetFieldByName(name);
    if (field == nullptr) {
      return Status::InvalidArgument("partition_columns: no column '" + name + "' in the schema");
    }
    if (!SamePartitionType(*field->type())) {
      return Status::InvalidArgument("partition_columns: column '" + name + "' has type " +
                                     field->type()->ToString() +
                                     "; partition by a string, integer, boolean or date column");
    }
    if (!partitions.insert(name).second) {
      return Status::InvalidArgument("partition_columns: '" + name + "' appears twice");
    }
  }
  if (partitions.size() == static_cast<size_t>(request.schema->num_fields())) {
    return Status::InvalidArgument(
        "partition_columns: at least one column must not be a "
        "partition column");
  }
  auto impl = std::make_unique<Impl>(store, std::move(root), clock, options);
  TY_ASSIGN_OR_RETURN(auto existing, impl->log_->ListCommitVersions());
  if (!existing.empty()) {
    return Status::AlreadyExists("a Delta table already exists at '" + impl->log_->root() + "'");
  }
  TY_ASSIGN_OR_RETURN(std::string schema_string, SchemaToDeltaJson(*request.schema));
  TY_ASSIGN_OR_RETURN(auto schema, SchemaFromDeltaJson(schema_string));
  Transaction txn;
  Action protocol;
  protocol.protocol = ProtocolFor(*schema);
  Action metadata;
  metadata.metadata = MetadataAction{};
  MetadataAction& m = *metadata.metadata;
  std::string hex = impl->options_.random->Hex(16);
  hex[12] = '4';
  m.id = hex.substr(0, 8) + "-" + hex.substr(8, 4) + "-" + hex.substr(12, 4) + "-" +
         hex.substr(16, 4) + "-" + hex.substr(20, 12);
  m.name = request.name;
  m.description = request.description;
  m.schema_string = schema_string;
  m.partition_columns = request.partition_columns;
  m.configuration = request.properties;
  m.created_time = clock.NowMillis();
  txn.actions = {protocol, metadata};
  txn.operation = "CREATE TABLE";
  txn.parameters["isManaged"] = "false";
  txn.parameters["description"] = request.description;
  txn.parameters["partitionBy"] = json::serialize(StringArray(request.partition_columns));
  json::object props;
  for (const auto& [k, v] : request.properties) props[k] = v;
  txn.parameters["properties"] = json::serialize(props);
  TY_ASSIGN_OR_RETURN(CommitResult committed, impl->Commit(txn));
  (void)committed;
  return std::unique_ptr<DeltaTable>(new DeltaTable(std::move(impl)));
}

Result<std::unique_ptr<DeltaTable>> DeltaTable::Open(blob::BlobStore& store, std::string root,
                                                     Clock& clock, TableOptions options) {
  if (!root.empty()) TY_RETURN_IF_ERROR(blob::ValidateKey(root).WithContext("table root"));
  auto impl = std::make_unique<Impl>(store, std::move(root), clock, options);
  Result<std::shared_ptr<const Snapshot>> snapshot = impl->Latest();
  if (!snapshot.ok()) {
    // A damaged (malformed) log entry is InvalidArgument: the table opens so that versions
    // before it can still be read; reads of the latest version report the damage.
    if (snapshot.status().code() != StatusCode::kInvalidArgument) return snapshot.status();
    TY_ASSIGN_OR_RETURN(auto versions, impl->log_->ListCommitVersions());
    if (versions.empty()) return snapshot.status();
  } else {
    Status readable = CheckReadable(**snapshot);
    if (!readable.ok()) return readable.WithContext("table '" + impl->log_->root() + "'");
  }
  return std::unique_ptr<DeltaTable>(new DeltaTable(std::move(impl)));
}

Result<CommitResult> DeltaTable::Append(arrow::RecordBatchReader& rows) {
  return impl_->Write(rows, false, std::nullopt);
}

Result<CommitResult> DeltaTable::Append(const arrow::Table& rows) {
  arrow::TableBatchReader reader(rows);
  return impl_->Write(reader, false, std::nullopt);
}

Result<CommitResult> DeltaTable::Overwrite(arrow::RecordBatchReader& rows,
                                           std::optional<Predicate> replace_where) {
  return impl_->Write(rows, true, replace_where);
}

Result<CommitResult> DeltaTable::Overwrite(const arrow::Table& rows,
                                           std::optional<Predicate> replace_where) {
  arrow::TableBatchReader reader(rows);
  return impl_->Write(reader, true, replace_where);
}

Result<CommitResult> DeltaTable::Delete(const Predicate& where) { return impl_->Modify(where, {}); }

Result<CommitResult> DeltaTable::Update(const Predicate& where,
                                        const std::map<std::string, Literal>& set) {
  if (set.empty()) return Status::InvalidArgument("set: name at least one column to update");
  return impl_->Modify(where, set);
}

Result<CommitResult> DeltaTable::AddColumns(
    const std::vector<std::shared_ptr<arrow::Field>>& fields) {
  TY_ASSIGN_OR_RETURN(auto snapshot, impl_->Writable());
  if (fields.empty()) return Status::InvalidArgument("columns: name at least one column");
  arrow::FieldVector all = snapshot->schema->fields();
  for (const auto& f : fields) {
    if (f == nullptr) return Status::InvalidArgument("columns: a column is null");
    if (!f->nullable()) {
      return Status::InvalidArgument("columns: new column '" + f->name() +
                                     "' must be nullable (existing rows have no value)");
    }
    all.push_back(f);
  }
  auto schema = arrow::schema(all);
  TY_RETURN_IF_ERROR(ValidateSchema(*schema, "columns"));
  TY_ASSIGN_OR_RETURN(std::string schema_string, SchemaToDeltaJson(*schema));
  Transaction txn;
  txn.read = snapshot;
  Action metadata;
  metadata.metadata = snapshot->metadata;
  metadata.metadata->schema_string = schema_string;
  ProtocolAction wanted = ProtocolFor(*schema);
  if (wanted.min_reader_version > snapshot->protocol.min_reader_version) {
    ProtocolAction p = snapshot->protocol;
    p.min_reader_version = 3;
    p.reader_features = p.reader_features.value_or(std::vector<std::string>{});
    if (p.min_writer_version < 7) {
      p.writer_features = std::vector<std::string>{"appendOnly", "invariants"};
      p.min_writer_version = 7;
    }
    p.reader_features->push_back("timestampNtz");
    p.writer_features->push_back("timestampNtz");
    Action protocol;
    protocol.protocol = p;
    txn.actions.push_back(protocol);
  }
  txn.actions.push_back(std::move(metadata));
  txn.operation = "ADD COLUMNS";
  json::array columns;
  for (const auto& f : fields) {
    columns.push_back(json::object{{"column", f->name()}, {"type", f->type()->ToString()}});
  }
  txn.parameters["columns"] = json::serialize(columns);
  return impl_->Commit(txn);
}

Result<std::unique_ptr<arrow::RecordBatchReader>> DeltaTable::Read(const ReadOptions& options) {
  TY_ASSIGN_OR_RETURN(auto snapshot, impl_->At(options.at));
  Status readable = CheckReadable(*snapshot);
  if (!readable.ok()) return readable.WithContext("table '" + root() + "'");
  std::shared_ptr<arrow::Schema> output = snapshot->schema;
  if (!options.columns.empty()) {
    arrow::FieldVector fields;
    for (const auto& name : options.columns) {
      auto f = snapshot->schema->GetFieldByName(name);
      if (f == nullptr) return Status::InvalidArgument("columns: no column '" + name + "'");
      fields.push_back(f);
    }
    output = arrow::schema(fields);
  }
  if (options.batch_rows <= 0) return Status::InvalidArgument("batch_rows must be positive");
  std::vector<AddAction> files;
  files.reserve(snapshot->files.size());
  for (const auto& [path, add] : snapshot->files) files.push_back(add);
  return ScanFiles(impl_->store_, impl_->log_, snapshot, std::move(files), output, options.filter,
                   options.batch_rows);
}

Result<std::shared_ptr<arrow::Table>> DeltaTable::ReadAll(const ReadOptions& options) {
  TY_ASSIGN_OR_RETURN(auto reader, Read(options));
  auto table = arrow::Table::FromRecordBatchReader(reader.get());
  if (!table.ok()) {
    const arrow::Status& s = table.status();
    return Status::InvalidArgument("table '" + root() + "': " + s.message());
  }
  return *table;
}

Result<TableInfo> DeltaTable::Describe(const VersionSpec& at) {
  TY_ASSIGN_OR_RETURN(auto s, impl_->At(at));
  TableInfo info;
  info.version = s->version;
  info.timestamp_ms = s->timestamp_ms;
  info.id = s->metadata.id;
  info.name = s->metadata.name;
  info.description = s->metadata.description;
  info.schema = s->schema;
  info.partition_columns = s->metadata.partition_columns;
  info.properties = s->metadata.configuration;
  info.created_time_ms = s->metadata.created_time.value_or(0);
  info.min_reader_version = s->protocol.min_reader_version;
  info.min_writer_version = s->protocol.min_writer_version;
  info.reader_features = s->protocol.reader_features.value_or(std::vector<std::string>{});
  info.writer_features = s->protocol.writer_features.value_or(std::vector<std::string>{});
  int64_t rows = 0;
  bool rows_known = true;
  for (const auto& [path, add] : s->files) {
    DataFile f;
    f.path = DecodePathUri(path).ok() ? *DecodePathUri(path) : path;
    f.size_bytes = add.size;
    f.modification_time_ms = add.modification_time;
    f.partition_values = add.partition_values;
    int64_t n = NumRecords(add);
    if (n >= 0) {
      f.num_records = n;
      rows += n;
    } else {
      rows_known = false;
    }
    info.size_bytes += add.size;
    info.files.push_back(std::move(f));
  }
  info.num_files = static_cast<int64_t>(s->files.size());
  if (rows_known) info.num_rows = rows;
  return info;
}

Result<std::vector<HistoryEntry>> DeltaTable::History(int64_t limit) {
  TY_ASSIGN_OR_RETURN(auto latest, impl_->Latest());
  std::vector<HistoryEntry> out;
  for (int64_t v = latest->version;
       v >= 0 && (limit <= 0 || static_cast<int64_t>(out.size()) < limit); --v) {
    TY_ASSIGN_OR_RETURN(auto actions, impl_->log_->ReadCommit(v));
    if (!actions) break;  // older entries were cleaned up
    HistoryEntry e;
    e.version = v;
    for (const Action& a : *actions) {
      if (!a.commit_info) continue;
      const json::object& f = a.commit_info->fields;
      e.timestamp_ms = a.commit_info->Timestamp().value_or(0);
      if (auto* op = f.if_contains("operation"); op && op->is_string())
        e.operation = op->as_string();
      if (auto* eng = f.if_contains("engineInfo"); eng && eng->is_string()) {
        e.engine_info = eng->as_string();
      }
      if (auto* u = f.if_contains("userMetadata"); u && u->is_string()) {
        e.user_metadata = u->as_string();
      }
      if (auto* id = f.if_contains("userId"); id && id->is_string()) e.user_id = id->as_string();
      if (auto* n = f.if_contains("userName"); n && n->is_string()) e.user_name = n->as_string();
      if (auto* p = f.if_contains("operationParameters"); p && p->is_object()) {
        for (const auto& [k, val] : p->as_object()) e.operation_parameters[k] = JsonText(val);
      }
      if (auto* m = f.if_contains("operationMetrics"); m && m->is_object()) {
        for (const auto& [k, val] : m->as_object()) e.operation_metrics[k] = JsonText(val);
      }
    }
    if (e.timestamp_ms == 0) {
      Result<int64_t> ts = impl_->log_->CommitTimestamp(v);
      if (ts.ok()) e.timestamp_ms = *ts;
    }
    out.push_back(std::move(e));
  }
  return out;
}

namespace {

// Every object under `dir` (relative to the table root), skipping the log and hidden entries
// at the top level.
struct ListedFile {
  std::string path;  // relative to the table root
  int64_t size = 0;
  int64_t modified_ms = 0;
};

Status ListDataFiles(blob::BlobStore& store, const DeltaLog& log, const std::string& dir,
                     std::vector<ListedFile>& out) {
  TY_ASSIGN_OR_RETURN(auto entries, store.List(dir.empty() ? log.Key("") : log.Key(dir)));
  for (const auto& e : entries) {
    if (dir.empty() && (StartsWith(e.name, "_") || StartsWith(e.name, "."))) continue;
    std::string path = dir.empty() ? e.name : dir + "/" + e.name;
    if (e.is_dir) {
      TY_RETURN_IF_ERROR(ListDataFiles(store, log, path, out));
    } else {
      out.push_back(ListedFile{path, e.size, e.modified_ms});
    }
  }
  return Status::Ok();
}

}  // namespace

Result<VacuumResult> DeltaTable::Vacuum(const VacuumOptions& options) {
  TY_ASSIGN_OR_RETURN(auto snapshot, impl_->Writable());
  TY_ASSIGN_OR_RETURN(auto configured,
                      IntervalProperty(*snapshot, "delta.deletedFileRetentionDuration"));
  int64_t minimum = configured.value_or(kDefaultRetentionMs);
  int64_t retention = options.retention_ms.value_or(minimum);
  if (retention < 0) return Status::InvalidArgument("retention must not be negative");
  if (retention < minimum && !options.force) {
    return Status::FailedPrecondition(
        "retention " + std::to_string(retention / 3'600'000) + "h is shorter than the table's " +
        std::to_string(minimum / 3'600'000) +
        "h: readers of older versions could lose files; pass force to do it anyway");
  }
  int64_t cutoff = impl_->clock_.NowMillis() - retention;
  std::set<std::string> keep;
  for (const auto& [path, add] : snapshot->files) {
    TY_ASSIGN_OR_RETURN(std::string p, DecodePathUri(path));
    keep.insert(p);
  }
  std::map<std::string, int64_t> tombstones;
  for (const auto& [path, r] : snapshot->tombstones) {
    TY_ASSIGN_OR_RETURN(std::string p, DecodePathUri(path));
    tombstones[p] = r.deletion_timestamp.value_or(0);
  }
  std::vector<ListedFile> files;
  TY_RETURN_IF_ERROR(ListDataFiles(impl_->store_, *impl_->log_, "", files));
  VacuumResult result;
  for (const ListedFile& file : files) {
    if (keep.count(file.path)) continue;
    auto t = tombstones.find(file.path);
    int64_t age_from = t != tombstones.end() ? t->second : file.modified_ms;
    if (age_from >= cutoff) continue;
    if (!options.dry_run) TY_RETURN_IF_ERROR(impl_->store_.Delete(impl_->log_->Key(file.path)));
    result.deleted.push_back(file.path);
    result.bytes += file.size;
  }
  return result;
}

Status DeltaTable::Checkpoint() {
  TY_ASSIGN_OR_RETURN(auto snapshot, impl_->Latest());
  return impl_->WriteCheckpoint(*snapshot);
}

Result<int64_t> DeltaTable::LatestVersion() {
  TY_ASSIGN_OR_RETURN(auto snapshot, impl_->Latest());
  return snapshot->version;
}

}  // namespace trainyard::tables
