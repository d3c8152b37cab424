// TrackingService's searches: experiments, runs and logged models, compiled from
// MLflow's filter and order_by grammar (search_filter.h) to one SQL query each.
#include "trainyard/common/page_token.h"
#include "trainyard/common/strings.h"
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
