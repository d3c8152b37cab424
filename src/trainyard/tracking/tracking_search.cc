// TrackingService's searches: experiments, runs and logged models, compiled from
// MLflow's filter and order_by grammar (search_filter.h) to one SQL query each.
#include <cctype>
#include <cmath>
#include <limits>
#include <tuple>
#include <unordered_map>

#include "trainyard/common/page_token.h"
#include "trainyard/common/strings.h"
#include "trainyard/store/sql.h"
#include "trainyard/tracking/run_list.h"
#include "trainyard/tracking/search_filter.h"
#include "trainyard/tracking/tracking_service.h"

namespace trainyard::tracking {
namespace {

using store::Rows;
using store::Transaction;
using store::Value;

// The most experiments one search may name: bounds its IN list.
constexpr size_t kMaxSearchExperimentIds = 1000;

std::string LifecycleCondition(const std::string& table, ViewType view) {
  switch (view) {
    case ViewType::kActiveOnly:
      return table + ".lifecycle_stage = 'active'";
    case ViewType::kDeletedOnly:
      return table + ".lifecycle_stage = 'deleted'";
    case ViewType::kAll:
      return "1=1";
  }
  return "1=1";
}

Status CheckMaxResults(int64_t max_results, int64_t limit) {
  if (max_results <= 0 || max_results > limit) {
    return Status::InvalidArgument("max_results must be between 1 and " + std::to_string(limit) +
                                   " (got " + std::to_string(max_results) + ")");
  }
  return Status::Ok();
}

Result<std::vector<OrderBy>> ParseOrderByList(const std::vector<std::string>& clauses) {
  std::vector<OrderBy> out;
  for (const auto& c : clauses) {
    TY_ASSIGN_OR_RETURN(OrderBy o, ParseOrderBy(c));
    out.push_back(std::move(o));
  }
  return out;
}

// "(?, ?)" with the ids, which must all be experiment ids.
Result<std::string> ExperimentIdList(const std::vector<std::string>& ids,
                                     std::vector<Value>& params) {
  if (ids.empty())
    return Status::InvalidArgument("experiment_ids must name at least one experiment");
  if (ids.size() > kMaxSearchExperimentIds) {
    return Status::InvalidArgument("experiment_ids may name at most " +
                                   std::to_string(kMaxSearchExperimentIds));
  }
  std::string sql = "(";
  for (size_t i = 0; i < ids.size(); ++i) {
    auto id = ParseInt64(ids[i]);
    if (!id || *id < 0) {
      return Status::InvalidArgument("experiment_ids[" + std::to_string(i) +
                                     "] must be a non-negative integer (got '" +
                                     Abbreviate(ids[i]) + "')");
    }
    sql += i ? ", ?" : "?";
    params.emplace_back(*id);
  }
  return sql + ")";
}

void Append(std::vector<Value>& to, const std::vector<Value>& from) {
  to.insert(to.end(), from.begin(), from.end());
}

}  // namespace

Result<Page<Experiment>> TrackingService::SearchExperiments(
    const SearchExperimentsRequest& request) {
  TY_RETURN_IF_ERROR(CheckMaxResults(request.max_results, limits_.max_results));
  TY_ASSIGN_OR_RETURN(int64_t offset, DecodePageToken(request.page_token));
  TY_ASSIGN_OR_RETURN(auto comparisons, ParseSearchFilter(request.filter));
  TY_ASSIGN_OR_RETURN(SqlFragment where, CompileExperimentFilter(comparisons));
  TY_ASSIGN_OR_RETURN(auto order_by, ParseOrderByList(request.order_by));
  TY_ASSIGN_OR_RETURN(SqlFragment order, CompileExperimentOrderBy(order_by));
  std::vector<Value> params = where.params;
  Append(params, order.params);
  params.emplace_back(request.max_results + 1);
  params.emplace_back(offset);
  std::string sql = "SELECT experiments.experiment_id FROM experiments WHERE " +
                    LifecycleCondition("experiments", request.view_type) + " AND (" + where.sql +
                    ") ORDER BY " + order.sql + " LIMIT ? OFFSET ?";
  Page<Experiment> page;
  Status s = db_.Read([&](Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(Rows rows, tx.Query(sql, params));
    size_t n = std::min<size_t>(rows.size(), static_cast<size_t>(request.max_results));
    for (size_t i = 0; i < n; ++i) {
      TY_ASSIGN_OR_RETURN(Experiment e,
                          LoadExperiment(tx, "experiment_id = ?", Value(rows[i].Int(0))));
      page.items.push_back(std::move(e));
    }
    if (rows.size() > n) page.next_page_token = EncodePageToken(offset + request.max_results);
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return page;
}

Result<Page<Run>> TrackingService::SearchRuns(const SearchRunsRequest& request) {
  TY_RETURN_IF_ERROR(CheckMaxResults(request.max_results, limits_.max_results));
  TY_ASSIGN_OR_RETURN(int64_t offset, DecodePageToken(request.page_token));
  std::vector<Value> params;
  TY_ASSIGN_OR_RETURN(std::string experiments, ExperimentIdList(request.experiment_ids, params));
  TY_ASSIGN_OR_RETURN(auto comparisons, ParseSearchFilter(request.filter));
  TY_ASSIGN_OR_RETURN(SqlFragment where, CompileRunFilter(comparisons));
  TY_ASSIGN_OR_RETURN(auto order_by, ParseOrderByList(request.order_by));
  TY_ASSIGN_OR_RETURN(SqlFragment order, CompileRunOrderBy(order_by));
  Append(params, where.params);
  Append(params, order.params);
  params.emplace_back(request.max_results + 1);
  params.emplace_back(offset);
  std::string sql =
      "SELECT runs.run_uuid, runs.experiment_id, runs.name, runs.user_id, runs.status, "
      "runs.start_time, runs.end_time, runs.lifecycle_stage, runs.artifact_uri FROM runs WHERE "
      "runs.experiment_id IN " +
      experiments + " AND " + LifecycleCondition("runs", request.view_type) + " AND (" + where.sql +
      ") ORDER BY " + order.sql + " LIMIT ? OFFSET ?";
  Page<Run> page;
  Status s = db_.Read([&](Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(Rows rows, tx.Query(sql, params));
    size_t n = std::min<size_t>(rows.size(), static_cast<size_t>(request.max_results));
    page.items.resize(n);
    for (size_t i = 0; i < n; ++i) {
      const auto& r = rows[i];
      RunInfo& info = page.items[i].info;
      info.run_id = r.Text(0);
      info.experiment_id = r.Text(1);
      info.run_name = r.Text(2);
      info.user_id = r.Text(3);
      info.status = r.Text(4);
      if (!r.IsNull(5)) info.start_time = r.Int(5);
      if (!r.IsNull(6)) info.end_time = r.Int(6);
      info.lifecycle_stage = r.Text(7);
      info.artifact_uri = r.Text(8);
    }
    if (rows.size() > n) page.next_page_token = EncodePageToken(offset + request.max_results);
    return LoadRunData(tx, page.items);
  });
  if (!s.ok()) return s;
  return page;
}

namespace {

std::string_view ViewTypeKey(ViewType view) {
  switch (view) {
    case ViewType::kActiveOnly:
      return "active";
    case ViewType::kDeletedOnly:
      return "deleted";
    case ViewType::kAll:
      return "all";
  }
  return "active";
}

// A listing's column, checked: "metrics.<k>", "params.<k>" or "tags.<k>".
Result<OrderBy> ParseListColumn(const std::string& column, size_t i) {
  auto parsed = ParseOrderBy(column);
  std::string field = "columns[" + std::to_string(i) + "]";
  if (!parsed.ok()) return Status::InvalidArgument(field + ": " + parsed.status().message());
  if (parsed->type != EntityType::kMetric && parsed->type != EntityType::kParam &&
      parsed->type != EntityType::kTag) {
    return Status::InvalidArgument(field +
                                   " must name a metric, param or tag, as in "
                                   "\"metrics.loss\" or \"params.lr\" (got '" +
                                   Abbreviate(column) + "')");
  }
  return parsed;
}

// As ParseOrderBy reads it back: a key with other characters than these goes in backticks.
std::string ColumnName(const OrderBy& c) {
  bool plain = !c.key.empty();
  for (char ch : c.key) {
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '.' || ch == ':' ||
          ch == '/' || ch == '-')) {
      plain = false;
    }
  }
  return std::string(EntityTypeName(c.type)) + "." + (plain ? c.key : "`" + c.key + "`");
}

// The distinct keys of `table` (latest_metrics or params) over an experiment's runs in a view.
Status ListKeys(Transaction& tx, const std::string& table, const std::string& lifecycle,
                int64_t experiment_id, std::vector<std::string>& keys, bool& truncated) {
  TY_ASSIGN_OR_RETURN(
      Rows rows, tx.Query("SELECT DISTINCT k.key FROM " + table +
                              " k JOIN runs ON runs.run_uuid = k.run_uuid WHERE "
                              "runs.experiment_id = ? AND " +
                              lifecycle + " ORDER BY k.key LIMIT ?",
                          {Value(experiment_id), Value(static_cast<int64_t>(kMaxListKeys + 1))}));
  for (const auto& r : rows) keys.push_back(r.Text(0));
  if (keys.size() > kMaxListKeys) {
    keys.resize(kMaxListKeys);
    truncated = true;
  }
  return Status::Ok();
}

// The first kDefaultListMetrics metric keys and kDefaultListParams param keys of these runs.
Status DefaultColumns(Transaction& tx, const std::vector<Value>& ids,
                      std::vector<OrderBy>& columns) {
  for (auto [table, type, count] :
       {std::tuple{"latest_metrics", EntityType::kMetric, kDefaultListMetrics},
        std::tuple{"params", EntityType::kParam, kDefaultListParams}}) {
    std::vector<Value> q = ids;
    q.emplace_back(static_cast<int64_t>(count));
    TY_ASSIGN_OR_RETURN(Rows keys, tx.Query(std::string("SELECT DISTINCT key FROM ") + table +
                                                " WHERE run_uuid IN " + store::InList(ids.size()) +
                                                " ORDER BY key LIMIT ?",
                                            q));
    for (const auto& k : keys) columns.push_back({type, k.Text(0), true});
  }
  return Status::Ok();
}

}  // namespace

Result<RunListPage> TrackingService::ListRuns(const ListRunsRequest& request) {
  if (request.page_size <= 0 || request.page_size > kMaxListPageSize) {
    return Status::InvalidArgument("page_size must be between 1 and " +
                                   std::to_string(kMaxListPageSize) + " (got " +
                                   std::to_string(request.page_size) + ")");
  }
  auto experiment_id = ParseInt64(request.experiment_id);
  if (!experiment_id || *experiment_id < 0) {
    return Status::InvalidArgument("experiment_id must be a non-negative integer (got '" +
                                   Abbreviate(request.experiment_id) + "')");
  }
  TY_ASSIGN_OR_RETURN(auto comparisons, ParseSearchFilter(request.filter));
  TY_ASSIGN_OR_RETURN(SqlFragment where, CompileRunFilter(comparisons));
  if (request.order_by.size() > kMaxListOrderBy) {
    return Status::InvalidArgument("order_by may have at most " + std::to_string(kMaxListOrderBy) +
                                   " clauses in a listing (got " +
                                   std::to_string(request.order_by.size()) + ")");
  }
  TY_ASSIGN_OR_RETURN(auto order_by, ParseOrderByList(request.order_by));
  TY_ASSIGN_OR_RETURN(RunOrderTerms order, CompileRunOrderTerms(order_by));
  const std::vector<OrderTerm>& terms = order.terms;
  if (request.columns.size() > kMaxListColumns) {
    return Status::InvalidArgument("columns may name at most " + std::to_string(kMaxListColumns) +
                                   " columns (got " + std::to_string(request.columns.size()) +
                                   "); choose fewer");
  }
  std::vector<OrderBy> columns;
  for (size_t i = 0; i < request.columns.size(); ++i) {
    TY_ASSIGN_OR_RETURN(OrderBy c, ParseListColumn(request.columns[i], i));
    columns.push_back(std::move(c));
  }
  std::string order_key;
  for (const auto& o : request.order_by) order_key += o + "\n";
  uint64_t fingerprint = QueryFingerprint(
      {request.experiment_id, request.filter, order_key, ViewTypeKey(request.view_type)});
  std::vector<Value> after;
  if (!request.cursor.empty()) {
    TY_ASSIGN_OR_RETURN(after, DecodeRunCursor(request.cursor, fingerprint, terms.size()));
  }

  std::string lifecycle = LifecycleCondition("runs", request.view_type);
  std::vector<Value> params;
  std::string sql =
      "SELECT runs.run_uuid, runs.experiment_id, runs.name, runs.user_id, runs.status, "
      "runs.start_time, runs.end_time, runs.lifecycle_stage, runs.artifact_uri";
  for (const auto& t : terms) {
    sql += ", " + t.sql;
    Append(params, t.params);
  }
  sql += " FROM runs" + order.joins.sql + " WHERE runs.experiment_id = ? AND " + lifecycle +
         " AND (" + where.sql + ")";
  Append(params, order.joins.params);
  params.emplace_back(*experiment_id);
  Append(params, where.params);
  if (!after.empty()) {
    SqlFragment keyset = KeysetCondition(terms, after);
    sql += " AND (" + keyset.sql + ")";
    Append(params, keyset.params);
  }
  sql += " ORDER BY ";
  for (size_t i = 0; i < terms.size(); ++i) {
    sql += (i ? ", " : "") + terms[i].sql + (terms[i].ascending ? " ASC" : " DESC");
    Append(params, terms[i].params);
  }
  sql += " LIMIT ?";
  params.emplace_back(request.page_size + 1);
  constexpr size_t kInfoColumns = 9;

  RunListPage page;
  Status s = db_.Read([&](Transaction& tx) -> Status {
    if (request.with_keys) {
      page.metric_keys.emplace();
      page.param_keys.emplace();
      TY_RETURN_IF_ERROR(ListKeys(tx, "latest_metrics", lifecycle, *experiment_id,
                                  *page.metric_keys, page.keys_truncated));
      TY_RETURN_IF_ERROR(
          ListKeys(tx, "params", lifecycle, *experiment_id, *page.param_keys, page.keys_truncated));
    }
    if (request.cursor.empty()) {
      std::vector<Value> count_params{Value(*experiment_id)};
      Append(count_params, where.params);
      TY_ASSIGN_OR_RETURN(Rows count,
                          tx.Query("SELECT COUNT(*) FROM runs WHERE runs.experiment_id = ? AND " +
                                       lifecycle + " AND (" + where.sql + ")",
                                   count_params));
      page.total = count.empty() ? 0 : count[0].Int(0);
    }
    TY_ASSIGN_OR_RETURN(Rows rows, tx.Query(sql, params));
    size_t n = std::min<size_t>(rows.size(), static_cast<size_t>(request.page_size));
    page.rows.resize(n);
    std::unordered_map<std::string, size_t> index;
    std::vector<Value> ids;
    for (size_t i = 0; i < n; ++i) {
      const auto& r = rows[i];
      RunInfo& info = page.rows[i].info;
      info.run_id = r.Text(0);
      info.experiment_id = r.Text(1);
      info.run_name = r.Text(2);
      info.user_id = r.Text(3);
      info.status = r.Text(4);
      if (!r.IsNull(5)) info.start_time = r.Int(5);
      if (!r.IsNull(6)) info.end_time = r.Int(6);
      info.lifecycle_stage = r.Text(7);
      info.artifact_uri = r.Text(8);
      page.rows[i].cells.resize(columns.size());
      index.emplace(info.run_id, i);
      ids.emplace_back(info.run_id);
    }
    if (rows.size() > n && n > 0) {
      std::vector<Value> last;
      for (size_t t = 0; t < terms.size(); ++t) last.push_back(rows[n - 1].raw(kInfoColumns + t));
      page.next_cursor = EncodeRunCursor(fingerprint, last);
    }
    if (ids.empty()) return Status::Ok();
    if (columns.empty()) {
      TY_RETURN_IF_ERROR(DefaultColumns(tx, ids, columns));
      for (auto& row : page.rows) row.cells.resize(columns.size());
    }
    if (columns.empty()) return Status::Ok();
    // The cells, one query per kind of column over the page's runs.
    for (EntityType type : {EntityType::kMetric, EntityType::kParam, EntityType::kTag}) {
      std::unordered_map<std::string, size_t> column_of;
      std::vector<Value> keys;
      for (size_t c = 0; c < columns.size(); ++c) {
        if (columns[c].type != type) continue;
        if (column_of.emplace(columns[c].key, c).second) keys.emplace_back(columns[c].key);
      }
      if (keys.empty()) continue;
      std::vector<Value> q = ids;
      Append(q, keys);
      std::string cells_sql = type == EntityType::kMetric
                                  ? "SELECT run_uuid, key, value, is_nan FROM latest_metrics"
                                  : std::string("SELECT run_uuid, key, value FROM ") +
                                        (type == EntityType::kParam ? "params" : "tags");
      cells_sql += " WHERE run_uuid IN " + store::InList(ids.size()) + " AND key IN " +
                   store::InList(keys.size());
      TY_RETURN_IF_ERROR(tx.QueryEach(cells_sql, q, [&](const store::RowView& r) -> Status {
        auto row = index.find(std::string(r.Text(0)));
        auto column = column_of.find(std::string(r.Text(1)));
        if (row == index.end() || column == column_of.end()) return Status::Ok();
        Value& cell = page.rows[row->second].cells[column->second];
        if (type != EntityType::kMetric) {
          cell = std::string(r.Text(2));
        } else if (r.Int(3) != 0) {
          cell = std::numeric_limits<double>::quiet_NaN();
        } else {
          cell = r.Double(2);
        }
        return Status::Ok();
      }));
    }
    return Status::Ok();
  });
  if (!s.ok()) return s;
  for (const auto& c : columns) page.columns.push_back(ColumnName(c));
  return page;
}

Result<Page<LoggedModel>> TrackingService::SearchLoggedModels(
    const SearchLoggedModelsRequest& request) {
  TY_RETURN_IF_ERROR(CheckMaxResults(request.max_results, limits_.max_results));
  TY_ASSIGN_OR_RETURN(int64_t offset, DecodePageToken(request.page_token));
  std::vector<Value> params;
  TY_ASSIGN_OR_RETURN(std::string experiments, ExperimentIdList(request.experiment_ids, params));
  TY_ASSIGN_OR_RETURN(auto comparisons, ParseSearchFilter(request.filter));
  TY_ASSIGN_OR_RETURN(SqlFragment where, CompileLoggedModelFilter(comparisons));
  std::vector<OrderBy> order_by;
  for (const auto& o : request.order_by) {
    TY_ASSIGN_OR_RETURN(OrderBy parsed, ParseOrderBy(o.field_name));
    parsed.ascending = o.ascending;
    order_by.push_back(std::move(parsed));
  }
  TY_ASSIGN_OR_RETURN(SqlFragment order, CompileLoggedModelOrderBy(order_by));
  Append(params, where.params);
  Append(params, order.params);
  params.emplace_back(request.max_results + 1);
  params.emplace_back(offset);
  std::string sql =
      "SELECT logged_models.model_id FROM logged_models WHERE logged_models.experiment_id IN " +
      experiments + " AND logged_models.lifecycle_stage = 'active' AND (" + where.sql +
      ") ORDER BY " + order.sql + " LIMIT ? OFFSET ?";
  std::vector<std::string> ids;
  Status s = db_.Read([&](Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(Rows rows, tx.Query(sql, params));
    for (const auto& r : rows) ids.push_back(r.Text(0));
    return Status::Ok();
  });
  if (!s.ok()) return s;
  Page<LoggedModel> page;
  size_t n = std::min<size_t>(ids.size(), static_cast<size_t>(request.max_results));
  for (size_t i = 0; i < n; ++i) {
    TY_ASSIGN_OR_RETURN(LoggedModel m, GetLoggedModel(ids[i]));
    page.items.push_back(std::move(m));
  }
  if (ids.size() > n) page.next_page_token = EncodePageToken(offset + request.max_results);
  return page;
}

}  // namespace trainyard::tracking
