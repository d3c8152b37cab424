#include "trainyard/api/mlflow_tracking_api.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <thread>

#include "trainyard/api/log_batch_decoder.h"
#include "trainyard/api/mlflow_json.h"
#include "trainyard/common/strings.h"

namespace trainyard::api {
namespace {

using http::Method;
using identity::Action;
using tracking::TrackingService;

// Reads an enum given by name ("FINISHED") or by number (proto enums as ints).
template <size_t N>
Result<std::optional<std::string>> EnumField(const json::object& o, std::string_view field,
                                             const std::array<const char*, N>& names) {
  auto it = o.find(field);
  if (it == o.end() || it->value().is_null()) return std::optional<std::string>();
  std::string allowed;
  for (const char* n : names) allowed += (allowed.empty() ? "" : ", ") + std::string(n);
  const json::value& v = it->value();
  if (v.is_string()) {
    for (const char* n : names) {
      if (v.as_string() == n) return std::optional<std::string>(n);
    }
  } else if (v.is_int64() && v.as_int64() >= 1 && static_cast<size_t>(v.as_int64()) <= N) {
    return std::optional<std::string>(names[static_cast<size_t>(v.as_int64()) - 1]);
  }
  return Status::InvalidArgument(std::string(field) + " must be one of " + allowed + " (got " +
                                 DescribeJson(v) + ")");
}

constexpr std::array<const char*, 5> kRunStatuses = {"RUNNING", "SCHEDULED", "FINISHED", "FAILED",
                                                     "KILLED"};
constexpr std::array<const char*, 3> kViewTypes = {"ACTIVE_ONLY", "DELETED_ONLY", "ALL"};
constexpr std::array<const char*, 3> kLoggedModelStatuses = {
    "LOGGED_MODEL_PENDING", "LOGGED_MODEL_READY", "LOGGED_MODEL_UPLOAD_FAILED"};

// Page sizes when a request names none: MLflow's defaults (its REST API and UI).
constexpr int64_t kDefaultExperimentsPerPage = 1000;
constexpr int64_t kDefaultRunsPerPage = 1000;
constexpr int64_t kDefaultLoggedModelsPerPage = 100;
// Points per run of a chart (get-history-bulk-interval), as MLflow's UI asks for.
constexpr int64_t kDefaultPointsPerChartRun = 320;

Result<tracking::ViewType> ViewTypeField(const json::object& o, std::string_view field) {
  TY_ASSIGN_OR_RETURN(auto v, EnumField(o, field, kViewTypes));
  if (!v || *v == "ACTIVE_ONLY") return tracking::ViewType::kActiveOnly;
  if (*v == "DELETED_ONLY") return tracking::ViewType::kDeletedOnly;
  return tracking::ViewType::kAll;
}

// {"run_id", "key", "exact", "total_points", "steps", "timestamps", "values"}: columns, as a
// chart takes them; a value that is not finite is "NaN", "Infinity" or "-Infinity" (MLflow's
// spelling).
json::value DownsampledJson(const std::string& run_id, const std::string& key,
                            const tracking::DownsampledHistory& h) {
  json::array steps, timestamps, values;
  steps.reserve(h.points.size());
  timestamps.reserve(h.points.size());
  values.reserve(h.points.size());
  for (const auto& p : h.points) {
    steps.emplace_back(p.step);
    timestamps.emplace_back(p.timestamp);
    if (std::isfinite(p.value)) {
      values.emplace_back(p.value);
    } else {
      values.emplace_back(std::isnan(p.value) ? "NaN" : p.value > 0 ? "Infinity" : "-Infinity");
    }
  }
  return json::object{{"run_id", run_id},           {"key", key},
                      {"exact", h.exact},           {"total_points", h.total_points},
                      {"steps", std::move(steps)},  {"timestamps", std::move(timestamps)},
                      {"values", std::move(values)}};
}

class TrackingRoutes : public std::enable_shared_from_this<TrackingRoutes> {
 public:
  TrackingRoutes(Api& api, TrackingService& tracking) : api_(api), tracking_(tracking) {}

  Result<json::value> LogBatch(Call& c, const LogBatchRequest& r) {
    TY_RETURN_IF_ERROR(tracking_.LogBatch(c.principal, r.run_id, r.metrics, r.params, r.tags));
    return json::object();
  }

  void Register() {
    RegisterExperiments();
    RegisterRuns();
    RegisterMetrics();
    RegisterLoggedModels();
  }

 private:
  void RegisterExperiments() {
    api_.Route(Method::kPost, kMlflowPrefixes, "/experiments/create",
               [this, self = shared_from_this()](Call& c) -> Result<json::value> {
                 TY_ASSIGN_OR_RETURN(std::string name, RequiredString(c.body, "name"));
                 TY_ASSIGN_OR_RETURN(auto location, OptionalString(c.body, "artifact_location"));
                 TY_ASSIGN_OR_RETURN(auto tags, KeyValuesFromJson(c.body, "tags"));
                 TY_ASSIGN_OR_RETURN(
                     std::string id,
                     tracking_.CreateExperiment(c.principal, name, location.value_or(""), tags));
                 return json::object{{"experiment_id", id}};
               });
    api_.Route(Method::kGet, kMlflowPrefixes, "/experiments/get",
               [this, self = shared_from_this()](Call& c) -> Result<json::value> {
                 TY_ASSIGN_OR_RETURN(std::string id, RequiredString(c.body, "experiment_id"));
                 TY_ASSIGN_OR_RETURN(auto e, tracking_.GetExperiment(id));
                 return json::object{{"experiment", ExperimentToJson(e)}};
               });
    api_.Route(Method::kGet, kMlflowPrefixes, "/experiments/get-by-name",
               [this, self = shared_from_this()](Call& c) -> Result<json::value> {
                 TY_ASSIGN_OR_RETURN(std::string name, RequiredString(c.body, "experiment_name"));
                 TY_ASSIGN_OR_RETURN(auto e, tracking_.GetExperimentByName(name));
                 return json::object{{"experiment", ExperimentToJson(e)}};
               });
    auto search = [this, self = shared_from_this()](Call& c) -> Result<json::value> {
      tracking::SearchExperimentsRequest req;
      TY_ASSIGN_OR_RETURN(auto filter, OptionalString(c.body, "filter"));
      req.filter = filter.value_or("");
      TY_ASSIGN_OR_RETURN(req.view_type, ViewTypeField(c.body, "view_type"));
      TY_ASSIGN_OR_RETURN(auto max_results, OptionalInt64(c.body, "max_results"));
      req.max_results = max_results.value_or(kDefaultExperimentsPerPage);
      TY_ASSIGN_OR_RETURN(req.order_by, StringList(c.body, "order_by"));
      TY_ASSIGN_OR_RETURN(auto token, OptionalString(c.body, "page_token"));
      req.page_token = token.value_or("");
      TY_ASSIGN_OR_RETURN(auto page, tracking_.SearchExperiments(req));
      json::array experiments;
      for (const auto& e : page.items) experiments.emplace_back(ExperimentToJson(e));
      json::object out{{"experiments", std::move(experiments)}};
      if (!page.next_page_token.empty()) out["next_page_token"] = page.next_page_token;
      return out;
    };
    api_.Route(Method::kGet, kMlflowPrefixes, "/experiments/search", search);
    api_.Route(Method::kPost, kMlflowPrefixes, "/experiments/search", search);
    api_.Route(Method::kPost, kMlflowPrefixes, "/experiments/update",
               [this, self = shared_from_this()](Call& c) -> Result<json::value> {
                 TY_ASSIGN_OR_RETURN(std::string id, RequiredString(c.body, "experiment_id"));
                 TY_ASSIGN_OR_RETURN(std::string name, RequiredString(c.body, "new_name"));
                 TY_RETURN_IF_ERROR(tracking_.RenameExperiment(c.principal, id, name));
                 return json::object();
               });
    api_.Route(Method::kPost, kMlflowPrefixes, "/experiments/delete",
               [this, self = shared_from_this()](Call& c) -> Result<json::value> {
                 TY_ASSIGN_OR_RETURN(std::string id, RequiredString(c.body, "experiment_id"));
                 TY_RETURN_IF_ERROR(tracking_.DeleteExperiment(c.principal, id));
                 return json::object();
               });
    api_.Route(Method::kPost, kMlflowPrefixes, "/experiments/restore",
               [this, self = shared_from_this()](Call& c) -> Result<json::value> {
                 TY_ASSIGN_OR_RETURN(std::string id, RequiredString(c.body, "experiment_id"));
                 TY_RETURN_IF_ERROR(tracking_.RestoreExperiment(c.principal, id));
                 return json::object();
               });
    api_.Route(Method::kPost, kMlflowPrefixes, "/experiments/set-experiment-tag",
               [this, self = shared_from_this()](Call& c) -> Result<json::value> {
                 TY_ASSIGN_OR_RETURN(std::string id, RequiredString(c.body, "experiment_id"));
                 TY_ASSIGN_OR_RETURN(std::string key, RequiredString(c.body, "key"));
                 TY_ASSIGN_OR_RETURN(auto value, OptionalString(c.body, "value"));
                 TY_RETURN_IF_ERROR(
                     tracking_.SetExperimentTag(c.principal, id, {key, value.value_or("")}));
                 return json::object();
               });
    api_.Route(Method::kPost, kMlflowPrefixes, "/experiments/delete-experiment-tag",
               [this, self = shared_from_this()](Call& c) -> Result<json::value> {
                 TY_ASSIGN_OR_RETURN(std::string id, RequiredString(c.body, "experiment_id"));
                 TY_ASSIGN_OR_RETURN(std::string key, RequiredString(c.body, "key"));
                 TY_RETURN_IF_ERROR(tracking_.DeleteExperimentTag(c.principal, id, key));
                 return json::object();
               });
  }

  void RegisterRuns() {
    api_.Route(Method::kPost, kMlflowPrefixes, "/runs/create",
               [this, self = shared_from_this()](Call& c) -> Result<json::value> {
                 TY_ASSIGN_OR_RETURN(auto eid, OptionalString(c.body, "experiment_id"));
                 std::string experiment_id = eid && !eid->empty() ? *eid : "0";
                 TY_ASSIGN_OR_RETURN(auto user, OptionalString(c.body, "user_id"));
                 TY_ASSIGN_OR_RETURN(auto name, OptionalString(c.body, "run_name"));
                 TY_ASSIGN_OR_RETURN(auto start, OptionalInt64(c.body, "start_time"));
                 TY_ASSIGN_OR_RETURN(auto tags, KeyValuesFromJson(c.body, "tags"));
                 std::string user_id = user && !user->empty() ? *user : c.principal.user;
                 TY_ASSIGN_OR_RETURN(auto run,
                                     tracking_.CreateRun(c.principal, experiment_id, user_id,
                                                         name.value_or(""), start, tags));
                 return json::object{{"run", RunToJson(run)}};
               });
    api_.Route(Method::kGet, kMlflowPrefixes, "/runs/get",
               [this, self = shared_from_this()](Call& c) -> Result<json::value> {
                 TY_ASSIGN_OR_RETURN(std::string id, RunIdField(c.body));
                 TY_ASSIGN_OR_RETURN(auto run, tracking_.GetRun(id));
                 return json::object{{"run", RunToJson(run)}};
               });
    api_.Route(Method::kPost, kMlflowPrefixes, "/runs/update",
               [this, self = shared_from_this()](Call& c) -> Result<json::value> {
                 TY_ASSIGN_OR_RETURN(std::string id, RunIdField(c.body));
                 TY_ASSIGN_OR_RETURN(auto status, EnumField(c.body, "status", kRunStatuses));
                 TY_ASSIGN_OR_RETURN(auto end, OptionalInt64(c.body, "end_time"));
                 TY_ASSIGN_OR_RETURN(auto name, OptionalString(c.body, "run_name"));
                 TY_ASSIGN_OR_RETURN(auto info,
                                     tracking_.UpdateRun(c.principal, id, status, end, name));
                 return json::object{{"run_info", RunInfoToJson(info)}};
               });
    api_.Route(Method::kPost, kMlflowPrefixes, "/runs/delete",
               [this, self = shared_from_this()](Call& c) -> Result<json::value> {
                 TY_ASSIGN_OR_RETURN(std::string id, RunIdField(c.body));
                 TY_RETURN_IF_ERROR(tracking_.DeleteRun(c.principal, id));
                 return json::object();
               });
    api_.Route(Method::kPost, kMlflowPrefixes, "/runs/restore",
               [this, self = shared_from_this()](Call& c) -> Result<json::value> {
                 TY_ASSIGN_OR_RETURN(std::string id, RunIdField(c.body));
                 TY_RETURN_IF_ERROR(tracking_.RestoreRun(c.principal, id));
                 return json::object();
               });
    api_.Route(Method::kPost, kMlflowPrefixes, "/runs/log-metric",
               [this, self = shared_from_this()](Call& c) -> Result<json::value> {
                 TY_ASSIGN_OR_RETURN(std::string id, RunIdField(c.body));
                 TY_ASSIGN_OR_RETURN(auto metric, MetricFromJson(c.body, "metric"));
                 TY_RETURN_IF_ERROR(tracking_.LogBatch(c.principal, id, {metric}, {}, {}));
                 return json::object();
               });
    api_.Route(Method::kPost, kMlflowPrefixes, "/runs/log-parameter",
               [this, self = shared_from_this()](Call& c) -> Result<json::value> {
                 TY_ASSIGN_OR_RETURN(std::string id, RunIdField(c.body));
                 TY_ASSIGN_OR_RETURN(std::string key, RequiredString(c.body, "key"));
                 TY_ASSIGN_OR_RETURN(std::string value, RequiredString(c.body, "value"));
                 TY_RETURN_IF_ERROR(tracking_.LogBatch(c.principal, id, {}, {{key, value}}, {}));
                 return json::object();
               });
    api_.Route(Method::kPost, kMlflowPrefixes, "/runs/set-tag",
               [this, self = shared_from_this()](Call& c) -> Result<json::value> {
                 TY_ASSIGN_OR_RETURN(std::string id, RunIdField(c.body));
                 TY_ASSIGN_OR_RETURN(std::string key, RequiredString(c.body, "key"));
                 TY_ASSIGN_OR_RETURN(auto value, OptionalString(c.body, "value"));
                 TY_RETURN_IF_ERROR(
                     tracking_.LogBatch(c.principal, id, {}, {}, {{key, value.value_or("")}}));
                 return json::object();
               });
    api_.Route(Method::kPost, kMlflowPrefixes, "/runs/delete-tag",
               [this, self = shared_from_this()](Call& c) -> Result<json::value> {
                 TY_ASSIGN_OR_RETURN(std::string id, RunIdField(c.body));
                 TY_ASSIGN_OR_RETURN(std::string key, RequiredString(c.body, "key"));
                 TY_RETURN_IF_ERROR(tracking_.DeleteTag(c.principal, id, key));
                 return json::object();
               });
    // The DOM path decodes (and words the errors for) whatever the fast decoder declines.
    api_.Route(
        Method::kPost, kMlflowPrefixes, "/runs/log-batch",
        [this, self = shared_from_this()](Call& c) -> Result<json::value> {
          TY_ASSIGN_OR_RETURN(LogBatchRequest r, DecodeLogBatch(c.body));
          return LogBatch(c, r);
        },
        [this, self = shared_from_this()](Call& c) -> std::optional<Result<json::value>> {
          std::optional<LogBatchRequest> r = DecodeLogBatchFast(c.request.body);
          if (!r) return std::nullopt;
          return LogBatch(c, *r);
        });
    api_.Route(
        Method::kPost, kMlflowPrefixes, "/runs/log-inputs",
        [this, self = shared_from_this()](Call& c) -> Result<json::value> {
          TY_ASSIGN_OR_RETURN(std::string id, RunIdField(c.body));
          std::vector<tracking::DatasetInput> inputs;
          TY_ASSIGN_OR_RETURN(const json::array* arr, OptionalArray(c.body, "datasets"));
          for (size_t i = 0; arr && i < arr->size(); ++i) {
            std::string where = "datasets[" + std::to_string(i) + "]";
            if (!(*arr)[i].is_object()) {
              return Status::InvalidArgument(where + " must be an object");
            }
            const auto& item = (*arr)[i].as_object();
            tracking::DatasetInput input;
            TY_ASSIGN_OR_RETURN(input.tags, KeyValuesFromJson(item, "tags"));
            TY_ASSIGN_OR_RETURN(const json::object* ds, OptionalObject(item, "dataset"));
            if (!ds) return Status::InvalidArgument(where + ".dataset is required");
            auto& d = input.dataset;
            for (auto [field, target] :
                 {std::pair{"name", &d.name}, std::pair{"digest", &d.digest},
                  std::pair{"source_type", &d.source_type}, std::pair{"source", &d.source},
                  std::pair{"schema", &d.schema}, std::pair{"profile", &d.profile}}) {
              auto s = OptionalString(*ds, field);
              if (!s.ok()) return s.status().WithContext(where + ".dataset");
              *target = s->value_or("");
            }
            inputs.push_back(std::move(input));
          }
          std::vector<std::string> model_ids;
          TY_ASSIGN_OR_RETURN(const json::array* models, OptionalArray(c.body, "models"));
          for (size_t i = 0; models && i < models->size(); ++i) {
            if (!(*models)[i].is_object()) {
              return Status::InvalidArgument("models[" + std::to_string(i) + "] must be an object");
            }
            TY_ASSIGN_OR_RETURN(std::string mid,
                                RequiredString((*models)[i].as_object(), "model_id"));
            model_ids.push_back(std::move(mid));
          }
          TY_RETURN_IF_ERROR(tracking_.LogInputs(c.principal, id, inputs, model_ids));
          return json::object();
        });
    api_.Route(Method::kPost, kMlflowPrefixes, "/runs/outputs",
               [this, self = shared_from_this()](Call& c) -> Result<json::value> {
                 TY_ASSIGN_OR_RETURN(std::string id, RunIdField(c.body));
                 std::vector<tracking::ModelOutput> outputs;
                 TY_ASSIGN_OR_RETURN(const json::array* arr, OptionalArray(c.body, "models"));
                 for (size_t i = 0; arr && i < arr->size(); ++i) {
                   std::string where = "models[" + std::to_string(i) + "]";
                   if (!(*arr)[i].is_object()) {
                     return Status::InvalidArgument(where + " must be an object");
                   }
                   const auto& item = (*arr)[i].as_object();
                   TY_ASSIGN_OR_RETURN(std::string mid, RequiredString(item, "model_id"));
                   TY_ASSIGN_OR_RETURN(auto step, OptionalInt64(item, "step"));
                   outputs.push_back({mid, step.value_or(0)});
                 }
                 TY_RETURN_IF_ERROR(tracking_.LogOutputs(c.principal, id, outputs));
                 return json::object();
               });
    // MLflow 2's history of logged models; MLflow 3 clients still call it.
    api_.Route(
        Method::kPost, kMlflowPrefixes, "/runs/log-model",
        [this, self = shared_from_this()](Call& c) -> Result<json::value> {
          TY_ASSIGN_OR_RETURN(std::string id, RunIdField(c.body));
          TY_ASSIGN_OR_RETURN(std::string model_json, RequiredString(c.body, "model_json"));
          if (!json::parse(model_json).is_object()) {
            return Status::InvalidArgument("model_json must be a JSON object");
          }
          TY_ASSIGN_OR_RETURN(auto run, tracking_.GetRun(id));
          json::array history;
          for (const auto& t : run.tags) {
            if (t.key == "mlflow.log-model.history") {
              boost::system::error_code ec;
              auto parsed = json::parse(t.value, ec);
              if (!ec && parsed.is_array()) history = parsed.as_array();
            }
          }
          history.emplace_back(json::parse(model_json));
          TY_RETURN_IF_ERROR(tracking_.LogBatch(
              c.principal, id, {}, {}, {{"mlflow.log-model.history", json::serialize(history)}}));
          return json::object();
        });
    api_.Route(Method::kPost, kMlflowPrefixes, "/runs/search",
               [this, self = shared_from_this()](Call& c) -> Result<json::value> {
                 tracking::SearchRunsRequest req;
                 TY_ASSIGN_OR_RETURN(req.experiment_ids, StringList(c.body, "experiment_ids"));
                 TY_ASSIGN_OR_RETURN(auto filter, OptionalString(c.body, "filter"));
                 req.filter = filter.value_or("");
                 TY_ASSIGN_OR_RETURN(req.view_type, ViewTypeField(c.body, "run_view_type"));
                 TY_ASSIGN_OR_RETURN(auto max_results, OptionalInt64(c.body, "max_results"));
                 req.max_results = max_results.value_or(kDefaultRunsPerPage);
                 TY_ASSIGN_OR_RETURN(req.order_by, StringList(c.body, "order_by"));
                 TY_ASSIGN_OR_RETURN(auto token, OptionalString(c.body, "page_token"));
                 req.page_token = token.value_or("");
                 TY_ASSIGN_OR_RETURN(auto page, tracking_.SearchRuns(req));
                 json::array runs;
                 for (const auto& r : page.items) runs.emplace_back(RunToJson(r));
                 json::object out{{"runs", std::move(runs)}};
                 if (!page.next_page_token.empty()) out["next_page_token"] = page.next_page_token;
                 return out;
               });
    // The web UI's runs table: runs/search's filter and order, only the shown columns, keyset
    // pages. Open to every authenticated caller, as runs/search is.
    api_.Route(Method::kGet, kTrainyardPrefixes, "/runs/list",
               [this, self = shared_from_this()](Call& c) -> Result<json::value> {
                 tracking::ListRunsRequest req;
                 TY_ASSIGN_OR_RETURN(req.experiment_id, RequiredString(c.body, "experiment_id"));
                 TY_ASSIGN_OR_RETURN(auto filter, OptionalString(c.body, "filter"));
                 req.filter = filter.value_or("");
                 TY_ASSIGN_OR_RETURN(req.view_type, ViewTypeField(c.body, "run_view_type"));
                 TY_ASSIGN_OR_RETURN(req.order_by, StringList(c.body, "order_by"));
                 TY_ASSIGN_OR_RETURN(req.columns, StringList(c.body, "columns"));
                 TY_ASSIGN_OR_RETURN(auto page_size, OptionalInt64(c.body, "page_size"));
                 req.page_size = page_size.value_or(req.page_size);
                 TY_ASSIGN_OR_RETURN(auto cursor, OptionalString(c.body, "cursor"));
                 req.cursor = cursor.value_or("");
                 TY_ASSIGN_OR_RETURN(auto with_keys, OptionalBool(c.body, "with_keys"));
                 req.with_keys = with_keys.value_or(false);
                 TY_ASSIGN_OR_RETURN(auto page, tracking_.ListRuns(req));
                 return RunListPageToJson(page);
               });
  }

  static json::value RunListPageToJson(const tracking::RunListPage& page) {
    json::array rows;
    rows.reserve(page.rows.size());
    for (const auto& r : page.rows) {
      json::array cells;
      cells.reserve(r.cells.size());
      for (const auto& v : r.cells) {
        if (const auto* d = std::get_if<double>(&v)) {
          cells.emplace_back(DoubleToJson(*d));
        } else if (const auto* t = std::get_if<std::string>(&v)) {
          cells.emplace_back(*t);
        } else {
          cells.emplace_back(nullptr);
        }
      }
      json::object row{{"run_id", r.info.run_id},
                       {"run_name", r.info.run_name},
                       {"status", r.info.status},
                       {"user_id", r.info.user_id},
                       {"cells", std::move(cells)}};
      if (r.info.start_time) row["start_time"] = *r.info.start_time;
      if (r.info.end_time) row["end_time"] = *r.info.end_time;
      rows.emplace_back(std::move(row));
    }
    json::array columns;
    for (const auto& c : page.columns) columns.emplace_back(c);
    json::object out{{"columns", std::move(columns)}, {"runs", std::move(rows)}};
    if (!page.next_cursor.empty()) out["next_cursor"] = page.next_cursor;
    if (page.total) out["total"] = *page.total;
    if (page.metric_keys && page.param_keys) {
      json::array metric_keys, param_keys;
      for (const auto& k : *page.metric_keys) metric_keys.emplace_back(k);
      for (const auto& k : *page.param_keys) param_keys.emplace_back(k);
      out["metric_keys"] = std::move(metric_keys);
      out["param_keys"] = std::move(param_keys);
      out["keys_truncated"] = page.keys_truncated;
    }
    return out;
  }

  // {"metrics":[...]} of a whole history as zero-copy body pieces. The history is cut
  // into step ranges that the cores take in turn (so none idles while another still has
  // work), each formatted into its own buffer; the buffers are then sent in order.
  Result<std::vector<http::Response::BodyPiece>> WholeHistoryPieces(const std::string& id,
                                                                    const std::string& key,
                                                                    const std::string& key_json) {
    // About 1.3 MB of JSON per range. Measured on 2 cores with 1M points (median of 12):
    // 16k steps 194 ms, 32k 202 ms, 64k 207 ms, one range per core 210 ms.
    constexpr int64_t kStepsPerRange = 16384;
    int threads = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 4u));
    // Own cache lines: every point updates its buffer's length, and buffers sharing a
    // line made two threads 1.35x one instead of nearly 2x.
    struct alignas(128) Range {
      JsonTextBuffer text;
    };
    std::vector<Range> ranges;
    const MetricPointJsonWriter writer(key_json);
    TY_RETURN_IF_ERROR(tracking_.ScanMetricHistoryRanges(
        id, key, threads, kStepsPerRange, [&](int n) { ranges.resize(static_cast<size_t>(n)); },
        [&](int r, const TrackingService::MetricPoint* points, size_t n) {
          JsonTextBuffer& out = ranges[static_cast<size_t>(r)].text;
          for (size_t i = 0; i < n; ++i) {
            writer.Append(out, points[i].value, points[i].timestamp, points[i].step);
          }
        }));
    static const std::string kOpen = "{\"metrics\":[", kClose = "]}";
    std::vector<http::Response::BodyPiece> pieces{{nullptr, kOpen}};
    bool first = true;
    for (auto& range : ranges) {
      for (auto& piece : range.text.TakePieces()) {
        // Every point starts with ','; the very first one drops it.
        if (first && !piece.data.empty()) {
          piece.data.remove_prefix(1);
          first = false;
        }
        pieces.push_back(std::move(piece));
      }
    }
    pieces.push_back({nullptr, kClose});
    return pieces;
  }

  void RegisterMetrics() {
    api_.RawRoute(
        Method::kGet, kMlflowPrefixes, "/metrics/get-history",
        [this, self = shared_from_this()](Call& c) -> Result<http::Response> {
          TY_ASSIGN_OR_RETURN(std::string id, RunIdField(c.body));
          TY_ASSIGN_OR_RETURN(std::string key, RequiredString(c.body, "metric_key"));
          TY_ASSIGN_OR_RETURN(auto max_results, OptionalInt64(c.body, "max_results"));
          TY_ASSIGN_OR_RETURN(auto token, OptionalString(c.body, "page_token"));
          const std::string key_json = json::serialize(json::string(key));
          if (!max_results && token.value_or("").empty()) {
            http::Response response = http::Response::Json(200, "");
            TY_ASSIGN_OR_RETURN(response.body_pieces, WholeHistoryPieces(id, key, key_json));
            return response;
          }
          JsonTextBuffer out;
          out.Append("{\"metrics\":[");
          bool first = true;
          const MetricPointJsonWriter writer(key_json);
          TY_ASSIGN_OR_RETURN(std::string next_token,
                              tracking_.ScanMetricHistory(
                                  id, key, max_results, token.value_or(""),
                                  [&](const TrackingService::MetricPoint& p) {
                                    writer.Append(out, p.value, p.timestamp, p.step, !first);
                                    first = false;
                                  }));
          out.Append("]");
          if (!next_token.empty()) {
            out.Append(",\"next_page_token\":");
            out.Append(json::serialize(json::string(next_token)));
          }
          out.Append("}");
          std::string body = out.Take();
          return http::Response::Json(200, std::move(body));
        });
    // Trainyard's own (the web UI's zoomable charts): min/max per bucket, exact when zoomed in.
    api_.Route(Method::kGet, kTrainyardPrefixes, "/metrics/downsample",
               [this, self = shared_from_this()](Call& c) -> Result<json::value> {
                 TY_ASSIGN_OR_RETURN(std::string id, RunIdField(c.body));
                 TY_ASSIGN_OR_RETURN(std::string key, RequiredString(c.body, "key"));
                 TY_ASSIGN_OR_RETURN(auto buckets, OptionalInt64(c.body, "buckets"));
                 TY_ASSIGN_OR_RETURN(auto min_step, OptionalInt64(c.body, "min_step"));
                 TY_ASSIGN_OR_RETURN(auto max_step, OptionalInt64(c.body, "max_step"));
                 TY_ASSIGN_OR_RETURN(auto history,
                                     tracking_.DownsampleMetricHistory(
                                         id, key, buckets.value_or(1000), min_step, max_step));
                 return DownsampledJson(id, key, history);
               });
    // The same for several runs of one chart in one request: {"series": [...]}, one
    // history per run_ids entry, in that order, each as /metrics/downsample answers it.
    api_.Route(Method::kGet, kTrainyardPrefixes, "/metrics/downsample-bulk",
               [this, self = shared_from_this()](Call& c) -> Result<json::value> {
                 TY_ASSIGN_OR_RETURN(auto run_ids, StringList(c.body, "run_ids"));
                 TY_ASSIGN_OR_RETURN(std::string key, RequiredString(c.body, "key"));
                 TY_ASSIGN_OR_RETURN(auto buckets, OptionalInt64(c.body, "buckets"));
                 TY_ASSIGN_OR_RETURN(auto min_step, OptionalInt64(c.body, "min_step"));
                 TY_ASSIGN_OR_RETURN(auto max_step, OptionalInt64(c.body, "max_step"));
                 TY_ASSIGN_OR_RETURN(auto histories,
                                     tracking_.DownsampleMetricHistories(
                                         run_ids, key, buckets.value_or(1000), min_step, max_step));
                 json::array series;
                 series.reserve(histories.size());
                 for (size_t i = 0; i < histories.size(); ++i) {
                   series.push_back(DownsampledJson(run_ids[i], key, histories[i]));
                 }
                 return json::object{{"series", std::move(series)}};
               });
    api_.RawRoute(Method::kGet, kMlflowPrefixes, "/metrics/get-history-bulk-interval",
                  [this, self = shared_from_this()](Call& c) -> Result<http::Response> {
                    TY_ASSIGN_OR_RETURN(auto run_ids, StringList(c.body, "run_ids"));
                    TY_ASSIGN_OR_RETURN(std::string key, RequiredString(c.body, "metric_key"));
                    TY_ASSIGN_OR_RETURN(auto start, OptionalInt64(c.body, "start_step"));
                    TY_ASSIGN_OR_RETURN(auto end, OptionalInt64(c.body, "end_step"));
                    TY_ASSIGN_OR_RETURN(auto max_results, OptionalInt64(c.body, "max_results"));
                    TY_ASSIGN_OR_RETURN(auto metrics,
                                        tracking_.GetMetricHistoryBulkInterval(
                                            run_ids, key, start, end,
                                            max_results.value_or(kDefaultPointsPerChartRun)));
                    std::string body = "{\"metrics\":[";
                    for (size_t i = 0; i < metrics.size(); ++i) {
                      if (i) body += ',';
                      AppendMetricJson(body, metrics[i], true);
                    }
                    body += "]}";
                    return http::Response::Json(200, std::move(body));
                  });
  }

  void RegisterLoggedModels() {
    api_.Route(Method::kPost, kMlflowPrefixes, "/logged-models",
               [this, self = shared_from_this()](Call& c) -> Result<json::value> {
                 TY_ASSIGN_OR_RETURN(std::string eid, RequiredString(c.body, "experiment_id"));
                 TY_ASSIGN_OR_RETURN(auto name, OptionalString(c.body, "name"));
                 TY_ASSIGN_OR_RETURN(auto type, OptionalString(c.body, "model_type"));
                 TY_ASSIGN_OR_RETURN(auto run, OptionalString(c.body, "source_run_id"));
                 TY_ASSIGN_OR_RETURN(auto params, KeyValuesFromJson(c.body, "params"));
                 TY_ASSIGN_OR_RETURN(auto tags, KeyValuesFromJson(c.body, "tags"));
                 TY_ASSIGN_OR_RETURN(
                     auto model, tracking_.CreateLoggedModel(c.principal, eid, name.value_or(""),
                                                             type.value_or(""), run.value_or(""),
                                                             params, tags));
                 return json::object{{"model", LoggedModelToJson(model)}};
               });
    api_.Route(Method::kGet, kMlflowPrefixes, "/logged-models/{model_id}",
               [this, self = shared_from_this()](Call& c) -> Result<json::value> {
                 TY_ASSIGN_OR_RETURN(auto model,
                                     tracking_.GetLoggedModel(c.request.path_params["model_id"]));
                 return json::object{{"model", LoggedModelToJson(model)}};
               });
    api_.Route(
        Method::kPatch, kMlflowPrefixes, "/logged-models/{model_id}",
        [this, self = shared_from_this()](Call& c) -> Result<json::value> {
          const std::string& id = c.request.path_params["model_id"];
          TY_ASSIGN_OR_RETURN(auto status, EnumField(c.body, "status", kLoggedModelStatuses));
          if (!status) return Status::InvalidArgument("missing required field 'status'");
          TY_ASSIGN_OR_RETURN(auto model, tracking_.FinalizeLoggedModel(c.principal, id, *status));
          return json::object{{"model", LoggedModelToJson(model)}};
        });
    api_.Route(Method::kDelete, kMlflowPrefixes, "/logged-models/{model_id}",
               [this, self = shared_from_this()](Call& c) -> Result<json::value> {
                 const std::string& id = c.request.path_params["model_id"];
                 TY_RETURN_IF_ERROR(tracking_.DeleteLoggedModel(c.principal, id));
                 return json::object();
               });
    api_.Route(Method::kPatch, kMlflowPrefixes, "/logged-models/{model_id}/tags",
               [this, self = shared_from_this()](Call& c) -> Result<json::value> {
                 const std::string& id = c.request.path_params["model_id"];
                 TY_ASSIGN_OR_RETURN(auto tags, KeyValuesFromJson(c.body, "tags"));
                 TY_ASSIGN_OR_RETURN(auto model,
                                     tracking_.SetLoggedModelTags(c.principal, id, tags));
                 return json::object{{"model", LoggedModelToJson(model)}};
               });
    api_.Route(Method::kDelete, kMlflowPrefixes, "/logged-models/{model_id}/tags/{tag_key}",
               [this, self = shared_from_this()](Call& c) -> Result<json::value> {
                 const std::string& id = c.request.path_params["model_id"];
                 TY_RETURN_IF_ERROR(tracking_.DeleteLoggedModelTag(
                     c.principal, id, c.request.path_params["tag_key"]));
                 return json::object();
               });
    api_.Route(Method::kPost, kMlflowPrefixes, "/logged-models/{model_id}/params",
               [this, self = shared_from_this()](Call& c) -> Result<json::value> {
                 const std::string& id = c.request.path_params["model_id"];
                 TY_ASSIGN_OR_RETURN(auto params, KeyValuesFromJson(c.body, "params"));
                 TY_RETURN_IF_ERROR(tracking_.LogLoggedModelParams(c.principal, id, params));
                 return json::object();
               });
    api_.Route(Method::kPost, kMlflowPrefixes, "/logged-models/search",
               [this, self = shared_from_this()](Call& c) -> Result<json::value> {
                 tracking::SearchLoggedModelsRequest req;
                 TY_ASSIGN_OR_RETURN(req.experiment_ids, StringList(c.body, "experiment_ids"));
                 TY_ASSIGN_OR_RETURN(auto filter, OptionalString(c.body, "filter"));
                 req.filter = filter.value_or("");
                 TY_ASSIGN_OR_RETURN(auto max_results, OptionalInt64(c.body, "max_results"));
                 req.max_results = max_results.value_or(kDefaultLoggedModelsPerPage);
                 TY_ASSIGN_OR_RETURN(const json::array* order, OptionalArray(c.body, "order_by"));
                 for (size_t i = 0; order && i < order->size(); ++i) {
                   std::string where = "order_by[" + std::to_string(i) + "]";
                   if (!(*order)[i].is_object()) {
                     return Status::InvalidArgument(where + " must be an object");
                   }
                   const auto& o = (*order)[i].as_object();
                   tracking::LoggedModelOrder entry;
                   TY_ASSIGN_OR_RETURN(entry.field_name, RequiredString(o, "field_name"));
                   TY_ASSIGN_OR_RETURN(auto asc, OptionalBool(o, "ascending"));
                   entry.ascending = asc.value_or(true);
                   TY_ASSIGN_OR_RETURN(auto dn, OptionalString(o, "dataset_name"));
                   TY_ASSIGN_OR_RETURN(auto dd, OptionalString(o, "dataset_digest"));
                   entry.dataset_name = dn.value_or("");
                   entry.dataset_digest = dd.value_or("");
                   req.order_by.push_back(std::move(entry));
                 }
                 TY_ASSIGN_OR_RETURN(auto token, OptionalString(c.body, "page_token"));
                 req.page_token = token.value_or("");
                 TY_ASSIGN_OR_RETURN(auto page, tracking_.SearchLoggedModels(req));
                 json::array models;
                 for (const auto& m : page.items) models.emplace_back(LoggedModelToJson(m));
                 json::object out{{"models", std::move(models)}};
                 if (!page.next_page_token.empty()) out["next_page_token"] = page.next_page_token;
                 return out;
               });
  }

  Api& api_;
  TrackingService& tracking_;
};

}  // namespace

void RegisterTrackingRoutes(Api& api, tracking::TrackingService& tracking) {
  // Each route holds a reference to the route set, which lives as long as the router.
  std::make_shared<TrackingRoutes>(api, tracking)->Register();
}

}  // namespace trainyard::api
